"""How poolfuzz starts its worker processes: from a fork server that has imported torch and hypothesis once.

Fuzz workers, mutation workers and ``ci`` walks each need a fresh interpreter (a crashed or poisoned worker
must not take the parent with it, and CUDA must not be initialised before a fork).  Under ``spawn`` every
worker imports torch and hypothesis again: about 2.5 s of CPU a worker, more than a short run's fuzzing.
``forkserver`` pays that once per parent: the server imports :data:`PRELOAD` and forks each worker from
itself, before any CUDA call, so a worker is as fresh as a spawned one (its own CUDA context, nothing of the
parent's state) and starts in milliseconds.  poolfuzz's own modules are not preloaded: a worker imports them
after its coverage starts (:func:`~poolfuzz.harness.fuzz.process.worker_main`), and a kit installed after the
server started is still found.

One difference from ``spawn`` matters: a forked worker inherits the *server's* environment, fixed when the
server started, not the parent's at the worker's start.  The context's processes therefore take the parent's
environment when they start and apply it before their target runs (:class:`_EnvironProcess`), for a
``Process`` and a ``ProcessPoolExecutor``'s workers alike: the ``POOLFUZZ_TARGETS`` override, ``--sglang-src``
and the device-path switch a mutation target sets all reach the worker as they did under ``spawn``.  Where
``forkserver`` does not exist (Windows), workers are spawned.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os

PRELOAD = ("torch", "hypothesis")
"""Imported once in the fork server: the two imports that dominate a worker's start-up (torch alone ~2 s)."""


class _EnvironProcess(multiprocessing.context.ForkServerProcess):
    """A fork-server process that runs its target in the environment the parent had at :meth:`start`."""

    _environ: dict[str, str] | None = None

    def start(self) -> None:
        self._environ = dict(os.environ)  # pickled to the child with the rest of the process object
        super().start()

    def run(self) -> None:
        if self._environ is not None:
            for name in set(os.environ) - set(self._environ):
                del os.environ[name]
            os.environ.update(self._environ)
        super().run()


class _EnvironContext(multiprocessing.context.ForkServerContext):
    Process = _EnvironProcess


def worker_context() -> _EnvironContext | multiprocessing.context.SpawnContext:
    """The context every poolfuzz worker process is started from (see the module docstring)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = _EnvironContext()
    context.set_forkserver_preload(list(PRELOAD))
    return context

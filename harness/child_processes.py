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
server started, not the parent's at the worker's start.  Every start therefore carries the parent's current
environment (:func:`environ_now`) and the worker applies it first (:func:`apply_environ`): the
``POOLFUZZ_TARGETS`` override, ``--sglang-src`` and the device-path switch a mutation target sets all reach
the worker as they did under ``spawn``.  Where ``forkserver`` does not exist (Windows), workers are spawned.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
from collections.abc import Mapping

PRELOAD = ("torch", "hypothesis")
"""Imported once in the fork server: the two imports that dominate a worker's start-up (torch alone ~2 s)."""


def worker_context() -> multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext:
    """The context every poolfuzz worker process is started from (see the module docstring)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def environ_now() -> dict[str, str]:
    """The parent's environment as it is now, for the worker to apply (a forked worker would see the server's)."""
    return dict(os.environ)


def apply_environ(environ: Mapping[str, str] | None) -> None:
    """Make this worker's environment the parent's at its start; ``None`` leaves it (a spawned worker has it)."""
    if environ is None:
        return
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)

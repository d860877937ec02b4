"""The start of one fuzz worker process, and what the parent hands it.

The nightly runner (:mod:`harness.fuzz.session`) starts its workers with the ``spawn``
method: every worker is a fresh interpreter, so no CUDA context or OpenMP pool
is inherited across ``fork``, and coverage can start before :mod:`pools` is
imported (lines run at import time count).  That is why this module imports
only the standard library at the top: unpickling a :class:`WorkerPlan` in the
child must not import the code under measurement.  The rounds themselves live
in :mod:`harness.fuzz.worker`.

Each worker talks to the parent over its **own** pipe, never a shared queue: a
worker killed while holding a shared queue's write lock (a segfault, a CUDA
abort, the OOM killer) would block every other worker's reports forever.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any

#: How often a worker sends its counters, in seconds (the display refreshes on its own clock).
FLUSH_SECONDS = 0.5
#: Exit status of a worker asking to be replaced: a CUDA error left its context unusable.
EXIT_RESTART = 75


@dataclass(frozen=True)
class TargetRef:
    """One fuzz target: a family bound to an implementation, and its slot in the shared tables."""

    index: int
    family: str
    spec: str
    key: str


@dataclass(frozen=True)
class WorkerPlan:
    """Everything a worker needs; plain data, so it pickles across ``spawn``."""

    worker: int
    generation: int
    targets: tuple[TargetRef, ...]
    seed: int
    deadline: float
    steps: int
    misuse: bool
    device: str
    corpus: str
    database: str
    log_path: str
    round_seconds: float = 2.0
    coverage_dir: str | None = None

    @property
    def name(self) -> str:
        return f"w{self.worker}" if self.generation == 0 else f"w{self.worker}.{self.generation}"


@dataclass(frozen=True)
class Shared:
    """The multiprocessing objects every worker shares with the parent.

    ``go`` is set once every first-generation worker is ready, so all start
    together and the budget measures fuzzing, not interpreter start-up;
    ``stop`` at the deadline or on Ctrl-C; ``retired`` holds one byte per
    target, set once that target failed (by the worker that saw it first).
    """

    go: Any
    stop: Any
    retired: Any


class Terminated(KeyboardInterrupt):
    """The parent asked this worker to stop now (SIGTERM): save what can be saved, then exit."""


class StopRound(KeyboardInterrupt):
    """Abandon the current hypothesis run: time is up, a stop was requested or the target was retired.

    A ``KeyboardInterrupt`` because hypothesis lets exactly that class through
    without treating it as a failure to shrink.
    """


def _redirect_output(log_path: str) -> None:
    """Send fd 1 and 2 (Python, torch and C-level output alike) to the worker's log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _start_coverage(coverage_dir: str) -> Any:
    import coverage

    cov = coverage.Coverage(
        data_file=os.path.join(coverage_dir, ".coverage"),
        data_suffix=True,
        branch=True,
        source_pkgs=["pools"],
    )
    cov.start()
    return cov


def worker_main(plan: WorkerPlan, conn: Any, shared: Shared) -> None:
    """Process entry point: set up signals, output and coverage, then run rounds until told to stop.

    SIGINT is ignored: on a terminal Ctrl-C reaches the whole process group, and
    the parent alone decides how the run ends.  SIGTERM raises :class:`Terminated`
    once, wherever the worker is, and sets a flag the rounds also poll.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminate = {"now": False}

    def on_sigterm(signum: int, frame: Any) -> None:
        # Raise once, wherever the worker is (hypothesis, the replay shrinker, a pool call):
        # the round loop then saves the smallest failing trace seen so far.
        if not terminate["now"]:
            terminate["now"] = True
            raise Terminated()

    signal.signal(signal.SIGTERM, on_sigterm)
    _redirect_output(plan.log_path)
    faulthandler.enable()
    cov = _start_coverage(plan.coverage_dir) if plan.coverage_dir else None
    code = 0
    try:
        from harness.fuzz.worker import Worker

        worker = Worker(plan, conn, shared, terminate)
        worker.run()
        if worker.poisoned:
            code = EXIT_RESTART
    except Terminated:
        pass
    except BaseException:  # noqa: BLE001 - logged; the exit code tells the parent
        traceback.print_exc()
        code = 1
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the last words must not be cut short (SIGKILL still can)
    if cov is not None:
        cov.stop()
        cov.save()
    try:
        conn.send(("bye", {}))
        conn.close()
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything worth keeping is saved: skip the slow interpreter teardown (torch's is seconds).
    os._exit(code)

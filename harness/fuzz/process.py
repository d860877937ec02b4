"""The start of one fuzz worker process.

The nightly runner (:mod:`poolfuzz.harness.fuzz.session`) starts its workers with the ``spawn``
method: every worker is a fresh interpreter, so no CUDA context or OpenMP pool
is inherited across ``fork``, and coverage can start before :mod:`pools` is
imported (lines run at import time count).  That is why this module imports
only the standard library and :mod:`poolfuzz.harness.fuzz.protocol` at the top; the round
loop (:mod:`poolfuzz.harness.fuzz.worker`) is imported once coverage runs.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import traceback
from typing import Any

from poolfuzz.harness.fuzz.protocol import EXIT_RESTART, Bye, Shared, Terminated, WorkerPlan


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
        data_file=os.path.join(coverage_dir, ".coverage"), data_suffix=True, branch=True, source_pkgs=["poolfuzz.pools"]
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
        from poolfuzz.harness.fuzz.worker import Worker

        worker = Worker(plan, conn, shared, terminate, coverage=cov)
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
        conn.send(Bye())
        conn.close()
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything worth keeping is saved: skip the slow interpreter teardown (torch's is seconds).
    os._exit(code)

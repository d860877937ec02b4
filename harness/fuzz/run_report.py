"""What a fuzz run reports: the :class:`~poolfuzz.harness.fuzz.report.RunReport` built from a run's state, its
opening progress line and its exit status.

:class:`~poolfuzz.harness.fuzz.session.FuzzRun` orchestrates the workers; this module only reads what the run
collected (its options, per-target stats, crashes, finished worker slots, how it stopped), so the
report's shape and the exit codes are defined in one place apart from process handling.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol

from poolfuzz.harness.fuzz.database import redacted
from poolfuzz.harness.fuzz.options import FuzzOptions
from poolfuzz.harness.fuzz.report import CrashRecord, RunReport, TargetStats, combine_coverage, machine_info, utc_now, versions
from poolfuzz.harness.fuzz.slots import Slot

__all__ = ["EXIT_FOUND", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "RunState", "build_run_report", "exit_status", "opening_line"]

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class RunState(Protocol):
    """What the report reads of a run (:class:`~poolfuzz.harness.fuzz.session.FuzzRun`)."""

    options: FuzzOptions
    stats: dict[str, TargetStats]
    crashes: list[CrashRecord]
    finished: list[Slot]
    stop_reason: str | None
    signal: int | None
    started: float
    started_iso: str
    fuzz_started: float
    series_every: float
    logdir: Path
    covdir: Path | None


def build_run_report(run: RunState, *, final: bool = True) -> RunReport:
    """The report of ``run``; not ``final``: the report so far, with no ``ended_because``, ``exit_status`` or
    run-wide ``coverage`` yet (per-target coverage is there)."""
    o = run.options
    interrupted = run.stop_reason == "interrupted"
    found = any(s.failing for s in run.stats.values()) or bool(run.crashes)  # a known finding fails only under --strict
    devices = sorted({s.info.device_name for s in run.finished if s.info is not None} - {""})
    return RunReport(
        started=run.started_iso,
        finished=utc_now(),
        duration_s=time.time() - run.fuzz_started,
        startup_s=run.fuzz_started - run.started,
        interrupted=interrupted,
        ended_because=(run.stop_reason or "every worker finished (all targets retired)") if final else None,
        exit_status=exit_status(found, interrupted, run.signal) if final else None,
        run={
            "seed": o.seed,
            "budget_s": o.seconds,
            "workers": o.workers,
            "device": o.device,
            "steps_per_example": o.steps,
            "misuse": o.misuse,
            "database": redacted(o.database),
            "corpus": str(o.corpus),
            "grace_s": o.grace,
            "coverage": o.coverage,
            "strict": o.strict,
            "known": str(o.known_file) if o.known_file else None,
            "cwd": os.getcwd(),
            "logs": str(run.logdir) if run.crashes else None,
        },
        machine={**machine_info(), "accelerators": devices},
        versions=versions(),
        series_interval_s=run.series_every,
        targets=tuple(run.stats.values()),
        crashes=tuple(run.crashes),
        workers=tuple({"worker": s.name, "pid": s.process.pid, "exit_code": s.process.exitcode, "rounds": s.rounds} for s in run.finished),
        skipped=tuple(o.skipped),
        # Combining reads and removes the workers' data files: only once they have all ended.
        coverage=combine_coverage(run.covdir) if run.covdir is not None and final else None,
    )


def opening_line(o: FuzzOptions) -> str:
    """The progress line that starts a run; the database is :func:`redacted`, as in the report."""
    return (
        f"poolfuzz: fuzzing {len(o.targets)} target(s) with {o.workers} worker(s) for {o.seconds:g} s, "
        f"seed {o.seed}, device {o.device}, database {redacted(o.database)}"
    )


def exit_status(found: bool, interrupted: bool, signum: int | None = None) -> int:
    """1 when anything was found (even if interrupted); interrupted clean, 128 + the signal's number
    (130 for Ctrl-C, 143 for SIGTERM), as a shell reports a process the signal ended; else 0."""
    if found:
        return EXIT_FOUND
    if not interrupted:
        return EXIT_OK
    return 128 + signum if signum is not None else EXIT_INTERRUPTED

"""Nightly fuzz reports in, typed runs out: discovery, strict validation, and the numbers the page shows.

A report is what ``poolfuzz fuzz`` writes (``docs/nightly.md``):
schema 1 has per-target totals only; schema 2 adds ``series_interval_s``,
per-target ``coverage`` and ``series`` (cumulative samples over the run) and a
``replay`` command per failure; schema 3 a failure's ``found_at`` (its first failing
step, with the unshrunk trace) and ``shrink`` (its state and time), and reports
written while the run goes on.  The reader is strict where the dashboard
depends on a field (its presence, JSON type and range; an unknown ``schema`` is
refused) and ignores keys it does not know, so a newer runner that only adds
fields still renders.

Validation is :mod:`poolfuzz.harness.dashboard.report_check`'s: a field's type and range are those of the
report's JSON Schema (``harness/fuzz/report.schema.json``) cut down to the fields the page reads;
by hand here is only what a schema cannot say: ``started`` must be a time :mod:`datetime` reads,
with or without an offset.

:func:`parse_report` is the only way a report becomes a :class:`Run` (files are
found and read by :mod:`~poolfuzz.harness.dashboard.sources`); every problem is one
:class:`ReportError` naming the file and the field (the first wrong one, in the
schema's field order), never a traceback from inside the page builder.
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poolfuzz.harness.dashboard.report_check import ReportError, check_report
from poolfuzz.harness.fuzz.database import redacted
from poolfuzz.harness.fuzz.report import SeriesPoint
from poolfuzz.harness.fuzz.summary import upstream_text

if TYPE_CHECKING:
    pass

NOT_REACHED = "not reached"


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class Failure:
    target: str
    invariant: str | None
    kind: str
    message: str
    trace: str | None
    steps: int | None
    shrunk: bool
    replay: str | None
    found_after_s: float | None
    first_seen_after_s: float | None = None
    """The first failing step, before shrinking (reports from before it was recorded: ``None``)."""
    unshrunk_trace: str | None = None
    """The trace of that first failing step, kept beside the shrunk one (schema 3 on)."""
    unshrunk_steps: int | None = None
    shrink_state: str | None = None
    """``running``, ``done`` or ``partial`` (schema 3 on; ``None`` before, or when the run did not shrink it)."""
    shrink_s: float | None = None
    """How long the shrink took, from the first failing step's report to the shrunk one."""
    shrink_note: str | None = None
    """Why a partial shrink is partial."""
    known: Mapping[str, Any] | None = None
    """The known finding it is (``corpus/known.toml``: key, number, upstream, document), or ``None`` (new, or an
    older report)."""

    @property
    def headline(self) -> str:
        """The message's first line: the invariant and its numbers (the rest is the shrunk steps)."""
        lines = self.message.strip().splitlines()
        return lines[0] if lines else self.kind


def so_far(series: Sequence[SeriesPoint]) -> list[SeriesPoint]:
    """``series`` with every counter as the most reached *so far*: a running maximum, so it never falls.

    The runner's samples can fall.  Its coverage is measured against every arc
    of each ``pools/`` module the target has executed so far
    (``TargetStats.coverage``), so the first step into another module (the
    radix tree, say) adds that module's arcs to the denominator and the
    percentage drops (54% to 51.5%) although no branch was lost; and samples of
    one target merged from several workers need not be in order.  A curve
    labelled *reached so far* shows the best measured up to each moment;
    ``None`` (not measured yet) stays ``None`` until the first measurement.
    """
    out: list[SeriesPoint] = []
    steps = examples = events = failures = 0
    coverage: float | None = None
    for s in series:
        steps, examples = max(steps, s.steps), max(examples, s.examples)
        events, failures = max(events, s.events), max(failures, s.failures)
        if s.coverage is not None:
            coverage = s.coverage if coverage is None else max(coverage, s.coverage)
        out.append(SeriesPoint(t=s.t, steps=steps, examples=examples, events=events, coverage=coverage, failures=failures))
    return out


@dataclass(frozen=True)
class TargetRun:
    """One target in one report."""

    key: str
    family: str
    implementation: str
    status: str
    examples: int
    steps: int
    steps_per_second: float
    events: Mapping[str, int]
    coverage: float | None
    failures: tuple[Failure, ...]
    crashes: int
    series: tuple[SeriesPoint, ...] | None
    upstream: str = ""
    """``upstream SGLang 0.5.23`` for a target that runs upstream's code, else ``""`` (and in older reports)."""

    @property
    def failing(self) -> int:
        """Failures that failed the run: the new ones; the known findings too when the target failed on them alone
        (``--strict``)."""
        new = sum(f.known is None for f in self.failures)
        return new or (len(self.failures) if self.status == "failed" else 0)

    @property
    def reached(self) -> bool:
        """Whether any step of this target ran; one that never ran is *not reached*, never ``ok``."""
        return self.steps > 0

    @property
    def shown_status(self) -> str:
        """``status``, except ``not reached`` for an ``ok`` target that ran no step (as the text summary says)."""
        return NOT_REACHED if self.status == "ok" and not self.reached else self.status

    def quiet_seconds(self) -> float | None:
        """Fuzzing time at the end of the run in which nothing new was reached.

        New behaviour is a sample with more distinct event labels or more branch
        coverage than the one before it.  The quiet time ends at the last sample
        whose step count still grew, so a target retired by a failure is not
        counted as quiet for the rest of the night.  ``None`` without a series,
        and for a target that never ran.
        """
        if not self.series or not self.reached:
            return None
        last_new = 0.0
        active_until = self.series[0].t
        before = SeriesPoint(t=0.0, steps=0, examples=0, events=0, coverage=None, failures=0)
        for sample in so_far(self.series):
            if sample.events > before.events or (sample.coverage or 0.0) > (before.coverage or 0.0):
                last_new = sample.t
            if sample.steps > before.steps:
                active_until = sample.t
            before = sample
        return max(0.0, active_until - last_new)


@dataclass(frozen=True)
class Run:
    """One report file: one run of ``poolfuzz fuzz`` on one box (see :attr:`run_id` and :attr:`night`)."""

    source: Path
    report: dict[str, Any]
    schema: int
    started: datetime.datetime
    duration_s: float
    interrupted: bool
    seed: int | None
    workers: int | None
    device: str
    database: str | None
    """``run.database`` :func:`~poolfuzz.harness.fuzz.database.redacted`: reports written before the runner redacted it
    carry a Redis password verbatim, and the page must not show it."""
    cwd: str | None
    coverage: float | None
    targets: tuple[TargetRun, ...]
    skipped: tuple[str, ...]
    copies: tuple[Path, ...] = ()
    """Other files that hold this same run (:attr:`run_id`), read and set aside (see ``sources.load_runs``)."""

    @property
    def night(self) -> datetime.date:
        """The night this report belongs to: the UTC date it started on (``started`` is UTC).

        With ``--by-night`` every report that started on one date, from any box,
        is one night, so boxes that start seconds apart are one night, not
        several; ``--nights`` counts these dates in either mode.
        """
        return self.started.date()

    @property
    def run_id(self) -> str:
        """What tells this run apart from every other: its start (UTC, to the second), its box and its seed.

        A report has no id field of its own; these three are what the runner
        decides at start-up.  Two runs on one date are two runs, and two files
        with one id are the same run read twice (a copy, or an earlier snapshot
        of it).  The id starts with the ISO start time, so ids sort by start.
        """
        seed = "?" if self.seed is None else str(self.seed)
        return f"{self.started:%Y-%m-%dT%H:%M:%SZ} {self.box} seed {seed}"

    @property
    def box(self) -> str:
        """The machine that wrote the report (``machine.hostname``), else the report file's name."""
        machine = self.report.get("machine")
        host = machine.get("hostname") if isinstance(machine, dict) else None
        return host if isinstance(host, str) and host else self.source.stem

    @property
    def has_series(self) -> bool:
        return self.schema >= 2

    def target(self, key: str) -> TargetRun | None:
        return next((t for t in self.targets if t.key == key), None)


def _started(source: Path, text: str) -> datetime.datetime:
    try:
        started = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ReportError(source, "started", f"not an ISO 8601 time: {text!r}") from None
    if started.tzinfo is None:  # the runner writes UTC; a bare time is read as UTC too
        started = started.replace(tzinfo=datetime.UTC)
    return started.astimezone(datetime.UTC)


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def _failure(f: Mapping[str, Any], target: str) -> Failure:
    trace = f.get("trace")
    replay = f.get("replay")  # schema 1 has none: built from the trace
    if replay is None and trace is not None:
        replay = f"poolfuzz replay {shlex.quote(trace)}"
    shrunk = f.get("shrunk")
    found_at, shrink = f.get("found_at") or {}, f.get("shrink") or {}
    first_seen = found_at.get("after_s", f.get("first_seen_after_s"))
    return Failure(
        target=target,
        invariant=f.get("invariant"),
        kind=f["kind"],
        message=f["message"],
        trace=trace,
        steps=f.get("steps"),
        shrunk=True if shrunk is None else shrunk,
        replay=replay,
        found_after_s=_number(f.get("found_after_s")),
        first_seen_after_s=_number(first_seen),
        unshrunk_trace=found_at.get("trace"),
        unshrunk_steps=found_at.get("steps", f.get("unshrunk_steps")),
        shrink_state=shrink.get("state"),
        shrink_s=_number(shrink.get("seconds")),
        shrink_note=shrink.get("note"),
        known=f.get("known") or None,
    )


def _measured(coverage: float | None, steps: int) -> float | None:
    """Coverage as measured: runners before ``TargetStats.coverage`` returned ``None`` wrote 0.0 for no steps."""
    return coverage if steps > 0 else None


def _sample(s: Mapping[str, Any]) -> SeriesPoint:
    return SeriesPoint(
        t=float(s["t"]),
        steps=s["steps"],
        examples=s["examples"],
        events=s["events"],
        coverage=_measured(_number(s.get("coverage")), s["steps"]),
        failures=s["failures"],
    )


def _target(t: Mapping[str, Any], schema: int) -> TargetRun:
    key = t["target"]
    v2 = schema >= 2  # schema 1 has neither series nor coverage per target
    return TargetRun(
        key=key,
        family=t["family"],
        implementation=t["implementation"],
        status=t["status"],
        examples=t["examples"],
        steps=t["steps"],
        steps_per_second=float(t["steps_per_second"]),
        events=dict(t["events"]),
        coverage=_measured(_number(t["coverage"]), t["steps"]) if v2 else None,
        failures=tuple(_failure(f, key) for f in t["failures"]),
        crashes=len(t["crashes"]),
        series=tuple(_sample(s) for s in t["series"]) if v2 else None,
        upstream=upstream_text(t),
    )


def parse_report(report: Any, source: Path) -> Run:
    """Check one decoded report and type it; raises :class:`ReportError` naming the first bad field."""
    schema = check_report(report, source)
    run, coverage, database = report["run"], report.get("coverage"), report["run"].get("database")
    return Run(
        source=source,
        report=report,
        schema=schema,
        started=_started(source, report["started"]),
        duration_s=float(report["duration_s"]),
        interrupted=bool(report.get("interrupted")),
        seed=run.get("seed"),
        workers=run.get("workers"),
        device=run["device"],
        database=None if database is None else redacted(database),
        cwd=run.get("cwd"),
        coverage=None if coverage is None else _number(coverage.get("percent")),
        targets=tuple(_target(t, schema) for t in report["targets"]),
        skipped=tuple(f"{s.get('family') or '?'}: {s.get('reason') or ''}" for s in report.get("skipped") or ()),
    )

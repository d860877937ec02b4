"""Nightly fuzz reports in, typed runs out: discovery, strict validation, and the numbers the page shows.

A report is what ``python -m harness fuzz`` writes (``docs/nightly.md``):
schema 1 has per-target totals only; schema 2 adds ``series_interval_s``,
per-target ``coverage`` and ``series`` (cumulative samples over the run) and a
``replay`` command per failure.  The reader is strict where the dashboard
depends on a field (its presence and JSON type, an unknown ``schema`` is
refused) and ignores keys it does not know, so a newer runner that only adds
fields still renders.

:func:`parse_report` is the only way a report becomes a :class:`Run` (files are
found and read by :mod:`~harness.dashboard.sources`); every problem is one
:class:`ReportError` naming the file and the field, never a traceback from
inside the page builder.
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from harness.fuzz.database import redacted
from harness.fuzz.report import SeriesPoint

TOOL = "poolfuzz fuzz"
SCHEMAS = (1, 2)
NOT_REACHED = "not reached"


class DashboardError(ValueError):
    """The dashboard cannot be built from what it was given; the message is one line for the user."""


class ReportError(DashboardError):
    """A file that is not a report this dashboard reads: unreadable, not JSON, an unknown schema, a bad field."""

    def __init__(self, source: Path, field_name: str, problem: str) -> None:
        self.source = source
        self.field = field_name
        self.problem = problem
        where = f"field {field_name!r}: " if field_name else ""
        super().__init__(f"{source}: {where}{problem}")


class NoReportsError(DashboardError):
    """The sources named exist but hold no poolfuzz report."""

    def __init__(self, sources: Sequence[Path]) -> None:
        self.sources = list(sources)
        named = ", ".join(str(s) for s in sources)
        super().__init__(f"no poolfuzz fuzz report found in {named} (searched for *.json)")


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
        out.append(SeriesPoint(t=s.t, steps=steps, examples=examples, events=events, coverage=coverage,
                               failures=failures))
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
    """One report file: one run of ``python -m harness fuzz`` on one box (see :attr:`run_id` and :attr:`night`)."""

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
    """``run.database`` :func:`~harness.fuzz.database.redacted`: reports written before the runner redacted it
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


# --------------------------------------------------------------- validation
class _Reader:
    """Typed field access that names the file and the JSON path of the first bad field."""

    def __init__(self, source: Path) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> NoReturn:
        raise ReportError(self.source, where, problem)

    def field(self, obj: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in obj:
            self.fail(f"{where}{key}", "missing")
        return obj[key]

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"expected an object, got {_json_type(value)}")
        return value

    def array(self, obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
        value = self.field(obj, key, where)
        if not isinstance(value, list):
            self.fail(f"{where}{key}", f"expected an array, got {_json_type(value)}")
        return value

    def text(self, obj: Mapping[str, Any], key: str, where: str) -> str:
        value = self.field(obj, key, where)
        if not isinstance(value, str):
            self.fail(f"{where}{key}", f"expected a string, got {_json_type(value)}")
        return value

    def optional_text(self, obj: Mapping[str, Any], key: str, where: str) -> str | None:
        return None if obj.get(key) is None else self.text(obj, key, where)

    def integer(self, obj: Mapping[str, Any], key: str, where: str) -> int:
        value = self.field(obj, key, where)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{where}{key}", f"expected an integer, got {_json_type(value)}")
        return value

    def optional_integer(self, obj: Mapping[str, Any], key: str, where: str) -> int | None:
        return None if obj.get(key) is None else self.integer(obj, key, where)

    def number(self, obj: Mapping[str, Any], key: str, where: str) -> float:
        value = self.field(obj, key, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(f"{where}{key}", f"expected a number, got {_json_type(value)}")
        return float(value)

    def optional_number(self, obj: Mapping[str, Any], key: str, where: str) -> float | None:
        return None if obj.get(key) is None else self.number(obj, key, where)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
             int: "an integer", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _started(read: _Reader, report: Mapping[str, Any]) -> datetime.datetime:
    text = read.text(report, "started", "")
    try:
        started = datetime.datetime.fromisoformat(text)
    except ValueError:
        read.fail("started", f"not an ISO 8601 time: {text!r}")
    if started.tzinfo is None:  # the runner writes UTC; a bare time is read as UTC too
        started = started.replace(tzinfo=datetime.timezone.utc)
    return started.astimezone(datetime.timezone.utc)


def _failure(read: _Reader, raw: Any, where: str, target: str) -> Failure:
    f = read.mapping(raw, where)
    where += "."
    trace = read.optional_text(f, "trace", where)
    replay = read.optional_text(f, "replay", where)
    if replay is None and trace is not None:
        replay = f"python -m harness replay {shlex.quote(trace)}"
    shrunk = f.get("shrunk", True)
    if not isinstance(shrunk, bool):
        read.fail(f"{where}shrunk", f"expected a boolean, got {_json_type(shrunk)}")
    return Failure(
        target=target, invariant=read.optional_text(f, "invariant", where), kind=read.text(f, "kind", where),
        message=read.text(f, "message", where), trace=trace, steps=read.optional_integer(f, "steps", where),
        shrunk=shrunk, replay=replay, found_after_s=read.optional_number(f, "found_after_s", where),
        first_seen_after_s=read.optional_number(f, "first_seen_after_s", where),
    )


def _measured(coverage: float | None, steps: int) -> float | None:
    """Coverage as measured: runners before ``TargetStats.coverage`` returned ``None`` wrote 0.0 for no steps."""
    return coverage if steps > 0 else None


def _sample(read: _Reader, raw: Any, where: str) -> SeriesPoint:
    s = read.mapping(raw, where)
    where += "."
    steps = read.integer(s, "steps", where)
    return SeriesPoint(t=read.number(s, "t", where), steps=steps,
                  examples=read.integer(s, "examples", where), events=read.integer(s, "events", where),
                  coverage=_measured(read.optional_number(s, "coverage", where), steps),
                  failures=read.integer(s, "failures", where))


def _target(read: _Reader, raw: Any, where: str, schema: int) -> TargetRun:
    t = read.mapping(raw, where)
    where += "."
    key = read.text(t, "target", where)
    events = read.mapping(read.field(t, "events", where), f"{where}events")
    for label, count in events.items():
        if isinstance(count, bool) or not isinstance(count, int):
            read.fail(f"{where}events.{label}", f"expected an integer count, got {_json_type(count)}")
    failures = tuple(_failure(read, f, f"{where}failures[{i}]", key)
                     for i, f in enumerate(read.array(t, "failures", where)))
    series: tuple[SeriesPoint, ...] | None = None
    coverage: float | None = None
    if schema >= 2:
        series = tuple(_sample(read, s, f"{where}series[{i}]") for i, s in enumerate(read.array(t, "series", where)))
        read.field(t, "coverage", where)
        coverage = read.optional_number(t, "coverage", where)
    steps = read.integer(t, "steps", where)
    return TargetRun(
        key=key, family=read.text(t, "family", where), implementation=read.text(t, "implementation", where),
        status=read.text(t, "status", where), examples=read.integer(t, "examples", where),
        steps=steps, steps_per_second=read.number(t, "steps_per_second", where),
        events=dict(events), coverage=_measured(coverage, steps), failures=failures,
        crashes=len(read.array(t, "crashes", where)), series=series,
    )


def parse_report(report: Any, source: Path) -> Run:
    """Check one decoded report and type it; raises :class:`ReportError` naming the first bad field."""
    read = _Reader(source)
    if not isinstance(report, dict) or report.get("tool") != TOOL:
        read.fail("tool", f"not a {TOOL!r} report")
    schema = read.integer(report, "schema", "")
    if schema not in SCHEMAS:
        read.fail("schema", f"report schema {schema} is not one this dashboard reads ({', '.join(map(str, SCHEMAS))})")
    if schema >= 2:
        read.number(report, "series_interval_s", "")
    run = read.mapping(read.field(report, "run", ""), "run")
    coverage = report.get("coverage")
    percent = read.optional_number(read.mapping(coverage, "coverage"), "percent", "coverage.") if coverage else None
    skipped = [read.mapping(s, f"skipped[{i}]") for i, s in enumerate(report.get("skipped") or [])]
    database = read.optional_text(run, "database", "run.")
    return Run(
        source=source, report=report, schema=schema, started=_started(read, report),
        duration_s=read.number(report, "duration_s", ""), interrupted=bool(report.get("interrupted", False)),
        seed=read.optional_integer(run, "seed", "run."), workers=read.optional_integer(run, "workers", "run."),
        device=read.text(run, "device", "run."), database=None if database is None else redacted(database),
        cwd=read.optional_text(run, "cwd", "run."), coverage=percent,
        targets=tuple(_target(read, t, f"targets[{i}]", schema)
                      for i, t in enumerate(read.array(report, "targets", ""))),
        skipped=tuple(f"{s.get('family', '?')}: {s.get('reason', '')}" for s in skipped),
    )

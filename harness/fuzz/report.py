"""The nightly run's results: per-target tallies, the JSON report and the summary a person reads.

The JSON report is the contract with whatever collects nightly runs
(``docs/nightly.md`` documents every field).  A failure is in it from its first
failing step on (:class:`FoundAt`, with the unshrunk trace), and its shrink's outcome
follows (:class:`ShrinkOutcome`).  The text summary a person reads is rendered from
the report dict by :mod:`poolfuzz.harness.fuzz.summary` (re-exported here).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import shlex
import socket
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from poolfuzz.harness.fuzz.protocol import FailureFound, ProgressReport
from poolfuzz.harness.fuzz.summary import NOT_REACHED as NOT_REACHED
from poolfuzz.harness.fuzz.summary import events_summary as events_summary
from poolfuzz.harness.fuzz.summary import shown_status as shown_status
from poolfuzz.harness.fuzz.summary import summary_text as summary_text

REPORT_SCHEMA = 3
"""Version 2 added ``series_interval_s`` and, per target, ``series`` and ``coverage``; version 3 a failure's
``found_at`` (its first failing step, reported at once) and ``shrink`` (running, done or partial, and how long it
took), and a snapshot's null ``ended_because`` and ``exit_status`` while the run goes on
(``harness/fuzz/report.schema.json``)."""

SHRINK_RUNNING, SHRINK_DONE, SHRINK_PARTIAL = "running", "done", "partial"
"""A shrink's states: still going on (a report written while the run goes on), finished, cut off."""


@dataclass(frozen=True)
class FoundAt:
    """A failure's first failing step, as reported at once, before any shrinking."""

    after_s: float
    """Seconds from the start of fuzzing to the first failing step's report."""
    since_start_s: float
    """Seconds from the start of the command (worker start-up included) to the same moment."""
    invariant: str
    message: str
    """The unshrunk violation, with its numbers."""
    trace: str | None
    """The unshrunk trace, written before shrinking started and kept after it (``None``: nothing could be written)."""
    steps: int
    worker: str

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "replay": replay_command(self.trace) if self.trace else None}


@dataclass(frozen=True)
class ShrinkOutcome:
    """How a failure's shrink went: ``state`` is one of :data:`SHRINK_RUNNING`, :data:`SHRINK_DONE`, :data:`SHRINK_PARTIAL`."""

    state: str
    after_s: float | None = None
    """Seconds from the start of fuzzing to the shrunk (or partially shrunk) report; ``None`` while running, or
    when the worker ended before any report."""
    seconds: float | None = None
    """The shrink's own time: from the first failing step's report to ``after_s``."""
    note: str | None = None
    """Why a shrink is partial (cut off by the grace after the budget, an interrupt, a worker that died)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FailureRecord(FailureFound):
    """One failure in the report: what a worker found (the :class:`FailureFound` it sent), which
    worker found it, when, and how to reproduce it."""

    worker: str
    found_after_s: float | None
    """Seconds from the start of fuzzing to the report of the shrunk failure (``None`` while it is shrinking)."""
    first_seen_after_s: float | None = None
    """Seconds from the start of fuzzing to the first failing step, before shrinking (``None``: not
    reported apart, as for errors and failures replayed from the database); ``found_at.after_s``."""
    unshrunk_steps: int | None = None
    """Length of the trace at the first failing step; ``found_at.steps``."""
    found_at: FoundAt | None = None
    """The first failing step, reported before shrinking (``None`` as for ``first_seen_after_s``)."""
    shrink: ShrinkOutcome | None = None
    """How its shrink went; ``None`` when this run did not shrink it (errors, traces replayed from the database)."""

    @classmethod
    def of(cls, found: FailureFound, *, worker: str, found_after_s: float | None, found_at: FoundAt | None = None,
           shrink: ShrinkOutcome | None = None) -> FailureRecord:
        return cls(**dataclasses.asdict(found), worker=worker,
                   found_after_s=round(found_after_s, 1) if found_after_s is not None else None,
                   first_seen_after_s=found_at.after_s if found_at is not None else None,
                   unshrunk_steps=found_at.steps if found_at is not None else None, found_at=found_at, shrink=shrink)

    @property
    def replay(self) -> str | None:
        """The command that reproduces this failure without hypothesis."""
        return replay_command(self.trace) if self.trace else None

    @property
    def classification(self) -> dict[str, str] | None:
        """``reachable`` / ``latent`` / ``divergence`` for a violation by an upstream target (:mod:`poolfuzz.harness.upstream.classify`)."""
        from poolfuzz.harness.upstream.classify import classify

        found = classify(self.family, self.implementation, self.invariant, self.trace)
        return found.to_json() if found is not None else None

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "found_at": self.found_at.to_json() if self.found_at else None,
                "shrink": self.shrink.to_json() if self.shrink else None, "replay": self.replay,
                "classification": self.classification}


def replay_command(trace: str) -> str:
    """The command that replays a saved trace, ready to paste."""
    return f"poolfuzz replay {shlex.quote(trace)}"


@dataclass(frozen=True)
class CrashRecord:
    """A worker process that died on its own (segfault, CUDA abort, OOM kill)."""

    worker: str
    target: str | None
    round: int | None
    seed: int | None
    exit_code: int | None
    reason: str
    log: str
    log_tail: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SeriesPoint:
    """One sample of a target's cumulative counters, ``t`` seconds after fuzzing started."""

    t: float
    steps: int
    examples: int
    events: int
    coverage: float | None
    failures: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TargetStats:
    """What the workers reported about one target, summed over workers and rounds."""

    key: str
    family: str
    implementation: str
    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    rounds: int = 0
    events: Counter[str] = field(default_factory=Counter)
    failures: list[FailureRecord] = field(default_factory=list)
    crashes: list[CrashRecord] = field(default_factory=list)
    series: list[SeriesPoint] = field(default_factory=list)
    arcs: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    possible_arcs: dict[str, frozenset[tuple[int, int]]] | None = None
    """Every arc of each module of ``pools/`` when ``--coverage`` is on (see :func:`possible_arcs`), else ``None``."""
    upstream: dict[str, str] | None = None
    """Upstream code under test (:func:`poolfuzz.harness.upstream.known.upstream_code`: distribution, title, version, origin),
    or ``None`` for our own pools and substitutes."""
    strict: bool = False
    """``--strict``: a known finding fails this target as a new one does."""

    @property
    def failing(self) -> list[FailureRecord]:
        """The failures that fail the run: new ones, and known ones too under ``--strict``."""
        return [f for f in self.failures if f.known is None or self.strict]

    @property
    def steps_per_second(self) -> float:
        """Speed of this target's machine while it was being fuzzed (summed over workers)."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def status(self) -> str:
        """``failed``, ``crashed``, ``known`` (its only failures are known findings, ``corpus/known.toml``) or ``ok``
        (nothing went wrong, which says nothing of how much ran).

        People are shown :func:`shown_status`, which tells an ``ok`` target that ran no step apart.
        """
        if self.failing:
            return "failed"
        if self.crashes:
            return "crashed"
        return "known" if self.failures else "ok"

    @property
    def coverage(self) -> float | None:
        """Branch (arc) coverage, in percent, of the ``pools/`` modules this target's machine reached.

        ``None`` without ``--coverage``, and ``None`` while there is nothing to
        measure: the target ran no step, or none of its arcs lies in a ``pools/``
        module.  A target that never ran is *not reached*, which a 0.0 would pass
        off as a measurement (the dashboard showed such a target as ok at 0.0%).
        The denominator is every arc of each module the target executed at least
        once, so a target is measured against the pool code it exercises, not
        against the other families' modules.
        """
        if self.possible_arcs is None or self.steps == 0:
            return None
        possible = executed = 0
        for name, arcs in self.arcs.items():
            known = self.possible_arcs.get(name)
            if known:
                possible += len(known)
                executed += len(arcs & known)
        return round(100.0 * executed / possible, 2) if possible else None

    def add_arcs(self, arcs: frozenset[tuple[str, int, int]]) -> None:
        for name, a, b in arcs:
            self.arcs.setdefault(name, set()).add((a, b))

    def add_progress(self, report: ProgressReport) -> None:
        self.steps += report.steps
        self.examples += report.examples
        self.seconds += report.seconds
        self.events.update(report.events)

    def sample(self, t: float) -> None:
        self.series.append(SeriesPoint(round(t, 2), self.steps, self.examples, len(self.events), self.coverage,
                                       len(self.failures)))

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.key,
            "family": self.family,
            "implementation": self.implementation,
            "upstream": self.upstream,
            "status": self.status,
            "examples": self.examples,
            "steps": self.steps,
            "fuzz_seconds": round(self.seconds, 3),
            "steps_per_second": round(self.steps_per_second, 1),
            "rounds": self.rounds,
            "events": dict(sorted(self.events.items())),
            "coverage": self.coverage,
            "failures": [f.to_json() for f in self.failures],
            "crashes": [c.to_json() for c in self.crashes],
            "series": [s.to_json() for s in self.series],
        }


@dataclass(frozen=True)
class RunReport:
    """The whole JSON report of one ``fuzz`` run (``harness/fuzz/report.schema.json`` documents every field)."""

    started: str
    finished: str
    duration_s: float
    startup_s: float
    interrupted: bool
    ended_because: str | None
    """``None`` in a report written while the run goes on (at a finding, or for the live page)."""
    exit_status: int | None
    """``None`` while the run goes on, as ``ended_because``."""
    run: dict[str, Any]
    machine: dict[str, Any]
    versions: dict[str, str | None]
    series_interval_s: float
    targets: tuple[TargetStats, ...]
    crashes: tuple[CrashRecord, ...]
    workers: tuple[dict[str, Any], ...]
    skipped: tuple[dict[str, str], ...]
    coverage: dict[str, Any] | None

    @property
    def failures(self) -> list[FailureRecord]:
        return [f for t in self.targets for f in t.failures]

    @property
    def failing(self) -> list[FailureRecord]:
        """The failures that fail the run (:attr:`TargetStats.failing`)."""
        return [f for t in self.targets for f in t.failing]

    def to_json(self) -> dict[str, Any]:
        steps = sum(t.steps for t in self.targets)
        return {
            "schema": REPORT_SCHEMA,
            "tool": "poolfuzz fuzz",
            "started": self.started,
            "finished": self.finished,
            "duration_s": round(self.duration_s, 2),
            "startup_s": round(self.startup_s, 2),
            "interrupted": self.interrupted,
            "ended_because": self.ended_because,
            "exit_status": self.exit_status,
            "run": self.run,
            "machine": self.machine,
            "versions": self.versions,
            "series_interval_s": self.series_interval_s,
            "totals": {
                "examples": sum(t.examples for t in self.targets), "steps": steps,
                "steps_per_second": round(steps / self.duration_s, 1) if self.duration_s > 0 else 0.0,
                "failures": len(self.failing), "known": len(self.failures) - len(self.failing), "crashes": len(self.crashes),
            },
            "targets": [t.to_json() for t in self.targets],
            "failures": [f.to_json() for f in self.failures],
            "crashes": [c.to_json() for c in self.crashes],
            "workers": list(self.workers),
            "skipped": list(self.skipped),
            "coverage": self.coverage,
        }


def possible_arcs(package: str = "poolfuzz.pools") -> dict[str, frozenset[tuple[int, int]]]:
    """Every arc (line to line, entries and exits included) of each module of ``package``, by absolute path."""
    import importlib.util

    from coverage.parser import PythonParser

    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not a package"
    found: dict[str, frozenset[tuple[int, int]]] = {}
    for root in spec.submodule_search_locations:
        for path in sorted(Path(root).rglob("*.py")):
            parser = PythonParser(filename=str(path.resolve()))
            parser.parse_source()
            found[str(path.resolve())] = frozenset(parser.arcs())
    return found


# ------------------------------------------------------------------ context
def versions() -> dict[str, str | None]:
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("poolfuzz", "hypothesis", "torch", "triton", "coverage", "redis"):
        found[dist] = version(dist)
    return found


def machine_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python_executable": sys.executable,
    }


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# ----------------------------------------------------------------- coverage
def combine_coverage(data_dir: Path) -> dict[str, Any] | None:
    """Combine the workers' parallel coverage files; per-file branch coverage of ``pools/``."""
    import coverage

    if not any(data_dir.glob(".coverage.*")):
        return None
    cov = coverage.Coverage(data_file=str(data_dir / ".coverage"), branch=True, source_pkgs=["poolfuzz.pools"])
    cov.combine([str(data_dir)])
    cov.save()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(out))
        data = json.loads(out.read_text())
    root = Path.cwd()
    files: dict[str, Any] = {}
    for path, entry in sorted(data["files"].items()):
        summary = entry["summary"]
        try:
            name = str(Path(path).resolve().relative_to(root))
        except ValueError:
            name = path
        files[name] = {
            "percent": round(summary["percent_covered"], 1),
            "statements": summary["num_statements"],
            "missing_statements": summary["missing_lines"],
            "branches": summary.get("num_branches", 0),
            "partial_branches": summary.get("num_partial_branches", 0),
        }
    return {"branch": True, "percent": round(data["totals"]["percent_covered"], 1), "files": files}


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)

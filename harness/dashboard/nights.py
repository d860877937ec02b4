"""Reports grouped into nights: a night is the UTC date a report started on, whichever box wrote it.

A fleet (``docs/nightly.md``, *Running N machines*) starts every box at the same
time, so one night is several reports, often of the same targets.  Counting
nights by distinct start *times* made each box a night of its own (``--nights
14`` was 14 reports) while the trend's per-minute labels could merge two of them;
the date (:attr:`~harness.dashboard.reports.Run.night`) is the one rule
everything on the page uses.  A run that starts after midnight UTC belongs to
the next date: the rule is the date, never a guess at which evening it meant.

Per target and night, :class:`TargetNight` combines the reports of every box:
distinct event labels are the union of theirs, coverage the best one measured
(arcs are not in the report, so it cannot be united), speed all their steps over
all their fuzzing seconds, and failures the sum.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from harness.dashboard.reports import Run, TargetRun


def night_label(night: datetime.date) -> str:
    return night.isoformat()


def nights_of(runs: Sequence[Run]) -> list[datetime.date]:
    """The distinct nights of ``runs``, oldest first."""
    return sorted({run.night for run in runs})


@dataclass(frozen=True)
class TargetNight:
    """One target over one night: its entries in every report of that night, combined."""

    key: str
    night: datetime.date
    runs: tuple[TargetRun, ...]

    @property
    def events(self) -> int:
        """Distinct event labels reached by any box that night."""
        return len(set().union(*(t.events for t in self.runs)))

    @property
    def coverage(self) -> float | None:
        measured = [t.coverage for t in self.runs if t.coverage is not None]
        return max(measured) if measured else None

    @property
    def steps_per_second(self) -> float:
        """Steps over fuzzing seconds, both summed over the boxes (each report's rate is steps / its seconds)."""
        ran = [t for t in self.runs if t.steps_per_second > 0]
        seconds = sum(t.steps / t.steps_per_second for t in ran)
        return sum(t.steps for t in ran) / seconds if seconds > 0 else 0.0

    @property
    def failures(self) -> int:
        return sum(len(t.failures) for t in self.runs)


def target_nights(runs: Sequence[Run], key: str) -> list[TargetNight]:
    """``key`` on each night that fuzzed it, oldest first; ``runs`` in any order."""
    by_night: dict[datetime.date, list[TargetRun]] = {}
    for run in sorted(runs, key=lambda r: (r.started, str(r.source))):
        target = run.target(key)
        if target is not None:
            by_night.setdefault(run.night, []).append(target)
    return [TargetNight(key, night, tuple(found)) for night, found in sorted(by_night.items())]


def latest_rows(runs: Sequence[Run]) -> list[tuple[Run, TargetRun]]:
    """Each target in every report of the most recent night that fuzzed it: a row per box, none dropped.

    Targets come in first-seen order, each target's rows in start order.  A night
    is a UTC start date, so when several boxes fuzzed a target that night each
    box's entry is a row (its failures among them), not just the last report read.
    """
    ordered = sorted(runs, key=lambda r: (r.started, str(r.source)))
    last_night: dict[str, datetime.date] = {}
    for run in ordered:
        for target in run.targets:
            last_night[target.key] = run.night
    return [(run, entry) for key, night in last_night.items()
            for run in ordered if run.night == night and (entry := run.target(key)) is not None]

"""What one step of the page is: a run (each report, the default) or a night (``--by-night``).

By default every report is its own run, told apart by
:attr:`~poolfuzz.harness.dashboard.reports.Run.run_id`: two runs on one UTC date are two
rows of the table's history, two points of the trend, never one "night" with its
rows doubled and its steps summed.

``--by-night`` is for a fleet (``docs/nightly.md``, *Running N machines*) that
starts every box at the same time: a night is then every report started on one
UTC date (:attr:`~poolfuzz.harness.dashboard.reports.Run.night`), whichever box wrote it,
and per target and night :class:`TargetGroup` combines the boxes: distinct
event labels are the union of theirs, coverage the best one measured (arcs are
not in the report, so it cannot be united), speed all their steps over all their
fuzzing seconds, and failures the sum.  A run that starts after midnight UTC
belongs to the next date: the rule is the date, never a guess at which evening
it meant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from poolfuzz.harness.dashboard.reports import Run, TargetRun


def _chronological(runs: Sequence[Run]) -> list[Run]:
    return sorted(runs, key=lambda r: (r.started, str(r.source)))


@dataclass(frozen=True)
class Grouping:
    """How runs are grouped into the page's steps: one a run (default), or one a UTC start date."""

    by_night: bool = False

    @property
    def noun(self) -> str:
        return "night" if self.by_night else "run"

    @property
    def nouns(self) -> str:
        return "nights" if self.by_night else "runs"

    @property
    def rule(self) -> str:
        """One phrase saying what a step is, for the page."""
        if self.by_night:
            return "a night is the UTC date a report started on: every report started that date, from any box"
        return "a run is one report (its start, box and seed): two runs on one date are two runs"

    def key(self, run: Run) -> str:
        """The step ``run`` belongs to; keys sort in time order (both start with an ISO date)."""
        return run.night.isoformat() if self.by_night else run.run_id

    def keys(self, runs: Sequence[Run]) -> list[str]:
        """The distinct steps of ``runs``, oldest first."""
        return sorted({self.key(run) for run in runs})

    def labels(self, runs: Sequence[Run]) -> dict[str, str]:
        """A short, distinct axis label per step: the date by night; by run its start, with what tells it apart.

        A run's label is its start to the minute, with the box when the runs
        loaded come from more than one; only runs whose label another shares get
        the seconds, and then the seed (:attr:`Run.run_id` is start, box and seed,
        so that last label is always distinct).
        """
        if self.by_night:
            return {key: key for key in self.keys(runs)}
        first = {self.key(run): run for run in reversed(_chronological(runs))}
        boxes = len({run.box for run in first.values()}) > 1
        levels = [{key: _run_label(run, boxes, detail) for key, run in first.items()} for detail in range(3)]
        labels = {}
        for key in sorted(first):
            labels[key] = next((level[key] for level in levels if list(level.values()).count(level[key]) == 1), levels[-1][key])
        return labels


def _run_label(run: Run, boxes: bool, detail: int) -> str:
    label = f"{run.started:%Y-%m-%d %H:%M}" + (f":{run.started:%S}" if detail else "")
    label += f" {run.box}" if boxes else ""
    return label + (f" seed {run.seed}" if detail == 2 else "")


@dataclass(frozen=True)
class TargetGroup:
    """One target over one step (a run, or a night): its entries in every report of that step, combined."""

    key: str
    group: str
    runs: tuple[TargetRun, ...]

    @property
    def events(self) -> int:
        """Distinct event labels reached by any report of the step."""
        return len(set().union(*(t.events for t in self.runs)))

    @property
    def coverage(self) -> float | None:
        measured = [t.coverage for t in self.runs if t.coverage is not None]
        return max(measured) if measured else None

    @property
    def steps_per_second(self) -> float:
        """Steps over fuzzing seconds, both summed over the reports (each report's rate is steps / its seconds)."""
        ran = [t for t in self.runs if t.steps_per_second > 0]
        seconds = sum(t.steps / t.steps_per_second for t in ran)
        return sum(t.steps for t in ran) / seconds if seconds > 0 else 0.0

    @property
    def failures(self) -> int:
        return sum(len(t.failures) for t in self.runs)


def target_groups(runs: Sequence[Run], key: str, grouping: Grouping) -> list[TargetGroup]:
    """``key`` in each step that fuzzed it, oldest first; ``runs`` in any order."""
    by_group: dict[str, list[TargetRun]] = {}
    for run in _chronological(runs):
        target = run.target(key)
        if target is not None:
            by_group.setdefault(grouping.key(run), []).append(target)
    return [TargetGroup(key, group, tuple(found)) for group, found in sorted(by_group.items())]


def latest_rows(runs: Sequence[Run], grouping: Grouping) -> list[tuple[Run, TargetRun]]:
    """Each target in every report of the most recent step that fuzzed it: by run one row, by night a row per box.

    Targets come in first-seen order, each target's rows in start order.  By
    night, when several boxes fuzzed a target that night each box's entry is a
    row (its failures among them), not just the last report read.  By run, a
    target the latest run did not fuzz (a run split by ``--target``) keeps the
    row of the latest run that did.
    """
    ordered = _chronological(runs)
    last_group: dict[str, str] = {}
    for run in ordered:
        for target in run.targets:
            last_group[target.key] = grouping.key(run)
    return [
        (run, entry)
        for key, group in last_group.items()
        for run in ordered
        if grouping.key(run) == group and (entry := run.target(key)) is not None
    ]

"""The report so far, while a run goes on: written at each finding, and handed to the live page.

A failure is worth knowing about the moment its first failing step is seen, not only
once it is shrunk (shrinking can outlast the budget and its grace).  So the coordinator
calls :meth:`Snapshots.finding` at a first sighting and at a shrunk report: the JSON report
file (``--report``) is written then, holding the failure with its ``found_at`` record and a
shrink still ``running`` (then ``done`` or ``partial``), with ``ended_because`` and
``exit_status`` null because the run has not ended; the final report replaces it at the end.
A collector reading ``reports/`` mid-run, or after a run killed before its end, sees what was
found.  The live page (``fuzz --dashboard``) gets the same report every few seconds and at
each finding.  Neither is part of the run: a failure to write one is a warning, once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from poolfuzz.harness.fuzz.report import write_report

Report = dict[str, Any]


class Snapshots:
    """Hands the report so far (``build()``) to the ``report`` file at findings and to ``live`` when due."""

    def __init__(
        self,
        build: Callable[[], Report],
        *,
        report: Path | None,
        live: Callable[[Report], None] | None,
        live_every: float,
        note: Callable[[str], None],
    ) -> None:
        self.build, self.report, self.note = build, report, note
        self.live, self.live_every, self.next_live = live, live_every, 0.0
        """``live`` gets the report so far every ``live_every`` seconds (``fuzz --dashboard``: the live page)."""

    def finding(self, now: float) -> None:
        """Something was found or shrunk at ``now``: write the report file, and update the live page, at once."""
        if self.report is None and self.live is None:
            return
        snapshot = self.build()
        if self.report is not None:
            try:
                write_report(snapshot, self.report)
            except OSError as exc:
                self.note(
                    f"poolfuzz: warning: the report could not be written at a finding ({type(exc).__name__}: "
                    f"{exc}); it is written again at the end"
                )
                self.report = None
        self.update_live(now, snapshot)

    def update_live(self, now: float, snapshot: Report | None = None) -> None:
        """Hand the report so far to ``live`` when due (always, given a ``snapshot``); a failure there is one
        warning, never the run's end."""
        if self.live is None or (snapshot is None and now < self.next_live):
            return
        self.next_live = now + self.live_every
        try:
            self.live(snapshot if snapshot is not None else self.build())
        except Exception as exc:  # noqa: BLE001 - the page is a view of the run, not part of it
            self.note(f"poolfuzz: warning: the live dashboard stopped: {type(exc).__name__}: {exc}")
            self.live = None

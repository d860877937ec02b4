"""The dashboard of a run while it runs: rewritten every few seconds, reloading itself until the run ends.

The fuzz coordinator (``fuzz --dashboard FILE``) makes one :class:`LiveDashboard`
at start-up and, from its loop, hands it the report so far::

    live = LiveDashboard(Path("tonight.html"))   # raises PlotlyMissingError at once without plotly
    ...
    live.update(run_report.to_json())            # every few seconds: a page that reloads itself
    ...
    live.finish(final_report)                    # once: the final page, which does not reload

Every write is atomic (:func:`~poolfuzz.harness.dashboard.writing.write_atomically`), so a
browser reloading the page reads the previous page or the new one, never half
of one.  An update is cheap: the report dict is typed in memory (no JSON file
is read back), plotly.js is read from disk once per process
(:mod:`~poolfuzz.harness.dashboard.bundle`), and with ``bundle="shared"`` its file is
written beside the page once, not on every update.  The final page is the one
``poolfuzz dashboard`` builds from the same report, byte for byte.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from poolfuzz.harness.dashboard.bundle import BUNDLE_MODES, write_shared
from poolfuzz.harness.dashboard.figures import target_colours
from poolfuzz.harness.dashboard.page import Live, Page, render
from poolfuzz.harness.dashboard.reports import parse_report
from poolfuzz.harness.dashboard.writing import write_atomically

DEFAULT_REFRESH_S = 5.0


class LiveDashboard:
    """The page at ``path`` for one run in progress: :meth:`update` as it goes, :meth:`finish` at the end.

    ``refresh_s`` is how often the live page reloads itself in the browser (call
    :meth:`update` about as often; calling it more often only costs writes).
    ``bundle`` is ``inline`` (the page is one self-contained file) or ``shared``
    (plotly.js in one file beside it).  ``report_path`` is where the run's JSON
    report goes, named in the page's footer as ``dashboard`` names it (default:
    the page's own path).  :meth:`update` and :meth:`finish` raise
    :class:`~poolfuzz.harness.dashboard.report_check.ReportError` for a report the dashboard
    cannot read and :class:`OSError` when the page cannot be written; the
    caller decides whether that ends the run (it should not: warn and go on).
    """

    def __init__(
        self, path: Path, *, refresh_s: float = DEFAULT_REFRESH_S, bundle: str = "inline", report_path: Path | None = None
    ) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s must be positive, not {refresh_s}")
        if bundle not in BUNDLE_MODES:
            raise ValueError(f"unknown bundle mode {bundle!r} (one of {', '.join(BUNDLE_MODES)})")
        target_colours([])  # PlotlyMissingError now, at start-up, rather than at the first update
        self.path = path
        self.report_path = report_path if report_path is not None else path
        self.refresh_s = refresh_s
        self.bundle = bundle
        self.updates = 0
        self.finished = False
        self.last_write_s = 0.0
        """Seconds the last :meth:`update` or :meth:`finish` took, rendering and writing (for the caller's log)."""
        self._shared: str | None = None  # the shared bundle file written beside the page, once

    def update(self, report: dict[str, Any]) -> None:
        """Rewrite the page from ``report`` (as ``RunReport.to_json()`` gives it): a page that reloads itself."""
        if self.finished:
            raise RuntimeError(f"{self.path}: the run's dashboard is already finished")
        self._write(report, Live(self.refresh_s))
        self.updates += 1

    def finish(self, report: dict[str, Any]) -> None:
        """Write the final page from the final ``report``: no reload, the same bytes as ``dashboard`` would build."""
        self._write(report, None)
        self.finished = True

    def _write(self, report: dict[str, Any], live: Live | None) -> None:
        started = time.perf_counter()
        page: Page = render([parse_report(report, self.report_path)], bundle_mode=self.bundle, live=live)
        if page.bundle is not None and self.bundle == "shared" and self._shared != page.bundle.file_name:
            write_shared(page.bundle, self.path.parent)
            self._shared = page.bundle.file_name
        write_atomically(self.path, page.html)
        self.last_write_s = time.perf_counter() - started

"""HTML pictures of nightly fuzz runs: one night at a glance, and each target across nights.

``python -m harness dashboard reports/ -o dashboard.html`` reads the JSON
reports of ``python -m harness fuzz`` (``docs/nightly.md``) and writes one
self-contained page: a table of targets, the failures with their replay
commands, behaviour (distinct events, branch coverage) against fuzzing time,
and per-target trends when several nights are given.  Plots use plotly (the
``dashboard`` extra); its JavaScript is inlined once, so the page opens offline.

* :mod:`~harness.dashboard.reports` -- finding, validating and typing reports.
* :mod:`~harness.dashboard.nights` -- reports grouped into nights (UTC start dates, every box).
* :mod:`~harness.dashboard.figures` -- the plotly figures.
* :mod:`~harness.dashboard.page` -- the HTML page.
* :mod:`~harness.dashboard.command` -- the CLI subcommand's two halves.
"""

from harness.dashboard.command import add_arguments, run
from harness.dashboard.figures import PlotlyMissingError
from harness.dashboard.page import build_dashboard
from harness.dashboard.reports import DashboardError, NoReportsError, ReportError, load_reports, load_runs

__all__ = [
    "DashboardError",
    "NoReportsError",
    "PlotlyMissingError",
    "ReportError",
    "add_arguments",
    "build_dashboard",
    "load_reports",
    "load_runs",
    "run",
]

"""HTML pictures of fuzz runs: the latest run at a glance, each target across runs, and a live page.

``python -m harness dashboard reports/ -o dashboard.html`` reads the JSON
reports of ``python -m harness fuzz`` (``docs/nightly.md``) and writes one
page: a table of targets, the failures with their replay commands, behaviour
(distinct events, branch coverage) reached so far against fuzzing time, and
per-target trends when several runs are given.  Each report is its own run;
``--by-night`` groups them by UTC start date.  Plots use plotly (the
``dashboard`` extra) with plotly.js's basic bundle, inline once or in one file
shared by the pages of a folder, so the page opens offline.

* :mod:`~harness.dashboard.reports` -- validating and typing reports; :func:`~harness.dashboard.reports.so_far`.
* :mod:`~harness.dashboard.sources` -- finding report files, each run once.
* :mod:`~harness.dashboard.groups` -- what a step of the page is: a run, or a night.
* :mod:`~harness.dashboard.figures` -- the plotly figures.
* :mod:`~harness.dashboard.bundle` -- which plotly.js, and how the page includes it.
* :mod:`~harness.dashboard.sections` and :mod:`~harness.dashboard.page` -- the HTML page.
* :mod:`~harness.dashboard.live` -- :class:`LiveDashboard`, the page of a run in progress.
* :mod:`~harness.dashboard.command` -- the CLI subcommand's two halves.
"""

from harness.dashboard.command import add_arguments, run
from harness.dashboard.figures import PlotlyMissingError
from harness.dashboard.live import LiveDashboard
from harness.dashboard.page import build_dashboard
from harness.dashboard.report_check import DashboardError, NoReportsError, ReportError
from harness.dashboard.sources import load_reports, load_runs

__all__ = [
    "DashboardError",
    "LiveDashboard",
    "NoReportsError",
    "PlotlyMissingError",
    "ReportError",
    "add_arguments",
    "build_dashboard",
    "load_reports",
    "load_runs",
    "run",
]

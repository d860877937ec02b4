"""HTML pictures of fuzz runs: the latest run at a glance, each target across runs, and a live page.

``poolfuzz dashboard reports/ -o dashboard.html`` reads the JSON
reports of ``poolfuzz fuzz`` (``docs/nightly.md``) and writes one
page: a table of targets, the failures with their replay commands, behaviour
(distinct events, branch coverage) reached so far against fuzzing time, and
per-target trends when several runs are given.  Each report is its own run;
``--by-night`` groups them by UTC start date.  Plots use plotly (the
``dashboard`` extra) with plotly.js's basic bundle, inline once or in one file
shared by the pages of a folder, so the page opens offline.

* :mod:`~poolfuzz.harness.dashboard.reports` -- validating and typing reports; :func:`~poolfuzz.harness.dashboard.reports.so_far`.
* :mod:`~poolfuzz.harness.dashboard.sources` -- finding report files, each run once.
* :mod:`~poolfuzz.harness.dashboard.groups` -- what a step of the page is: a run, or a night.
* :mod:`~poolfuzz.harness.dashboard.figures` -- the plotly figures.
* :mod:`~poolfuzz.harness.dashboard.bundle` -- which plotly.js, and how the page includes it.
* :mod:`~poolfuzz.harness.dashboard.sections` and :mod:`~poolfuzz.harness.dashboard.page` -- the HTML page.
* :mod:`~poolfuzz.harness.dashboard.live` -- :class:`LiveDashboard`, the page of a run in progress.
* :mod:`~poolfuzz.harness.dashboard.command` -- the CLI subcommand's two halves.
"""

from poolfuzz.harness.dashboard.command import add_arguments, run
from poolfuzz.harness.dashboard.figures import PlotlyMissingError
from poolfuzz.harness.dashboard.live import LiveDashboard
from poolfuzz.harness.dashboard.page import build_dashboard
from poolfuzz.harness.dashboard.report_check import DashboardError, NoReportsError, ReportError
from poolfuzz.harness.dashboard.sources import load_reports, load_runs

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

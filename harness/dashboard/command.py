"""``poolfuzz dashboard REPORT_OR_DIR... -o FILE.html``: the parser half and the run half.

:mod:`poolfuzz.harness.cli` owns the subcommand; it calls :func:`add_arguments` on the
subparser and :func:`run` with the parsed namespace.  Every problem with the
inputs is one ``poolfuzz: error:`` line and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from poolfuzz.harness.arguments import positive
from poolfuzz.harness.dashboard.bundle import BUNDLE_MODES
from poolfuzz.harness.dashboard.figures import PlotlyMissingError
from poolfuzz.harness.dashboard.page import build_dashboard
from poolfuzz.harness.dashboard.report_check import DashboardError

EXIT_OK = 0
EXIT_USAGE = 2
DEFAULT_OUTPUT = Path("poolfuzz-dashboard.html")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``dashboard`` subcommand's arguments, on the subparser :mod:`poolfuzz.harness.cli` made for it."""
    parser.add_argument(
        "sources",
        nargs="+",
        type=Path,
        metavar="REPORT_OR_DIR",
        help="nightly fuzz reports (JSON), or folders searched for them (*.json, recursively)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        metavar="FILE.html",
        help=f"where to write the page (default {DEFAULT_OUTPUT}); opens offline",
    )
    parser.add_argument(
        "--by-night",
        action="store_true",
        help="group the reports into nights: every report started on one UTC date, from any box, "
        "is one night (one row per box in the table, one trend point per target); by default "
        "each report is its own run",
    )
    parser.add_argument(
        "--nights", type=positive(int), metavar="N", help="only the reports started on the N most recent UTC dates (default all)"
    )
    parser.add_argument("--runs", type=positive(int), metavar="N", help="only the N most recent reports (default all)")
    parser.add_argument(
        "--bundle",
        choices=BUNDLE_MODES,
        default="inline",
        help="inline: plotly.js inside the page, one self-contained file (default); shared: "
        "plotly.js in one file beside the page, which every page in that folder uses",
    )


def run(args: argparse.Namespace) -> int:
    """Build the page; 0 when written, 2 (one line on stderr) for a bad report, no report, or no plotly."""
    try:
        written = build_dashboard(args.sources, args.output, nights=args.nights, last=args.runs, by_night=args.by_night, bundle=args.bundle)
    except (DashboardError, PlotlyMissingError) as exc:
        print(f"poolfuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"poolfuzz: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"dashboard: {written}")
    return EXIT_OK

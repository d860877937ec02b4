"""The nightly session: worker processes fuzzing every target for a time budget, then a typed report.

:mod:`~harness.fuzz.options` (what to run), :mod:`~harness.fuzz.session` (the
coordinator), :mod:`~harness.fuzz.process` and :mod:`~harness.fuzz.worker` (one
worker process and its rounds), :mod:`~harness.fuzz.protocol` (the messages between
them, standard library only), :mod:`~harness.fuzz.database` (the example database),
:mod:`~harness.fuzz.progress` (the live display) and :mod:`~harness.fuzz.report`
(the typed report and its summary).
"""

from harness.fuzz.options import FuzzOptions, select_targets
from harness.fuzz.report import REPORT_SCHEMA, RunReport, summary_text, write_report
from harness.fuzz.session import EXIT_FOUND, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, FuzzRun, exit_status

__all__ = [
    "EXIT_FOUND",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "REPORT_SCHEMA",
    "FuzzOptions",
    "FuzzRun",
    "RunReport",
    "exit_status",
    "select_targets",
    "summary_text",
    "write_report",
]

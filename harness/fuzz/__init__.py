"""The nightly session: worker processes fuzzing every target for a time budget, then a typed report.

:mod:`~harness.fuzz.options` (what to run), :mod:`~harness.fuzz.session` (the
coordinator), :mod:`~harness.fuzz.process` and :mod:`~harness.fuzz.worker` (one
worker process and its rounds), :mod:`~harness.fuzz.protocol` (the messages between
them, standard library only), :mod:`~harness.fuzz.database` (the example database),
:mod:`~harness.fuzz.progress` (the live display), :mod:`~harness.fuzz.findings` (a failure
from its first failing step, reported at once, to its shrunk report), :mod:`~harness.fuzz.snapshots`
(the report written at each finding, and the live page), :mod:`~harness.fuzz.report` (the typed
report) and :mod:`~harness.fuzz.summary` (the text summary of a report).
"""

from harness.fuzz.options import FuzzOptions, select_targets
from harness.fuzz.report import REPORT_SCHEMA, RunReport, summary_text, write_report
from harness.fuzz.run_report import EXIT_FOUND, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, exit_status
from harness.fuzz.session import FuzzRun

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

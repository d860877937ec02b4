"""The nightly session: worker processes fuzzing every target for a time budget, then a typed report.

:mod:`~poolfuzz.harness.fuzz.options` (what to run), :mod:`~poolfuzz.harness.fuzz.session` (the
coordinator), :mod:`~poolfuzz.harness.fuzz.process` and :mod:`~poolfuzz.harness.fuzz.worker` (one
worker process and its rounds), :mod:`~poolfuzz.harness.fuzz.protocol` (the messages between
them, standard library only), :mod:`~poolfuzz.harness.fuzz.database` (the example database),
:mod:`~poolfuzz.harness.fuzz.progress` (the live display), :mod:`~poolfuzz.harness.fuzz.findings` (a failure
from its first failing step, reported at once, to its shrunk report), :mod:`~poolfuzz.harness.fuzz.snapshots`
(the report written at each finding, and the live page), :mod:`~poolfuzz.harness.fuzz.report` (the typed
report) and :mod:`~poolfuzz.harness.fuzz.summary` (the text summary of a report).
"""

from poolfuzz.harness.fuzz.options import FuzzOptions, select_targets
from poolfuzz.harness.fuzz.report import REPORT_SCHEMA, RunReport, summary_text, write_report
from poolfuzz.harness.fuzz.run_report import EXIT_FOUND, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, exit_status
from poolfuzz.harness.fuzz.session import FuzzRun

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

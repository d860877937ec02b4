"""The hypothesis layer: one state machine per pool family, thin over the judge's drivers.

Also the one builder of hypothesis settings (:mod:`harness.machines.settings`) and
the runner of one machine that shrinks and saves a failing trace (:mod:`harness.machines.run`).
"""

from harness.machines.base import PoolMachine
from harness.machines.run import failure_trace, run_machine, violation_of
from harness.machines.settings import build_settings, pinned_settings, settings_for
from harness.machines.table import make_machine

__all__ = [
    "PoolMachine",
    "build_settings",
    "failure_trace",
    "make_machine",
    "pinned_settings",
    "run_machine",
    "settings_for",
    "violation_of",
]

"""The hypothesis layer: one state machine per pool family, thin over the judge's drivers.

Also the one builder of hypothesis settings (:mod:`poolfuzz.harness.machines.settings`) and
the runner of one machine that shrinks and saves a failing trace (:mod:`poolfuzz.harness.machines.run`).
"""

from poolfuzz.harness.machines.base import PoolMachine
from poolfuzz.harness.machines.run import failure_trace, run_machine, violation_of
from poolfuzz.harness.machines.settings import build_settings, pinned_settings, settings_for
from poolfuzz.harness.machines.table import make_machine

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

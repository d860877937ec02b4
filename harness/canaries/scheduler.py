"""Scheduler canaries: the scheduler's own bookkeeping with one historical bug put back.

The ``scheduler`` family's pools are the production ones; what changes here is
how the scheduler (the driver) calls them, so these canaries are driver
variants, bound with :attr:`harness.machines.scheduler.SchedulerMachine.driver_class`.
"""

from __future__ import annotations

from harness.judge.drivers.scheduler import SchedulerDriver
from harness.canaries.catalogue import Canary


class CeilRetractScheduler(SchedulerDriver):
    """``retract`` frees the request's KV from ``ceil(keep / ps) * ps`` (SGLang #4977).

    The tokens ``floor(keep/ps)*ps .. keep`` are dropped from the request but
    their page is never freed: at page size > 1 every mid-page retract leaks
    one page.  Caught by ``scheduler-conservation``.
    """

    def retract_free_start(self, keep: int) -> int:
        return -(-keep // self.ps) * self.ps


CANARIES: dict[str, Canary] = {
    "retract-frees-from-ceil": Canary(
        "scheduler", "harness.judge.drivers.scheduler:build_scheduler_pools",
        "retract frees KV from ceil(keep/ps)*ps instead of the floor, leaking the partial page",
        "SGLang #4977", "scheduler-conservation", driver="harness.canaries.scheduler:CeilRetractScheduler",
    ),
}

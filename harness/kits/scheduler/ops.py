"""The scheduler driver's operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`).

:class:`~poolfuzz.harness.kits.scheduler.driver.SchedulerDriver` implements exactly these; its moves, the combination
canaries and the limits name them through :class:`SchedulerOps`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.ops import Operations, op


class SchedulerOps(Operations):
    """``scheduler``: requests admitted, prefilled in chunks, decoded, finished, retracted and aborted."""

    abort = op("handle")
    admit = op("requests", "reserve_extra", "tokens")
    clear = op()
    decode = op("handles")
    finish = op("handles")
    prefill = op("handles", "chunk")
    retract = op("handle", "keep")

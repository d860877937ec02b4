"""SGLang 0.5.23's engine loop as an engine target (:class:`poolfuzz.harness.engines.interface.EngineTarget`).

The loop (:class:`poolfuzz.harness.upstream.engine.EngineLoop`) runs ``event_loop_normal``: an iteration lands the
results of the batch it scheduled, so a :class:`~poolfuzz.harness.engines.interface.StepReport`'s scheduled and
landed requests are the same, and nothing is in flight between steps.  An overlap loop would report the
batch it launched as in flight, with the pages it still reads, and be judged by the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolfuzz.harness.engines.interface import Observation, StepReport, Submission
from poolfuzz.harness.kits.engine.checks import UpstreamChecker
from poolfuzz.harness.kits.engine.observe import observe
from poolfuzz.harness.upstream.sglang_modules import active


class SGLangEngine:
    """One loop and upstream's checker over its pools, behind the engine protocol."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.checker = UpstreamChecker(loop)
        attach = getattr(loop, "attach_checker", None)
        if attach is not None:  # upstream's own Scheduler runs on_idle's checks with it (engine_scheduler.SchedulerLoop)
            attach(self.checker)

    def submit(self, request: Submission) -> str | None:
        req = self.loop.arrive(list(request.prompt), request.max_new_tokens)
        return None if req is None else str(req.rid)

    def abort(self, rid: str) -> str:
        return str(self.loop.abort(rid))

    def step(self, samples: Mapping[str, int]) -> StepReport:
        kind = str(self.loop.iterate(dict(samples)))
        batch = self.loop.last_batch
        rids = tuple(str(r.rid) for r in batch.reqs) if batch is not None else ()
        return StepReport(kind, rids, rids)

    def observe(self) -> Observation:
        with active(self.loop.m):
            return observe(self.loop, self.checker)

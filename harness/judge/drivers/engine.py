"""The ``engine`` family's driver: scheduler iterations of SGLang's memory path, judged after each one.

The pool under test is an :class:`harness.upstream.engine.EngineLoop`: upstream's ``ReqToTokenPool``,
KV allocator and prefix cache driven by upstream's own scheduler calls.  The fuzzer chooses only
what a user and a model choose: which requests arrive (prompts that share prefixes on purpose,
output budgets), which running requests sample EOS at a result, which get aborted, and when the
scheduler iterates.  What the scheduler then does with memory (admission, chunking, eviction,
retraction, checkpoints, releases) is upstream's decision, so every call order reached is one the
0.5.23 scheduler produces.  After every step both judges of :mod:`harness.judge.engine_checks` run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from harness.judge.drivers.base import SKIPPED, Driver, operation
from harness.judge.engine_checks import UpstreamChecker, judge
from harness.judge.invariants import InvariantViolation

STEMS: tuple[tuple[int, ...], ...] = (
    (11, 12, 13, 14, 15, 16, 17, 18),
    (11, 12, 13, 14, 21, 22, 23, 24),
    (31, 32, 33, 34, 35, 36, 37, 38),
)
"""Prompt stems: the first two share a four-token prefix (a split), the third shares nothing."""


class EngineDriver(Driver):
    """Arrivals, iterations and aborts on one :class:`~harness.upstream.engine.EngineLoop`."""

    family = "engine"

    def __init__(self, factory: Callable[..., Any], config: dict[str, Any], **kwargs: Any) -> None:
        kwargs["audit_period"] = 1
        super().__init__(factory, config, **kwargs)
        self.loop = self.pool
        self.upstream = UpstreamChecker(self.loop)
        self.finished = 0

    # ------------------------------------------------------------------ operations
    @operation
    def arrive(self, stem: int, length: int, tail: int, max_new: int) -> None:
        """A request arrives: ``length`` tokens of stem ``stem`` plus ``tail`` distinct tokens."""
        base = STEMS[stem % len(STEMS)]
        prompt = [base[i % len(base)] for i in range(max(1, length))] + [40 + self.steps % 50 + i for i in range(tail)]
        limit = self.loop.config.context - 2
        if len(prompt) + max_new > limit:
            return SKIPPED  # the tokenizer manager refuses a request past the context length
        self.loop.arrive(prompt, max(1, max_new))
        return None

    @operation
    def crowd(self, count: int, max_new: int) -> None:
        """``count`` requests with long outputs arrive at once: decode outgrows memory and retracts."""
        limit = self.loop.config.context - 2
        for i in range(count):
            prompt = [11, 12, 13, 14, 50 + (self.steps + i) % 40]
            self.loop.arrive(prompt, max(1, min(max_new, limit - len(prompt))))
        self.event("a crowd arrived")
        return None

    @operation
    def iterate(self, eos: list[int]) -> str:
        """One scheduler iteration; running requests at positions ``eos`` sample EOS at its result."""
        from harness.upstream.engine import EOS

        batch_reqs = self._next_batch_reqs()
        tokens = {batch_reqs[i].rid: EOS for i in eos if i < len(batch_reqs)}
        try:
            kind = self.loop.iterate(tokens)
        except InvariantViolation:
            raise
        except Exception as exc:  # upstream raised inside its own scheduler path
            raise InvariantViolation("valid-call-accepted", f"scheduler iteration raised {type(exc).__name__}: {exc}",
                                     iteration=self.loop.iterations) from exc
        self.event(f"iteration: {kind}")
        return kind

    @operation
    def abort(self, pick: int) -> None:
        """Abort a queued or running request (the ``abort_request`` path)."""
        live = [r.rid for r in self.loop.waiting_queue] + [r.rid for r in self.loop.running_batch.reqs]
        if not live:
            return SKIPPED
        where = self.loop.abort(live[pick % len(live)])
        self.event(f"abort of a {where} request")
        return None

    def _next_batch_reqs(self) -> list[Any]:
        """Requests a result will cover if this iteration decodes (prefill batches are new requests)."""
        return list(self.loop.running_batch.reqs) + list(self.loop.waiting_queue)

    # ------------------------------------------------------------------ judging
    def observe(self) -> Hashable:
        loop = self.loop
        return (loop.allocator.available_size(), loop.req_to_token_pool.available_size(),
                int(loop.tree_cache.evictable_size()), int(loop.tree_cache.protected_size()))

    def audit(self) -> None:
        judge(self.loop, self.upstream)

    def teardown(self) -> None:
        """Drain: every request finishes (EOS), then the idle checks run."""
        from harness.upstream.engine import EOS

        for _ in range(4 * self.loop.config.rows + 8):
            if self.loop.is_idle():
                break
            rids = [r.rid for r in self.loop.running_batch.reqs]
            self.loop.iterate(dict.fromkeys(rids, EOS))
            self.audit_now()
        self.loop.iterate({})  # the idle iteration: on_idle's pool and request-pool checks
        super().teardown()


def build_engine(**config: Any) -> Any:
    """The default target: upstream's loop (there is no poolfuzz engine yet; see docs/upstream-findings.md)."""
    from harness.upstream.engine import EngineConfig, EngineLoop

    return EngineLoop(EngineConfig(**{k: v for k, v in config.items() if k != "device"}))

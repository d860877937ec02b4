"""``vllm_engine`` canaries: vLLM's scheduler with one real bug shape planted in one engine's objects.

Each canary builds a :class:`~harness.kits.vllm_engine.target.VllmEngine` and replaces one method on *that*
engine's scheduler or block pool (an instance attribute), so vLLM's loaded classes stay untouched and a
process running other targets is not affected.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.canaries.catalogue import Canary
from harness.kits.vllm_engine.target import VllmEngine, build_vllm_engine


def build_duplicate_in_free_blocks(**shape: Any) -> VllmEngine:
    """``BlockPool.free_blocks`` gets its first block twice in one call (vLLM #42571, SWA + CPU offload).

    0.33.0's ``free_blocks`` neither dedups nor asserts ``ref_cnt > 0`` (block_pool.py:816-849): the block's
    count goes one too low, and it is appended to the free queue while a table still holds it or twice.
    """
    engine = build_vllm_engine(**shape)
    pool = engine.scheduler.kv_cache_manager.block_pool
    free = pool.free_blocks

    def free_blocks(ordered_blocks: Iterable[Any]) -> None:
        blocks = list(ordered_blocks)
        free(blocks + blocks[:1])

    pool.free_blocks = free_blocks
    return engine


def build_preemption_keeps_blocks(**shape: Any) -> VllmEngine:
    """A preempted request goes back to the waiting queue still holding its blocks.

    ``_preempt_request`` must free them (``_free_request_blocks``, scheduler.py:1817) and reset
    ``num_computed_tokens``; here the free is skipped, so the request waits with nothing computed and its
    blocks held (the async + preemption family of vLLM #46066 / #47900 / #38624).
    """
    engine = build_vllm_engine(**shape)
    scheduler = engine.scheduler
    preempt, release = scheduler._preempt_request, scheduler._free_request_blocks
    preempting = [False]

    def free_request_blocks(request: Any) -> None:
        if not preempting[0]:
            release(request)

    def preempt_request(request: Any, timestamp: float, drop_stale_output: bool = False) -> None:
        preempting[0] = True
        try:
            preempt(request, timestamp, drop_stale_output)
        finally:
            preempting[0] = False

    scheduler._free_request_blocks = free_request_blocks
    scheduler._preempt_request = preempt_request
    return engine


CANARIES = {
    "vllm-engine-duplicate-in-free-blocks": Canary(
        family="vllm_engine",
        spec="harness.kits.vllm_engine.canaries:build_duplicate_in_free_blocks",
        bug="free_blocks gets one block twice in a call: its ref_cnt drops one too low",
        upstream="vLLM #42571 (SWA + CPU offload double free; fix PR #42615)",
        invariant="ref-count",
    ),
    "vllm-engine-preemption-keeps-blocks": Canary(
        family="vllm_engine",
        spec="harness.kits.vllm_engine.canaries:build_preemption_keeps_blocks",
        bug="a preempted request is re-queued still holding its KV blocks",
        upstream="vLLM async + preemption fixes (#38624, #46066, #47900)",
        invariant="scheduler-conservation",
    ),
}

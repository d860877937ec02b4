"""``vllm_engine`` canaries for speculative decoding: one bug shape planted in one engine's objects.

As in :mod:`poolfuzz.harness.kits.vllm_engine.canaries`, the method is replaced on *that* engine's scheduler (an instance
attribute), so vLLM's loaded classes stay untouched.
"""

from __future__ import annotations

from typing import Any

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.kits.vllm_engine.target import VllmEngine, build_vllm_engine


def build_lookahead_blocks_kept_after_preemption(**shape: Any) -> VllmEngine:
    """A preempted request keeps the blocks allocated past its computed tokens (its draft and lookahead slots).

    ``allocate_slots`` reserves ``num_lookahead_tokens`` and the scheduled drafts past the computed tokens
    (kv_cache_manager.py:460-552); rejected drafts roll ``num_computed_tokens`` back (scheduler.py:2354-2361) without
    freeing them.  ``_preempt_request`` must free every block (``_free_request_blocks``, scheduler.py:1817); here the
    blocks past the computed tokens stay in the request's table, so it waits with nothing computed and holds them (the
    async + speculative preemption family of vLLM #41190 / #38624).  A shape drawn without speculation gets EAGLE
    with 3 lookahead slots, so every example can reach the bug; one over our pool too (``both``) keeps its own, since
    the driver's mirror over ours is built from the drawn shape and must run the same server.  A Mamba shape gets the
    three speculative state blocks its group then needs; a chunked-local shape with caching gets n-gram drafts (vLLM
    asserts EAGLE + chunked local unsupported, config.py::group_problems).
    """
    if not shape.get("speculative_method") and shape.get("pools", "upstream") == "upstream":
        method = "eagle"
        if shape.get("attention_chunk_size") is not None and shape.get("enable_prefix_caching", True):
            method = "ngram_gpu" if shape.get("async_scheduling") else "ngram"  # vLLM refuses EAGLE + chunked local
        shape = {**shape, "speculative_method": method, "num_speculative_tokens": 3}
        if shape.get("mamba"):
            # A Mamba group holds one speculative state block per draft (MambaSpec.num_speculative_blocks): three more.
            shape["num_blocks"] = int(shape.get("num_blocks", 64)) + 3
    engine = build_vllm_engine(**shape)
    scheduler = engine.scheduler
    preempt = scheduler._preempt_request
    managers = scheduler.kv_cache_manager.coordinator.single_type_managers

    def preempt_request(request: Any, timestamp: float, drop_stale_output: bool = False) -> None:
        rid = request.request_id
        kept = []
        for manager in managers:
            blocks = manager.req_to_blocks.get(rid, [])
            covered = -(-request.num_computed_tokens // manager.block_size)
            kept.append(blocks[covered:])
            del blocks[covered:]
        preempt(request, timestamp, drop_stale_output)
        for manager, tail in zip(managers, kept, strict=True):
            if tail:
                manager.req_to_blocks[rid] = tail

    scheduler._preempt_request = preempt_request
    return engine


CANARIES = {
    "vllm-engine-lookahead-blocks-kept-after-preemption": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.spec_canaries:build_lookahead_blocks_kept_after_preemption",
        bug="speculative decoding: a preempted request keeps the blocks of its draft and lookahead slots",
        upstream="vLLM async + speculative preemption fixes (#41190, #38624)",
        invariant="scheduler-conservation",
    )
}

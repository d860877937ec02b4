"""``vllm_engine`` canaries: vLLM's scheduler with one real bug shape planted in one engine's objects.

Each canary builds a :class:`~poolfuzz.harness.kits.vllm_engine.target.VllmEngine` and replaces one method on *that*
engine's scheduler or block pool (an instance attribute), so vLLM's loaded classes stay untouched and a
process running other targets is not affected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.kits.vllm_engine.config import BLOCKS, VllmEngineConfig
from poolfuzz.harness.kits.vllm_engine.target import VllmEngine, build_vllm_engine
from poolfuzz.pools.block_pool import BlockPool

Builder = Callable[..., VllmEngine]


def _vllms_pool(engine: VllmEngine) -> Any:
    """vLLM's ``BlockPool`` of ``engine``, or ``None`` on the poolfuzz side of a ``pools="both"`` run: a bug planted in
    vLLM's pool stays out of ours (which refuses some of them), so the mirror runs the pool as written."""
    pool = engine.scheduler.kv_cache_manager.block_pool
    return None if isinstance(pool, BlockPool) else pool


def _scheduler(engine: VllmEngine) -> Any:
    return engine.scheduler


def with_overrides(shape: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``shape`` with a canary's ``overrides``, kept a shape vLLM starts: prefix caching forced onto a drawn Mamba shape
    puts Mamba in align mode, which needs chunked prefill (model_executor/models/config.py:772) and runs over vLLM's
    pool only (config.py::group_problems), so chunked prefill is turned on and, over our pool (``poolfuzz``/``both``:
    the driver builds the mirror with the same overrides), the Mamba group is left out (a pure Mamba model becomes a
    full-attention one); EAGLE drafts over our pool with caching forced on become n-gram drafts, as the moves draw."""
    built = {**shape, **overrides}
    ours = built.get("pools", "upstream") != "upstream"
    local = built.get("attention_chunk_size") is not None
    if (ours or local) and built.get("enable_prefix_caching", True) and built.get("speculative_method") == "eagle":
        # As the move table draws it (moves.py): EAGLE's lookahead block hashes are not bridged to our pool.
        built["speculative_method"] = "ngram_gpu" if built.get("async_scheduling") else "ngram"
    if built.get("async_scheduling") and built.get("speculative_method") == "ngram":
        built["speculative_method"] = "ngram_gpu"  # async forced on: vLLM's async n-gram drafter (config.py::ASYNC_NGRAM)
    if built.get("mamba") and built.get("enable_prefix_caching", True):
        built["enable_chunked_prefill"] = True
        if ours:
            built["mamba"] = False
            if not built.get("full_attention", True) and built.get("attention_chunk_size") is None:
                # A pure Mamba model becomes a full-attention one, with the blocks one max_model_len request needs.
                built["full_attention"] = True
                need = -(-int(built.get("max_model_len", 64)) // int(built.get("block_size", 16))) + 1
                built["num_blocks"] = max(int(built.get("num_blocks", 64)), need)
        else:
            # Align mode keeps 2 + K state blocks a request where none mode kept 1 + K: the pool grows to what
            # vLLM's startup check asks of one max_model_len request (config.py::_shape_problems), as a server would.
            probe = VllmEngineConfig.from_mapping({**built, "num_blocks": BLOCKS})
            built["num_blocks"] = max(int(built.get("num_blocks", probe.num_blocks)), probe.blocks_per_request() + 1)
    return built


def _planted(where: Callable[[VllmEngine], Any], **overrides: Any) -> Callable[[Callable[[Any], None]], Builder]:
    """A canary's builder from ``plant(obj)``: the engine built from the shape with ``overrides``, then the bug planted
    in ``where(engine)`` (nothing planted where that is ``None``).  The builder takes ``plant``'s name and docstring,
    not its signature (no ``__wrapped__``: a target's signature is checked against the family's configuration)."""

    def decorate(plant: Callable[[Any], None]) -> Builder:
        def build(**shape: Any) -> VllmEngine:
            engine = build_vllm_engine(**with_overrides(shape, overrides))
            planted_in = where(engine)
            if planted_in is not None:
                plant(planted_in)
            return engine

        build.__name__ = build.__qualname__ = plant.__name__
        build.__doc__ = plant.__doc__
        return build

    return decorate


@_planted(_vllms_pool)
def build_duplicate_in_free_blocks(pool: Any) -> None:
    """``BlockPool.free_blocks`` gets its first block twice in one call (vLLM #42571, SWA + CPU offload).

    0.33.0's ``free_blocks`` neither dedups nor asserts ``ref_cnt > 0`` (block_pool.py:816-849): the block's
    count goes one too low, and it is appended to the free queue while a table still holds it or twice.
    """
    free = pool.free_blocks

    def free_blocks(ordered_blocks: Iterable[Any]) -> None:
        blocks = list(ordered_blocks)
        free(blocks + blocks[:1])

    pool.free_blocks = free_blocks


@_planted(_scheduler)
def build_preemption_keeps_blocks(scheduler: Any) -> None:
    """A preempted request goes back to the waiting queue still holding its blocks.

    ``_preempt_request`` must free them (``_free_request_blocks``, scheduler.py:1817) and reset
    ``num_computed_tokens``; here the free is skipped, so the request waits with nothing computed and its
    blocks held (the async + preemption family of vLLM #46066 / #47900 / #38624).
    """
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


@_planted(_scheduler, async_scheduling=True)
def build_placeholders_survive_preemption(scheduler: Any) -> None:
    """Async scheduling: a preempted request keeps its ``num_output_placeholders`` (vLLM #46066 / #47900 / #38624).

    ``_preempt_request`` rolls the placeholders of its in-flight steps back to 0 (scheduler.py:1836); here they
    survive, so the request waits with placeholders for tokens it will never be scheduled for, and once resumed
    its placeholder count drifts from what is in flight (the underflow assert at scheduler.py:2769 upstream).
    """
    preempt = scheduler._preempt_request

    def preempt_request(request: Any, timestamp: float, drop_stale_output: bool = False) -> None:
        kept = request.num_output_placeholders
        preempt(request, timestamp, drop_stale_output)
        request.num_output_placeholders = kept

    scheduler._preempt_request = preempt_request


@_planted(_vllms_pool, enable_prefix_caching=True)
def build_evicted_hash_left_in_map(pool: Any) -> None:
    """A cached free block reused by ``get_new_blocks`` loses its hash, but the hash map keeps pointing at it.

    ``_maybe_evict_cached_block`` must pop the block's entries from ``cached_block_hash_to_block``
    (block_pool.py:769-790, ``_remove_cached_block_hashes``); here only the block's own hash is reset, so a later
    request with that prefix hits a block another request now writes (vLLM #4761, stale hashes after reuse #44237).
    """

    def maybe_evict_cached_block(block: Any) -> bool:
        had = block.block_hash is not None
        block.reset_hash()
        return had

    pool._maybe_evict_cached_block = maybe_evict_cached_block


@_planted(_vllms_pool)
def build_free_blocks_in_call_order_reversed(pool: Any) -> None:
    """``BlockPool.free_blocks`` queues the blocks of one call in reverse order.

    The managers pass a request's blocks tail first (single_type_kv_cache_manager.py:599, ``reversed``) so its tail
    block is evicted before the prefix it extends; a pool that reverses the call evicts the shared prefix first.
    Planted in vLLM's pool of a ``pools="both"`` run: ours keeps block_pool.py's order, and the two free queues
    differ (``free-queue-order``).
    """
    free = pool.free_blocks
    pool.free_blocks = lambda ordered_blocks: free(list(ordered_blocks)[::-1])


@_planted(_vllms_pool)
def build_null_block_left_queued(pool: Any) -> None:
    """The null block stays on the free queue after the pool takes it as the placeholder.

    ``BlockPool.__init__`` pops block 0 off the queue as the null block (block_pool.py:190-192), which sliding-window
    tables name for every skipped position and no call pools again (``touch``/``free_blocks`` skip it, :795, :828).
    Here it is queued again at the tail, so once the queue drains ``get_new_blocks`` hands the placeholder to a
    request that then writes into it.
    """
    pool.free_block_queue.append(pool.null_block)


@_planted(_scheduler)
def build_table_entry_left_after_free(scheduler: Any) -> None:
    """A finished request's blocks go back to the pool, but the single-type manager keeps its block table entry.

    ``SingleTypeKVCacheManager.free`` pops ``req_to_blocks[request_id]`` (single_type_kv_cache_manager.py:599,
    ``pop_blocks_for_free``); here the freed blocks stay listed under the gone request, so the table names blocks
    the free queue hands to others (the shape of vLLM's leaked-table fixes around ``req_to_blocks``).
    """
    for manager in scheduler.kv_cache_manager.coordinator.single_type_managers:

        def free(request_id: str, manager: Any = manager, release: Any = manager.free) -> None:
            blocks = list(manager.req_to_blocks.get(request_id, ()))
            release(request_id)
            if blocks:
                manager.req_to_blocks[request_id] = blocks

        manager.free = free


@_planted(_vllms_pool, enable_prefix_caching=True)
def build_reset_leaves_block_hashes(pool: Any) -> None:
    """``reset_prefix_cache`` empties the hash map but leaves each block's own hash.

    block_pool.py:890-897 resets the map and then every block's hash; here the blocks keep theirs, so a block
    carries a hash nothing indexes, and caching it again trips ``set_block_hash``'s assert (kv_cache_utils.py:201).
    """
    reset = pool.reset_prefix_cache

    def reset_prefix_cache() -> bool:
        hashes = [(block, block._block_hash, block._block_hash_num_tokens) for block in pool.blocks]
        done = bool(reset())
        if done:
            for block, block_hash, tokens in hashes:
                block._block_hash, block._block_hash_num_tokens = block_hash, tokens
        return done

    pool.reset_prefix_cache = reset_prefix_cache


@_planted(_vllms_pool, enable_prefix_caching=True)
def build_hit_on_stale_hash(pool: Any) -> None:
    """A prefix lookup answers from a memo of earlier lookups that eviction never invalidates: a hit on a stale hash.

    ``get_cached_block`` must answer from ``cached_block_hash_to_block`` alone (block_pool.py:202-228), whose entry
    ``_maybe_evict_cached_block`` pops when the block is reused (:769-790).  Here every block a lookup returned is
    remembered under its key and returned again for that key, even after the block was evicted and refilled for other
    tokens: the map and the blocks stay consistent (``cache-map`` holds), but a later request with that prefix is
    handed a block whose content is not its tokens (the shape of vLLM #4761 and #44237 from the lookup side).
    """
    lookup = pool.get_cached_block
    memo: dict[tuple[Any, int], Any] = {}

    def get_cached_block(block_hash: Any, kv_cache_group_ids: list[int]) -> list[Any] | None:
        found = lookup(block_hash, kv_cache_group_ids)
        remembered = [memo.get((block_hash, group)) for group in kv_cache_group_ids]
        if found is None and all(block is not None and not block.is_null for block in remembered):
            return remembered
        for group, block in zip(kv_cache_group_ids, found or (), strict=False):
            memo[(block_hash, group)] = block
        return found

    pool.get_cached_block = get_cached_block


@_planted(_vllms_pool)
def build_block_handed_out_twice(pool: Any) -> None:
    """``get_new_blocks`` hands out, as the first of a call, the last block it handed out before while that block is
    still in use and unwritten (no hash), taking a reference instead of popping a free block.

    ``get_new_blocks`` must pop ``ref_cnt == 0`` blocks off the free queue only (block_pool.py's ``get_new_blocks``):
    here the next group of the same request (a hybrid's second table), or the next request, gets a block another table
    already writes.  The counts stay consistent (``ref-count`` holds), so only the group check sees it: one block in two
    groups' tables, or an unhashed block shared by two requests (``no-double-allocation``; the shape of a double
    allocation such as vLLM #42571's, from the allocation side).
    """
    allocate = pool.get_new_blocks
    last: list[Any] = []

    def get_new_blocks(num_blocks: int) -> list[Any]:
        previous = last[0] if last else None
        if num_blocks and previous is not None and previous.ref_cnt > 0 and previous.block_hash is None:
            blocks = [previous, *allocate(num_blocks - 1)]
            previous.ref_cnt += 1
        else:
            blocks = allocate(num_blocks)
        if blocks:
            last[:] = blocks[-1:]
        return blocks

    pool.get_new_blocks = get_new_blocks


CANARIES = {
    "vllm-engine-duplicate-in-free-blocks": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_duplicate_in_free_blocks",
        bug="free_blocks gets one block twice in a call: its ref_cnt drops one too low",
        upstream="vLLM #42571 (SWA + CPU offload double free; fix PR #42615)",
        invariant="ref-count",
    ),
    "vllm-engine-preemption-keeps-blocks": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_preemption_keeps_blocks",
        bug="a preempted request is re-queued still holding its KV blocks",
        upstream="vLLM async + preemption fixes (#38624, #46066, #47900)",
        invariant="scheduler-conservation",
    ),
    "vllm-engine-placeholders-survive-preemption": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_placeholders_survive_preemption",
        bug="async scheduling: a preempted request keeps its num_output_placeholders",
        upstream="vLLM async + preemption placeholder fixes (#46066, #47900, #38624)",
        invariant="async-placeholders",
    ),
    "vllm-engine-evicted-hash-left-in-map": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_evicted_hash_left_in_map",
        bug="a cached block reused by get_new_blocks loses its hash, but the hash map still points at it",
        upstream="vLLM #4761 (a reused block left in the map), #44237 (stale hashes after reuse)",
        invariant="cache-map",
    ),
    "vllm-engine-free-order-reversed": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_free_blocks_in_call_order_reversed",
        bug="free_blocks queues one call's blocks in reverse: a shared prefix is evicted before its tail",
        upstream="vLLM v1 free order (the managers free a request's blocks tail first, single_type_kv_cache_manager.py:599)",
        invariant="free-queue-order",
    ),
    "vllm-engine-null-block-left-queued": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_null_block_left_queued",
        bug="the null block stays on the free queue, so get_new_blocks can hand the placeholder to a request",
        upstream="vLLM v1 null block (block_pool.py:190-192: taken off the queue, never pooled again)",
        invariant="reserved-never-handed-out",
    ),
    "vllm-engine-table-entry-left-after-free": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_table_entry_left_after_free",
        bug="a finished request's block table entry survives the free of its blocks",
        upstream="vLLM req_to_blocks leaks (assert_scheduler_empty in tests/v1/core/test_scheduler.py)",
        invariant="scheduler-conservation",
    ),
    "vllm-engine-reset-leaves-block-hashes": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_reset_leaves_block_hashes",
        bug="reset_prefix_cache empties the hash map but leaves each block's hash",
        upstream="vLLM reset_prefix_cache (block_pool.py:871-910; RLHF weight updates)",
        invariant="cache-map",
    ),
    "vllm-engine-hit-on-stale-hash": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_hit_on_stale_hash",
        bug="a prefix lookup answers from a memo that eviction does not invalidate: a hit reuses a block refilled for other tokens",
        upstream="vLLM #4761 (a reused block still found by its old hash), #44237 (stale hashes after reuse)",
        invariant="prefix-hit-sound",
    ),
    "vllm-engine-block-handed-out-twice": Canary(
        family="vllm_engine",
        spec="poolfuzz.harness.kits.vllm_engine.canaries:build_block_handed_out_twice",
        bug="get_new_blocks hands out a block still in use and unwritten: two groups' tables or two requests share it",
        upstream="vLLM #42571 (a block allocated twice corrupts the free queue); KVCacheTensor: one group owns a block at a time",
        invariant="no-double-allocation",
    ),
}

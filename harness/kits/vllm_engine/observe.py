"""vLLM's v1 scheduler state as an engine-neutral :class:`~poolfuzz.harness.engines.interface.Observation`, and the checks
only vLLM's structures need.

Read from raw state, never from a size method: the blocks (``BlockPool.blocks``) and their ``ref_cnt``; the free
queue walked link by link from its fake head; each request's block table per KV cache group
(``single_type_managers[g].req_to_blocks``), each entry a *reference* (``Holding(owned=False)``) in one shared
pool; the null block reserved.  A cached block with ``ref_cnt == 0`` is free (its hash is an index entry, not a
holder).  vLLM keeps no leak checker of its own, so the observation has no accounts: a block neither free nor
referenced is a breach at once.

:func:`check_structures` adds what the engine-neutral judges cannot see: each KV cache group's tables over the one
pool (:func:`poolfuzz.harness.kits.vllm_engine.groups.check_groups`: a block in one group at a time, the null block
never in a full-attention table, a ``none``-mode Mamba request's state blocks within what vLLM sized), the free queue's own count and links
(``free-queue-order``), every hash map entry pointing at a block that carries that hash, and every hashed block
reachable from the map (``cache-map``); and at idle the conditions of vLLM's test helper
``assert_scheduler_empty`` (tests/v1/core/test_scheduler.py): no request, no block table, no cached-block
count left, every block but the null one free (``scheduler-conservation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from poolfuzz.harness.engines.interface import FreePlace, Holder, HolderKind, Holding, InFlight, Observation, PoolState, Progress, Read
from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.vllm_engine.groups import check_groups

POOL = "block"


class FlightLike(Protocol):
    seq: int
    reads: dict[str, tuple[int, int, tuple[int, ...]]]


class VllmEngine(Protocol):
    """What the observation reads of :class:`poolfuzz.harness.kits.vllm_engine.target.VllmEngine` (no import: no circle)."""

    scheduler: Any
    status: Any
    last_advanced: bool
    null_ref_cnt_kept: bool

    @property
    def config(self) -> Any: ...

    @property
    def flights(self) -> Sequence[FlightLike]: ...


def free_queue(pool: Any) -> tuple[list[int], str | None]:
    """The free queue's block ids head to tail, walked by ``next_free_block``; and what is wrong with its links."""
    queue = pool.free_block_queue
    ids: list[int] = []
    block = queue.fake_free_list_head.next_free_block
    previous = queue.fake_free_list_head
    bound = len(pool.blocks) + 1
    while block is not None and block is not queue.fake_free_list_tail:
        if block.prev_free_block is not previous:
            return ids, f"block {block.block_id}'s prev_free_block is not the block before it"
        ids.append(block.block_id)
        if len(ids) > bound:
            return ids, "the free queue's links form a cycle"
        previous, block = block, block.next_free_block
    if block is None:
        return ids, "the free queue ends before its fake tail"
    return ids, None


def tables(engine: VllmEngine) -> dict[str, list[int]]:
    """Each request's non-null block ids over every KV cache group (a request's tables, concatenated)."""
    held: dict[str, list[int]] = {}
    for manager in engine.scheduler.kv_cache_manager.coordinator.single_type_managers:
        for rid, blocks in manager.req_to_blocks.items():
            held.setdefault(rid, []).extend(b.block_id for b in blocks if not b.is_null)
    return held


def observe(engine: VllmEngine) -> Observation:
    """The engine's raw state now (see the module docstring)."""
    scheduler = engine.scheduler
    pool = scheduler.kv_cache_manager.block_pool
    queue, _ = free_queue(pool)
    holdings = tuple(
        Holding(Holder(HolderKind.REQUEST, rid), tuple(ids), owned=False) for rid, ids in sorted(tables(engine).items()) if ids
    )
    null = pool.null_block.block_id
    blocks = PoolState(
        name=POOL,
        ids=range(null + 1, len(pool.blocks)),
        free=(FreePlace("free_block_queue", tuple(queue)),),
        holdings=holdings,
        reserved=(null,),
        shared=True,
        ref_counts=tuple((b.block_id, b.ref_cnt) for b in pool.blocks if not b.is_null),
    )
    running = {r.request_id for r in scheduler.running}
    waiting = tuple(rid for rid in scheduler.requests if rid not in running)
    return Observation(
        engine=f"vllm {'AsyncScheduler' if engine.config.async_scheduling else 'Scheduler'} over {engine.config.pools} pools",
        pools=(blocks,),
        progress=Progress(
            waiting=waiting,
            active=tuple(sorted(running)),
            advanced=engine.last_advanced,
            context=(("free_blocks", len(queue)), ("head_prompt", _head_prompt(engine))),
        ),
        in_flight=_in_flight(engine),
        checker="vLLM (no leak checker of its own)",
        surface=surface(engine),
    )


SURFACE_FIELDS = ("free_blocks", "waiting", "running", "requests")


def surface(engine: VllmEngine) -> tuple[tuple[str, Any], ...]:
    """What a user of the engine sees: the KV cache usage it reports (free blocks), who waits and who runs in order,
    and per request its status, computed tokens (prefix hits included), output tokens and preemptions.  Block ids are not
    seen, so two pools handing out other ids under the same decisions agree."""
    scheduler = engine.scheduler
    requests = tuple(
        (rid, int(r.status), r.num_computed_tokens, r.num_output_tokens, r.num_preemptions) for rid, r in scheduler.requests.items()
    )
    values = (
        scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
        tuple(r.request_id for queue in (scheduler.kv_holding_waiting, scheduler.waiting) for r in queue),
        tuple(r.request_id for r in scheduler.running),
        requests,
    )
    return tuple(zip(SURFACE_FIELDS, values, strict=True))


def _head_prompt(engine: VllmEngine) -> int | None:
    for request in engine.scheduler.requests.values():
        if request.status != engine.status.RUNNING:
            return int(request.num_tokens)
    return None


def _in_flight(engine: VllmEngine) -> tuple[InFlight, ...]:
    """Each step in flight, and the blocks it still reads for each request it scheduled that still runs.

    A request finished, aborted or preempted while its step is in flight has its blocks freed at once (no KV
    connector: ``defer_block_free`` is off, scheduler.py:191-194); the step's writes precede any later owner's
    on the one stream, so those reads are not reported.  A request still running must keep every block its
    in-flight step reads (a sliding window's pruning must leave them: kv_cache_manager.py:566).
    """
    flights = []
    requests = engine.scheduler.requests
    for flight in engine.flights:
        reads = []
        for rid, (status, preemptions, ids) in flight.reads.items():
            request = requests.get(rid)
            if request is None or int(request.status) != status or int(request.num_preemptions) != preemptions:
                continue
            reads.append(Read(POOL, Holder(HolderKind.REQUEST, rid), ids))
        flights.append(InFlight(f"step {flight.seq}", tuple(reads)))
    return tuple(flights)


def check_structures(engine: VllmEngine, observation: Observation) -> None:
    """vLLM's own structures (see the module docstring); run right after the partition judges."""
    scheduler = engine.scheduler
    pool = scheduler.kv_cache_manager.block_pool
    queue, broken = free_queue(pool)
    check(broken is None, "free-queue-order", f"vLLM's free block queue is broken: {broken}")
    counted = pool.free_block_queue.num_free_blocks
    check(
        counted == len(queue),
        "free-queue-order",
        "the free queue's num_free_blocks differs from its length",
        counted=counted,
        walked=len(queue),
    )
    null = pool.null_block
    # The null block is never pooled and no call maintains its ref_cnt (block_pool.py:190-192, :795, :828): it is
    # never queued, and a count moved off 0 means get_new_blocks handed it out (tables list it as a placeholder).
    # 0.31.0/0.32.0's touch and free_blocks still count it ("not maintained", their block_pool.py:185, :764, :792):
    # there only the queue is read.
    check(
        null.block_id not in queue and (null.ref_cnt == 0 or not engine.null_ref_cnt_kept),
        "reserved-never-handed-out",
        "the null block is on the free queue or was handed out",
        queued=null.block_id in queue,
        ref_cnt=null.ref_cnt,
    )
    check_groups(scheduler.kv_cache_manager.coordinator.single_type_managers)
    hashed = {b.block_id: b.block_hash for b in pool.blocks if b.block_hash is not None}
    seen: set[int] = set()
    index = pool.cached_block_hash_to_block  # vLLM's BlockHashToBlockMap, or ours: a dict of dicts
    duplicates = getattr(index, "_dup_ids", {})
    for key, entry in getattr(index, "_cache", index).items():
        if isinstance(entry, int):  # 0.34.0: one block id per key, every id of a shared key in _dup_ids (block_pool.py:61-64)
            entry = {i: pool.blocks[i] for i in duplicates.get(key, {entry: None})}
        for block in entry.values() if isinstance(entry, dict) else (entry,):
            check(
                hashed.get(block.block_id) == key, "cache-map", "a hash map entry points at a block without that hash", block=block.block_id
            )
            seen.add(block.block_id)
    unindexed = sorted(set(hashed) - seen)
    check(not unindexed, "cache-map", "a block carries a hash the map does not index", blocks=unindexed[:8])
    held = tables(engine)
    gone = sorted(rid for rid, ids in held.items() if ids and rid not in scheduler.requests)
    check(
        not gone,
        "scheduler-conservation",
        "a request the scheduler no longer holds keeps blocks (freed requests hold none)",
        requests=gone[:8],
    )
    kept = sorted(
        rid
        for rid, ids in held.items()
        if ids
        and rid in scheduler.requests
        and scheduler.requests[rid].status != engine.status.RUNNING
        and not scheduler._holds_kv_blocks(scheduler.requests[rid])
    )
    # scheduler.py:2697-2707: a waiting or preempted request holds blocks only once it has computed tokens.
    check(not kept, "scheduler-conservation", "a waiting or preempted request with nothing computed keeps blocks", requests=kept[:8])
    placeholders = sorted(
        (rid, r.num_output_placeholders)
        for rid, r in scheduler.requests.items()
        if r.num_output_placeholders < 0 or (r.num_output_placeholders and r.status != engine.status.RUNNING)
    )
    check(
        not placeholders,
        "async-placeholders",
        "a request has negative output placeholders, or keeps some while not running (preemption resets them)",
        requests=placeholders[:8],
    )
    if observation.at_rest:
        managers = scheduler.kv_cache_manager.coordinator.single_type_managers
        left = sorted({rid for m in managers for rid in (*m.req_to_blocks, *m.num_cached_block)})
        check(
            not left,
            "scheduler-conservation",
            "at idle, a manager still keeps a request's blocks (assert_scheduler_empty)",
            requests=left[:8],
        )
        check(
            counted == len(pool.blocks) - 1,
            "scheduler-conservation",
            "at idle, not every block but the null block is free (assert_scheduler_empty)",
            free=counted,
            blocks=len(pool.blocks),
        )


def same_free_queue(first: VllmEngine, second: VllmEngine) -> None:
    """``free-queue-order`` across a ``pools="both"`` run: the same steps leave vLLM's free queue and ours in the same
    order, block id by block id.  ``poolfuzz.pools.block_pool`` states vLLM 0.33.0's order (get_new_blocks pops the front;
    free_blocks prepends unhashed blocks and appends hashed ones, each in call order; touch unlinks), so it is the
    model the upstream pool's order is held to, with vLLM's own managers deciding every call."""
    queues = [free_queue(engine.scheduler.kv_cache_manager.block_pool)[0] for engine in (first, second)]
    if queues[0] != queues[1]:
        at = next((i for i, (a, b) in enumerate(zip(*queues, strict=False)) if a != b), min(map(len, queues)))
        check(
            False,
            "free-queue-order",
            f"the same steps leave the free queue over {first.config.pools} pools in another order than over {second.config.pools}",
            position=at,
            **{first.config.pools: queues[0][at : at + 8], second.config.pools: queues[1][at : at + 8]},
        )

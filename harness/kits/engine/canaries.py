"""Engine canaries: SGLang's scheduler loop with one real bug shape planted in the glue it runs.

Each canary is an :class:`~poolfuzz.harness.upstream.engine.EngineLoop` subclass that changes exactly one
glue call of one loop (the module-level upstream functions stay untouched, so a process running
other targets is not affected).  The shapes are the ones users hit in the scheduler's memory path:
a release that frees the tree's protected prefix, a retraction that keeps its row, over-allocated
decode slots never returned, a lock a release forgets, a double free at finish, and a free group
whose frees are dropped.
"""

from __future__ import annotations

from typing import Any

import torch

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.kits.engine.config import EngineTargetConfig, takes_the_shape
from poolfuzz.harness.kits.engine.overlap_canaries import CANARIES as OVERLAP_CANARIES
from poolfuzz.harness.kits.engine.spec_canaries import CANARIES as SPEC_CANARIES
from poolfuzz.harness.upstream.engine import EngineLoop


class ReleaseFreesProtectedPrefix(EngineLoop):
    """``release_kv_cache`` frees the row from 0: the prefix the tree owns is freed while cached.

    Upstream frees ``[cache_protected_len, owned)`` (common.py:433); a release that starts at 0
    puts the tree's pages on the free list (mini-sglang PR #142 shape).  Caught by
    ``scheduler-conservation`` (a page both free and in the tree).
    """

    def _release(self, req: Any, *, checkpoint: bool) -> None:
        if req.kv.holds_kv and req.kv.cache_protected_len > 0:
            row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx]
            self.allocator.free(row[: req.kv.cache_protected_len].to(torch.int64))
        super()._release(req, checkpoint=checkpoint)


class RetractionKeepsRow(EngineLoop):
    """A retracted request is re-queued still holding its ``req_to_token`` row.

    ``release_req`` must return the row (``req_to_token_pool.free``, memory_pool.py:462); here the
    row is taken again for the request after release, as a restore into the wrong row would leave
    it.  Caught by the raw row partition at that step (``scheduler-conservation``: a row neither free
    nor held), before the pool runs dry and ``alloc_req_slots`` raises.
    """

    def _retracted(self, reqs: list[Any]) -> None:
        for _ in reqs:
            self.req_to_token_pool.alloc_rows(1)


class OverallocatedDecodeNotReturned(EngineLoop):
    """Decode over-allocates one slot per request (as speculative decoding does) and release forgets it.

    ``_release_overallocated_kv_indices`` (common.py:447) frees ``[owned, allocated)``; here the extra
    slot is allocated but ``kv_allocated_len`` never records it, so nothing frees it.  Caught by
    ``kv-accounting`` (both judges see the leak).
    """

    def _decoded(self, batch: Any) -> None:
        if self.config.page_size == 1 and self.allocator.available_size() > len(batch.reqs):
            self.allocator.alloc(len(batch.reqs))


class ReleaseKeepsLock(EngineLoop):
    """A finish checkpoints the request but never unlocks its tree path (``unlock(req.lock)`` skipped).

    The path stays protected forever: nothing can evict it, and at idle ``protected_size() > 0``.
    Caught by ``lock-balance``.
    """

    def _release(self, req: Any, *, checkpoint: bool) -> None:
        lock = req.lock
        if checkpoint and lock is not None:
            self.tree_cache.lock(req.last_node)  # one extra reference that no release drops
        super()._release(req, checkpoint=checkpoint)


class DoubleFreeAtFinish(EngineLoop):
    """A finished request's private tail is freed twice (release, then the over-allocation path again).

    Caught by ``no-double-allocation`` (a page twice on the free list) or ``scheduler-conservation``.
    """

    def _release(self, req: Any, *, checkpoint: bool) -> None:
        kv = req.kv
        row = None
        if kv.holds_kv and kv.kv_allocated_len > 0 and self.config.page_size == 1 and not self.config.hybrid_swa:
            row = self.req_to_token_pool.req_to_token[kv.req_pool_idx, : kv.kv_allocated_len].clone().to(torch.int64)
        super()._release(req, checkpoint=checkpoint)
        if row is not None:
            pending = self.allocator.free_group or []  # inside a result's free group, frees wait here
            freed = torch.cat([self.allocator.free_pages, *[t.to(torch.int64) for t in pending]])
            returned = row[torch.isin(row, freed)]
            if len(returned):  # an insert duplicate or an unaligned tail went back once already
                self.allocator.free(returned[:1])


class FreeGroupDropped(EngineLoop):
    """``free_group_end`` drops the frees collected since ``free_group_begin`` instead of returning them.

    Every release inside a result's free group leaks its pages.  Caught by ``kv-accounting``.
    """

    def _end_free_group(self) -> None:
        self.allocator.free_group = []
        super()._end_free_group()


class AdmitsNothingWhenIdle(EngineLoop):
    """Admission refuses every request while nothing runs (a budget that counts the idle pool as full).

    The hang shape of SGLang's "the scheduler spins in the waiting queue and the server hangs at warmup"
    (pool_configurator.py:201-207).  Caught by ``scheduler-progress``.
    """

    def _new_prefill_batch(self) -> Any:
        if self.running_batch.is_empty() and self.chunked_req is None and self.waiting_queue:
            return None
        return super()._new_prefill_batch()


class EvictableSizeDrifts(EngineLoop):
    """The tree's ``evictable_size()`` counts one token too many once anything is cached.

    An accounting method drifting from the pages it counts (a shared page counted twice, SGLang
    #35270): upstream's leak equation then fires on a sound pool, while the raw page partition
    sees nothing wrong.  Caught by ``checker-agreement``.
    """

    def __init__(self, config: EngineTargetConfig) -> None:
        super().__init__(config)
        counted = self.tree_cache.evictable_size
        self.tree_cache.evictable_size = lambda: counted() + (1 if counted() else 0)


class MirrorPopsTail(EngineLoop):
    """The poolfuzz side of a ``pools="both"`` run hands out KV slots from the free list's tail.

    The tail-pop shape of SGLang #32208, planted in the mirror only: both sides stay sound, yet
    the same iterations leave different rows.  Caught by ``implementations-agree``.
    """

    def __init__(self, config: EngineTargetConfig) -> None:
        super().__init__(config)
        if config.pools == "poolfuzz" and config.page_size == 1:
            ours = self.allocator.ours
            take = ours._take_pages

            def from_the_tail(num_pages: int) -> Any:
                taken = take(num_pages)
                return None if taken is None else taken.flip(0)

            ours._take_pages = from_the_tail


def _factory(loop_class: type[EngineLoop], *, mirror: bool = False, retracting: bool = False) -> Any:
    def shaped(config: EngineTargetConfig) -> EngineTargetConfig:
        # The glue bugs are planted over upstream's pools (ours would refuse some of them); a mirror
        # canary keeps the drawn pools, since its bug lives on the poolfuzz side of a "both" run.
        # Hybrid-SWA shapes run as full attention: upstream's SWA admission hangs on many of them (finding 5 in
        # docs/upstream-findings.md), and that hang, not the planted bug, would be reported first.
        # The re-enacted loop has no speculative decoding (spec_canaries.py plants those bugs in upstream's loop).
        pools = config.pools if mirror else "upstream"
        # Nor PD disaggregation (its queues are upstream's scheduler mixins): a PD shape runs as the plain server.
        config = config.replaced(pools=pools, sliding_window=None, swa_tokens=0, speculative_num_steps=0, disaggregation=None)
        if retracting:
            # A bug in what a retraction leaves shows only once decode runs out of KV: a server that admits at the low
            # new-token ratio the moves draw for two shapes in three (0.1), with four rows or more, full attention without
            # Mamba state.  Chased from seeds 0-5 at the ci budget, the examples to catch it went from 117, 8, 240, 56, 85,
            # 282 on every drawn shape to 43, 8, 33, 70, 14, 4 on these.
            config = config.replaced(new_token_ratio=0.1, mamba_slots=0, rows=max(config.rows, 4))
        return config

    @takes_the_shape
    def build(**shape: Any) -> EngineLoop:
        config = shaped(EngineTargetConfig(**shape))
        return loop_class(config.replaced(pools="upstream") if config.pools == "both" else config)

    build.__name__ = f"build_{loop_class.__name__}"
    build.poolfuzz_shape = shaped  # type: ignore[attr-defined]  # the driver records and steps the shape that runs
    return build


build_release_frees_protected_prefix = _factory(ReleaseFreesProtectedPrefix)
build_retraction_keeps_row = _factory(RetractionKeepsRow, retracting=True)
build_overallocated_decode_not_returned = _factory(OverallocatedDecodeNotReturned)
build_release_keeps_lock = _factory(ReleaseKeepsLock)
build_double_free_at_finish = _factory(DoubleFreeAtFinish)
build_free_group_dropped = _factory(FreeGroupDropped)
build_evictable_size_drifts = _factory(EvictableSizeDrifts)
build_admits_nothing_when_idle = _factory(AdmitsNothingWhenIdle)
build_mirror_pops_tail = _factory(MirrorPopsTail, mirror=True)

_HERE = __name__  # the module the specs below name

CANARIES: dict[str, Canary] = {
    "engine-release-frees-protected-prefix": Canary(
        "engine",
        f"{_HERE}:build_release_frees_protected_prefix",
        "a release frees the row from 0, the tree's protected prefix included",
        "release_kv_cache frees [cache_protected_len, owned) (common.py:433); mini-sglang PR #142",
        "scheduler-conservation",
    ),
    "engine-retraction-keeps-row": Canary(
        "engine",
        f"{_HERE}:build_retraction_keeps_row",
        "a retracted request's req_to_token row is taken again after release",
        "release_req / req_to_token_pool.free (schedule_batch.py:2360, memory_pool.py:462)",
        "scheduler-conservation",
    ),
    "engine-overallocated-decode-not-returned": Canary(
        "engine",
        f"{_HERE}:build_overallocated_decode_not_returned",
        "decode over-allocates a slot per request that kv_allocated_len never records",
        "_release_overallocated_kv_indices (common.py:447); spec-decode over-allocation",
        "kv-accounting",
    ),
    "engine-release-keeps-lock": Canary(
        "engine",
        f"{_HERE}:build_release_keeps_lock",
        "a finish leaves one lock reference on the request's tree path",
        "release_kv_cache unlock(req.lock) (common.py:434); SGLang PR #29291 lock_ref shapes",
        "lock-balance",
    ),
    "engine-double-free-at-finish": Canary(
        "engine",
        f"{_HERE}:build_double_free_at_finish",
        "a finish frees again a slot its release already returned (an insert duplicate)",
        "double frees in release paths (SGLang #4977, #18694)",
        "no-double-allocation",
    ),
    "engine-free-group-dropped": Canary(
        "engine",
        f"{_HERE}:build_free_group_dropped",
        "free_group_end discards the frees collected since free_group_begin",
        "free_group_begin/end around result processing (batch_result_processor.py:264, :501)",
        "kv-accounting",
    ),
    "engine-admits-nothing-when-idle": Canary(
        "engine",
        f"{_HERE}:build_admits_nothing_when_idle",
        "admission refuses every request while nothing runs",
        "pool_configurator.py:201-207 (the scheduler spins in the waiting queue, the server hangs)",
        "scheduler-progress",
    ),
    "engine-evictable-size-drifts": Canary(
        "engine",
        f"{_HERE}:build_evictable_size_drifts",
        "evictable_size() counts one token more than the tree holds",
        "SGLang #35270 (a shared page counted twice in evictable_size)",
        "checker-agreement",
    ),
    "engine-mirror-pops-tail": Canary(
        "engine",
        f"{_HERE}:build_mirror_pops_tail",
        "the poolfuzz side of a both-pools run hands out KV slots from the free list's tail",
        "SGLang #32208 (tail pop)",
        "implementations-agree",
    ),
}
CANARIES.update(OVERLAP_CANARIES)  # the overlap loop's (upstream's own Scheduler): harness/kits/engine/overlap_canaries.py
CANARIES.update(SPEC_CANARIES)  # speculative decoding's (an EAGLE server): harness/kits/engine/spec_canaries.py

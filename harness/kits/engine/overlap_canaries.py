"""Overlap canaries: SGLang 0.5.23's own ``Scheduler`` under ``event_loop_overlap`` with one real bug shape planted.

Each canary is a :class:`~poolfuzz.harness.upstream.engine_scheduler.SchedulerLoop` whose scheduler (the real ``Scheduler``
built without ``__init__``), result processor or allocator gets one method replaced on the *instance*, wrapping
upstream's own method: the loaded classes and installed files are untouched, so another target in the same
process runs upstream unchanged.  The shapes are the overlap path's (docs/engine.md, issue 42; the reference's
§1.3-1.4): a request's row moved between chunks while the next chunk is queued (#17850), ``inflight_middle_chunks``
never decremented, a request aborted while its batch is queued processed again (mini-sglang #111), a filter that keeps
finished requests, and ``free_group_end`` never called.  Not planted: a retracted request's queued result processed
(#17797/#18694): processed, it only appends a token to a request that is re-prefilled anyway, unless that very
result finishes it, and the moves reach that (a retraction with the batch in flight, then EOS for that request at
that result) in none of 3,600 selfcheck steps; a finish that frees a slot its queued batch writes is what upstream
does by design (the processor skips the finished request, one stream orders the free after the forward), so the
in-flight canary is the chunk-row shape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.kits.engine.config import EngineTargetConfig, takes_the_shape
from poolfuzz.harness.upstream.engine_scheduler import SchedulerLoop


class _Planted(SchedulerLoop):
    """The overlap loop with one instance method of upstream's replaced by :meth:`plant` (nothing class-wide).

    The result processor is a frozen, slotted dataclass (batch_result_processor.py:96), so a planted processor bug wraps
    the scheduler's ``process_batch_result`` (scheduler.py:5074), which dispatches to it by the batch's mode."""

    def __init__(self, config: EngineTargetConfig) -> None:
        super().__init__(config, overlap=True)
        self.plant()

    def plant(self) -> None:
        raise NotImplementedError

    def wrap(self, owner: Any, name: str, around: Callable[..., Any]) -> None:
        """``owner.name`` (a bound method of upstream's) becomes ``around(original, *args, **kwargs)`` on ``owner`` alone."""
        original = getattr(owner, name)
        setattr(owner, name, lambda *args, **kwargs: around(original, *args, **kwargs))


class ChunkMovesRowWhileQueued(_Planted):
    """A middle chunk's result moves the chunked request to a fresh ``req_to_token`` row and frees the old one.

    SGLang #17850 (commit 027f314050): a chunked request freed its row between chunks; under overlap the next chunk,
    already queued, still reads the old row, which the next allocation hands to another request.  The fix keeps the
    row (``ReqToTokenPool.alloc(reqs)``, memory_pool.py:419-436).  Caught by ``in-flight-reuse``."""

    def plant(self) -> None:
        pool = self.req_to_token_pool

        def prefill(original: Callable[..., Any], batch: Any, result: Any) -> Any:
            before = {id(r): r.inflight_middle_chunks for r in batch.reqs}
            out = original(batch, result)
            for req in batch.reqs:
                if req.inflight_middle_chunks < before[id(req)] and req.kv.holds_kv and not req.finished():
                    fresh = pool.alloc_rows(1)
                    if fresh:
                        old = req.kv.req_pool_idx
                        pool.req_to_token[fresh[0]] = pool.req_to_token[old]
                        req.kv.req_pool_idx = fresh[0]
                        pool.free_rows([old])
            return out

        self.wrap(self.s, "process_batch_result", prefill)


class MiddleChunksNeverDecremented(_Planted):
    """``inflight_middle_chunks`` is incremented when a chunk is scheduled (scheduler.py:4329-4330) and never
    decremented when its result lands (batch_result_processor.py:428, :498): the last chunk's result is taken for
    a middle chunk, so the request never gets its first token nor its prefill checkpointed."""

    def plant(self) -> None:
        def prefill(original: Callable[..., Any], batch: Any, result: Any) -> Any:
            before = {id(r): r.inflight_middle_chunks for r in batch.reqs}
            out = original(batch, result)
            for req in batch.reqs:
                req.inflight_middle_chunks = max(req.inflight_middle_chunks, before[id(req)])
            return out

        self.wrap(self.s, "process_batch_result", prefill)


class AbortedResultNotSkipped(_Planted):
    """A request aborted while its batch was queued is processed again when that batch's result lands.

    ``abort_request`` marks a running request ``to_finish`` (scheduler.py:5812); the next result finishes and releases
    it, and the result of the batch already queued must skip it (``req.finished()``, batch_result_processor.py:1022).
    Here an aborted request's result is taken as live: the abort is re-applied and the request released twice
    (mini-sglang #111, "abort of an in-flight request → double free")."""

    def plant(self) -> None:
        abort_cls = self.scheduler_modules.scheduler.FINISH_ABORT

        def decode(original: Callable[..., Any], batch: Any, result: Any) -> Any:
            aborted = [r for r in batch.reqs if isinstance(r.finished_reason, abort_cls)]
            for r in aborted:
                r.to_finish, r.finished_reason = r.finished_reason, None
            return original(batch, result)

        self.wrap(self.s, "process_batch_result", decode)


class FilterKeepsFinished(_Planted):
    """``filter_batch`` drops only the requests named to exclude, not the finished ones (schedule_batch.py:3845-3849).

    The running batch is filtered every step because "overlap merges a prefill's requests before its result finishes
    them" (scheduler.py:3963-3967); a finished, released request kept there is decoded again on memory it gave back."""

    def plant(self) -> None:
        def keep_finished(original: Callable[..., Any], reqs_to_exclude: Any = None, keep_indices: Any = None, *, batch: Any) -> Any:
            if keep_indices is None:
                excluded = (
                    [reqs_to_exclude] if reqs_to_exclude is not None and not isinstance(reqs_to_exclude, list) else reqs_to_exclude or []
                )
                keep_indices = [i for i, r in enumerate(batch.reqs) if r not in excluded]
            return original(keep_indices=keep_indices)

        def plan(original: Callable[..., Any], **batches: Any) -> Any:
            for batch in batches.values():
                if batch is not None and "filter_batch" not in vars(batch):
                    self.wrap(batch, "filter_batch", functools.partial(keep_finished, batch=batch))
            return original(**batches)

        self.wrap(self.s, "get_next_batch_to_run", plan)


class ChunkedRequestForgotten(_Planted):
    """A prefill pass cuts a request's chunk and then loses its chunked-request record (scheduler.py:4324-4330 undone).

    Finding 7's mechanism on any server: ``PrefillAdder`` overwrote ``new_chunked_req`` with a second cut request
    (schedule_policy.py:1692), so the first one's partial prefill was processed as complete and it decoded on a
    truncated prompt.  Here the record of every newly chunked request is dropped.  Caught by ``prompt-prefilled``."""

    def plant(self) -> None:
        s = self.s

        def plan(original: Callable[..., Any], **batches: Any) -> Any:
            before = s.chunked_req
            out = original(**batches)
            if before is None and s.chunked_req is not None:
                s.chunked_req.inflight_middle_chunks -= 1
                if out.batch_to_run is not None and out.batch_to_run.chunked_req is s.chunked_req:
                    out.batch_to_run.chunked_req = None  # the batch records the pass's chunked request too (:4343)
                s.chunked_req = None
            return out

        self.wrap(s, "get_next_batch_to_run", plan)


class FreeGroupNeverEnded(_Planted):
    """``free_group_end`` is never called after the decode result's ``free_group_begin`` (batch_result_processor.py:998,
    :1100): every release of a finished request waits in the group forever, and the next result's ``free_group_begin``
    starts a new group over it (mem_cache/allocator/base.py:213-220 with the nesting assert gone)."""

    def plant(self) -> None:
        allocator = self.allocator

        def begin(original: Callable[..., Any]) -> Any:
            allocator.free_group = None
            return original()

        self.wrap(allocator, "free_group_begin", begin)
        self.wrap(self.s, "process_batch_result", _without_group_end(allocator))


def _without_group_end(allocator: Any) -> Callable[..., Any]:
    def decode(original: Callable[..., Any], batch: Any, result: Any) -> Any:
        ended = allocator.free_group_end
        allocator.free_group_end = lambda: None
        try:
            return original(batch, result)
        finally:
            allocator.free_group_end = ended

    return decode


def _factory(loop_class: type[_Planted], *, chunked: bool = False) -> Any:
    def shaped(config: EngineTargetConfig) -> EngineTargetConfig:
        # Overlap over upstream's pools and full attention: a Mamba shape runs the normal loop (upstream forces it), and
        # hybrid-SWA shapes hang on finding 5 before the planted bug shows.  A chunk canary needs chunked prefill on.  The
        # bugs are the overlap path's, planted without speculation (spec_canaries.py plants speculative decoding's).
        # A PD shape runs as the plain server: the bugs are planted in event_loop_overlap's path, not the PD loops'.
        config = config.replaced(
            loop="overlap", pools="upstream", sliding_window=None, swa_tokens=0, mamba_slots=0, speculative_num_steps=0, disaggregation=None
        )
        return config.replaced(chunk=8) if chunked and not config.chunk else config

    @takes_the_shape
    def build(**shape: Any) -> SchedulerLoop:
        return loop_class(shaped(EngineTargetConfig(**shape)))

    build.__name__ = f"build_{loop_class.__name__}"
    build.poolfuzz_shape = shaped  # type: ignore[attr-defined]  # the driver records and steps the shape that runs
    return build


build_chunk_moves_row_while_queued = _factory(ChunkMovesRowWhileQueued, chunked=True)
build_middle_chunks_never_decremented = _factory(MiddleChunksNeverDecremented, chunked=True)
build_aborted_result_not_skipped = _factory(AbortedResultNotSkipped)
build_filter_keeps_finished = _factory(FilterKeepsFinished)
build_free_group_never_ended = _factory(FreeGroupNeverEnded)
build_chunked_request_forgotten = _factory(ChunkedRequestForgotten, chunked=True)

_HERE = __name__  # the module the specs below name

CANARIES: dict[str, Canary] = {
    "engine-overlap-chunk-moves-row-while-queued": Canary(
        "engine",
        f"{_HERE}:build_chunk_moves_row_while_queued",
        "under overlap a middle chunk's result moves the request to a fresh row and frees the one its queued next chunk reads",
        "SGLang #17850 (commit 027f314050): a chunked request's row reused while its previous chunk ran",
        "in-flight-reuse",
    ),
    "engine-overlap-middle-chunks-never-decremented": Canary(
        "engine",
        f"{_HERE}:build_middle_chunks_never_decremented",
        "inflight_middle_chunks is never decremented when a chunk's result lands",
        "scheduler.py:4329-4330, batch_result_processor.py:428/:498 (chunked prefill pipelining under overlap)",
        "scheduler-conservation",
    ),
    "engine-overlap-aborted-result-not-skipped": Canary(
        "engine",
        f"{_HERE}:build_aborted_result_not_skipped",
        "under overlap a request aborted while its batch was queued is processed again when that result lands",
        "batch_result_processor.py:1022 (finished skip); mini-sglang #111 (abort of an in-flight request, double free)",
        "valid-call-accepted",
    ),
    "engine-overlap-filter-keeps-finished": Canary(
        "engine",
        f"{_HERE}:build_filter_keeps_finished",
        "filter_batch keeps finished requests in the running batch",
        "schedule_batch.py:3845-3849; scheduler.py:3963-3967 (filter every step under overlap)",
        "kv-accounting",
    ),
    "engine-overlap-chunked-request-forgotten": Canary(
        "engine",
        f"{_HERE}:build_chunked_request_forgotten",
        "a prefill pass drops the record of the request whose chunk it cut, so its partial prefill counts as complete",
        "finding 7 (schedule_policy.py:1692, a second SWA-capped chunk overwrites new_chunked_req); scheduler.py:4324-4330",
        "prompt-prefilled",
    ),
    "engine-overlap-free-group-never-ended": Canary(
        "engine",
        f"{_HERE}:build_free_group_never_ended",
        "the decode result's free group is begun and never ended",
        "free_group_begin/end (batch_result_processor.py:998, :1100; allocator/base.py:213-220)",
        "kv-accounting",
    ),
}

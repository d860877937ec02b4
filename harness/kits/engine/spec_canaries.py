"""Speculative-decoding canaries: SGLang 0.5.23's own ``Scheduler`` on an EAGLE server with one spec-decode memory bug planted.

Like the overlap canaries (:mod:`poolfuzz.harness.kits.engine.overlap_canaries`), the bug wraps one method of upstream's
on one *instance* (here the loop's tree cache), so the loaded classes and installed files stay as they are and another
loop in the process runs upstream unchanged.

Planted: **rejected draft slots never freed**.  Each verify step allocates ``2 * (K + 1)`` slots past the committed
length (``alloc_for_spec_decode``, allocation.py:780-848) and commits only the accepted run (``_resolve_spec_v2_tokens``,
batch_result_processor.py:829-831), so a request holds slots past ``kv_committed_len`` (the rejected drafts' and the
unused reserve) until its release, where ``_release_overallocated_kv_indices`` (common.py:447-476) returns
``[owned_kv_len, kv_allocated_len)``.  The canary's release stops at ``kv_committed_len``: the tail is never returned.
That is the class of SGLang #12224 ("unify memory management across (overlap, non-overlap) x (page) x (spec) x
(retract, finished)", which replaced ad-hoc tail frees with ``kv_committed_len`` / ``kv_allocated_len``) and of #22862
(a resumed streaming session overwrote the range ``[prefix_len, kv_allocated_len)`` speculative over-allocation left,
leaking it).

Planted: **a reserve of one verify window** (:class:`ReserveOneWindow`): under overlap the decode reserve covers one
verify window past the committed length instead of two, so a queued verify writes past ``kv_allocated_len``.

Not planted, with the reason: #31616's page-unaligned ``kv_allocated_len`` (``eagle_prepare_for_decode`` recording
``committed + reserve`` unrounded while the paged allocator hands out whole pages).  Re-created on 0.5.23 (the recorded
length lowered to the unaligned value after each ``prepare_for_decode``), it leaks nothing here: the unrecorded tail
always shares its page with recorded positions (``ceil`` of both lengths is the same page count), and 0.5.23's paged
``free`` returns the whole page of any index it is given (allocator/paged.py), so the release returns it.  No judge,
ours or upstream's, sees a difference, and a canary that cannot fail proves nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.kits.engine.config import EngineTargetConfig, takes_the_shape
from poolfuzz.harness.upstream.engine_scheduler import SchedulerLoop
from poolfuzz.harness.upstream.overrides import overridden
from poolfuzz.harness.upstream.sglang_files import sglang_copy

CANARY_STEPS = 3
"""The draft steps a canary server runs when the drawn shape has none (EAGLE's common ``--speculative-num-steps 3``)."""


class RejectedDraftsNeverFreed(SchedulerLoop):
    """Every ``free_kv_row`` of a release stops at ``kv_committed_len``: the slots past it are never returned.

    ``release_kv_cache`` frees ``[cache_protected_len, owned_kv_len)`` and then the over-allocated tail
    ``[ceil(owned_kv_len), kv_allocated_len)`` (common.py:435-443, :466-476), both through the tree's ``free_kv_row``;
    the wrapped ``free_kv_row`` clips each segment's end to ``kv_committed_len``.  Without speculation nothing changes
    (a non-spec request's allocated length is its committed length); with it, each release strands the rejected drafts'
    slots.  Caught by ``kv-accounting`` (the pages are neither free nor held; upstream's idle check sees the leak too)."""

    def __init__(self, config: EngineTargetConfig) -> None:
        super().__init__(config, overlap=config.loop == "overlap")
        cache = self.tree_cache
        original: Callable[..., Any] = cache.free_kv_row

        def free_kv_row(kv: Any, segments: Any, *args: Any, **kwargs: Any) -> Any:
            end = int(kv.kv_committed_len)
            clipped = [(start, min(stop, end)) for start, stop in segments if min(stop, end) > start]
            return original(kv, clipped, *args, **kwargs) if clipped else None

        cache.free_kv_row = free_kv_row


class ReserveOneWindow(SchedulerLoop):
    """The decode reserve covers one verify window, not two: while ``update_running_batch`` runs, the reserve
    ``eagle_prepare_for_decode`` asks for (eagle_utils.py:866) is ``get_alloc_len_per_decode()`` (K + 1), not
    ``get_alloc_reserve_per_decode()``'s ``2 * (K + 1)`` (allocation_sizing.py:64-70).

    The 2x is "a double-buffer that absorbs the kv_committed_len lag in overlap mode": batch *k* is allocated before
    batch *k - 1*'s verify is committed, and *k*'s verify writes ``K + 1`` slots past the length *k - 1* commits.  With one
    window, that write runs past ``kv_allocated_len`` into row positions the request never got, whose entries name
    slots that are free or another request's.  No single upstream issue: the reserve's contract, closest to the spec-v2
    out-of-bounds reports (SGLang #15638).  Caught by ``in-flight-reuse`` (the queued verify reads a slot its request does
    not hold).  The patch is the name in the loaded ``eagle_utils`` module for the length of one call of this scheduler's
    method (single-threaded), so no other loop sees it."""

    def __init__(self, config: EngineTargetConfig) -> None:
        super().__init__(config, overlap=True)
        scheduler = self.s
        original: Callable[..., Any] = scheduler.update_running_batch
        loaded = sglang_copy().load((EAGLE_UTILS, SIZING))[0]
        utils, one_window = loaded[EAGLE_UTILS], loaded[SIZING].get_alloc_len_per_decode

        def update_running_batch(batch: Any) -> Any:
            with overridden(utils.__dict__, {"get_alloc_reserve_per_decode": one_window}):
                return original(batch)

        scheduler.update_running_batch = update_running_batch


EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"
SIZING = "sglang.srt.mem_cache.allocation_sizing"


def _eagle_server(shape: dict[str, Any], *, loop: str | None = None) -> EngineTargetConfig:
    """A drawn shape as an EAGLE server (its draft steps, or :data:`CANARY_STEPS`) on upstream's loop (``loop`` when given)
    and pools, full attention: the combinations speculative decoding runs on here (``speculative_num_steps``)."""
    config = EngineTargetConfig(**shape)
    chosen = loop or ("overlap" if config.loop == "reenacted" else config.loop)
    return config.replaced(
        pools="upstream",
        sliding_window=None,
        swa_tokens=0,
        mamba_slots=0,
        embedding=False,
        loop=chosen,
        speculative_num_steps=config.speculative_num_steps or CANARY_STEPS,
        disaggregation=None,  # speculation does not run with PD here (EngineTargetConfig.disaggregation)
    )


@takes_the_shape
def build_rejected_drafts_never_freed(**shape: Any) -> SchedulerLoop:
    """:class:`RejectedDraftsNeverFreed` on the drawn shape's loop."""
    return RejectedDraftsNeverFreed(_eagle_server(shape))


@takes_the_shape
def build_reserve_one_window(**shape: Any) -> SchedulerLoop:
    """:class:`ReserveOneWindow` under overlap (the normal loop commits before it allocates: no lag to absorb)."""
    return ReserveOneWindow(_eagle_server(shape, loop="overlap"))


CANARIES: dict[str, Canary] = {
    "engine-spec-rejected-drafts-never-freed": Canary(
        "engine",
        f"{__name__}:build_rejected_drafts_never_freed",
        "on an EAGLE server a release frees only up to kv_committed_len: the rejected drafts' slots and the reserve leak",
        "_release_overallocated_kv_indices (common.py:447-476); SGLang #12224 (spec tail frees unified), #22862 (spec tail leak)",
        "kv-accounting",
    ),
    "engine-spec-reserve-one-window": Canary(
        "engine",
        f"{__name__}:build_reserve_one_window",
        "under overlap an EAGLE server's decode reserves one verify window past the committed length, not two",
        "get_alloc_reserve_per_decode's 2x (allocation_sizing.py:64-70, eagle_utils.py:866); spec-v2 out-of-bounds (#15638)",
        "in-flight-reuse",
    ),
}

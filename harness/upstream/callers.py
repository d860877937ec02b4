"""Caller sites several contract tables cite (the scheduler's and the mem_cache helpers' calls into the pools and
caches), and the predicates and rules several tables share.

One definition each, so a line that moves in a new release is corrected once (``tests/test_contracts.py`` checks each
against the installed files).  A table that says more of a shared line gives it its own note with
:func:`dataclasses.replace`, so the line itself is still spelled here only.  Tables import this module and write
``callers.NAME``, so a shared line reads as shared where it is cited.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from poolfuzz.harness.judge.contract import CallRule, Cite, NotCalled
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.kits.kv.ops import FreeGroupOps, TokenKVOps
from poolfuzz.harness.kits.prefix_cache.ops import PrefixCacheOps

ADMISSION_MATCH = Cite('srt/managers/schedule_batch.py', 1734,
                       'match_result = match_kv_cache(',
                       note='init_next_round_input, key_limit = _compute_max_prefix_len = input_len - 1 (:1723, :1768)')
ONE_TOKEN_AT_LEAST = Cite('srt/managers/schedule_batch.py', 1767,
                          'the matched length is at most 1 less than the input length',
                          note='_compute_max_prefix_len: every extend has a token to compute')
GROUP_BEGIN = Cite('srt/managers/schedule_batch.py', 4080, 'token_to_kv_pool_allocator.free_group_begin()')
GROUP_BEGIN_FOR_SWA_EVICTION = replace(GROUP_BEGIN, note='maybe_evict_swa')
GROUP_END = Cite('srt/managers/schedule_batch.py', 4123, 'token_to_kv_pool_allocator.free_group_end()')
GROUP_END_FOR_SWA_EVICTION = replace(GROUP_END, note='maybe_evict_swa')
WAITING_MATCH = Cite('srt/managers/schedule_policy.py', 356,
                     'match_result = match_kv_cache(r, self.tree_cache, prefix_ids)',
                     note='every waiting request, every round, its whole prompt (no key limit)')
CHECK_LOCK = Cite('srt/managers/schedule_policy.py', 1232,
                  'lock = self.tree_cache.lock(last_node)',
                  note='_lock_node: the match locked while the admission is checked')
CHECK_UNLOCK = Cite('srt/managers/schedule_policy.py', 1236,
                    'self.tree_cache.unlock(lock)',
                    note="_lock_node's release")
ADMISSION_LOCK = Cite('srt/managers/schedule_policy.py', 1690, 'req.lock = self.tree_cache.lock(req.last_node)')
MAMBA_BEGIN = Cite('srt/managers/scheduler.py', 4201, 'mamba_allocator.alloc_group_begin(len(self.waiting_queue))')
MAMBA_REJECTED_FREE = Cite('srt/managers/scheduler.py', 4296, 'self.tree_cache.req_to_token_pool.mamba_allocator.free(')
MAMBA_END = Cite('srt/managers/scheduler.py', 4303, 'mamba_allocator.alloc_group_end()')
DECODE_MEM_CHECK = Cite('srt/managers/scheduler.py', 4469, 'kv_full_retract_flag = not batch.check_decode_mem()')
FULLY_IDLE = Cite('srt/managers/scheduler.py', 5520, 'if self.is_fully_idle(ignore_waiting=self._engine_paused):')
FLUSH_RESET = Cite('srt/managers/scheduler.py', 5523, 'self.tree_cache.reset()')
FLUSH = Cite('srt/managers/scheduler.py', 5525,
             'self.token_to_kv_pool_allocator.clear()',
             note='flush_cache, only when the scheduler is fully idle')
BATCH_BEGIN = Cite('srt/managers/scheduler_components/batch_result_processor.py', 264,
                   'token_to_kv_pool_allocator.free_group_begin()')
BATCH_END = Cite('srt/managers/scheduler_components/batch_result_processor.py', 501,
                 'token_to_kv_pool_allocator.free_group_end()')
ALLOC = Cite('srt/mem_cache/allocation.py', 159, 'allocator.alloc(num_tokens)', note='alloc_token_slots')
EXTEND_ALLOC = Cite('srt/mem_cache/allocation.py', 201,
                    'evict_from_tree_cache(tree_cache, num_tokens)',
                    note='alloc_paged_token_slots_extend (alloc_token_slots: :157)')
EXTEND = Cite('srt/mem_cache/allocation.py', 219,
              'out = allocator.alloc_extend(',
              note='alloc_paged_token_slots_extend')
PREFIX_INDICES = Cite('srt/mem_cache/allocation.py', 371, 'return batch.tree_cache.prefix_device_indices(req)')
FREE_ON_ERROR = Cite('srt/mem_cache/allocation.py', 471, 'token_to_kv_pool_allocator.free(out_cache_loc)')
DECODE_ALLOC = Cite('srt/mem_cache/allocation.py', 585,
                    'evict_from_tree_cache(tree_cache, num_tokens)',
                    note='alloc_paged_token_slots_decode')
EVICT_FOR_ALLOC = Cite('srt/mem_cache/allocator/base.py', 168,
                       'tree_cache.evict_for_alloc(EvictParams(num_tokens=shortfall))',
                       note='evict_to_free_tokens, only when shortfall > 0 (:167)')
CHECKPOINT_KV = Cite('srt/mem_cache/common.py', 278,
                     'tree_cache.checkpoint(req, up_to=req.extend_end)',
                     note='checkpoint_kv_cache')
RELEASE_CHECKPOINT = Cite('srt/mem_cache/common.py', 431,
                          'tree_cache.checkpoint(req, up_to=owned_kv_len)',
                          note='release_kv_cache; skipped for an abort or skip_radix_cache_insert (:422)')
RELEASE_UNLOCK = Cite('srt/mem_cache/common.py', 434, 'tree_cache.unlock(req.lock)', note='release_kv_cache')
SEGMENT_IS_FREE = Cite('srt/mem_cache/allocator/base.py', 293, 'self.free(free_index)')
SEGMENTS_LOOP = Cite('srt/mem_cache/allocator/base.py', 301, 'self.free_segment(free_index, start_pos=start_pos)',
                     note='free_segments, from free_kv_row_segments (common.py:190): a request row, segment by segment')
EVICT_SEGMENT = Cite('srt/mem_cache/radix_cache.py', 569, 'self.token_to_kv_pool_allocator.free_segment(x.value, start_pos=0)',
                     note='eviction frees a node\'s value')
NODE_OF_A_ROW = replace(EVICT_SEGMENT, note="eviction frees one node's slots of a longer row")
DUPLICATE_SEGMENT = Cite('srt/mem_cache/radix_cache.py', 504, 'self.token_to_kv_pool_allocator.free_segment(',
                         note='a checkpoint frees the row\'s duplicates from cache_protected_len on')
ACTION_SEGMENT = Cite('srt/mem_cache/unified_radix_cache.py', 1405,
                      'self.token_to_kv_pool_allocator.free_segment(indices, start_pos=0)',
                      note='the unified cache applies a FreeDeviceKV action')
SWA_WINDOW_SEGMENT = Cite('srt/mem_cache/common.py', 137, 'free_segment(free_slots, start_pos=evicted_seqlen)')
PEERLESS_SEGMENTS = Cite('srt/mem_cache/common.py', 188, 'allocator.free_full_segments(swa_dead)')
PEERED_SEGMENTS = Cite('srt/mem_cache/common.py', 190, 'allocator.free_segments(swa_alive)')


# ------------------------------------------------------------------ what the callers send
class GroupWindow(Protocol):
    """A contract view that says whether a free group (or a Mamba alloc window) is open."""

    @property
    def group_open(self) -> bool: ...


def at_least_one(view: object, args: Args) -> bool:
    """Callers allocate at least one: a batch's new tokens (``alloc_token_slots``, allocation.py:159), a request's
    Mamba slot or its 1 or 2 tracking slots (``allocation_sizing.py:19``)."""
    return bool(args.get("need_size", 0) >= 1)


def nothing_to_free(view: object, args: Args) -> bool:
    """``free_indices`` with indices is misuse; the empty free is the one callers send."""
    return not args.get("indices")


def outside_a_group(view: GroupWindow, args: Args) -> bool:
    """No group is open: ``flush_cache`` clears only an idle scheduler, between batches, never inside a batch's free
    group, and the admission loop opens one Mamba alloc window and closes it before the next (``scheduler.py:4201,
    4303``)."""
    return not view.group_open


def non_empty_batch(view: object, args: Args) -> bool:
    """A batch of at least one request: no prefill batch is built without one (``scheduler.py:4307``)."""
    return bool(args.get("batch"))


def evicts_something(view: object, args: Args) -> bool:
    """Callers evict a shortfall: ``evict_to_free_tokens`` only when it is positive (allocator/base.py:167),
    ``_evict_until_allocatable`` at least a page (common.py:312), FlexKV only a positive need (:329); the unified
    cache's ``_evict_components`` starts a FULL walk only for a positive request (unified_radix_cache.py:1017)."""
    return bool(args.get("num_tokens", 0) >= 1)


# ------------------------------------------------------------------ rules several tables share
FREE_SEGMENT_RULE: CallRule[object] = CallRule(
    TokenKVOps.free_segment, ("free_segment",),
    "free_segment(row[start:end], start_pos=start): a page-aligned start, the end anywhere in the last page",
    (SEGMENTS_LOOP, EVICT_SEGMENT, DUPLICATE_SEGMENT, ACTION_SEGMENT))
"""A token allocator's ``free_segment``: a request row segment by segment, a node's value, a checkpoint's duplicates."""

CLEAR_BETWEEN_BATCHES = ("clear() between batches; then an empty begin/end pair, as the next batch's processing makes",
                         "flush_cache clears only an idle scheduler, between batches (scheduler.py:5520-5525)")
"""The ``clear`` rule's shape and ``instead``, as the token and paged tables word them."""
CLEAR_OUTSIDE_A_GROUP = ("clear(); then an empty begin/end pair, as the next batch's processing makes",
                         "flush_cache clears only when the scheduler is fully idle (scheduler.py:5520-5525), "
                         "never inside a batch's free group")
"""The ``clear`` rule's shape and ``instead``, as the SWA tables word them."""


def free_group_rules(begin: Cite, end: Cite, wording: tuple[str, str], *, flush: Cite = FLUSH,
                     also_begin: tuple[Cite, ...] = (), also_end: tuple[Cite, ...] = ()
                     ) -> tuple[CallRule[GroupWindow], CallRule[GroupWindow], CallRule[GroupWindow]]:
    """A token allocator's ``group_begin``, ``group_end`` and ``clear`` rules: a batch's releases bracketed in a free
    group (``begin`` and ``end`` the schedule_batch lines that open and close it, then the result processor's,
    then the table's own ``also_begin`` and ``also_end``), and ``clear`` only from ``flush_cache`` (``flush``) outside
    any group, the next batch's processing then making an empty begin/end pair; ``wording`` is the ``clear`` rule's
    shape and ``instead``."""
    shape, instead = wording
    return (
        CallRule(FreeGroupOps.group_begin, ("free_group_begin",), "no arguments, no group open", (begin, BATCH_BEGIN, *also_begin)),
        CallRule(FreeGroupOps.group_end, ("free_group_end",), "no arguments, a group open", (end, BATCH_END, *also_end)),
        CallRule(FreeGroupOps.clear, ("clear", "free_group_begin", "free_group_end"), shape, (flush, BATCH_BEGIN, BATCH_END),
                 today=outside_a_group, instead=instead),
    )


TREE_MISUSE = (
    NotCalled(PrefixCacheOps.insert_mismatched, "misuse: a value longer or shorter than its key"),
    NotCalled(PrefixCacheOps.insert_malformed, "misuse: values that are not whole pages, past the pool, page 0, repeated, float"),
    NotCalled(PrefixCacheOps.recache, "misuse: pages the tree holds cached again under another key"),
    NotCalled(PrefixCacheOps.release_malformed, "misuse: release_request with a broken argument"),
    NotCalled(PrefixCacheOps.cache_over, "misuse: a second cache of another page size or an unknown policy"),
)
"""The prefix-cache driver's misuse operations, never issued to an upstream tree."""

"""Caller sites several contract tables cite (the scheduler's and the mem_cache helpers' calls into the pools and
caches), and the predicates several tables share.

One definition each, so a line that moves in a new release is corrected once (``tests/test_contracts.py`` checks each
against the installed files).
"""

from __future__ import annotations

from typing import Any

from harness.judge.contract import Cite

ADMISSION_MATCH = Cite('srt/managers/schedule_batch.py', 1734,
                       'match_result = match_kv_cache(',
                       note='init_next_round_input, key_limit = _compute_max_prefix_len = input_len - 1 (:1723, :1768)')
ONE_TOKEN_AT_LEAST = Cite('srt/managers/schedule_batch.py', 1767,
                          'the matched length is at most 1 less than the input length',
                          note='_compute_max_prefix_len: every extend has a token to compute')
GROUP_BEGIN = Cite('srt/managers/schedule_batch.py', 4080, 'token_to_kv_pool_allocator.free_group_begin()')
GROUP_BEGIN_FOR_SWA_EVICTION = Cite('srt/managers/schedule_batch.py', 4080,
                                    'token_to_kv_pool_allocator.free_group_begin()',
                                    note='maybe_evict_swa')
GROUP_END = Cite('srt/managers/schedule_batch.py', 4123, 'token_to_kv_pool_allocator.free_group_end()')
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
MAMBA_END = Cite('srt/managers/scheduler.py', 4303, 'mamba_allocator.alloc_group_end()')
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
SEGMENTS_LOOP = Cite('srt/mem_cache/allocator/base.py', 301, 'self.free_segment(free_index, start_pos=start_pos)',
                     note='free_segments, from free_kv_row_segments (common.py:190): a request row, segment by segment')
EVICT_SEGMENT = Cite('srt/mem_cache/radix_cache.py', 569, 'self.token_to_kv_pool_allocator.free_segment(x.value, start_pos=0)',
                     note='eviction frees a node\'s value')
DUPLICATE_SEGMENT = Cite('srt/mem_cache/radix_cache.py', 504, 'self.token_to_kv_pool_allocator.free_segment(',
                         note='a checkpoint frees the row\'s duplicates from cache_protected_len on')
ACTION_SEGMENT = Cite('srt/mem_cache/unified_radix_cache.py', 1405,
                      'self.token_to_kv_pool_allocator.free_segment(indices, start_pos=0)',
                      note='the unified cache applies a FreeDeviceKV action')


# ------------------------------------------------------------------ what the callers send
def at_least_one_token(driver: Any, args: dict[str, Any]) -> bool:
    """Callers allocate a batch's new tokens, at least one (``alloc_token_slots``, allocation.py:159)."""
    return bool(args.get("need_size", 0) >= 1)


def nothing_to_free(driver: Any, args: dict[str, Any]) -> bool:
    """``free_indices`` with indices is misuse; the empty free is the one callers send."""
    return not args.get("indices")


def outside_a_group(driver: Any, args: dict[str, Any]) -> bool:
    """``flush_cache`` clears only an idle scheduler, between batches, never inside a batch's free group."""
    return not driver.model.group_open


def non_empty_batch(driver: Any, args: dict[str, Any]) -> bool:
    """A batch of at least one request: no prefill batch is built without one (``scheduler.py:4307``)."""
    return bool(args.get("batch"))

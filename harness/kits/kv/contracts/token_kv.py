"""The calls ``TokenToKVPoolAllocator``'s callers make in SGLang 0.5.23 (target ``poolfuzz.harness.upstream:TokenKV``).

Callers allocate through ``alloc_token_slots`` and free a request's row through
``free_kv_row`` -> ``free_kv_row_segments`` -> ``free_segments`` -> ``free_segment``, which at
page size 1 is ``free`` (``allocator/base.py:284-293``); the scheduler brackets a batch's
releases in ``free_group_begin``/``free_group_end`` and clears only from ``flush_cache``,
outside any batch.  ``merge_and_sort_free`` is the allocator's own (``alloc`` calls it when
``need_sort`` and the free list is short): no caller makes it.
"""

from __future__ import annotations

from dataclasses import replace

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, NotCalled
from poolfuzz.harness.kits.kv.contract_view import KVContractView
from poolfuzz.harness.kits.kv.ops import TokenKVOps
from poolfuzz.harness.upstream import callers

FREE_SEGMENT = replace(callers.SEGMENT_IS_FREE, note="free_segment at page size 1, reached from free_kv_row_segments (common.py:190)")


CONTRACT = Contract(
    ops=TokenKVOps,
    view=KVContractView,
    target="poolfuzz.harness.upstream:TokenKV",
    release="sglang==0.5.23",
    rules=(
        CallRule(
            TokenKVOps.alloc,
            ("alloc",),
            "alloc(n), n >= 1 tokens",
            (callers.ALLOC,),
            today=callers.at_least_one,
            instead="callers allocate a batch's new tokens, at least one (alloc_token_slots)",
        ),
        CallRule(TokenKVOps.free, ("free",), "free(a request's whole row of slots)", (FREE_SEGMENT, callers.FREE_ON_ERROR)),
        callers.FREE_SEGMENT_RULE,
        CallRule(
            TokenKVOps.free_part,
            ("free",),
            "free(a prefix of a request's slots: a cache node's value)",
            (FREE_SEGMENT, callers.NODE_OF_A_ROW),
        ),
        CallRule(
            TokenKVOps.free_indices,
            ("free",),
            "free(empty tensor): a request with nothing to give back",
            (
                Cite(
                    "srt/mem_cache/allocator/token.py",
                    68,
                    "if free_index.numel() == 0:",
                    note="free's own early return for the empty frees its callers send",
                ),
            ),
            allows=callers.nothing_to_free,
        ),
        *callers.free_group_rules(callers.GROUP_BEGIN, callers.GROUP_END, callers.CLEAR_BETWEEN_BATCHES),
    ),
    reads=("available_size", "get_all_free_pages"),
    not_called=(
        NotCalled(TokenKVOps.free_segment_malformed, "misuse: a segment off the page grid, or naming a page in two runs"),
        NotCalled(TokenKVOps.merge, "merge_and_sort_free is called by alloc itself (allocator/token.py:56), by no caller"),
        NotCalled(TokenKVOps.free_again, "misuse: a second free of released slots"),
        NotCalled(TokenKVOps.free_malformed, "misuse: a list, float or 2-D tensor of indices"),
    ),
)

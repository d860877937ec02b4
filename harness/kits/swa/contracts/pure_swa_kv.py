"""The calls ``PureSWATokenToKVPoolAllocator``'s callers make in SGLang 0.5.23 (target ``poolfuzz.harness.upstream:PureSWAKV``).

The pure variant is built for a model whose every layer is sliding-window attention
(``kv_cache_configurator.py:2865-2866``: hybrid SWA with no full-attention tokens), at page
size 1 only (``allocator/swa.py:739``), with ``PureSWARadixCache`` as its tree
(``mem_cache/registry.py:87``, ``:128-130``), a legacy ``RadixCache``.  Its callers are those
of any page-size-1 token allocator: ``alloc_token_slots`` (``allocation.py:159``) for extends
and decodes; a request's row back through ``free_kv_row_segments`` (``common.py:152-190``),
whose ``free_segments`` reach ``free_segment``, which is ``free`` here (``swa.py:855-858``),
and whose ``free_full_segments`` reach this class's no-op ``free_full_segment`` (``:860-861``);
the window sliding through ``free_swa_segment``, which is ``free_swa`` (``:847-848``); tree
eviction freeing a node's value with ``free_segment`` (``radix_cache.py:569``).  Batches
bracket releases in ``free_group_begin``/``free_group_end``; ``clear`` runs only from
``flush_cache``.  The paged calls raise ``NotImplementedError`` (``swa.py:815-828``): page
size 1 allocates with ``alloc``.  Off the callers' path (issued, a finding through it is
latent): an allocation of no tokens, a free of the padding slots ``free`` drops
(``swa.py:834``; every caller's free is a slice of a request's row or a node's value), and a
clear inside a free group.
"""

from __future__ import annotations

from dataclasses import replace

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, NotCalled
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.kits.kv.contract_view import KVContractView
from poolfuzz.harness.kits.swa.ops import PureSWAKVOps
from poolfuzz.harness.upstream import callers

SWA = "srt/mem_cache/allocator/swa.py"

FREE_SEGMENTS = replace(callers.PEERED_SEGMENTS, note="free_kv_row_segments")
FREE_SEGMENT_IS_FREE = Cite(SWA, 858, "self.free(free_index)", note="free_segment: a single pool frees once")
PADDING_DROPPED = Cite(SWA, 834, "self.swa_attn_allocator.free(free_index[free_index > 0])", note="padding dropped")
NO_PADDING = (
    "no caller sends the padding slots 0 and -1: every free is a slice of a request's row (common.py:190) "
    "or a node's value (radix_cache.py:569)"
)


def padding_only(view: object, args: Args) -> bool:
    """Raw live, foreign or free indices are misuse; what remains is a free of padding (``<= 0``), which ``free``
    drops (``swa.py:834``), or of nothing."""
    return all(int(i) <= 0 for i in args.get("indices") or [])


def never(view: object, args: Args) -> bool:
    """Today: no caller makes this call (``instead`` says what they do)."""
    return False


CONTRACT = Contract(
    ops=PureSWAKVOps,
    view=KVContractView,
    target="poolfuzz.harness.upstream:PureSWAKV",
    release="sglang==0.5.23",
    rules=(
        CallRule(
            PureSWAKVOps.alloc,
            ("alloc",),
            "alloc(n) of a few tokens",
            (callers.ALLOC, callers.ONE_TOKEN_AT_LEAST),
            today=callers.at_least_one,
            instead="callers allocate a batch's new tokens, >= 1 a request (schedule_batch.py:1767)",
        ),
        CallRule(
            PureSWAKVOps.free,
            ("free",),
            "free(a request's whole row of slots)",
            (FREE_SEGMENTS, FREE_SEGMENT_IS_FREE, callers.FREE_ON_ERROR),
        ),
        CallRule(
            PureSWAKVOps.free_part,
            ("free",),
            "free(a prefix of an allocation's slots: a cache node's value)",
            (callers.NODE_OF_A_ROW, FREE_SEGMENT_IS_FREE),
        ),
        CallRule(
            PureSWAKVOps.free_swa,
            ("free_swa",),
            "free_swa(an allocation's slots): the window slides past them",
            (
                replace(callers.SWA_WINDOW_SEGMENT, note="_evict_swa: free_swa_segment (:136)"),
                Cite(SWA, 848, "self.free_swa(free_index)", note="free_swa_segment is free_swa"),
            ),
        ),
        CallRule(
            PureSWAKVOps.free_full,
            ("free_full",),
            "free_full(an allocation's slots): the part of a row the window already released, whose slots may "
            "be another request's by then; a no-op, as free_full_segment is",
            (
                callers.PEERLESS_SEGMENTS,
                Cite("srt/mem_cache/allocator/base.py", 314, "self.free_full_segment(free_index, start_pos=start_pos)"),
                Cite(
                    SWA,
                    860,
                    "def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int):",
                    note="returns; free_full returns too (:850-853)",
                ),
            ),
        ),
        CallRule(
            PureSWAKVOps.free_indices,
            ("free",),
            "free(empty tensor): a request with nothing to give back; or of padding only",
            (Cite(SWA, 831, "if free_index.numel() == 0:", note="free's own early return"), PADDING_DROPPED),
            allows=padding_only,
            today=callers.nothing_to_free,
            instead=NO_PADDING,
        ),
        CallRule(
            PureSWAKVOps.free_padded,
            ("free",),
            "free(an allocation's slots with the padding slots 0 and -1 around them)",
            (FREE_SEGMENT_IS_FREE, PADDING_DROPPED),
            today=never,
            instead=NO_PADDING,
        ),
        *callers.free_group_rules(callers.GROUP_BEGIN_FOR_SWA_EVICTION, callers.GROUP_END, callers.CLEAR_OUTSIDE_A_GROUP),
    ),
    reads=("available_size", "full_available_size", "swa_available_size", "translate_loc_from_full_to_swa"),
    not_called=(
        NotCalled(PureSWAKVOps.free_segment_malformed, "misuse: a segment off the page grid, or naming a page in two runs"),
        NotCalled(
            PureSWAKVOps.free_segment,
            "not drawn by the pure SWA moves; its callers' free_segment is free (swa.py:855-858), which the free and free_part rules cover",
        ),
        NotCalled(
            PureSWAKVOps.paged_call,
            "misuse: alloc_extend / alloc_decode / alloc_extend_swa_tail raise NotImplementedError "
            "(swa.py:815-828); at page size 1 callers allocate with alloc (allocation.py:432)",
        ),
        NotCalled(PureSWAKVOps.merge, "merge_and_sort_free is called by the token allocator's alloc itself (token.py:56), by no caller"),
        NotCalled(PureSWAKVOps.free_again, "misuse: a second free of released slots"),
        NotCalled(PureSWAKVOps.free_malformed, "misuse: a list or float tensor of indices"),
    ),
)

"""The calls ``PagedTokenToKVPoolAllocator``'s callers make in SGLang 0.5.23 (target ``poolfuzz.harness.upstream:PagedKV``).

Callers allocate a batch through ``alloc_paged_token_slots_extend`` / ``..._decode``
(``mem_cache/allocation.py``), but only when the allocation page size is above 1: at page
size 1 ``alloc_for_extend``, ``alloc_for_decode_default``, ``alloc_for_spec_decode`` and the
disaggregated prealloc call ``alloc`` instead (``allocation.py:431, 522, 638, 794``,
``disaggregation/decode.py:2449``).  The one ``alloc_extend`` that reaches a page-size-1
instance is HiSparse's disaggregated-decode prealloc (``decode.py:2424`` ->
``hisparse.py:151``), one fresh request with prefix 0 and ``last_loc = -1``; no caller sends
``alloc_decode`` at page size 1.  Extend batches carry ``prefix_lens`` (the tokens a request
holds), ``seq_lens`` (held plus new) and ``last_loc`` (its last held slot, or -1,
``allocation.py:435-438``); decode batches carry the post-step lengths and the slot of each
request's last token (``allocation.py:643-646``), so every decoded request holds a token.
Rows are freed through ``free_kv_row`` -> ``free_kv_row_segments`` -> ``free_segments`` ->
``free_segment``, which this class overrides (``paged.py:340``): it frees ``free_index[::ps]
// ps`` through ``free_page_ids`` (page ids queued in ``free_page_ids_group`` inside a group)
and never calls ``free``.  ``free`` itself is what HiSparse forwards every free and segment
to (``hisparse.py:290``; its ``free_segment`` is ``base.py:293``'s), what a failed batch
hands back (``allocation.py:471, 681``) and what FlexKV's load path uses on a plain
allocation (``flexkv_radix_cache.py:347, 353``); it releases ``torch.unique(free_index //
ps)`` (``paged.py:333``).  The scheduler brackets a batch's releases in
``free_group_begin``/``free_group_end`` and clears only from ``flush_cache``, when idle.
``merge_and_sort_free`` and the page kernels are the allocator's own.

The driver issues ``free`` where most callers reach ``free_segment``: the override's
``free_page_ids`` path is not exercised here (a coverage gap, not a call no caller makes).
"""

from __future__ import annotations

from dataclasses import replace

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, KnownFindingFilter, NotCalled
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.kits.kv.contract_view import KVContractView
from poolfuzz.harness.kits.kv.ops import PagedKVOps
from poolfuzz.harness.upstream import callers

# ------------------------------------------------------------------ alloc
ALLOC_PS1 = replace(callers.ALLOC, note="alloc_token_slots: the page-size-1 path of extend and decode")
HISPARSE_ALLOC = Cite(
    "srt/mem_cache/allocator/hisparse.py",
    129,
    "self.logical_attn_allocator.alloc(need_size)",
    note="HiSparse's alloc, page size 1 only (hisparse.py:123), on its paged logical allocator",
)
HICACHE_LOAD = Cite(
    "srt/managers/cache_controller.py",
    937,
    "self.mem_pool_device_allocator.alloc(len(host_indices))",
    note="load-back of page-aligned host slots",
)
FLEXKV_ALLOC = Cite(
    "srt/mem_cache/storage/flexkv/flexkv_radix_cache.py", 335, "token_slots = self.token_to_kv_pool_allocator.alloc(uncached_len)"
)

# ------------------------------------------------------------------ free
EXTEND_FREE_ON_ERROR = replace(callers.FREE_ON_ERROR, note="alloc_for_extend hands a failed batch's slots back")
FREE_ON_DECODE_ERROR = Cite("srt/mem_cache/allocation.py", 681, "token_to_kv_pool_allocator.free(out_cache_loc)")
HISPARSE_FREE = Cite(
    "srt/mem_cache/allocator/hisparse.py",
    290,
    "self.logical_attn_allocator.free(free_index)",
    note="HiSparse forwards every free to the paged logical allocator",
)
HISPARSE_SEGMENT = replace(callers.SEGMENT_IS_FREE, note="free_segment of an allocator that does not override it (HiSparse): a row segment")
FLEXKV_FREE_ALL = Cite("srt/mem_cache/storage/flexkv/flexkv_radix_cache.py", 347, "self.token_to_kv_pool_allocator.free(token_slots)")
FLEXKV_FREE_TAIL = Cite(
    "srt/mem_cache/storage/flexkv/flexkv_radix_cache.py",
    353,
    "self.token_to_kv_pool_allocator.free(token_slots[num_retrieved:])",
    note="part of a plain allocation's pages",
)
HISPARSE_SUBSET = Cite(
    "srt/mem_cache/allocator/hisparse.py",
    199,
    "buffer_indices[buffer_indices >= self.page_size]",
    note="free_hisparse_indices: a filtered subset of a plain allocation's tokens",
)
PAGE_DEDUP = Cite(
    "srt/mem_cache/allocator/paged.py",
    333,
    "self._release_page_ids(torch.unique(free_index // self.page_size))",
    note="free releases each named page once, however many of its tokens are named",
)
EMPTY_FREE = Cite(
    "srt/mem_cache/allocator/paged.py",
    329,
    "if free_index.numel() == 0:",
    note="free's own early return for the empty frees its callers send",
)

# ------------------------------------------------------------------ groups and clear
SWA_BEGIN = Cite(
    "srt/mem_cache/allocator/swa.py",
    648,
    "self.full_attn_allocator.free_group_begin()",
    note="the SWA allocator opens its paged full side's group with its own",
)
SWA_END = Cite("srt/mem_cache/allocator/swa.py", 661, "self.full_attn_allocator.free_group_end()")
IDLE_FLUSH = replace(callers.FLUSH, note="flush_cache, only when the scheduler is fully idle (scheduler.py:5520)")

# ------------------------------------------------------------------ extend
EXTEND_ONLY_PAGED = Cite(
    "srt/mem_cache/allocation.py", 431, "elif alloc_page_size == 1:", note="alloc_for_extend takes alloc_token_slots at page size 1"
)
EXTEND_LAST_LOC = Cite(
    "srt/mem_cache/allocation.py",
    436,
    "(t[-1:] if len(t) > 0 else torch.full((1,), -1, device=batch.device))",
    note="last_loc: the last held slot, or -1 for an empty prefix",
)
PREALLOC_EXTEND = Cite(
    "srt/disaggregation/decode.py",
    2496,
    "kv_loc = allocator.alloc_extend(",
    note="disaggregated-decode prealloc, past its page-size-1 alloc branch (decode.py:2449)",
)
PREALLOC_ONLY_PAGED = Cite("srt/disaggregation/decode.py", 2449, "if allocator.page_size == 1:")
HISPARSE_PREALLOC = Cite(
    "srt/disaggregation/decode.py",
    2424,
    "kv_loc = allocator.alloc_logical_only(",
    note="HiSparse disaggregated-decode prealloc, at every page size",
)
HISPARSE_PREALLOC_SHAPE = Cite(
    "srt/disaggregation/decode.py",
    2405,
    "prefix_lens = async_h2d([0], dtype=torch.int64, device=device)",
    note="one request, prefix 0, last_loc -1 (decode.py:2409), fill_len tokens",
)
HISPARSE_LOGICAL_EXTEND = Cite("srt/mem_cache/allocator/hisparse.py", 151, "return self.logical_attn_allocator.alloc_extend(")
SPEC_ONLY_PAGED = Cite(
    "srt/mem_cache/allocation.py",
    794,
    "if tree_cache.token_to_kv_pool_allocator.page_size == 1:",
    note="alloc_for_spec_decode: alloc at page size 1, alloc_extend above it",
)
NO_EMPTY_PREFILL = Cite("srt/managers/scheduler.py", 4307, "if len(can_run_list) == 0:", note="no prefill batch is built without a request")

# ------------------------------------------------------------------ decode
DECODE = Cite(
    "srt/mem_cache/allocation.py",
    601,
    "out = allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc, **extra_alloc_kwargs)",
    note="alloc_paged_token_slots_decode, the only caller that reaches this class",
)
DECODE_ONLY_PAGED = Cite(
    "srt/mem_cache/allocation.py",
    638,
    "if _alloc_page_size(batch) == 1:",
    note="alloc_for_decode_default takes alloc_token_slots at page size 1",
)
DECODE_LAST_TOKEN = Cite(
    "srt/mem_cache/allocation.py",
    644,
    "batch.req_pool_indices, seq_lens_gpu - 1",
    note="last_loc is the slot of each request's last token: every request holds one",
)
SWA_DECODE_ONLY_PAGED = Cite(
    "srt/mem_cache/allocator/swa.py", 436, "assert self.page_size > 1", note="the SWA allocator's alloc_decode on its paged sides"
)
NO_EMPTY_DECODE = Cite(
    "srt/managers/scheduler.py", 4547, "if batch.is_empty():", note="update_running_batch returns an empty batch before prepare_for_decode"
)


def extend_as_callers_send(view: KVContractView, args: Args) -> bool:
    """Every request extends by at least one token; above page size 1 any such batch; at page size 1 only HiSparse's prealloc extends, one fresh request of at
    least one token with prefix 0 (``decode.py:2405-2424``), every other extend path having taken ``alloc``
    (``allocation.py:431, 522, 794``, ``decode.py:2449``)."""
    batch = args["batch"]
    if not all(isinstance(extend, int) and extend >= 1 for _, extend in batch):
        return False  # every scheduled request computes at least one token
    if view.page_size > 1:
        return True
    (handle, _), *rest = batch
    return not rest and handle is None


def non_empty_decode(view: object, args: Args) -> bool:
    """A decode batch of at least one request (``scheduler.py:4547`` returns an empty batch before it)."""
    return bool(args.get("handles"))


def decode_as_callers_send(view: KVContractView, args: Args) -> bool:
    """0.5.23's callers decode through this class only above page size 1 (``allocation.py:638``), and only
    requests that hold their last token's slot (``allocation.py:644``): a decode follows a prefill."""
    slots = view.model.slots
    return bool(view.page_size > 1) and all(slots.get(handle) for handle in args["handles"])


CONTRACT = Contract(
    ops=PagedKVOps,
    view=KVContractView,
    target="poolfuzz.harness.upstream:PagedKV",
    release="sglang==0.5.23",
    rules=(
        CallRule(
            PagedKVOps.alloc,
            ("alloc",),
            "alloc(n), n >= 1 whole pages",
            (ALLOC_PS1, HISPARSE_ALLOC, HICACHE_LOAD, FLEXKV_ALLOC),
            today=callers.at_least_one,
            instead="callers allocate at least one token (allocation.py:159)",
        ),
        CallRule(
            PagedKVOps.free,
            ("free",),
            "free(a request's or an allocation's whole row of slots)",
            (EXTEND_FREE_ON_ERROR, FREE_ON_DECODE_ERROR, HISPARSE_FREE, HISPARSE_SEGMENT, FLEXKV_FREE_ALL, PAGE_DEDUP),
        ),
        callers.FREE_SEGMENT_RULE,
        CallRule(
            PagedKVOps.free_part,
            ("free",),
            "free(some pages of a plain allocation: all their tokens, or a subset naming each page)",
            (FLEXKV_FREE_TAIL, HISPARSE_SEGMENT, HISPARSE_SUBSET, PAGE_DEDUP),
        ),
        CallRule(
            PagedKVOps.free_indices,
            ("free",),
            "free(empty tensor): a request with nothing to give back",
            (EMPTY_FREE,),
            allows=callers.nothing_to_free,
        ),
        *callers.free_group_rules(
            callers.GROUP_BEGIN,
            callers.GROUP_END,
            callers.CLEAR_BETWEEN_BATCHES,
            flush=IDLE_FLUSH,
            also_begin=(SWA_BEGIN,),
            also_end=(SWA_END,),
        ),
        CallRule(
            PagedKVOps.extend,
            ("alloc_extend",),
            "alloc_extend(prefix_lens, seq_lens, last_loc, sum of new tokens) of a non-empty batch; "
            "at page size 1 the callers send only one fresh request of >= 1 token",
            (
                callers.EXTEND,
                EXTEND_ONLY_PAGED,
                EXTEND_LAST_LOC,
                PREALLOC_EXTEND,
                PREALLOC_ONLY_PAGED,
                HISPARSE_PREALLOC,
                HISPARSE_PREALLOC_SHAPE,
                HISPARSE_LOGICAL_EXTEND,
                SPEC_ONLY_PAGED,
                NO_EMPTY_PREFILL,
            ),
            allows=callers.non_empty_batch,
            today=extend_as_callers_send,
            instead="every scheduled request extends by >= 1 token, and at page size 1 the callers extend through alloc_token_slots (allocation.py:431, 522, 794), "
            "except HiSparse's prealloc of one fresh request (disaggregation/decode.py:2405-2424)",
        ),
        CallRule(
            PagedKVOps.decode,
            ("alloc_decode",),
            "alloc_decode(post-step seq_lens, last token's slot) of a non-empty batch of requests holding "
            ">= 1 token; the callers of 0.5.23 send it above page size 1 only",
            (DECODE, DECODE_ONLY_PAGED, DECODE_LAST_TOKEN, SWA_DECODE_ONLY_PAGED, NO_EMPTY_DECODE),
            allows=non_empty_decode,
            today=decode_as_callers_send,
            instead="at page size 1 the callers decode through alloc_token_slots (allocation.py:638), and "
            "every request they decode holds its last token's slot (allocation.py:644)",
        ),
    ),
    reads=("available_size", "get_all_free_pages"),
    not_called=(
        NotCalled(PagedKVOps.free_segment_malformed, "misuse: a segment off the page grid, or naming a page in two runs"),
        NotCalled(
            PagedKVOps.merge, "merge_and_sort_free is called by the allocator itself (allocator/paged.py:190, 224, 292), by no caller"
        ),
        NotCalled(
            PagedKVOps.kernel_call,
            "the page kernels (alloc_extend_kernel / alloc_extend_naive, alloc_decode_kernel / "
            "alloc_decode_naive) are launched only by alloc_extend and alloc_decode "
            "(allocator/paged.py:246, 256, 304, 313); the op drives our pools' PageKernel",
        ),
        NotCalled(PagedKVOps.free_again, "misuse: a second free of released slots"),
        NotCalled(PagedKVOps.free_malformed, "misuse: a list, float or 2-D tensor of indices"),
        NotCalled(PagedKVOps.extend_malformed, "misuse: an extend batch with a defect"),
        NotCalled(PagedKVOps.decode_malformed, "misuse: a decode batch with a defect"),
    ),
)


def decode_above_page_size_1(view: KVContractView, args: Args) -> bool:
    """Known finding ``paged-decode-page-size-1`` (:mod:`poolfuzz.harness.upstream.findings`): at page size 1
    ``alloc_decode`` counts no new page, so a decode is withheld there."""
    return view.page_size > 1


KNOWN_FINDINGS = KnownFindingFilter(KVContractView, ((PagedKVOps.decode, decode_above_page_size_1),), ops=PagedKVOps)
"""The calls that reach ``paged_kv``'s known upstream finding (the kit's ``known_findings``)."""

"""The calls ``SWATokenToKVPoolAllocator``'s callers make in SGLang 0.5.23 (target ``poolfuzz.harness.upstream:SWAKV``).

The hybrid-SWA allocator is built by ``kv_cache_configurator.py:2875`` for a model with both
full-attention and sliding-window layers.  Callers allocate as for any token allocator:
``alloc_for_extend`` and ``alloc_for_decode_default`` (``mem_cache/allocation.py``) send
``alloc`` through ``alloc_token_slots`` at page size 1 and ``alloc_extend`` / ``alloc_decode``
above it, and PD decode pre-allocates a request with ``alloc_extend_swa_tail``
(``disaggregation/decode.py``): full KV for the extend, SWA KV for the window's tail only.
The window slides by ``free_swa_segment`` of a request's oldest tokens (``_evict_swa`` ->
``free_swa_out_of_window_slots``, ``common.py:136-137``), and the unified tree tombstones a
node's SWA the same way.  A request's row goes back through ``free_kv_row_segments``
(``common.py:152-190``): the part whose SWA peers are gone to ``free_full_segments``, the rest
to ``free_segments``, whose per-segment calls at page size 1 are ``free_swa`` + ``free`` of
the full side, as ``free`` is (``allocator/swa.py:474-475``, ``:625-631``); an allocation
that fails after the fact is given back with ``free`` (``allocation.py:471``).  The driver
reaches the same code through ``free`` / ``free_swa`` / ``free_full``; which of the three a
set of pages may be sent is :data:`poolfuzz.harness.kits.swa.contract.CONTRACT` (the class's
own ``expect``s), consulted here so there is one table.  Batches bracket their releases in
``free_group_begin`` / ``free_group_end`` and ``clear`` runs only from ``flush_cache``.

Off the callers' path (issued, a finding through it is latent): an allocation of no tokens, an SWA
tail of none or over a prefix that is not page-aligned, a clear inside a free group, and a
decode that a side is short for: 0.5.23's scheduler allocates a decode step only after
``check_decode_mem`` passed (:data:`DECODE_GATE`), and ``retract_decode`` aborts the last
request rather than decode it short.  Finding 3's traces (``corpus/upstream/swa_kv-*.json``)
make that decode.
"""

from __future__ import annotations

from dataclasses import replace

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, ContractError, KnownFindingFilter, NotCalled
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.kits.swa.contract import CONTRACT as FREE_RULES
from poolfuzz.harness.kits.swa.contract import SWAContractView
from poolfuzz.harness.kits.swa.contract import allows as free_allows
from poolfuzz.harness.kits.swa.ops import SWAKVOps
from poolfuzz.harness.upstream import callers

SWA = "srt/mem_cache/allocator/swa.py"
COMMON = "srt/mem_cache/common.py"
ALLOCATION = "srt/mem_cache/allocation.py"
PD_DECODE = "srt/disaggregation/decode.py"
BATCH = "srt/managers/schedule_batch.py"

EXTEND_PS1 = Cite(ALLOCATION, 432, "alloc_token_slots(batch.tree_cache, batch.extend_num_tokens)", note="alloc_for_extend at page size 1")
DECODE_PS1 = Cite(
    ALLOCATION, 640, "alloc_token_slots(batch.tree_cache, bs * token_per_req)", note="alloc_for_decode_default at page size 1"
)
DECODE = Cite(ALLOCATION, 601, "allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc", note="alloc_paged_token_slots_decode")
PD_TAIL = Cite(PD_DECODE, 2477, "kv_loc = allocator.alloc_extend_swa_tail(", note="alloc_for_decode_prealloc")
NO_EMPTY_PROMPT = Cite("srt/managers/io_struct.py", 499, 'raise ValueError("input_ids cannot be empty.")')
NO_EMPTY_CHUNK = Cite("srt/managers/schedule_policy.py", 1672, "if extend_len <= 0:", note="a chunk of no tokens is not admitted")
REUSE_ONLY_WITH_TOKENS = Cite(
    ALLOCATION, 521, "if alloc_extend_num_tokens > 0:", note="the dLLM reuse path allocates only when a request brings new tokens"
)
PEER_MAPPED = Cite(SWA, 560, 'expect(_SWA_PEER_MAPPED, swa_tokens > 0, msg="caller wants free_full")')
EXPAND_TO_PAGES = Cite(SWA, 512, "mapping_indices = self._expand_to_full_pages(free_index)")
PEERLESS_DROPPED = Cite(SWA, 605, "swa_indices = swa_indices[swa_indices > 0]")

DECODE_GATE: tuple[Cite, ...] = (
    callers.DECODE_MEM_CHECK,
    Cite(
        BATCH, 3415, "1 for r in requests if r.kv.kv_committed_len % page_size == 0", note="one page per request whose next token opens one"
    ),
    Cite("srt/mem_cache/allocator/base.py", 185, "return self.available_size() >= num_tokens", note="check_decode_capacity"),
    Cite(SWA, 168, "return min(", note="available_size is the smaller side's"),
    Cite(
        BATCH,
        3511,
        "Even the last remaining request cannot fit in memory.",
        note="retract_decode aborts the last request instead of decoding it short",
    ),
)
"""The scheduler's decode gate: the decode step is allocated only if both sides hold its new pages."""

FREE_RULE_CITES: dict[tuple[str, str], tuple[Cite, ...]] = {
    ("free", "1"): (
        Cite(SWA, 474, "self.free_swa(free_index)", note="free() releases the SWA peers first, then free_full (:475)"),
        Cite(SWA, 507, "self._free_swa_pages(free_index, start_pos=0)", note="at page size 1"),
        PEER_MAPPED,
        replace(callers.PEERLESS_SEGMENTS, note="free_kv_row_segments: the part without peers"),
        replace(callers.PEERED_SEGMENTS, note="free_kv_row_segments: the rest"),
        callers.FREE_ON_ERROR,
    ),
    ("free", ">1"): (
        replace(EXPAND_TO_PAGES, note="whole pages; the paged side dedups pages too (paged.py:333)"),
        replace(PEERLESS_DROPPED, note="pages without peers read as 0, dropped"),
        callers.FREE_ON_ERROR,
        replace(callers.ACTION_SEGMENT, note="a tree node's value"),
    ),
    ("free_swa", "1"): (
        replace(callers.SWA_WINDOW_SEGMENT, note="_evict_swa: free_swa_segment (:136) of the oldest tokens out of the window"),
        Cite(
            SWA,
            530,
            "self._free_swa_pages(free_index, start_pos=start_pos)",
            note="free_swa_segment, the same release as free_swa at page size 1 (:507)",
        ),
        PEER_MAPPED,
    ),
    ("free_swa", ">1"): (
        Cite(
            "srt/mem_cache/unified_cache/components/swa.py",
            1562,
            "alloc.free_swa_segment(indices, start_pos=0)",
            note="a tree node's SWA tombstoned",
        ),
        EXPAND_TO_PAGES,
        PEERLESS_DROPPED,
    ),
    ("free_full", "any"): (
        Cite(
            SWA,
            617,
            "self.full_to_swa_index_mapping[free_index] == 0,",
            note='expect(_SWA_PEER_RELEASED, ..., msg="caller wants free"); free_full_segment the same (:638)',
        ),
        callers.PEERLESS_SEGMENTS,
        Cite(
            "srt/mem_cache/unified_radix_cache.py",
            1408,
            "self.token_to_kv_pool_allocator.free_full_segment(indices, start_pos=0)",
            note="a tree node whose SWA was tombstoned",
        ),
    ),
}
"""The upstream lines of each :class:`~poolfuzz.harness.kits.swa.contract.FreeRule`'s evidence, by (call, page sizes)."""

_uncited = {(rule.call, rule.page_sizes) for rule in FREE_RULES} ^ set(FREE_RULE_CITES)
if _uncited:
    raise ContractError(f"swa_contract's free rules and their citations here differ: {sorted(_uncited)}")


def free_cites(*calls: str) -> tuple[Cite, ...]:
    """The citations of every free rule of ``calls``, in swa_contract's order, each once."""
    found = [cite for rule in FREE_RULES if rule.call in calls for cite in FREE_RULE_CITES[(rule.call, rule.page_sizes)]]
    return tuple(dict.fromkeys(found))


# ------------------------------------------------------------------ allocations
def page_size_1(view: SWAContractView, args: Args) -> bool:
    """``alloc`` is the page-size-1 call: ``swa.py:274`` asserts it (above it ``alloc`` is the driver's misuse)."""
    return bool(view.page_size == 1)


def tokens_for_every_new_request(view: object, args: Args) -> bool:
    """Today: an extend admits a request with at least one token and allocates at least one in all
    (``schedule_batch.py:1767``, ``schedule_policy.py:1672``, ``allocation.py:521``)."""
    lengths = [(handle, int(length or 0)) for handle, length in args.get("batch", [])]
    return all(n >= 1 for h, n in lengths if h is None) and sum(n for _, n in lengths) >= 1


def decode_passed_the_gate(view: SWAContractView, args: Args) -> bool:
    """Today: each request holds its prompt (``allocation.py:643-644``), and both sides hold a page for
    every request whose next token opens one (:data:`DECODE_GATE`)."""
    model, ps = view.model, view.page_size
    handles = args.get("handles") or []
    if not all(model.is_live(h) for h in handles):
        return True  # not requests: the driver skips it
    if not all(model.slots[h] for h in handles):
        return False
    need = sum(1 for h in handles if len(model.slots[h]) % ps == 0)
    return not model.pages_short(need, need)


def one_tail(view: SWAContractView, args: Args) -> bool:
    """What ``alloc_extend_swa_tail`` asserts: page size > 1 (``swa.py:367``) and ``0 <= swa_tail_len <=
    extend_num_tokens`` (``:370``); the driver's call is one request (``:368``)."""
    return view.page_size > 1 and 0 <= int(args.get("swa_tail_len", 0)) <= int(args.get("extend_len", 0))


def a_pd_tail(view: SWAContractView, args: Args) -> bool:
    """Today: a tail of ``_swa_tail_len`` (``decode.py:563-580``: at least one token) over a page-aligned
    prefix (``common.py:60``, ``decode_prefix_len``)."""
    handle = args.get("handle")
    if int(args.get("swa_tail_len", 0)) < 1:
        return False
    if handle is None or not view.model.is_live(handle):
        return True  # a new request (prefix 0), or no request: the driver skips that
    return len(view.model.slots[handle]) % view.page_size == 0


# ------------------------------------------------------------------------ frees
def live_handle(view: SWAContractView, args: Args) -> int | None:
    """The live request ``args`` names (its ``handle``); ``None`` for none, or one released or cleared."""
    handle: int | None = args.get("handle")
    return handle if handle is not None and view.model.is_live(handle) else None


def row_free(view: SWAContractView, args: Args) -> bool:
    """A request's whole row goes back as ``free_kv_row_segments`` sends it: one ``free`` where the
    free rule allows the pages, else ``free_full`` of the pages without SWA peers and ``free`` of the rest."""
    model, handle = view.model, live_handle(view, args)
    if handle is None:
        return True  # released or cleared: the driver skips it
    pages = model.pages_of(model.slots[handle])
    if free_allows(model, "free", pages):
        return True
    gone = set(model.unwindowed_pages(handle))
    dead, alive = [p for p in pages if p in gone], [p for p in pages if p not in gone]
    return free_allows(model, "free_full", dead) and (not alive or free_allows(model, "free", alive))


def window_slides(view: SWAContractView, args: Args) -> bool:
    """``free_swa`` of a request's oldest pages that still have SWA peers, as the free rule allows them."""
    model, handle = view.model, live_handle(view, args)
    if handle is None or not model.windowed_pages(handle):
        return True  # nothing in the window: the driver skips it
    chosen = model.windowed_pages(handle)[: max(1, int(args.get("pages", 1)))]
    return free_allows(model, "free_swa", chosen)


def peers_released(view: SWAContractView, args: Args) -> bool:
    """``free_full`` only of a request none of whose pages has an SWA peer left (the free rule)."""
    model, handle = view.model, live_handle(view, args)
    return handle is None or free_allows(model, "free_full", model.pages_of(model.slots[handle]))


def nothing_to_free(view: object, args: Args) -> bool:
    """Raw ``indices`` are misuse; the empty free of one of the three calls is the one callers send."""
    return not args.get("indices") and args.get("call", "free") in ("free", "free_swa", "free_full")


CONTRACT = Contract(
    ops=SWAKVOps,
    view=SWAContractView,
    target="poolfuzz.harness.upstream:SWAKV",
    release="sglang==0.5.23",
    rules=(
        CallRule(
            SWAKVOps.alloc,
            ("alloc",),
            "page size 1: alloc(n) of a few tokens",
            (callers.ALLOC, callers.ONE_TOKEN_AT_LEAST, Cite(SWA, 274, "assert self.page_size == 1")),
            allows=page_size_1,
            today=callers.at_least_one,
            instead="callers allocate a batch's new tokens, >= 1 a request (schedule_batch.py:1767)",
        ),
        CallRule(
            SWAKVOps.extend,
            ("alloc", "alloc_extend"),
            "a non-empty batch of new requests and continued ones whose last token is in the window: "
            "alloc(total) at page size 1, alloc_extend above it",
            (EXTEND_PS1, callers.EXTEND, callers.ONE_TOKEN_AT_LEAST, NO_EMPTY_PROMPT, NO_EMPTY_CHUNK, REUSE_ONLY_WITH_TOKENS),
            allows=callers.non_empty_batch,
            today=tokens_for_every_new_request,
            instead="every scheduled request extends by >= 1 token (schedule_batch.py:1767, "
            "schedule_policy.py:1672); one reusing its KV is sent with prefix == seq only beside one "
            "that brings tokens (allocation.py:521-529)",
        ),
        CallRule(
            SWAKVOps.decode,
            ("alloc", "alloc_decode"),
            "one token for each of distinct live requests whose last token is in the window: alloc(bs) at page "
            "size 1, alloc_decode above it (last_loc -1 for a request of no tokens: swa.py:108-109)",
            (DECODE_PS1, DECODE, Cite(BATCH, 3780, "alloc_for_decode(self, token_per_req=1)", note="prepare_for_decode"), *DECODE_GATE),
            today=decode_passed_the_gate,
            instead="0.5.23 allocates a decode step only after check_decode_mem passed (scheduler.py:4469, "
            "4393): available_size(), the smaller side (swa.py:168), covers a page per request whose "
            "next token opens one (schedule_batch.py:3415, base.py:185); retract_decode aborts the "
            "last request rather than decode it short (schedule_batch.py:3508-3524); and a decoding "
            "request holds its prompt (allocation.py:643-644)",
        ),
        CallRule(
            SWAKVOps.tail,
            ("alloc_extend_swa_tail",),
            "page size > 1, one request (new, or over a live prefix), 0 <= swa_tail_len <= extend_len, the "
            "tail starting on a page boundary",
            (
                PD_TAIL,
                Cite(PD_DECODE, 580, "return seq_len - window_start", note="_swa_tail_len"),
                Cite(PD_DECODE, 2492, "and swa_evicted_seqlen % allocator.page_size == 0"),
                Cite(COMMON, 60, "the same page-aligned prefix", note="decode_prefix_len"),
                Cite(SWA, 370, "assert 0 <= swa_tail_len <= extend_num_tokens"),
            ),
            allows=one_tail,
            today=a_pd_tail,
            instead="PD decode sends a tail of >= 1 token (decode.py:563-580) over a page-aligned prefix (common.py:60, decode.py:1512)",
        ),
        CallRule(
            SWAKVOps.free,
            ("free", "free_full"),
            "a request's whole row (sparse: one token a page, which free expands to the same pages); at page size "
            "1 a row partly out of the window as free_full of the part without peers, then free of the rest",
            free_cites("free", "free_full"),
            allows=row_free,
        ),
        CallRule(
            SWAKVOps.free_swa,
            ("free_swa",),
            "the window slides: a request's oldest pages that still have SWA peers",
            free_cites("free_swa"),
            allows=window_slides,
        ),
        CallRule(
            SWAKVOps.free_full,
            ("free_full",),
            "a request none of whose pages has an SWA peer (a tombstoned node)",
            free_cites("free_full"),
            allows=peers_released,
        ),
        CallRule(
            SWAKVOps.free_indices,
            ("free", "free_swa", "free_full"),
            "free / free_swa / free_full of an empty tensor: a request with nothing to give back",
            (
                Cite(SWA, 468, "if free_index.numel() == 0:", note="free"),
                Cite(SWA, 503, "if self._swa_req_ring or free_index.numel() == 0:", note="free_swa"),
                Cite(SWA, 610, "if free_index.numel() == 0:", note="free_full"),
            ),
            allows=nothing_to_free,
        ),
        *callers.free_group_rules(callers.GROUP_BEGIN_FOR_SWA_EVICTION, callers.GROUP_END_FOR_SWA_EVICTION, callers.CLEAR_OUTSIDE_A_GROUP),
    ),
    reads=("available_size", "full_available_size", "swa_available_size"),
    not_called=(
        NotCalled(SWAKVOps.free_again, "misuse: free, free_swa or free_full again of released slots"),
        NotCalled(SWAKVOps.free_swa_again, "misuse: free_swa of pages without SWA peers (swa.py:560, _SWA_PEER_MAPPED)"),
        NotCalled(SWAKVOps.extend_malformed, "misuse: an alloc_extend batch with one defect"),
        NotCalled(SWAKVOps.decode_malformed, "misuse: an alloc_decode batch with one defect"),
        NotCalled(SWAKVOps.tail_of_two, "misuse: alloc_extend_swa_tail takes one request (swa.py:368 asserts bs=1)"),
        NotCalled(SWAKVOps.alloc_non_int, "misuse: alloc of a size that is not an int"),
    ),
)


def not_one_side_short(view: SWAContractView, args: Args) -> bool:
    """Known finding ``swa-decode-keeps-one-side`` (:mod:`poolfuzz.harness.upstream.findings`): a paged decode of ``handles``
    that finds exactly one side short keeps the other side's page, so it is withheld."""
    model, handles = view.model, args["handles"]
    if view.page_size == 1 or not all(model.is_live(h) for h in handles):
        return True
    need = sum(model.decode_pages_needed(len(model.slots[h]) + 1) for h in handles)
    return (need > len(model.full.free)) == (need > len(model.swa.free))


KNOWN_FINDINGS = KnownFindingFilter(SWAContractView, ((SWAKVOps.decode, not_one_side_short),), ops=SWAKVOps)
"""The calls that reach ``swa_kv``'s known upstream finding (the kit's ``known_findings``)."""

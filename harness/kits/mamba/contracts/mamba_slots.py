"""The calls ``MambaSlotAllocator``'s callers make in SGLang 0.5.23 (target ``poolfuzz.harness.upstream:MambaSlots``).

``HybridReqToTokenPool`` owns the allocator (``memory_pool.py:1459``).  It takes one slot per
admitted request (``alloc(1)``, ``memory_pool.py:1597``) and, with the extra buffer on, the
request's ping-pong tracking slots (``alloc(n)``, ``n`` 1 or 2, ``memory_pool.py:1760``);
the unified cache's Mamba component takes ``alloc(1)`` for copy-on-write during
``match_prefix``.  Slots go back through ``free`` of one or a few live slots
(``common.py:411``, ``free_mamba_cache`` at ``memory_pool.py:1831-1849``, the rejected
request's slot at ``scheduler.py:4296``).  The only alloc window is the scheduler's
admission loop: ``alloc_group_begin(len(self.waiting_queue))`` at ``scheduler.py:4201``
and ``alloc_group_end()`` at ``scheduler.py:4303``, in one synchronous stretch of
``_get_new_batch_prefill_raw`` with no ``return`` between them; an exception there ends the
scheduler process (``scheduler.py:6370-6373``), so no window outlives it.  ``clear`` has
two callers, ``HybridReqToTokenPool.clear`` (``memory_pool.py:1866``) and the disaggregated
decode pool's (``decode.py:358``), both reached only from ``flush_cache`` when the scheduler
is fully idle (``scheduler.py:5520-5524``) and from the PD role switch after its idle check
(``role_switch.py:73``, ``:293``): request handlers that run between scheduling passes,
never inside the admission loop.  So no caller clears while a window is open.
"""

from __future__ import annotations

from dataclasses import replace

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, KnownFindingFilter, NotCalled
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.judge.view import DriverView
from poolfuzz.harness.kits.mamba.model import SlotModel
from poolfuzz.harness.kits.mamba.ops import SlotOps
from poolfuzz.harness.upstream import callers

ALLOC_ONE = Cite("srt/mem_cache/memory_pool.py", 1597, "mid = self.mamba_allocator.alloc(1)",
                 note="HybridReqToTokenPool.alloc, one slot per request without one")
MATCH_ALLOC = Cite("srt/mem_cache/unified_cache/components/mamba.py", 210,
                   "dst_index = self.cache.req_to_token_pool.mamba_allocator.alloc(1)",
                   note="copy-on-write during match_prefix, inside the admission window")
PING_PONG = Cite("srt/mem_cache/memory_pool.py", 1760, "slots = self.mamba_allocator.alloc(n)",
                 note="the tracking slots, with the extra buffer on (memory_pool.py:1610)")
PING_PONG_COUNT = Cite("srt/mem_cache/allocation_sizing.py", 19, "return 2 if overlap else 1",
                       note="get_mamba_tracking_slots with the extra buffer on: n >= 1")
HICACHE_ALLOC = Cite("srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", 1370, "device_alloc_fn=mamba_allocator.alloc,",
                     note="HiCache load-back of a node's Mamba host slots")

FREE_EARLY = Cite("srt/mem_cache/common.py", 411, "tree_cache.req_to_token_pool.mamba_allocator.free(")
FREE_REQUEST = Cite("srt/mem_cache/memory_pool.py", 1831, "self.mamba_allocator.free(mamba_index.unsqueeze(0))",
                    note="free_mamba_cache")
FREE_ROW = Cite("srt/mem_cache/memory_pool.py", 1846, "self.mamba_allocator.free(row)",
                note="the whole ping-pong row: several slots in one call")
FREE_REJECTED = replace(callers.MAMBA_REJECTED_FREE, note="a request the admission loop did not add, inside the window")
EMPTY_FREE = Cite("srt/mem_cache/allocator/mamba.py", 80, "if free_index.numel() == 0:",
                  note="free's own early return for the empty frees its callers send")
INT64_SLOTS = Cite("srt/mem_cache/allocator/mamba.py", 87, "1, self.size + 1, dtype=torch.int64, device=self.device",
                   note="every slot a caller frees is a slice of this int64 free list or of the int64 "
                        "ping-pong map (memory_pool.py:1527)")

GROUP_BEGIN = replace(callers.MAMBA_BEGIN, note="the admission loop; 0 with an empty queue, more than the pool holds with a long one")
CLEAR_HYBRID = Cite("srt/mem_cache/memory_pool.py", 1866, "self.mamba_allocator.clear()",
                    note="HybridReqToTokenPool.clear")
CLEAR_DECODE = Cite("srt/disaggregation/decode.py", 358, "self.mamba_allocator.clear()",
                    note="the disaggregated decode pool's clear")
FLUSH_IDLE = replace(callers.FULLY_IDLE, note="flush_cache clears the pools (scheduler.py:5524) only when idle, between passes")
FLUSH = Cite("srt/managers/scheduler.py", 5524, "self.req_to_token_pool.clear()")
ROLE_SWITCH_IDLE = Cite("srt/disaggregation/role_switch.py", 73, "if not scheduler.is_fully_idle():",
                        note="the PD role switch clears (role_switch.py:293) only after this check")
ROLE_SWITCH = Cite("srt/disaggregation/role_switch.py", 293, "scheduler.req_to_token_pool.clear()")
NO_WINDOW_SURVIVES = Cite("srt/managers/scheduler.py", 6373, "parent_process.send_signal(signal.SIGQUIT)",
                          note="an exception escaping the admission loop ends the scheduler: no window left open")


class SlotContractView(DriverView):
    """The Mamba slot driver as its contract's predicates see it: whether its alloc window is open."""

    __slots__ = ()

    @property
    def group_open(self) -> bool:
        model: SlotModel = self._driver.model
        return model.group_open


def int64_slots(view: object, args: Args) -> bool:
    """Every freed slot tensor comes from the int64 free list or ping-pong map (``mamba.py:87``): no int32 frees."""
    return not args.get("int32")


def window_open(view: SlotContractView, args: Args) -> bool:
    """``alloc_group_end`` closes the window ``alloc_group_begin`` opened in the same loop."""
    return view.group_open


CONTRACT = Contract(
    ops=SlotOps,
    view=SlotContractView,
    target="poolfuzz.harness.upstream:MambaSlots",
    release="sglang==0.5.23",
    rules=(
        CallRule(SlotOps.alloc, ("alloc",), "alloc(n), n >= 1 (1 per request, 1 or 2 tracking slots), in or out of a window",
                 (ALLOC_ONE, MATCH_ALLOC, PING_PONG, PING_PONG_COUNT, HICACHE_ALLOC), today=callers.at_least_one,
                 instead="callers take one slot per request, or 1 or 2 tracking slots (allocation_sizing.py:19)"),
        CallRule(SlotOps.free, ("free",), "free(int64 tensor of one or a few distinct live slots), in or out of a window",
                 (FREE_EARLY, FREE_REQUEST, FREE_ROW, FREE_REJECTED)),
        CallRule(SlotOps.free_slots, ("free",), "free(int64 tensor of distinct live slots, or empty)",
                 (FREE_REQUEST, FREE_ROW, EMPTY_FREE, INT64_SLOTS), today=int64_slots,
                 instead="every slot tensor callers free comes from the int64 free list or ping-pong map (mamba.py:87)"),
        CallRule(SlotOps.group_begin, ("alloc_group_begin",), "alloc_group_begin(n >= 0), no window open",
                 (GROUP_BEGIN,), allows=callers.outside_a_group),
        CallRule(SlotOps.group_end, ("alloc_group_end",), "alloc_group_end(), the window open", (callers.MAMBA_END,),
                 allows=window_open),
        CallRule(SlotOps.clear, ("clear",), "clear(); the callers of 0.5.23 clear from flush_cache or the role switch, "
                 "when idle, never inside a window",
                 (CLEAR_HYBRID, CLEAR_DECODE, FLUSH_IDLE, FLUSH, ROLE_SWITCH_IDLE, ROLE_SWITCH, NO_WINDOW_SURVIVES),
                 today=callers.outside_a_group,
                 instead="0.5.23 clears only when idle (scheduler.py:5520-5524, role_switch.py:73), and the window "
                         "spans one synchronous stretch of _get_new_batch_prefill_raw (scheduler.py:4201-4303) that "
                         "an exception ends with the process (scheduler.py:6373)"),
    ),
    reads=("available_size",),
    not_called=(
        NotCalled(SlotOps.free_malformed, "misuse: a list, float, 2-D or 0-d tensor of slots"),
    ),
)


def clear_outside_a_window(view: SlotContractView, args: Args) -> bool:
    """Known finding ``mamba-clear-keeps-reservation`` (:mod:`poolfuzz.harness.upstream.findings`): ``clear`` inside an
    alloc window keeps the reservation, so it is withheld there."""
    return not view.group_open


KNOWN_FINDINGS = KnownFindingFilter(SlotContractView, ((SlotOps.clear, clear_outside_a_window),), ops=SlotOps)
"""The calls that reach ``mamba_slots``'s known upstream finding (the kit's ``known_findings``)."""

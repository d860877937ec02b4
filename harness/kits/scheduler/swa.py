"""The sliding window's part of a scheduler step (``scheduler`` family, ``sliding_window`` on).

The KV side is an ``SWATokenToKVPoolAllocator``: every token holds a full slot, and
an SWA slot while it is inside the window.  Before each step, as SGLang 0.5.23's
``maybe_evict_swa`` does for a cache without prefix sharing
(``free_swa_out_of_window_slots``), each request gives back the SWA slots of the
positions below ``floor_page(pre_len - window)`` with ``free_swa``, inside one free
group.  The page holding a request's last token never leaves, so the next extend or
decode always finds the SWA peer of its ``last_loc``.

Conservation holds per side (``scheduler-conservation``): after every step the count
equations ``full_available + sum(ceil_align(len)) == full total`` and
``swa_available + sum(ceil_align(len) - swa_evicted) == swa total`` (SGLang's SWA
leak check without a cache); at audit every SWA page is free or owned by exactly one
live request's in-window tokens, and the mapping of each row is the model's
(``swa-mapping``: in-window positions map to their own SWA slot, the rest to 0).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.scheduler.base import SchedulerDriverBase
from poolfuzz.harness.kits.scheduler.model import ReqState


class WindowBook:
    """Out-of-window releases and the SWA side's checks for one driver."""

    def __init__(self, driver: SchedulerDriverBase) -> None:
        self.driver = driver
        self.kv: Any = driver.kv
        self.window = driver.window

    def leave_window(self, states: list[ReqState]) -> None:
        """``free_swa`` the positions each request's window has passed, in one free group."""
        d, model = self.driver, self.driver.model
        moving = [(s, model.window_start(s, self.window)) for s in states]
        moving = [(s, start) for s, start in moving if start > s.swa_evicted]
        if not moving:
            return
        d.expect_accepted(self.kv.free_group_begin, "free_group_begin")
        for state, start in moving:
            gone = d.rows.req_to_token[state.row, state.swa_evicted:start]
            d.expect_accepted(partial(self.kv.free_swa, gone),
                              f"free_swa(tokens {state.swa_evicted}..{start} of request {state.handle})")
            model.leave_window(state.handle, start)
        d.expect_accepted(self.kv.free_group_end, "free_group_end")
        d.event("out-of-window SWA release")
        self.check_ledger()  # before the allocation: a leak here would otherwise read as a refusal

    def retract_bounds(self, state: ReqState, start: int, model_start: int) -> tuple[int, int]:
        """A kept prefix must end on a token with an SWA slot; one ending in the released window restarts at 0."""
        if model_start == 0 or model_start > state.swa_evicted:
            return start, model_start
        self.driver.event("retract past the window: re-prefill from the start")
        return 0, 0

    def check_ledger(self) -> None:
        """The count equation of each side, from the allocator's sizes and the live requests' lengths."""
        d, model = self.driver, self.driver.model
        full, swa = self.kv.full_available_size(), self.kv.swa_available_size()
        held, in_window = model.uncached_tokens(), model.swa_uncached_tokens()
        check(full + held == model.num_pages * d.ps, "scheduler-conservation",
              "full side: available + live tokens (page-aligned) != total", available=full, held=held,
              total=model.num_pages * d.ps)
        check(swa + in_window == model.num_swa_pages * d.ps, "scheduler-conservation",
              "SWA side: available + in-window tokens (page-aligned) != total", available=swa,
              in_window=in_window, total=model.num_swa_pages * d.ps)

    def audit(self) -> None:
        """Every SWA page free or owned once, and each live row's mapping the model's."""
        d, model = self.driver, self.driver.model
        free = d.free_pages(self.kv.swa_attn_allocator)
        mapped: dict[int, list[int]] = {}
        for handle, state in model.live.items():
            row = d.rows.req_to_token[state.row, : state.length].to(self.kv.full_to_swa_index_mapping.device)
            mapped[handle] = self.kv.translate_loc_from_full_to_swa(row.long()).tolist()
        problems = model.ownership_problems(free, {h: [s for s in m if s > 0] for h, m in mapped.items()}, model.num_swa_pages)
        check(not problems, "scheduler-conservation", "an SWA page is not free-or-owned-once", **problems)
        check(set(free) == model.free_swa, "conservation", "SWA free pages differ from the model",
              missing=sorted(model.free_swa - set(free)), extra=sorted(set(free) - model.free_swa))
        for handle, state in model.live.items():
            check(mapped[handle] == state.swa, "swa-mapping", "a row's SWA mapping is not its in-window slots",
                  handle=handle, swa_evicted=state.swa_evicted, mapping=mapped[handle], expected=state.swa)

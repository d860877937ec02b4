"""Driver for the ``scheduler`` family: request rows, Mamba slots and paged KV, driven as scheduler steps.

One driver owns a request-row pool (``ReqToTokenPool``, or ``HybridReqToTokenPool``
when ``hybrid``) and a ``PagedTokenToKVPoolAllocator`` together, built by
:func:`build_scheduler_pools` (swap it with ``--target scheduler=module:attr``),
and replays what SGLang's scheduler does with them:

* ``admit``: the Mamba group window opens around admission; rows and slots
  come from ``alloc(reqs)``; KV for the first chunk from ``alloc_extend`` with
  prefix 0; ``req_to_token[row, :chunk] = out``.  A KV shortage rolls the
  admission back.
* ``prefill``: chunked prefill continues on the *same* row (``alloc`` reuses
  it, SGLang #17850), ``last_loc`` read from ``req_to_token``.
* ``decode``: ``alloc_decode`` with ``last_loc = req_to_token[row, len-1]``.
* ``finish``: KV freed inside a free group, then the Mamba slot, then the row;
  the row is overwritten before the group ends (the #34067 aliasing hazard).
* ``retract``: free from the page boundary at or below ``keep`` (#4977).
* ``abort``: mid-flight, no free group, row first.  ``clear``: reset everything.

Every extend/decode result is compared with the loop oracle run on the same
pages and ``last_loc`` (``kernel-agreement``).  The scheduler's conservation
equation (``scheduler-conservation``) is O(pool + live tokens), so it runs with
the audit: every ``audit_period`` steps (4 for this machine) and at teardown.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch

from harness.judge.drivers.base import SKIPPED, Driver, operation
from harness.judge.invariants import InvariantViolation, check, check_slot_layout, check_unique
from harness.judge.models.scheduler import ReqState, SchedulerModel
from pools.kv_allocator import PagedTokenToKVPoolAllocator
from pools.mamba import HybridReqToTokenPool
from pools.page_alloc import get_kernel
from pools.req_to_token import Req, ReqToTokenPool


@dataclass
class SchedulerPools:
    """What a scheduler holds: the request-row pool and the KV allocator."""

    req_to_token_pool: Any
    token_to_kv_pool_allocator: Any


def build_scheduler_pools(
    *, size: int, max_context_len: int, page_size: int, kv_pages: int, hybrid: bool = False, mamba_size: int = 0,
    need_sort: bool = False, kernel: str = "vectorized", device: str = "cpu",
) -> SchedulerPools:
    """The default ``scheduler`` target: the pools of :mod:`pools`, sized by the config."""
    rows: Any = (
        HybridReqToTokenPool(size, max_context_len, mamba_size, device=device) if hybrid
        else ReqToTokenPool(size, max_context_len, device=device)
    )
    kv = PagedTokenToKVPoolAllocator(kv_pages * page_size, page_size, device=device, need_sort=need_sort, kernel=kernel)
    return SchedulerPools(rows, kv)


def _first_difference(expected: list[int], actual: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))


class SchedulerDriver(Driver):
    family = "scheduler"

    def __init__(self, factory: Any, config: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        c = self.config
        self.rows = self.pool.req_to_token_pool
        self.kv = self.pool.token_to_kv_pool_allocator
        self.hybrid = bool(c.get("hybrid", False))
        self.device = torch.device(c.get("device", "cpu"))
        self.ps = int(c["page_size"])
        self.max_len = int(c["max_context_len"])
        self.model = SchedulerModel(int(c["size"]), int(c["kv_pages"]), self.ps, int(c.get("mamba_size", 0)), self.hybrid)
        self.reqs: dict[int, Req] = {}
        self.oracle = get_kernel("loop")

    # ------------------------------------------------------------ policy
    def retract_free_start(self, keep: int) -> int:
        """Where this scheduler starts freeing on retract; the model's rule unless a variant plants a bug."""
        return self.model.retract_start(keep)

    # ------------------------------------------------------------ helpers
    def _i64(self, values: list[int], device: torch.device | str | None = None) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=device or self.device)

    def _free_pages(self) -> list[int]:
        return list(self.kv.get_all_free_pages().tolist())

    def _pages_to_take(self, count: int) -> list[int]:
        """The head of the free list, merged and sorted first when it is short (the allocator contract)."""
        head = self.kv.free_pages.tolist()
        return list((head if count <= len(head) else sorted(self._free_pages()))[:count])

    def _last_loc(self, states: list[ReqState]) -> torch.Tensor:
        """``req_to_token[row, len - 1]`` read from the pool, ``-1`` for an empty request."""
        rows = self._i64([s.row for s in states])
        lens = self._i64([s.length for s in states])
        read = self.rows.req_to_token[rows, (lens - 1).clamp(min=0)].to(torch.int64)
        return torch.where(lens > 0, read, torch.full_like(read, -1))

    def _check_fresh(self, values: list[int], free: set[int], what: str, reserved: str) -> None:
        check_unique(values, "no-double-allocation", what)
        for value in values:
            check(value != 0, "reserved-never-handed-out", f"{what} handed out {reserved} 0")
            check(value in free, "no-double-allocation", f"{what} handed out {value}, which is not free")

    def _kv_step(self, states: list[ReqState], seqs: list[int], *, decode: bool) -> bool:
        """One ``alloc_extend``/``alloc_decode`` for ``states`` growing to ``seqs``; False when KV is short."""
        model, ps = self.model, self.ps
        pres = [s.length for s in states]
        per_request = [model.decode_pages(q) if decode else model.extend_pages(p, q) for p, q in zip(pres, seqs)]
        need = sum(per_request)
        enough = need <= len(model.free_pages)
        pages = self._pages_to_take(need) if enough else []
        before = self._free_pages()
        last_loc = self._last_loc(states)
        seq_t, pre_t = self._i64(seqs), self._i64(pres)
        seq_cpu = seq_t.cpu()
        what = f"alloc_{'decode' if decode else 'extend'}(prefix={pres}, seq={seqs})"
        if decode:
            result = self.expect_accepted(lambda: self.kv.alloc_decode(seq_t, seq_cpu, last_loc), what)
        else:
            total = sum(seqs) - sum(pres)
            result = self.expect_accepted(
                lambda: self.kv.alloc_extend(pre_t, pre_t.cpu(), seq_t, seq_cpu, last_loc, total), what)
        if not enough:
            check(result is None, "empty-pool-guard", f"{what} served with {len(model.free_pages)} free pages", need=need)
            # A refusal may merge staged frees (need_sort) into the free list: same pages, new order.
            check(sorted(self._free_pages()) == sorted(before), "empty-pool-guard", f"a refused {what} changed the free pages")
            self.event(f"{'decode' if decode else 'extend'} refused: KV short")
            return False
        check(result is not None, "empty-pool-guard", f"{what} refused with {len(model.free_pages)} free pages", need=need)
        if not decode and any(p % ps and q > p for p, q in zip(pres, seqs)):
            self.event("extend continues a mid-page prefix")
        if need == len(model.free_pages) and need:
            self.event("KV exactly full")
        out = result.tolist()
        expected = self._oracle(pres, seqs, last_loc, pages, decode)
        if out != expected:
            i = _first_difference(expected, out)
            raise InvariantViolation("kernel-agreement", f"{what} differs from the loop oracle at output {i}",
                                     kernel=self.config.get("kernel"), expected=expected[i: i + 4], actual=out[i: i + 4])
        self._check_fresh(pages, model.free_pages, what, "page")
        after = self._free_pages()
        check(sorted(after) == sorted(set(before) - set(pages)) and len(after) == len(before) - need, "page-layout",
              f"{what} consumed other than its {need} counted pages", consumed=sorted(set(before) - set(after)))
        start = 0
        for state, pre, seq, last in zip(states, pres, seqs, last_loc.tolist()):
            width = 1 if decode else seq - pre
            slots = out[start: start + width]
            check_slot_layout(slots, prefix=seq - width, last_loc=last, page_size=ps, what=what, handle=state.handle)
            if width:
                self.expect_accepted(lambda: self.rows.write(
                    (state.row, slice(seq - width, seq)), result[start: start + width].to(torch.int32)), "write")
            model.grow(state.handle, slots)
            start += width
        return True

    def _oracle(self, pres: list[int], seqs: list[int], last_loc: torch.Tensor, pages: list[int], decode: bool) -> list[int]:
        """The loop kernel on the same pages and ``last_loc`` (CPU)."""
        cpu = torch.device("cpu")
        width = len(seqs) if decode else sum(seqs) - sum(pres)
        out = torch.full((width,), -7777, dtype=torch.int64)
        seq_t, loc, free = self._i64(seqs, cpu), last_loc.cpu(), self._i64(pages, cpu)
        if decode:
            self.oracle.decode(seq_t, loc, free, out, self.ps)
        else:
            self.oracle.extend(self._i64(pres, cpu), seq_t, loc, free, out, self.ps)
        return list(out.tolist())

    def _release(self, state: ReqState, *, grouped: bool) -> None:
        """Free one request's KV, Mamba slot and row (a finish inside a free group, or an abort)."""
        req = self.reqs.pop(state.handle)
        row, length = state.row, state.length
        kv_slots = self.rows.req_to_token[row, :length]  # a view: the allocator must copy it (#34067)
        if not grouped:
            kv_slots = kv_slots.clone()
            self.expect_accepted(lambda: self.rows.free(req), f"free(row {row})")
        if length:
            self.expect_accepted(lambda: self.kv.free(kv_slots), f"free(KV of request {state.handle})")
        if self.hybrid:
            self.expect_accepted(lambda: self.rows.free_mamba_cache(req), f"free_mamba_cache(request {state.handle})")
        if grouped:
            self.expect_accepted(lambda: self.rows.free(req), f"free(row {row})")
            self.rows.req_to_token[row, :length] = 0  # the row's next owner overwrites it before the group ends
        self.model.release(state.handle)

    # --------------------------------------------------------- operations
    @operation
    def admit(self, requests: list[list[int]], reserve_extra: int = 0) -> list[int]:
        """Admit ``[prompt, first_chunk]`` requests as one batch; returns their handles ([] if refused)."""
        batch = [(min(prompt, self.max_len), min(chunk, prompt, self.max_len)) for prompt, chunk in requests]
        if not batch:
            return SKIPPED  # type: ignore[return-value]
        model = self.model
        mamba: Any = self.rows.mamba_allocator if self.hybrid else None
        reqs = [Req(rid=f"req-{model.next_handle + i}") for i in range(len(batch))]
        if self.hybrid:
            self.expect_accepted(lambda: mamba.alloc_group_begin(len(batch) + reserve_extra), "alloc_group_begin")
        handles: list[int] = []
        if not model.can_admit(len(batch)):
            self.expect_refused(lambda: self.rows.alloc(reqs), f"admission of {len(reqs)} requests",
                                free_rows=len(model.free_rows), free_mamba=len(model.free_mamba))
            self.event("admission refused: rows or Mamba slots short")
        else:
            rows = self.expect_accepted(lambda: self.rows.alloc(reqs), f"alloc({len(reqs)} requests)")
            check(rows is not None and len(rows) == len(batch), "empty-pool-guard", "admission refused with room",
                  free_rows=len(model.free_rows), free_mamba=len(model.free_mamba))
            self._check_fresh(list(rows), model.free_rows, "alloc(reqs)", "row")
            slots = [req.mamba_pool_idx for req in reqs]
            if self.hybrid:
                self._check_fresh([int(s or 0) for s in slots], model.free_mamba, "alloc(reqs)", "mamba slot")
            states = [model.admit(row, slot, prompt) for row, slot, (prompt, _) in zip(rows, slots, batch)]
            for state, req in zip(states, reqs):
                self.reqs[state.handle] = req
            if self._kv_step(states, [chunk for _, chunk in batch], decode=False):
                handles = [s.handle for s in states]
            else:
                for state in states:
                    self._release(state, grouped=False)
                self.event("admission rolled back: KV short")
        if self.hybrid:
            self.expect_accepted(mamba.alloc_group_end, "alloc_group_end")
            check(not mamba.group_open, "group-window", "the Mamba group window stayed open after admission")
        return handles

    @operation
    def prefill(self, handles: list[int], chunk: int) -> None:
        """The next chunk of each named prefilling request, on the row it already holds."""
        states = [self.model.live[h] for h in dict.fromkeys(handles) if h in self.model.live]
        states = [s for s in states if s.prefilling]
        if not states:
            return SKIPPED  # type: ignore[return-value]
        before = self.observe()
        rows = self.expect_accepted(lambda: self.rows.alloc([self.reqs[s.handle] for s in states]), "alloc(continuing)")
        check(rows == [s.row for s in states] and self.observe() == before, "valid-call-accepted",
              "continuing requests did not keep their rows", rows=rows, expected=[s.row for s in states])
        self._kv_step(states, [min(s.length + chunk, s.target) for s in states], decode=False)

    @operation
    def decode(self, handles: list[int]) -> None:
        """One decode step of each named running request."""
        states = [self.model.live[h] for h in dict.fromkeys(handles) if h in self.model.live]
        states = [s for s in states if not s.prefilling and s.length < self.max_len]
        if not states:
            return SKIPPED  # type: ignore[return-value]
        self._kv_step(states, [s.length + 1 for s in states], decode=True)

    @operation
    def finish(self, handles: list[int]) -> None:
        """Release finished requests: KV inside one free group, then Mamba slots, then rows."""
        states = [self.model.live[h] for h in dict.fromkeys(handles) if h in self.model.live]
        if not states:
            return SKIPPED  # type: ignore[return-value]
        available = self.kv.available_size()
        self.expect_accepted(self.kv.free_group_begin, "free_group_begin")
        for state in states:
            self._release(state, grouped=True)
        check(self.kv.available_size() == available, "group-window", "frees inside a free group took effect early")
        self.expect_accepted(self.kv.free_group_end, "free_group_end")

    @operation
    def abort(self, handle: int) -> None:
        """Abort a request mid-flight: row first, then Mamba slot and KV, no free group."""
        if handle not in self.model.live:
            return SKIPPED  # type: ignore[return-value]
        self._release(self.model.live[handle], grouped=False)

    @operation
    def retract(self, handle: int, keep: int) -> None:
        """Shrink a request to the page boundary at or below ``keep``; it must prefill the rest again."""
        state = self.model.live.get(handle)
        if state is None or state.length == 0:
            return SKIPPED  # type: ignore[return-value]
        keep, length = min(keep, state.length), state.length
        start = self.retract_free_start(keep)
        if start < length:
            tail = self.rows.req_to_token[state.row, start:length]
            self.expect_accepted(lambda: self.kv.free(tail), f"free(tokens {start}..{length} of request {handle})")
        self.model.truncate(handle, self.model.retract_start(keep))
        state.target = max(state.target, length)
        if keep % self.ps:
            self.event("retract mid-page")

    @operation
    def clear(self) -> None:
        """Reset both pools; every request is dropped."""
        self.expect_accepted(self.rows.clear, "req_to_token_pool.clear()")
        self.expect_accepted(self.kv.clear, "allocator.clear()")
        self.model.clear()
        self.reqs.clear()
        check(self.rows.available_size() == self.model.num_rows, "clear-restores", "rows still allocated after clear")
        check(self.kv.available_size() == self.model.num_pages * self.ps and not self.kv.in_free_group,
              "clear-restores", "KV pages still allocated (or a free group open) after clear")

    # ------------------------------------------------------------- audits
    def observe(self) -> Hashable:
        mamba = getattr(self.rows, "mamba_allocator", None)
        return (tuple(self.rows.free_slots), tuple(self._free_pages()),
                tuple(mamba.free_slots.tolist()) if mamba is not None else ())

    def check_equation(self) -> None:
        """The scheduler conservation equation, from the pools' own state.

        Every KV page is on the allocator's free list or in ``req_to_token[row, :len]`` of
        exactly one live request; every row and Mamba slot is free or held by exactly one.
        """
        model = self.model
        held: dict[int, list[int]] = {}
        for handle, state in model.live.items():
            held[handle] = self.rows.req_to_token[state.row, : state.length].tolist()
            if held[handle] != state.slots:
                i = _first_difference(state.slots, held[handle])
                raise InvariantViolation("scheduler-conservation", "req_to_token[row, :len] is not the request's slots",
                                         handle=handle, row=state.row, position=i,
                                         expected=state.slots[i: i + 4], actual=held[handle][i: i + 4])
        problems = model.ownership_problems(self._free_pages(), held)
        check(not problems, "scheduler-conservation", "a KV page is not free-or-owned-once", **problems)
        self._check_partition("rows", list(self.rows.free_slots), [s.row for s in model.live.values()], model.num_rows)
        mamba = getattr(self.rows, "mamba_allocator", None)
        if self.hybrid and mamba is not None:
            self._check_partition("Mamba slots", mamba.free_slots.tolist(),
                                  [int(s.mamba or 0) for s in model.live.values()], model.num_mamba)

    def _check_partition(self, what: str, free: list[int], held: list[int], count: int) -> None:
        everything = free + held
        check(len(set(everything)) == len(everything) and set(everything) == set(range(1, count + 1)),
              "scheduler-conservation", f"{what} are not each free or held by exactly one live request",
              free=sorted(free), held=sorted(held), count=count)

    def audit(self) -> None:
        """Pools against the model: the conservation equation, free sets, handles, mapping, row 0, closed groups."""
        model = self.model
        self.check_equation()
        free_pages = self._free_pages()
        check_unique(free_pages, "no-double-allocation", "the KV free list")
        check(set(free_pages) == model.free_pages, "conservation", "KV free pages differ from the model",
              missing=sorted(model.free_pages - set(free_pages)), extra=sorted(set(free_pages) - model.free_pages))
        check(self.kv.available_size() == len(model.free_pages) * self.ps, "conservation", "KV available_size()",
              available=self.kv.available_size(), expected=len(model.free_pages) * self.ps)
        check(not self.kv.in_free_group, "group-window", "a free group is open between steps")
        check(set(self.rows.free_slots) == model.free_rows, "conservation", "free rows differ from the model",
              pool=sorted(self.rows.free_slots), model=sorted(model.free_rows))
        check(not bool(self.rows.req_to_token[0].any()), "reserved-never-handed-out", "row 0 of req_to_token written")
        for handle, state in model.live.items():
            req = self.reqs[handle]
            check(req.req_pool_idx == state.row and req.mamba_pool_idx == state.mamba, "conservation",
                  "a request's handles differ from the model", handle=handle, row=req.req_pool_idx,
                  mamba=req.mamba_pool_idx, expected=(state.row, state.mamba))
        if self.hybrid:
            mamba = self.rows.mamba_allocator
            check(set(mamba.free_slots.tolist()) == model.free_mamba, "conservation", "free Mamba slots differ")
            check(not mamba.group_open, "group-window", "a Mamba group window is open between steps")
            mapping = self.rows.req_index_to_mamba_index_mapping.tolist()
            expected = [0] * len(mapping)
            for state in model.live.values():
                expected[state.row] = int(state.mamba or 0)
            check(mapping == expected, "conservation", "req_index_to_mamba_index_mapping differs from the live requests",
                  mapping=mapping, expected=expected)

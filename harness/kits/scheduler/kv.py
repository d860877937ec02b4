"""One KV allocation of a scheduler step (``scheduler`` family): ``alloc_extend`` or ``alloc_decode`` for a batch.

The model says how many pages the batch needs (the same number on each side of an
SWA allocator) and which pages it must take: the head of each side's free list,
merged and sorted first when the head is short.  Before allocating, the batch's
requests leave the window (SWA) and a short pool evicts from the cache (prefix
cache).  Then:

* a batch the free pages cannot serve must be refused with ``None`` and no side's
  free pages changed (``empty-pool-guard``);
* otherwise each side's output equals the loop oracle run on that side's pages and
  ``last_loc`` (``kernel-agreement`` on the full side; on the SWA side, read through
  ``full_to_swa_index_mapping``, ``swa-mapping``), every slot sits at its position's
  page offset and continues ``last_loc`` (``page-layout``), and exactly the counted
  pages left each free list (``page-layout``, ``no-double-allocation``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from poolfuzz.harness.judge.invariants import InvariantViolation, check, check_slot_layout
from poolfuzz.harness.kits.scheduler.base import SchedulerDriverBase
from poolfuzz.harness.kits.scheduler.cache import CacheBook
from poolfuzz.harness.kits.scheduler.model import ReqState
from poolfuzz.harness.kits.scheduler.swa import WindowBook
from poolfuzz.pools.page_alloc import get_kernel


def first_difference(expected: list[int], actual: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))


class KVStep:
    """``KVStep(driver, cache=..., swa=...)(states, seqs, decode=...)``: grow ``states`` to ``seqs``; False when KV is short.

    ``cache`` and ``swa`` are the driver's books for its options (``None`` when off).
    """

    def __init__(self, driver: SchedulerDriverBase, *, cache: CacheBook | None, swa: WindowBook | None) -> None:
        self.driver = driver
        self.cache = cache
        self.swa = swa
        self.oracle = get_kernel("loop")

    def _pages_to_take(self, allocator: Any, count: int) -> list[int]:
        """The head of the free list, merged and sorted first when it is short (the allocator contract)."""
        head = allocator.free_pages.tolist()
        return list((head if count <= len(head) else sorted(self.driver.free_pages(allocator)))[:count])

    def _last_loc(self, states: list[ReqState]) -> torch.Tensor:
        """``req_to_token[row, len - 1]`` read from the pool, ``-1`` for an empty request."""
        d = self.driver
        rows = d.i64([s.row for s in states])
        lens = d.i64([s.length for s in states])
        read = d.rows.req_to_token[rows, (lens - 1).clamp(min=0)].to(torch.int64)
        return torch.where(lens > 0, read, torch.full_like(read, -1))

    def __call__(self, states: list[ReqState], seqs: list[int], *, decode: bool) -> bool:
        d = self.driver
        model, ps = d.model, d.ps
        if self.swa is not None:
            self.swa.leave_window(states)
        pres = [s.length for s in states]
        need = sum(model.decode_pages(q) if decode else model.extend_pages(p, q) for p, q in zip(pres, seqs))
        if self.cache is not None and need > len(model.free_pages):
            self.cache.evict_for(need)
        sides = d.sides()
        enough = all(need <= len(free) for _, _, free in sides)
        plans = [(self._pages_to_take(alloc, need) if enough else [], d.free_pages(alloc)) for _, alloc, _ in sides]
        last_loc = self._last_loc(states)
        seq_t, pre_t = d.i64(seqs), d.i64(pres)
        seq_cpu = seq_t.cpu()
        what = f"alloc_{'decode' if decode else 'extend'}(prefix={pres}, seq={seqs})"
        if decode:
            result = d.expect_accepted(lambda: d.kv.alloc_decode(seq_t, seq_cpu, last_loc), what)
        else:
            total = sum(seqs) - sum(pres)
            result = d.expect_accepted(lambda: d.kv.alloc_extend(pre_t, pre_t.cpu(), seq_t, seq_cpu, last_loc, total), what)
        free_counts = {name: len(free) for name, _, free in sides}
        if not enough:
            check(result is None, "empty-pool-guard", f"{what} served with free pages {free_counts}", need=need)
            for (name, alloc, _), (_, before) in zip(sides, plans):
                # A refusal may merge staged frees (need_sort) into the free list: same pages, new order.
                check(
                    sorted(d.free_pages(alloc)) == sorted(before),
                    "empty-pool-guard",
                    f"a refused {what} changed the {name} side's free pages",
                )
            d.event(f"{'decode' if decode else 'extend'} refused: KV short")
            return False
        check(result is not None, "empty-pool-guard", f"{what} refused with free pages {free_counts}", need=need)
        if not decode and any(p % ps and q > p for p, q in zip(pres, seqs)):
            d.event("extend continues a mid-page prefix")
        if need and need == min(free_counts.values()):
            d.event("KV exactly full")
        outputs = [result.tolist()]
        last_locs = [last_loc.tolist()]
        if self.swa is not None:
            outputs.append(d.kv.translate_loc_from_full_to_swa(result).tolist())
            last_locs.append([s.swa[s.length - 1] if s.length else -1 for s in states])
        for (name, alloc, free), (pages, before), out, lasts in zip(sides, plans, outputs, last_locs):
            expected = self._oracle(pres, seqs, lasts, pages, decode)
            if out != expected:
                i = first_difference(expected, out)
                raise InvariantViolation(
                    "kernel-agreement" if name == "full" else "swa-mapping",
                    f"{what}: the {name} side differs from the loop oracle at output {i}",
                    kernel=d.config.kernel,
                    expected=expected[i : i + 4],
                    actual=out[i : i + 4],
                )
            d.check_fresh(pages, free, what, f"{name} page")
            after = d.free_pages(alloc)
            check(
                sorted(after) == sorted(set(before) - set(pages)) and len(after) == len(before) - need,
                "page-layout",
                f"{what} consumed other than its {need} counted {name} pages",
                consumed=sorted(set(before) - set(after)),
            )
        start = 0
        for i, (state, pre, seq) in enumerate(zip(states, pres, seqs)):
            width = 1 if decode else seq - pre
            per_side = [out[start : start + width] for out in outputs]
            for slots, lasts in zip(per_side, last_locs):
                check_slot_layout(slots, prefix=seq - width, last_loc=lasts[i], page_size=ps, what=what, handle=state.handle)
            if width:
                d.expect_accepted(
                    partial(d.rows.write, (state.row, slice(seq - width, seq)), result[start : start + width].to(torch.int32)), "write"
                )
            model.grow(state.handle, per_side[0], per_side[1] if self.swa is not None else None)
            start += width
        return True

    def _oracle(self, pres: list[int], seqs: list[int], last_loc: list[int], pages: list[int], decode: bool) -> list[int]:
        """The loop kernel on the same pages and ``last_loc`` (CPU)."""
        d, cpu = self.driver, torch.device("cpu")
        width = len(seqs) if decode else sum(seqs) - sum(pres)
        out = torch.full((width,), -7777, dtype=torch.int64)
        seq_t, loc, free = d.i64(seqs, cpu), d.i64(last_loc, cpu), d.i64(pages, cpu)
        if decode:
            self.oracle.decode(seq_t, loc, free, out, d.ps)
        else:
            self.oracle.extend(d.i64(pres, cpu), seq_t, loc, free, out, d.ps)
        return list(out.tolist())

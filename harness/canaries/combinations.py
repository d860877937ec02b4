"""Combination canaries: planted bugs that show only when two independent conditions meet in one call.

The historical canaries each trip on one condition.  These were written apart
from the strategies, after the shapes of bug that took a single worker minutes
to find: a repeated index inside one call that frees or claims several, a batch
mixing requests of different kinds (holding a row or slot, or needing one), and
an extend or decode batch whose geometry meets several conditions at once
(prefix alignment, how many pages it needs, position in the batch).  Each class
docstring names its two conditions and the invariant that must catch it; each
bug fails one way only, so the invariant is the same whatever example finds it.

None of these is an upstream bug report: they are the shapes such bugs take
(the ``upstream`` field names the code they imitate).  This module holds the
request-row and Mamba-slot ones; :mod:`poolfuzz.harness.canaries.combinations_caches`
the KV allocator, prefix cache and block pool ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.pools.errors import DoubleFreeError
from poolfuzz.pools.mamba import HybridReqToTokenPool, MambaSlotAllocator
from poolfuzz.pools.mamba_slots import _FREE, _LIVE, _slot_list
from poolfuzz.pools.req_to_token import DecodeReqToTokenPool, Req, ReqToTokenPool


# ------------------------------------------------------------------ request rows
class FreeRowsChecksASet(ReqToTokenPool):
    """``free_rows`` validates ``set(rows)`` but appends the list as given.

    Needs: a live row, and that row named twice in one ``free_rows`` call.  The
    row then sits on the free list twice and goes to two requests.  Caught by
    ``misuse-rejected``: a repeated row is a double free.
    """

    def free_rows(self, indices: Iterable[int]) -> None:
        rows = list(indices)
        self._check_releasable(sorted(set(rows)))
        for row in rows:
            self._is_free[row] = 1
        self.free_slots.extend(rows)


class CapacityCountsWholeBatch(ReqToTokenPool):
    """``alloc`` checks capacity against the batch length, not the requests needing a row.

    Needs: a batch with a request that already holds its row (chunked prefill
    continuing, SGLang #17850), and a pool with fewer free rows than the batch
    has requests but enough for the new ones.  The batch is refused although
    it fits.  Caught by ``empty-pool-guard``.
    """

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        need = self._validate_batch(reqs)
        if len(reqs) > len(self.free_slots):
            return None
        rows = self.alloc_rows(need)
        return None if rows is None else self._bind_rows(reqs, rows)


class RowsBoundByBatchPosition(DecodeReqToTokenPool):
    """New requests get ``rows[i]`` with ``i`` their position in the batch, not their rank among new ones.

    Needs: a batch mixing requests that hold a row with new ones, and a holder
    placed before a new request.  The index runs past the rows taken and the
    call crashes.  Caught by ``valid-call-accepted``.
    """

    def _bind_rows(self, reqs: Sequence[Req], rows: list[int]) -> list[int]:
        for position, req in enumerate(reqs):
            if req.req_pool_idx is None:
                req.req_pool_idx = rows[position]
        return [req.req_pool_idx for req in reqs]  # type: ignore[misc]


# ------------------------------------------------------------------ Mamba slots
class NeighbourDuplicateCheck(MambaSlotAllocator):
    """``free`` looks for repeated slots by comparing neighbours, without sorting.

    Needs: three or more slots in one ``free`` call, and a slot repeated with
    another between the two copies (``[a, b, a]``); ``[a, a]`` is still
    rejected.  The repeated slot lands on the free list twice.  Caught by
    ``misuse-rejected``.
    """

    def free(self, indices: Tensor) -> None:
        slots = _slot_list(self.pool_name, indices, self.size)
        for previous, slot in zip([None, *slots], slots):
            if slot == previous or self._state[slot] != _LIVE:
                raise DoubleFreeError(self.pool_name, [slot], "mamba slot")
        if not slots:
            return
        for slot in slots:
            self._state[slot] = _FREE
        self._free_list.append(indices.reshape(-1).to(self.device, torch.int64))


class MultiSlotAllocFromWindow(MambaSlotAllocator):
    """``alloc(n)`` with ``n > 1`` pops the open window's reservation (room checked on the free list).

    Needs: a group window with at least ``n >= 2`` unconsumed reserved slots,
    and an ``alloc`` of ``n`` slots (only ``alloc(1)`` may take reserved slots).
    Caught by ``group-window``.
    """

    def alloc(self, need_size: int) -> Tensor | None:
        if need_size < 2 or self.reserved_size() < need_size or need_size > self.available_size():
            return super().alloc(need_size)
        slots = self._reserved[self._cursor : self._cursor + need_size]
        for slot in self._reserved_ids[self._cursor : self._cursor + need_size]:
            self._state[slot] = _LIVE
        self._cursor += need_size
        return slots


# ------------------------------------------------------------------ hybrid rows + slots
class _HybridBinding(HybridReqToTokenPool):
    """The tail of ``alloc`` once rows and slots are taken: bind them and fill the mapping."""

    def _bind(self, reqs: Sequence[Req], rows: list[int], slots: list[int]) -> list[int]:
        bound = self._bind_rows(reqs, rows)
        fresh = iter(slots)
        for req in reqs:
            if req.mamba_pool_idx is None:
                req.mamba_pool_idx, req.mamba_needs_clear = next(fresh, 0), True
        if reqs:
            index = torch.tensor(bound, dtype=torch.int64, device=self.device)
            values = torch.tensor([req.mamba_pool_idx for req in reqs], dtype=torch.int64, device=self.device)
            self.req_index_to_mamba_index_mapping[index] = values
        return bound

    def _take_slots(self, count: int) -> list[int]:
        taken = [self.mamba_allocator.alloc(1) for _ in range(count)]
        assert all(t is not None for t in taken), "mamba capacity was checked"
        return [int(t) for t in torch.cat(taken).tolist()] if taken else []  # type: ignore[arg-type]


class SlotsCountedFromNewRows(_HybridBinding):
    """Slots go to new requests, and to requests lacking only a slot only when the batch has no new request.

    Written for the two common batches, a fresh admission and a chunked
    request re-admitted after ``free_mamba_cache``.  Needs: one batch with a
    request that needs a row and a request holding its row but no slot.  The
    second gets padding slot 0.  Caught by ``reserved-never-handed-out``.
    """

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        need_rows, need_slots = self._validate_batch(reqs), self._validate_mamba_handles(reqs)
        allocator = self.mamba_allocator
        if need_rows > self.available_size() or need_slots > allocator.available_size() + allocator.reserved_size():
            return None
        lacking = [r for r in reqs if r.mamba_pool_idx is None and (r.req_pool_idx is None or not need_rows)]
        rows = self.alloc_rows(need_rows)
        assert rows is not None, "row capacity was checked"
        slots = self._take_slots(len(lacking))
        for req, slot in zip(lacking, slots):
            req.mamba_pool_idx, req.mamba_needs_clear = slot, True
        return self._bind(reqs, rows, [])


class AllOrNothingOnTheSum(_HybridBinding):
    """The all-or-nothing check compares rows plus slots needed with rows plus slots free.

    Needs: one side short (rows or Mamba slots) while the other has at least
    that much to spare, and a batch that needs the short side.  The check
    passes, the short side runs out mid-call and the pool asserts.  Caught by
    ``valid-call-accepted``: a short pool must refuse, not crash.
    """

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        need_rows, need_slots = self._validate_batch(reqs), self._validate_mamba_handles(reqs)
        allocator = self.mamba_allocator
        if need_rows + need_slots > self.available_size() + allocator.available_size() + allocator.reserved_size():
            return None
        rows = self.alloc_rows(need_rows)
        assert rows is not None, "row capacity was checked"
        return self._bind(reqs, rows, self._take_slots(need_slots))


_HERE = __name__  # the module the specs below name
CANARIES: dict[str, Canary] = {
    "free-rows-checks-a-set": Canary(
        "req_to_token",
        f"{_HERE}:FreeRowsChecksASet",
        "free_rows validates set(rows) but appends the list: [r, r] of a live row puts r on the free list twice",
        "combination: live row x named twice in one call (ReqToTokenPool.free_rows)",
        "misuse-rejected",
    ),
    "capacity-counts-whole-batch": Canary(
        "req_to_token",
        f"{_HERE}:CapacityCountsWholeBatch",
        "alloc compares len(batch) with the free rows: a mixed batch that fits is refused when rows are few",
        "combination: mixed batch x near-full pool (ReqToTokenPool.alloc, SGLang #17850)",
        "empty-pool-guard",
    ),
    "rows-bound-by-batch-position": Canary(
        "decode_req_to_token",
        f"{_HERE}:RowsBoundByBatchPosition",
        "new requests take rows[position in batch]: a row holder before a new request runs past the rows taken",
        "combination: mixed batch x order (DecodeReqToTokenPool.alloc)",
        "valid-call-accepted",
    ),
    "neighbour-duplicate-check": Canary(
        "mamba_slots",
        f"{_HERE}:NeighbourDuplicateCheck",
        "free compares neighbours for repeats: [a, b, a] frees a twice",
        "combination: repeated index x call of three or more (MambaSlotAllocator.free)",
        "misuse-rejected",
    ),
    "multi-slot-alloc-from-window": Canary(
        "mamba_slots",
        f"{_HERE}:MultiSlotAllocFromWindow",
        "alloc(n >= 2) inside a group window pops the reservation, which only alloc(1) may take",
        "combination: open reservation x multi-slot alloc (MambaSlotAllocator.alloc, seed 001)",
        "group-window",
    ),
    "slots-counted-from-new-rows": Canary(
        "hybrid_req_to_token",
        f"{_HERE}:SlotsCountedFromNewRows",
        "slots taken per request needing a row: a row holder without a slot next to a new request gets slot 0",
        "combination: new request x row holder without a slot (HybridReqToTokenPool.alloc)",
        "reserved-never-handed-out",
    ),
    "all-or-nothing-on-the-sum": Canary(
        "hybrid_req_to_token",
        f"{_HERE}:AllOrNothingOnTheSum",
        "capacity checked on rows + slots together: one short side with the other spare crashes mid-call",
        "combination: asymmetric shortage x batch (HybridReqToTokenPool.alloc)",
        "valid-call-accepted",
    ),
}

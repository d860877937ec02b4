"""Request-row pools: ``ReqToTokenPool`` (tail pop) and ``DecodeReqToTokenPool`` (head pop).

Semantics follow SGLang 0.5.23 (``memory_pool.py`` / ``disaggregation/decode.py``):

* Row 0 of ``req_to_token`` is a padding row: padded CUDA-graph batches default
  ``req_pool_indices`` to 0, so their dummy reads and writes must land in a row
  nobody owns (SGLang #24243).  It is never handed out and stays zero.
* ``_alloc_size == size + 1`` rows exist, and every table indexed by a row must
  have ``req_to_token.shape[0]`` rows: sizing aux tables with ``size`` went out
  of bounds at ``index == size`` (SGLang #24439).
* ``req_generation[row]`` rises by exactly one per fresh binding and is never
  reset, not even by ``clear()``: readers detect row reuse by comparing
  generations, and zeroing let a new owner collide with the previous one
  (fixed after the 0.5.17 snapshot).
* ``alloc_rows(0)`` returns ``[]``: ``free_slots[-0:]`` is the whole list, the
  "negative-zero slice" that would hand out every free row at once (seed 000).

Hazards fixed here: upstream appends freed rows without a membership check, so
``free_rows`` of a free row silently duplicates it.  These pools keep an O(1)
free-membership table and raise :class:`~poolfuzz.pools.errors.DoubleFreeError` instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from poolfuzz.pools.errors import BadBatchError, DoubleFreeError, ForeignIndexError, ReservedIndexError, check_count
from poolfuzz.pools.host_views import HostViews


@dataclass(eq=False)
class Req:
    """The per-request fields the pools read and write.

    ``eq=False`` keeps identity semantics: two requests are never "equal", so a
    batch that names one request twice is detected by identity.
    """

    rid: int | str
    req_pool_idx: int | None = None
    mamba_pool_idx: int | None = None
    mamba_needs_clear: bool = False
    kv_allocated_len: int = 0


class _RowPool(HostViews, ABC):
    """Shared machinery of the two request-row pools; subclasses choose the pop end."""

    pool_name = "ReqToTokenPool"
    size: int
    pre_alloc_size: int = 0
    """Rows held back for in-transfer decode requests (``DecodeReqToTokenPool``); 0 otherwise, as upstream."""
    _host_views = (("_generation_view", "req_generation"),)

    def __init__(self, usable_rows: int, max_context_len: int, device: str | torch.device) -> None:
        check_count(self.pool_name, "size", usable_rows)
        self.max_context_len = check_count(self.pool_name, "max_context_len", max_context_len, 1)
        self.device = torch.device(device)
        self._alloc_size = usable_rows + 1
        self.req_to_token = torch.zeros((self._alloc_size, max_context_len), dtype=torch.int32, device=self.device)
        self.req_generation = torch.zeros(self._alloc_size, dtype=torch.int64)
        # A numpy view sharing the tensor's CPU storage: bumping a handful of
        # generations through it costs well under 1 us, through torch indexing ~10 us.
        self._generation_view = self.req_generation.numpy()
        self.free_slots: list[int]
        self._is_free: bytearray  # 1 for a free row, by row
        self.clear()

    # ------------------------------------------------------------------ queries
    @property
    def num_rows(self) -> int:
        """Rows that can be handed out (``size`` plus any pre-allocation share)."""
        return self._alloc_size - 1

    def available_size(self) -> int:
        return len(self.free_slots)

    def is_free(self, row: int) -> bool:
        return 1 <= row < self._alloc_size and bool(self._is_free[row])

    # --------------------------------------------------------------- validation
    def _check_row(self, row: Any) -> int:
        if isinstance(row, bool) or not isinstance(row, int):
            raise BadBatchError(self.pool_name, f"row {row!r} is not an int")
        if row == 0:
            raise ReservedIndexError(self.pool_name, 0, "row")
        if not 1 <= row < self._alloc_size:
            raise ForeignIndexError(self.pool_name, [row], 1, self.num_rows, "row")
        return row

    def _check_releasable(self, rows: Sequence[int]) -> None:
        seen: set[int] = set()
        for row in rows:
            self._check_row(row)
            if self._is_free[row] or row in seen:
                raise DoubleFreeError(self.pool_name, [row], "row")
            seen.add(row)

    # ---------------------------------------------------------------- mutation
    @abstractmethod
    def _take_rows(self, need: int) -> list[int]:
        """Remove ``need`` rows (``0 < need <= available_size()``) from the free list and return them."""

    def alloc_rows(self, need_size: int) -> list[int] | None:
        """Take ``need_size`` rows, or return ``None`` (and change nothing) if short."""
        if type(need_size) is not int or need_size < 0:
            check_count(self.pool_name, "need_size", need_size)
        if need_size > len(self.free_slots):
            return None
        if need_size == 0:
            return []
        rows = self._take_rows(need_size)
        for row in rows:
            self._is_free[row] = 0
        generation = self._generation_view
        if need_size <= 16:  # scalar updates beat building an index array for small batches
            for row in rows:
                generation[row] += 1
        else:
            generation[rows] += 1
        return rows

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        """Bind a row to every request that has none; requests holding a row keep it.

        Keeping the row across chunks fixes a data race: a chunked request that
        released its row between chunks could see it reassigned while the
        previous chunk still used it under overlap scheduling (SGLang #17850).
        All-or-nothing: a short pool returns ``None`` and binds nothing.
        """
        rows = self.alloc_rows(self._validate_batch(reqs))
        if rows is None:
            return None
        return self._bind_rows(reqs, rows)

    def _validate_batch(self, reqs: Sequence[Req]) -> int:
        """Reject a malformed batch (changing nothing); return how many rows it needs."""
        seen: set[int] = set()
        claimed: set[int] = set()
        need = 0
        for position, req in enumerate(reqs):
            if id(req) in seen:
                raise BadBatchError(self.pool_name, f"request {req.rid!r} appears twice", position=position)
            seen.add(id(req))
            if req.req_pool_idx is None:
                need += 1
                continue
            row = self._check_row(req.req_pool_idx)
            if row in claimed:
                raise BadBatchError(self.pool_name, f"two requests claim row {row}", position=position)
            claimed.add(row)
            if self._is_free[row]:
                raise BadBatchError(
                    self.pool_name, f"request {req.rid!r} claims row {row}, which is free (stale handle)", position=position
                )
        return need

    def _bind_rows(self, reqs: Sequence[Req], rows: list[int]) -> list[int]:
        """Give ``rows`` in order to the requests that hold none; return every request's row."""
        fresh = iter(rows)
        for req in reqs:
            if req.req_pool_idx is None:
                req.req_pool_idx = next(fresh)
        return [req.req_pool_idx for req in reqs]  # type: ignore[misc]

    def free(self, req: Req) -> None:
        """Release the request's row; a request without a row is a double free."""
        row = req.req_pool_idx
        if row is None:
            raise DoubleFreeError(self.pool_name, [], f"row of request {req.rid!r} (it holds none)")
        self._check_releasable([row])
        self._is_free[row] = 1
        self.free_slots.append(row)
        req.req_pool_idx = None

    def free_rows(self, indices: Iterable[int]) -> None:
        """Release rows taken with :meth:`alloc_rows` (beam-search members)."""
        rows = list(indices)
        self._check_releasable(rows)
        for row in rows:
            self._is_free[row] = 1
        self.free_slots.extend(rows)

    def clear(self) -> None:
        """Free every row.  Generations are kept: they must stay monotonic."""
        self.free_slots = list(range(1, self._alloc_size))
        self._is_free = bytearray(b"\x00" + b"\x01" * (self._alloc_size - 1))

    def write(self, indices: Any, values: Any) -> None:
        """``req_to_token[indices] = values``; a row selector that reaches row 0 is refused.

        The rows are ``indices`` itself or, for a tuple, its first element: an
        int or a list of ints naming rows ``1..num_rows``, an integer tensor of
        them (a CUDA tensor is not read back: that would be a sync per write),
        or a forward slice that does not start at row 0.
        """
        self._check_write_rows(indices[0] if isinstance(indices, tuple) else indices)
        self.req_to_token[indices] = values

    def _check_write_rows(self, rows: Any) -> None:
        if isinstance(rows, int) and not isinstance(rows, bool):
            self._check_row(rows)
        elif isinstance(rows, torch.Tensor):
            if rows.dtype == torch.bool or rows.is_floating_point() or rows.is_complex():
                raise BadBatchError(self.pool_name, f"write rows must be an integer tensor, got {rows.dtype}")
            if rows.device.type == "cpu":
                outside = rows[(rows <= 0) | (rows >= self._alloc_size)].tolist()
                if 0 in outside:
                    raise ReservedIndexError(self.pool_name, 0, "row")
                if outside:
                    raise ForeignIndexError(self.pool_name, outside, 1, self.num_rows, "row")
        elif isinstance(rows, slice):
            if rows.step is not None and (not isinstance(rows.step, int) or rows.step < 1):
                raise BadBatchError(self.pool_name, f"write rows {rows} must step forward")
            start, stop, _ = rows.indices(self._alloc_size)
            if start == 0 and stop > 0:
                raise ReservedIndexError(self.pool_name, 0, "row")
        elif isinstance(rows, list):
            for row in rows:
                self._check_row(row)
        else:
            raise BadBatchError(self.pool_name, f"write rows {rows!r} are not an int, slice, list or tensor")


class ReqToTokenPool(_RowPool):
    """Request rows ``1..size``, taken from the tail of ``free_slots``.

    Tail pop costs O(need) rather than O(len(free_slots)); the head-slice it
    replaced copied every surviving slot on each scheduler step (seed 000,
    SGLang #32208, about 10x at 16,384 slots).  Freed rows are appended, so the
    most recently freed row is reused first (LIFO).
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu") -> None:
        self.size = size
        super().__init__(size, max_context_len, device)

    def _take_rows(self, need: int) -> list[int]:
        rows = self.free_slots[-need:]
        del self.free_slots[-need:]
        return rows


class DecodeReqToTokenPool(_RowPool):
    """Decode-side request rows: ``size + pre_alloc_size`` usable rows, head pop (FIFO).

    The running/pre-allocated split is the scheduler's business; the pool only
    sees one total.
    """

    pool_name = "DecodeReqToTokenPool"

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu", pre_alloc_size: int = 0) -> None:
        self.pre_alloc_size = check_count(self.pool_name, "pre_alloc_size", pre_alloc_size)
        self.size = check_count(self.pool_name, "size", size)
        super().__init__(size + pre_alloc_size, max_context_len, device)

    def _take_rows(self, need: int) -> list[int]:
        rows = self.free_slots[:need]
        del self.free_slots[:need]
        return rows

"""Driver for the request-row families: ``req_to_token`` and ``decode_req_to_token``.

Requests are named by integer handles the driver hands out in order, so a trace
that says ``free(handle=3)`` means the same request on every replay.

Misuse (with ``check_misuse``) besides double and foreign frees: sizes and rows
that are not ints, a batch with a forged request claiming a row (a live one
twice, row 0, one past the pool, a non-integer one: :data:`CLAIMS`), a tensor
write naming padding row 0, and malformed constructors.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, ConstructorKwargs, Driver, offends_free, operation
from poolfuzz.harness.judge.invariants import InvariantViolation, check, check_unique
from poolfuzz.harness.judge.limits import is_int
from poolfuzz.harness.kits.rows.config import RowConfig
from poolfuzz.harness.kits.rows.model import RowModel
from poolfuzz.harness.kits.rows.ops import RowOps
from poolfuzz.pools.errors import BadBatchError, BadSizeError, DoubleFreeError, ForeignIndexError, PoolError, ReservedIndexError
from poolfuzz.pools.req_to_token import Req

CLAIMS = ("a live row twice", "a non-integer row", "row 0", "a row past the pool")
"""What a forged request in an ``alloc`` batch claims (``alloc_claiming``)."""

WRITE_SELECTORS: dict[str, tuple[Callable[[int, int], Any], tuple[type[PoolError], ...]]] = {
    "an int row": (lambda row, rows: row, ()),
    "a slice of one row": (lambda row, rows: slice(row, row + 1, 1), ()),
    "a list of rows": (lambda row, rows: [row, row], ()),
    "an open slice from row 1": (lambda row, rows: slice(1, None), ()),
    "every other row from row 1": (lambda row, rows: slice(1, None, 2), ()),
    "an empty slice at row 0": (lambda row, rows: slice(0, 0), ()),
    "int row 0": (lambda row, rows: 0, (ReservedIndexError,)),
    "an int row past the pool": (lambda row, rows: rows + 1, (ForeignIndexError,)),
    "a negative int row": (lambda row, rows: -1, (ForeignIndexError,)),
    "a bool row": (lambda row, rows: True, (BadBatchError,)),
    "a slice from row 0": (lambda row, rows: slice(0, row + 1), (ReservedIndexError,)),
    "the whole table": (lambda row, rows: slice(None), (ReservedIndexError,)),
    "a backward slice": (lambda row, rows: slice(row, None, -1), (BadBatchError,)),
    "a slice of step 0": (lambda row, rows: slice(row, None, 0), (BadBatchError,)),
    "a slice of a float step": (lambda row, rows: slice(row, None, 1.5), (BadBatchError,)),
    "row 0 alone as a slice": (lambda row, rows: slice(0, 1), (ReservedIndexError,)),
    "a list naming row 0": (lambda row, rows: [row, 0], (ReservedIndexError,)),
    "a list naming a row past the pool": (lambda row, rows: [rows + 1], (ForeignIndexError,)),
    "a float tensor": (lambda row, rows: torch.tensor([float(row)]), (BadBatchError,)),
    "a bool tensor": (lambda row, rows: torch.zeros(rows + 1, dtype=torch.bool), (BadBatchError,)),
    "a tensor naming a row past the pool": (lambda row, rows: torch.tensor([row, rows + 1]), (ForeignIndexError,)),
    "a tensor naming a negative row": (lambda row, rows: torch.tensor([row, -rows - 1]), (ForeignIndexError,)),
    "no row at all": (lambda row, rows: None, (BadBatchError,)),
}
"""How ``write_selecting`` names rows of ``req_to_token`` (from a live ``row``, in a pool of ``rows``), and
the errors each must raise: none for a selector of real rows, a typed error for one reaching row 0, a row
past the table, or what is not a row selector."""


class RowPoolDriver(Driver):
    family = "req_to_token"
    ops = RowOps

    config: RowConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        num_rows = self.config.size + getattr(self.config, "pre_alloc_size", 0)
        self.model = RowModel(num_rows)
        self.reqs: dict[int, Req] = {}

    # ------------------------------------------------------------ helpers
    def _holds_live_row(self, handle: int) -> bool:
        req = self.reqs[handle]
        return req.req_pool_idx is not None and self.model.owner.get(req.req_pool_idx, -1) == handle

    def live_handles(self) -> list[int]:
        return sorted(h for h in self.reqs if self._holds_live_row(h))

    def _check_fresh_rows(self, rows: list[int], what: str) -> None:
        check_unique(rows, "no-double-allocation", f"rows returned by {what}")
        for row in rows:
            check(row != 0, "reserved-never-handed-out", f"{what} handed out padding row 0")
            check(self.model.in_range(row), "in-bounds", f"{what} returned row {row}", rows=self.model.num_rows)
            check(row in self.model.free, "no-double-allocation", f"{what} returned row {row}, which is live",
                  owner=self.model.owner.get(row))
        generation = self.pool.req_generation
        for row in rows:
            expected = self.model.generation[row] + 1
            actual = int(generation[row])
            check(actual == expected, "generation-monotonic", f"row {row} generation after binding",
                  expected=expected, actual=actual)

    # --------------------------------------------------------- operations
    @operation
    def alloc(self, batch: list[int | None]) -> list[int]:
        """``batch`` names existing handles and ``None`` for each brand-new request.

        A handle holding a live row reuses it; a handle whose request was freed
        (``req_pool_idx is None``) is re-admitted and needs a fresh row.
        """
        reqs = [Req(rid=-1) if h is None else self.reqs[h] for h in batch]
        named = [h for h in batch if h is not None]
        stale = [h for h in named if self.reqs[h].req_pool_idx is not None and not self._holds_live_row(h)]
        if len(set(named)) != len(named) or stale:
            if any(self.reqs[h].req_pool_idx not in self.model.free for h in stale):
                return SKIPPED  # type: ignore[return-value]  # stale row re-bound to another request: undetectable
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(lambda: self.pool.alloc(reqs), BadBatchError, f"alloc({batch})")
            return []
        needs_row = [req.req_pool_idx is None for req in reqs]
        need = sum(needs_row)
        if need > len(self.model.free):
            self.expect_refused(lambda: self.pool.alloc(reqs), f"alloc({batch})", need=need, free=len(self.model.free))
            self.event("alloc refused: pool short")
            return []
        result = self.expect_accepted(lambda: self.pool.alloc(reqs), f"alloc({batch})")
        check(result is not None, "empty-pool-guard", f"alloc of {need} rows refused with {len(self.model.free)} free")
        check(len(result) == len(batch), "empty-pool-guard", "alloc returned the wrong number of rows",
              expected=len(batch), actual=len(result))
        for req, fresh, row in zip(reqs, needs_row, result):
            check(req.req_pool_idx == row, "valid-call-accepted", "returned row differs from req_pool_idx",
                  row=row, req_pool_idx=req.req_pool_idx)
            if not fresh:
                check(self.model.owner.get(row, -1) == req.rid, "valid-call-accepted", "a reusing request changed rows",
                      request=req.rid, row=row)
        self._check_fresh_rows([row for fresh, row in zip(needs_row, result) if fresh], "alloc")
        if need == 0:
            self.event("alloc needing no row")
            check(self.pool.available_size() == len(self.model.free), "empty-pool-guard",
                  "alloc needing 0 rows consumed rows", available=self.pool.available_size())
        new_handles = []
        for req, fresh, row in zip(reqs, needs_row, result):
            if req.rid == -1:
                req.rid = len(self.reqs)
                self.reqs[req.rid] = req
                new_handles.append(req.rid)
            if fresh:
                self.model.bind(row, int(req.rid))
        if not self.model.free:
            self.event("pool exactly full")
        return new_handles

    def _row_is_free(self, handle: int) -> bool:
        row = self.reqs[handle].req_pool_idx
        return row is None or row in self.model.free

    @operation
    def free(self, handle: int) -> None:
        req = self.reqs[handle]
        if self._holds_live_row(handle):
            row = req.req_pool_idx
            self.expect_accepted(lambda: self.pool.free(req), f"free(request {handle})")
            check(req.req_pool_idx is None, "valid-call-accepted", "free left req_pool_idx set", row=row)
            assert row is not None
            self.model.release(row)
            available = self.pool.available_size()
            check(available == len(self.model.free), "conservation", f"free(request {handle}) did not give row {row} back",
                  available=available, expected=len(self.model.free))
            return
        if not self._row_is_free(handle) or not self.check_misuse:
            # The stale row now belongs to someone else: no pool can tell. Not a call to make.
            return SKIPPED  # type: ignore[return-value]
        self.expect_rejected(lambda: self.pool.free(req), DoubleFreeError, f"free(request {handle}) of a row it does not hold")

    @operation
    def alloc_rows_non_int(self, need_size: float | bool | str) -> None:
        """``alloc_rows`` of a size that is not an int (a float, a bool, a string): ``BadSizeError``."""
        if is_int(need_size) or not self.check_misuse:
            return SKIPPED  # type: ignore[return-value]
        self.expect_rejected(lambda: self.pool.alloc_rows(need_size), BadSizeError, f"alloc_rows({need_size!r})")
        self.event(f"misuse: alloc_rows of a {type(need_size).__name__}")

    @operation
    def alloc_rows(self, need_size: int) -> list[int]:
        if need_size < 0:
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(lambda: self.pool.alloc_rows(need_size), BadSizeError, f"alloc_rows({need_size})")
            return []
        if need_size > len(self.model.free):
            self.expect_refused(lambda: self.pool.alloc_rows(need_size), f"alloc_rows({need_size})",
                                free=len(self.model.free))
            return []
        rows = self.expect_accepted(lambda: self.pool.alloc_rows(need_size), f"alloc_rows({need_size})")
        check(rows is not None, "empty-pool-guard", f"alloc_rows({need_size}) refused with {len(self.model.free)} free")
        check(len(rows) == need_size, "empty-pool-guard", f"alloc_rows({need_size}) returned {len(rows)} rows",
              rows=list(rows))
        self._check_fresh_rows(list(rows), f"alloc_rows({need_size})")
        for row in rows:
            self.model.bind(row, None)
        if need_size > 16:
            self.event("corner: alloc_rows of more than 16 rows at once")
        return list(rows)

    @operation
    def free_rows(self, rows: list[float | bool]) -> None:
        if not all(is_int(r) for r in rows):
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(lambda: self.pool.free_rows(rows), BadBatchError, f"free_rows({rows})")
            self.event("misuse: free_rows of a row that is not an int")
            return
        self._free_int_rows([int(r) for r in rows])

    def _free_int_rows(self, rows: list[int]) -> None:
        expected: list[type[PoolError]] = []
        if any(r == 0 for r in rows):
            expected.append(ReservedIndexError)
        if any(r != 0 and not self.model.in_range(r) for r in rows):
            expected.append(ForeignIndexError)
        if len(set(rows)) != len(rows) or any(r in self.model.free for r in rows):
            expected.append(DoubleFreeError)
        if expected:
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(lambda: self.pool.free_rows(rows), tuple(expected), f"free_rows({rows})",  # type: ignore[arg-type]
                                 offending=offends_free(rows, self.model.in_range, lambda row: row not in self.model.free))
            return
        if any(self.model.owner.get(r) is not None for r in rows):
            return SKIPPED  # type: ignore[return-value]  # a request's row: free(req) is the call
        self.expect_accepted(lambda: self.pool.free_rows(rows), f"free_rows({rows})")
        for row in rows:
            self.model.release(row)

    def _forged(self, handle: int, claim: str) -> Req | None:
        """A request the driver never admitted, claiming a row as :data:`CLAIMS` says; ``None`` if n/a."""
        row = self.reqs[handle].req_pool_idx if handle in self.reqs and self._holds_live_row(handle) else None
        claims: dict[str, Any] = {"a live row twice": row, "a non-integer row": None if row is None else float(row),
                                  "row 0": 0, "a row past the pool": self.model.num_rows + 1}
        value = claims.get(claim)
        return None if value is None else Req(rid=-2, req_pool_idx=value)

    @operation
    def alloc_claiming(self, handle: int, claim: str) -> Any:
        """``alloc([request handle, forged, new])``: the forged request's claim (:data:`CLAIMS`) must be refused."""
        forged = self._forged(handle, claim)
        if forged is None or not self.check_misuse:
            return SKIPPED
        batch = [self.reqs[handle], forged, Req(rid=-3)] if claim.endswith("twice") else [forged, Req(rid=-3)]
        error = {"row 0": ReservedIndexError, "slot 0": ReservedIndexError, "a row past the pool": ForeignIndexError,
                 "a slot past the pool": ForeignIndexError}.get(claim, BadBatchError)
        self.expect_rejected(lambda: self.pool.alloc(batch), error, f"alloc with a request claiming {claim}")
        self.event(f"misuse: alloc with a forged request claiming {claim}")
        return None

    @operation
    def write_rows(self, handles: list[int], padding: bool) -> Any:
        """``write`` through a tensor of the requests' rows (and padding row 0: ``ReservedIndexError``)."""
        rows = [self.reqs[h].req_pool_idx for h in handles if h in self.reqs and self._holds_live_row(h)]
        if padding:
            rows.append(0)
        if (handles and not rows) or (padding and not self.check_misuse):
            return SKIPPED
        index = torch.tensor(rows, dtype=torch.int64)
        values = torch.ones(len(rows), 2, dtype=torch.int32)
        call = lambda: self.pool.write((index, slice(0, 2)), values)
        if padding:
            self.expect_rejected(call, ReservedIndexError, f"write(rows {rows}) naming padding row 0")
            self.event("misuse: a tensor write naming padding row 0")
        else:
            self.expect_accepted(call, f"write(rows {rows})")
            self.event("corner: a write through a tensor of rows" if rows else "corner: a write through an empty tensor")
        return None

    @operation
    def write_selecting(self, handle: int, selector: str, whole_rows: bool = False) -> Any:
        """``write((rows, 0), 7)`` (``write(rows, 7)`` with ``whole_rows``) with rows named as
        :data:`WRITE_SELECTORS` says; each cell it names then holds 7."""
        if not self._holds_live_row(handle):
            return SKIPPED
        build, errors = WRITE_SELECTORS[selector]
        rows = build(int(self.reqs[handle].req_pool_idx), self.model.num_rows)  # type: ignore[arg-type]
        index = rows if whole_rows else (rows, 0)
        call = lambda: self.pool.write(index, 7)
        if errors:
            if not self.check_misuse:
                return SKIPPED
            self.expect_rejected(call, errors, f"write through {selector} ({rows!r})")
            self.event(f"misuse: a write through {selector}")
            return None
        self.expect_accepted(call, f"write through {selector} ({rows!r})")
        written = self.pool.req_to_token[index].reshape(-1).tolist()
        landed = all(v == 7 for v in written) and bool(written) != selector.startswith("an empty")
        check(landed, "valid-call-accepted", f"write through {selector} did not land", rows=repr(rows), written=written)
        self.event(f"corner: a write through {selector}")
        return None

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """``size`` and ``pre_alloc_size`` ints >= 0, ``max_context_len`` an int > 0."""
        counts = [config.get("size", 0), config.get("pre_alloc_size", 0), config.get("max_context_len", 1)]
        if not all(is_int(n) for n in counts):
            return (BadSizeError,)
        if counts[0] < 0 or counts[1] < 0 or counts[2] <= 0:
            return (BadSizeError,)
        return ()

    @operation
    def clear(self) -> None:
        self.expect_accepted(self.pool.clear, "clear()")
        self.model.clear()
        available = self.pool.available_size()
        check(available == self.model.num_rows, "clear-restores", "clear left rows allocated",
              available=available, rows=self.model.num_rows)

    @operation
    def write(self, handle: int, start: int, length: int) -> None:
        """Write ``length`` token slots into the request's row from ``start`` (clipped to the row)."""
        if not self._holds_live_row(handle):
            return SKIPPED  # type: ignore[return-value]
        row = self.reqs[handle].req_pool_idx
        width = self.config.max_context_len
        start = min(start, width)
        stop = min(start + length, width)
        values = torch.arange(start, stop, dtype=torch.int32) + 1
        self.expect_accepted(lambda: self.pool.write((row, slice(start, stop)), values), f"write(row {row})")
        written = self.pool.req_to_token[row, start:stop]
        check(bool(torch.equal(written, values)), "valid-call-accepted", f"write(row {row}) did not land",
              expected=values.tolist(), written=written.tolist())

    # ------------------------------------------------------------- audits
    def observe(self) -> Hashable:
        return (tuple(self.pool.free_slots), tuple(self.pool.req_generation.tolist()), self.pool.available_size(),
                tuple(self.reqs[h].req_pool_idx for h in sorted(self.reqs)))

    def _check_sizes(self) -> None:
        """The sizes a scheduler reads off the pool are the ones it was built with (and ``num_rows``, where the
        pool has it, counts every row it can hand out)."""
        config, pool = self.config, self.pool
        expected = (config.size, config.max_context_len, getattr(config, "pre_alloc_size", 0))
        actual = (pool.size, pool.max_context_len, pool.pre_alloc_size)
        check(actual == expected, "in-bounds", "(size, max_context_len, pre_alloc_size) differ from the configuration",
              actual=actual, expected=expected)
        if hasattr(type(pool), "num_rows"):  # beyond the protocol: this project's pools have it
            check(pool.num_rows == self.model.num_rows, "in-bounds", "num_rows differs from the rows handed out",
                  num_rows=pool.num_rows, expected=self.model.num_rows)

    def audit(self) -> None:
        self._check_sizes()
        free_slots = list(self.pool.free_slots)
        check_unique(free_slots, "no-double-allocation", "free_slots")
        check(0 not in free_slots, "reserved-never-handed-out", "row 0 is on the free list")
        outside = [r for r in free_slots if not self.model.in_range(r)]
        check(not outside, "in-bounds", "free list holds rows that do not exist", rows=outside)
        free = set(free_slots)
        check(free == self.model.free, "conservation", "free rows differ from the model",
              missing=sorted(self.model.free - free), extra=sorted(free - self.model.free))
        available = self.pool.available_size()
        check(available == len(self.model.free), "conservation", "available_size() disagrees",
              available=available, expected=len(self.model.free))
        is_free = getattr(self.pool, "is_free", None)  # a query beyond the protocol, where the pool has it
        if is_free is not None:
            wrong = [r for r in range(self.model.num_rows + 2) if is_free(r) != (r in self.model.free)]
            check(not wrong, "conservation", "is_free() disagrees with the free rows", rows=wrong)
        table = self.pool.req_to_token
        check(table.shape[0] == self.model.num_rows + 1, "in-bounds", "req_to_token rows must be num_rows + 1",
              shape=tuple(table.shape), rows=self.model.num_rows)
        check(not bool(table[0].any()), "reserved-never-handed-out", "row 0 of req_to_token was written")
        generations = self.pool.req_generation.tolist()
        if generations != self.model.generation:
            diff = {r: (g, e) for r, (g, e) in enumerate(zip(generations, self.model.generation)) if g != e}
            raise InvariantViolation("generation-monotonic", "req_generation differs from bindings (actual, expected)",
                                     rows=diff)


class DecodeRowPoolDriver(RowPoolDriver):
    family = "decode_req_to_token"

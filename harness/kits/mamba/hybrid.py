"""Driver for the ``hybrid_req_to_token`` family: request rows plus one Mamba slot per request.

Rows are checked as :class:`~poolfuzz.harness.kits.rows.driver.RowPoolDriver` checks them and
slots as :class:`~poolfuzz.harness.kits.mamba.driver.SlotWindowDriver` does; this module adds
the all-or-nothing admission, ``free_mamba_cache`` and the row-to-slot mapping.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, ConstructorKwargs, operation
from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.mamba.config import HybridRowConfig
from poolfuzz.harness.kits.mamba.driver import SlotWindowDriver, as_int, bad_count
from poolfuzz.harness.kits.mamba.model import Claim, HybridModel, SlotModel
from poolfuzz.harness.kits.mamba.ops import HybridOps
from poolfuzz.harness.kits.mamba.state import MambaStateOps
from poolfuzz.harness.kits.rows.driver import RowPoolDriver
from poolfuzz.pools.errors import BadBatchError, BadSizeError, DoubleFreeError, PoolError
from poolfuzz.pools.req_to_token import Req

SLOT_CLAIMS = ("a live slot twice", "a slot not handed out", "a non-integer slot", "slot 0", "a slot past the pool")
"""What a forged request's ``mamba_pool_idx`` claims in ``alloc_claiming`` (beside the row claims)."""

FORGED_SLOT_FORMS = ("a float slot", "a bool slot")
"""How ``free_mamba_cache_forged`` names a live slot in a forged request's ``mamba_pool_idx``."""


class HybridDriver(RowPoolDriver, SlotWindowDriver, MambaStateOps):
    """Rows (checked as :class:`RowPoolDriver` does) plus one Mamba slot per request, all-or-nothing;
    the Mamba state calls are :class:`~poolfuzz.harness.kits.mamba.state.MambaStateOps`."""

    family = "hybrid_req_to_token"
    ops = HybridOps

    config: HybridRowConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.hybrid = HybridModel(self.config.size, mamba_size=self.config.mamba_size)
        self.model = self.hybrid

    @property
    def slot_allocator(self) -> Any:
        return self.pool.mamba_allocator

    @property
    def slot_model(self) -> SlotModel:
        return self.hybrid.slots

    # ------------------------------------------------------------ misuse
    def _forged(self, handle: int, claim: str) -> Req | None:
        """Row claims as :class:`RowPoolDriver` forges them; slot claims (:data:`SLOT_CLAIMS`) with no row."""
        if claim not in SLOT_CLAIMS:
            return super()._forged(handle, claim)
        slots = self.hybrid.slots
        own = self.hybrid.claims[handle].slot if handle in self.hybrid.claims and self.hybrid.holds_slot(handle) else None
        idle = sorted(set(range(1, slots.size + 1)) - set(slots.live))
        value = {
            "a live slot twice": own,
            "a slot not handed out": idle[0] if idle else None,
            "a non-integer slot": 1.0,
            "slot 0": 0,
            "a slot past the pool": slots.size + 1,
        }[claim]
        if claim == "a live slot twice" and (own is None or not self._holds_live_row(handle)):
            return None  # the owner must be in the batch with its row, so only the slot is claimed twice
        return None if value is None else Req(rid=-2, mamba_pool_idx=value)

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """Rows as :class:`RowPoolDriver` says; ``mamba_size`` and state dimensions >= 0, ``num_layers`` >= 1."""
        dims = [*config.get("conv_shape", ()), *config.get("temporal_shape", ())]
        if bad_count(config.get("mamba_size")) or bad_count(config.get("num_layers", 1) - 1) or any(map(bad_count, dims)):
            return (BadSizeError,)
        return super().constructor_errors(config)

    # ------------------------------------------------------------ checks
    def _check_mapping_shape(self) -> None:
        """in-bounds: the mapping is indexed by row, so it has ``req_to_token`` rows (SGLang #24244)."""
        shape, rows = tuple(self.pool.req_index_to_mamba_index_mapping.shape), self.pool.req_to_token.shape[0]
        check(
            shape[:1] == (rows,),
            "in-bounds",
            "req_index_to_mamba_index_mapping must have one entry per row",
            mapping=shape,
            rows=rows,
            mamba_size=self.hybrid.mamba_size,
        )

    def _check_mapping(self, rows: list[int], what: str) -> None:
        mapping = self.pool.req_index_to_mamba_index_mapping
        for row in rows:
            expected, actual = self.hybrid.expected_mapping(row), int(mapping[row])
            check(
                actual == expected,
                "conservation",
                f"after {what}, mapping[{row}] must name the row's slot (or 0)",
                row=row,
                expected=expected,
                actual=actual,
            )

    def _check_fields(self, handles: list[int], what: str) -> None:
        for handle in handles:
            req, claim = self.reqs[handle], self.hybrid.claims[handle]
            fields = (as_int(req.req_pool_idx), as_int(req.mamba_pool_idx))
            check(
                fields == (claim.row, claim.slot),
                "valid-call-accepted",
                f"after {what}, request {handle} holds (row, slot) {fields}",
                expected=(claim.row, claim.slot),
            )

    def _check_counts(self, what: str) -> None:
        available = self.pool.available_size()
        check(
            available == len(self.hybrid.free),
            "conservation",
            f"after {what}, row available_size() disagrees",
            available=available,
            expected=len(self.hybrid.free),
        )
        self.check_slot_counts(what)

    # ------------------------------------------------------------ operations
    @operation
    def alloc(self, batch: list[int | None]) -> Any:
        """Bind a row and a slot to every request lacking one; short on either side -> ``None``, nothing taken."""
        hm, what = self.hybrid, f"alloc({batch})"
        reqs = [Req(rid=-1) if h is None else self.reqs[h] for h in batch]
        named = [h for h in batch if h is not None]
        detectable = [h for h in named if hm.stale_row_detectable(h) or hm.stale_slot_detectable(h)]
        if len(set(named)) != len(named) or detectable:
            return self.misuse(lambda: self.pool.alloc(reqs), BadBatchError, f"{what} naming a request twice or stale")
        if any(hm.stale(h) for h in named):
            return SKIPPED  # a stale claim re-bound to another request: no pool can tell
        claims = [Claim() if h is None else hm.claims[h] for h in batch]
        need_rows = sum(c.row is None for c in claims)
        need_slots = sum(c.slot is None for c in claims)
        self._check_mapping_shape()
        short = need_rows > len(hm.free) or need_slots > hm.slots.capacity
        need = f"{need_rows} row(s) and {need_slots} slot(s)"
        room: dict[str, Any] = dict(free_rows=len(hm.free), free_slots=len(hm.slots.free), reserved=len(hm.slots.unconsumed))
        if short:
            self.expect_refused(lambda: self.pool.alloc(reqs), f"{what} needing {need}", **room)
            self.event("alloc refused: rows short" if need_rows > len(hm.free) else "alloc refused: mamba slots short")
            return []
        before = self.observe() if need_rows == need_slots == 0 else None
        result = self.expect_accepted(lambda: self.pool.alloc(reqs), what)
        check(result is not None, "empty-pool-guard", f"{what} needing {need} refused", **room)
        rows = [int(r) for r in result]
        check(
            rows == [as_int(req.req_pool_idx) for req in reqs],
            "valid-call-accepted",
            f"{what} must return every request's row, as set in req_pool_idx",
            rows=rows,
        )
        self._check_fresh_rows([r for r, c in zip(rows, claims) if c.row is None], what)
        fresh = [(req, c) for req, c in zip(reqs, claims) if c.slot is None]
        new_slots = [int(req.mamba_pool_idx) for req, _ in fresh if req.mamba_pool_idx is not None]
        check(len(new_slots) == need_slots, "valid-call-accepted", f"{what} left a request without a mamba slot")
        reserved = hm.slots.unconsumed[:need_slots]
        self.check_handed_out(new_slots, what, reserved)
        check(
            all(req.mamba_needs_clear for req, _ in fresh),
            "valid-call-accepted",
            "a fresh mamba slot must carry mamba_needs_clear (stale state of its last owner, SGLang #14209)",
        )
        if need_rows == need_slots == 0:
            self.event("alloc needing nothing")
            check(self.observe() == before, "empty-pool-guard", f"{what} needing nothing changed the pool")
        handles = []
        for req, claim, row in zip(reqs, claims, rows):
            if req.rid == -1:  # a new request takes the next handle
                req.rid = len(self.reqs)
                self.reqs[req.rid], hm.claims[req.rid] = req, claim
                handles.append(req.rid)
            if claim.row is None:
                claim.row = row
                hm.bind(row, int(req.rid))
        for (_, claim), slot in zip(fresh, new_slots):
            claim.slot = slot
        self.bind_slots(new_slots, [int(req.rid) for req, _ in fresh], len(reserved))
        self._check_fields([int(req.rid) for req in reqs], what)
        self._check_mapping(rows, what)
        self._check_counts(what)  # need 0 consumed nothing, and the rest consumed exactly what it needed
        if not hm.free or not hm.slots.capacity:
            self.event("rows exactly full" if not hm.free else "mamba slots exactly full")
        return handles

    @operation
    def free(self, handle: int) -> Any:
        """Release the request's row only: its slot stays live until ``free_mamba_cache``."""
        hm, req, what = self.hybrid, self.reqs[handle], f"free(request {handle})"
        claim = hm.claims[handle]
        if claim.row is None or hm.stale_row_detectable(handle):
            return self.misuse(lambda: self.pool.free(req), DoubleFreeError, f"{what} of a row it does not hold")
        if not hm.holds_row(handle):
            return SKIPPED  # the stale row now belongs to someone else
        row = claim.row
        self.expect_accepted(lambda: self.pool.free(req), what)
        hm.release(row)
        claim.row = None
        self._check_fields([handle], what)
        self._check_mapping([row], what)
        if hm.holds_slot(handle):
            check(
                self.slot_allocator.is_live(claim.slot),
                "conservation",
                f"{what} must release the row only; slot {claim.slot} stays live until free_mamba_cache",
            )
            self.event("row freed, mamba slot kept")
        self._check_counts(what)
        return None

    @operation
    def free_mamba_cache(self, handle: int) -> Any:
        """Release the request's slot; a request holding none (or a stale one) is a double free."""
        hm, req, what = self.hybrid, self.reqs[handle], f"free_mamba_cache(request {handle})"
        claim = hm.claims[handle]
        if claim.slot is None or hm.stale_slot_detectable(handle):
            return self.misuse(lambda: self.pool.free_mamba_cache(req), DoubleFreeError, f"{what} holding no slot")
        if not hm.holds_slot(handle):
            return SKIPPED  # the stale slot now belongs to someone else
        slot, row = claim.slot, claim.row
        self.expect_accepted(lambda: self.pool.free_mamba_cache(req), what)
        hm.slots.release(slot)
        claim.slot = None
        self._check_fields([handle], what)
        check(
            not req.mamba_needs_clear,
            "valid-call-accepted",
            f"after {what}, a request holding no slot still carries mamba_needs_clear (a later clear would name a slot it does not own)",
        )
        if row is not None and hm.holds_row(handle):
            self._check_mapping([row], what)
        self._check_counts(what)
        return None

    @operation
    def free_mamba_cache_forged(self, handle: int, form: str) -> Any:
        """``free_mamba_cache`` of a forged request naming the live slot of ``handle`` as a float or a bool
        (:data:`FORGED_SLOT_FORMS`): ``BadBatchError``; a tensor built from it would free a live slot."""
        hm = self.hybrid
        if handle not in hm.claims or not hm.holds_slot(handle) or form not in FORGED_SLOT_FORMS:
            return SKIPPED
        slot = int(hm.claims[handle].slot)  # type: ignore[arg-type]
        value: Any = float(slot) if form == "a float slot" else slot == 1
        forged = Req(rid=-2, mamba_pool_idx=value)
        result = self.misuse(
            lambda: self.pool.free_mamba_cache(forged),
            BadBatchError,
            f"free_mamba_cache of a request holding {form} ({forged.mamba_pool_idx!r})",
        )
        if result is SKIPPED:
            return SKIPPED
        self.event(f"misuse: free_mamba_cache of a request holding {form}")
        return None

    @operation
    def clear(self) -> None:
        self._check_mapping_shape()
        self.expect_accepted(self.pool.clear, "clear()")
        self.hybrid.clear()
        available = self.pool.available_size()
        check(
            available == self.hybrid.num_rows, "clear-restores", "clear left rows allocated", available=available, rows=self.hybrid.num_rows
        )
        self.check_slots_cleared()
        left = self.pool.req_index_to_mamba_index_mapping.nonzero().reshape(-1).tolist()
        check(not left, "clear-restores", "clear left mapping entries", rows=left)

    # ------------------------------------------------------------ audits
    def observe(self) -> Hashable:
        fields = tuple((as_int(r.mamba_pool_idx), bool(r.mamba_needs_clear)) for _, r in sorted(self.reqs.items()))
        mapping = tuple(self.pool.req_index_to_mamba_index_mapping.tolist())
        return (RowPoolDriver.observe(self), self.observe_slots(), mapping, fields)

    def audit(self) -> None:
        RowPoolDriver.audit(self)
        self.audit_slots()
        self._check_mapping_shape()
        mapping = self.pool.req_index_to_mamba_index_mapping
        check(int(mapping[0]) == 0, "reserved-never-handed-out", "padding row 0 maps to a mamba slot", slot=int(mapping[0]))
        self._check_mapping(list(range(1, self.hybrid.num_rows + 1)), "audit")
        self._check_fields(sorted(self.reqs), "audit")
        check(
            self.pool.mamba_available_size() == len(self.hybrid.slots.free),
            "conservation",
            "mamba_available_size() disagrees",
            available=self.pool.mamba_available_size(),
        )

"""The Mamba families' views: what the ``mamba_slots`` and ``hybrid_req_to_token`` moves and catalogues may read.

:class:`SlotView` is the slot window both families have (the free list's size, the open
window and its reservation); :class:`MambaSlotView` adds the slot handles, and
:class:`HybridView` which requests hold a row, a slot or both, and a
:class:`~poolfuzz.harness.kits.rows.moves.RowView` of the rows for the request-row catalogue.
"""

from __future__ import annotations

from typing import Any

from poolfuzz.harness.kits.mamba.model import HybridModel, SlotModel
from poolfuzz.harness.kits.rows.moves import RowView


class SlotView:
    """What the slot-window moves may read: the slot model's free count, its window and reservation.

    Both Mamba families have one slot window (a hybrid pool's is its Mamba allocator's);
    the model object is the driver's for the pool's whole life, so it is looked up once.
    """

    __slots__ = ("_slots",)

    def __init__(self, driver: Any) -> None:
        self._slots: SlotModel = driver.slot_model

    @property
    def size(self) -> int:
        """Slots ``1..size`` exist."""
        return self._slots.size

    @property
    def group_open(self) -> bool:
        return self._slots.group_open

    def free_count(self) -> int:
        return len(self._slots.free)

    def unconsumed(self) -> list[int]:
        """The open window's reservation not yet handed out, in the order ``alloc(1)`` must hand it out."""
        return self._slots.unconsumed

    def capacity(self) -> int:
        """Slots a request may still get: the free list plus the unconsumed reservation."""
        return self._slots.capacity

    def live_slots(self) -> list[int]:
        return sorted(self._slots.live)

    def in_use(self) -> bool:
        """Something for ``clear`` to undo: a clear of a fresh pool proves nothing and wastes a step."""
        slots = self._slots
        return slots.group_open or len(slots.free) < slots.size


class MambaSlotView(SlotView):
    """``mamba_slots``: the slot window, and which slot handles are live (the driver's handles, in order)."""

    __slots__ = ("_handles",)

    def __init__(self, driver: Any) -> None:
        super().__init__(driver)
        self._handles: dict[int, int] = driver.handles

    def live(self) -> list[int]:
        """Handles whose slot they still hold, in order (handles are numbered in the order they were made)."""
        live = self._slots.live
        return [h for h, slot in self._handles.items() if live.get(slot, -1) == h]

    def gone(self) -> list[int]:
        """Handles whose slot was freed (or cleared, or is live again under another handle)."""
        live = self._slots.live
        return [h for h, slot in self._handles.items() if live.get(slot, -1) != h]

    def occupancy(self) -> float:
        return 1.0 - len(self._slots.free) / max(1, self._slots.size)


class HybridView(SlotView):
    """``hybrid_req_to_token``: the slot window, per request handle whether it holds its row, its slot or
    both, and :attr:`rows`, the request rows read as the request-row moves read them (a :class:`RowView`)."""

    __slots__ = ("_hybrid", "rows")

    def __init__(self, driver: Any) -> None:
        super().__init__(driver)
        self._hybrid: HybridModel = driver.hybrid
        self.rows = RowView(driver)

    def known(self) -> list[int]:
        """Every request handle ever made, in order: live, released, or stale after a clear."""
        return list(self._hybrid.claims)

    def holds_row(self, handle: int) -> bool:
        return self._hybrid.holds_row(handle)

    def row_holders(self) -> list[int]:
        hm = self._hybrid
        return [h for h in hm.claims if hm.holds_row(h)]

    def slot_holders(self) -> list[int]:
        hm = self._hybrid
        return [h for h in hm.claims if hm.holds_slot(h)]

    def holding_both(self) -> list[int]:
        hm = self._hybrid
        return [h for h in hm.claims if hm.holds_row(h) and hm.holds_slot(h)]

    def holding_one(self) -> list[int]:
        """Requests holding their row or their slot, not both (half-way through a two-call release)."""
        hm = self._hybrid
        return [h for h in hm.claims if hm.holds_row(h) != hm.holds_slot(h)]

    def row_without_slot(self) -> list[int]:
        """Requests holding their row whose slot was given back (``free_mamba_cache``): they need a slot only."""
        hm = self._hybrid
        return [h for h, claim in hm.claims.items() if claim.slot is None and hm.holds_row(h)]

    def free_rows(self) -> int:
        return len(self._hybrid.free)

    def in_use(self) -> bool:
        return super().in_use() or len(self._hybrid.free) < self._hybrid.num_rows

    def occupancy(self) -> float:
        """The fuller side: rows in use, or slots no request can get any more."""
        hm = self._hybrid
        rows = 1.0 - len(hm.free) / max(1, hm.num_rows)
        return max(rows, 1.0 - hm.slots.capacity / max(1, hm.slots.size))

"""Shadow models of the Mamba families: ``MambaSlotAllocator`` and ``HybridReqToTokenPool``.

Slots ``1..size`` are in exactly one of three places: free, live (owned by a
handle), or reserved by the open group window and not yet consumed.  The
hybrid model is a :class:`~poolfuzz.harness.kits.rows.model.RowModel` for the rows plus a
:class:`SlotModel` for the slots, and remembers per request handle which row
and slot the request's fields should name (stale after ``clear``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poolfuzz.harness.kits.rows.model import RowModel


@dataclass
class SlotModel:
    """Mamba slots ``1..size``: free, live (slot -> owner handle) or reserved in the open group.

    ``reserved`` is the open group's reservation in the order ``alloc(1)`` must
    hand it out; ``reserved[cursor:]`` is what ``alloc_group_end`` must give back.
    """

    size: int
    free: set[int] = field(default_factory=set)
    live: dict[int, int | None] = field(default_factory=dict)
    reserved: list[int] = field(default_factory=list)
    cursor: int = 0
    group_open: bool = False

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Everything free, the window closed: what ``clear`` must leave behind."""
        self.free = set(range(1, self.size + 1))
        self.live = {}
        self.reserved, self.cursor, self.group_open = [], 0, False

    def in_range(self, slot: int) -> bool:
        return 1 <= slot <= self.size

    @property
    def unconsumed(self) -> list[int]:
        return self.reserved[self.cursor :]

    @property
    def capacity(self) -> int:
        """Slots a request may still get: the free list plus the unconsumed reservation."""
        return len(self.free) + len(self.unconsumed)

    def next_reserved(self) -> int | None:
        """The slot ``alloc(1)`` must return now, or ``None`` when it takes the free list."""
        return self.reserved[self.cursor] if self.cursor < len(self.reserved) else None

    def bind(self, slot: int, handle: int | None) -> None:
        assert slot in self.free, f"model: binding slot {slot}, which is not free"
        self.free.remove(slot)
        self.live[slot] = handle

    def consume_reserved(self, handle: int | None) -> int:
        slot = self.reserved[self.cursor]
        self.cursor += 1
        self.live[slot] = handle
        return slot

    def release(self, slot: int) -> int | None:
        """Free a live slot; returns the handle that held it."""
        self.free.add(slot)
        return self.live.pop(slot)

    def open_group(self, reserved: list[int]) -> None:
        assert not self.group_open, "model: opening a second group"
        assert set(reserved) <= self.free, "model: reserving slots that are not free"
        self.free -= set(reserved)
        self.reserved, self.cursor, self.group_open = list(reserved), 0, True

    def close_group(self) -> list[int]:
        """Close the window; the unconsumed reservation goes back to the free list."""
        returned = self.unconsumed
        self.free |= set(returned)
        self.reserved, self.cursor, self.group_open = [], 0, False
        return returned

    def assert_partition(self) -> None:
        """The model's own consistency (a harness bug if it fails, not a pool's)."""
        parts = [self.free, set(self.live), set(self.unconsumed)]
        assert sum(map(len, parts)) == self.size and set().union(*parts) == set(range(1, self.size + 1)), parts


@dataclass
class Claim:
    """The row and slot a request's fields should name; stale once the pool gives them to someone else."""

    row: int | None = None
    slot: int | None = None


@dataclass
class HybridModel(RowModel):
    """Rows (inherited :class:`RowModel`), slots (:class:`SlotModel`) and one :class:`Claim` per handle.

    ``clear`` frees rows and slots but leaves the claims alone: the pool does not
    touch request objects, so their fields go stale, and a later call naming
    them is misuse when the pool can tell, and skipped when it cannot.
    """

    mamba_size: int = 0
    slots: SlotModel = field(init=False)
    claims: dict[int, Claim] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.slots = SlotModel(self.mamba_size)
        super().__post_init__()

    def clear(self) -> None:
        super().clear()
        self.slots.clear()

    def holds_row(self, handle: int) -> bool:
        row = self.claims[handle].row
        return row is not None and self.owner.get(row, -1) == handle

    def holds_slot(self, handle: int) -> bool:
        slot = self.claims[handle].slot
        return slot is not None and self.slots.live.get(slot, -1) == handle

    def stale(self, handle: int) -> bool:
        """The request's fields name a row or slot it no longer holds (after ``clear``)."""
        claim = self.claims[handle]
        return (claim.row is not None and not self.holds_row(handle)) or (claim.slot is not None and not self.holds_slot(handle))

    def stale_row_detectable(self, handle: int) -> bool:
        """A stale row claim the pool can see through: the row is free again."""
        row = self.claims[handle].row
        return row is not None and not self.holds_row(handle) and row in self.free

    def stale_slot_detectable(self, handle: int) -> bool:
        """A stale slot claim the pool can see through: the slot is not live (free or reserved)."""
        slot = self.claims[handle].slot
        return slot is not None and not self.holds_slot(handle) and slot not in self.slots.live

    def expected_mapping(self, row: int) -> int:
        """``req_index_to_mamba_index_mapping[row]``: the slot of the request holding ``row``, else 0."""
        handle = self.owner.get(row)
        if handle is None or not self.holds_slot(handle):
            return 0
        slot = self.claims[handle].slot
        assert slot is not None
        return slot

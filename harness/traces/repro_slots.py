"""The Mamba slot checks a generated reproduction carries (:mod:`poolfuzz.harness.traces.repro_script` writes this
file's source, without its import of :mod:`~poolfuzz.harness.traces.repro_runtime`, after that module's: the
script is one file that imports nothing from poolfuzz).

What ``harness/kits/mamba/driver.py`` checks of each call, in plain Python: a window reserves its requests' slots,
``alloc(1)`` hands them out in order, ``alloc_group_end`` gives back exactly the rest, no slot is 0, past the pool
or live when handed out, and ``clear`` leaves every slot free and no reservation behind.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from poolfuzz.harness.traces.repro_runtime import accepted, check, ints, t


class SlotRun:
    """A Mamba slot allocator under the trace's calls: slots 1..``size`` free, live (by handle) or reserved by the
    open window (upstream keeps the reservation as the iterator ``_alloc_iter``; its length is what is left)."""

    def __init__(self, pool: Any, size: int) -> None:
        self.pool, self.size = pool, size
        self.free: set[int] = set(range(1, size + 1))
        self.live: dict[int, int] = {}  # slot -> the handle holding it
        self.reserved: list[int] = []  # the open window's unconsumed reservation, in hand-out order
        self.handles: dict[int, int] = {}  # handle -> its slot

    def reserved_size(self) -> int:
        iterator = self.pool._alloc_iter  # upstream's reservation: the slots alloc(1) hands out next
        return 0 if iterator is None else operator.length_hint(iterator)

    def counts(self, what: str) -> None:
        available, reserved = int(self.pool.available_size()), self.reserved_size()
        check(available == len(self.free), "conservation", f"after {what}, available_size() is {available}", expected=len(self.free))
        check(
            reserved == len(self.reserved),
            "conservation",
            f"after {what}, the reservation holds {reserved} slots",
            expected=len(self.reserved),
        )

    def group_begin(self, num_reqs: int) -> None:
        what = f"alloc_group_begin({num_reqs})"
        before = ints(self.pool.free_slots)
        accepted(what, lambda: self.pool.alloc_group_begin(num_reqs))
        after = set(ints(self.pool.free_slots))
        taken = [s for s in dict.fromkeys(before) if s not in after]
        expected = num_reqs if num_reqs <= len(self.free) else 0
        check(
            len(taken) == expected == self.reserved_size(),
            "group-window",
            f"{what} with {len(self.free)} free must reserve {expected}",
            reserved=taken,
            reserved_size=self.reserved_size(),
        )
        check(0 not in taken, "reserved-never-handed-out", f"{what} reserved padding slot 0")
        check(set(taken) <= self.free, "no-double-allocation", f"{what} reserved slots that were not free", slots=taken)
        self.free -= set(taken)
        self.reserved = taken

    def group_end(self) -> None:
        available = int(self.pool.available_size())
        accepted("alloc_group_end()", self.pool.alloc_group_end)
        returned = int(self.pool.available_size()) - available
        check(
            returned == len(self.reserved),
            "group-window",
            "alloc_group_end() must return exactly the unconsumed reservation",
            returned=returned,
            unconsumed=self.reserved,
        )
        self.free |= set(self.reserved)
        self.reserved = []

    def alloc(self, need_size: int) -> None:
        what = f"alloc({need_size})"
        reserved = self.reserved[:1] if need_size == 1 else []
        result = accepted(what, lambda: self.pool.alloc(need_size))
        if not reserved and need_size > len(self.free):
            check(
                result is None,
                "empty-pool-guard",
                f"{what} with {len(self.free)} free handed out slots",
                slots=None if result is None else ints(result),
            )
            return
        check(result is not None, "empty-pool-guard", f"{what} refused with {len(self.free)} free", reserved=self.reserved)
        slots = ints(result)
        check(len(slots) == need_size, "empty-pool-guard", f"{what} returned {len(slots)} slots", slots=slots)
        check(len(set(slots)) == len(slots), "no-double-allocation", f"{what} returned a slot twice", slots=slots)
        for position, slot in enumerate(slots):
            check(slot != 0, "reserved-never-handed-out", f"{what} handed out padding slot 0")
            check(1 <= slot <= self.size, "in-bounds", f"{what} returned slot {slot}", size=self.size)
            check(
                slot not in self.live, "no-double-allocation", f"{what} returned slot {slot}, which allocation {self.live.get(slot)} holds"
            )
            if position < len(reserved):
                check(
                    slot == reserved[position],
                    "group-window",
                    f"{what} must hand out the reservation in order",
                    expected=reserved[position],
                    actual=slot,
                )
                self.reserved.pop(0)
            else:
                check(
                    slot in self.free, "group-window", f"{what} handed out reserved slot {slot} outside alloc(1)", reservation=self.reserved
                )
                self.free.discard(slot)
            handle = len(self.handles)
            self.handles[handle], self.live[slot] = slot, handle
        self.counts(what)

    def release(self, slots: list[int], what: str, dtype: torch.dtype = torch.int64) -> None:
        accepted(what, lambda: self.pool.free(t(slots).to(dtype)))
        for slot in slots:
            self.live.pop(slot, None)
            self.free.add(slot)
        self.counts(what)

    def clear(self) -> None:
        accepted("clear()", self.pool.clear)
        check(
            self.reserved_size() == 0,
            "clear-restores",
            "clear() kept the open window's unconsumed reservation: alloc(1) hands those slots out again, and they are on the free list too",
            reserved_size=self.reserved_size(),
            free_slots=ints(self.pool.free_slots),
        )
        available = int(self.pool.available_size())
        check(available == self.size, "clear-restores", "clear() left Mamba slots allocated", available=available, size=self.size)
        self.free, self.live, self.reserved = set(range(1, self.size + 1)), {}, []

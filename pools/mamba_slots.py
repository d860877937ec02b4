"""Mamba state slots: ``MambaSlotAllocator``, the free list of slot ids a Mamba state pool hands out.

Semantics follow SGLang 0.5.23 (``allocator/mamba.py``).  Slot 0 is the dummy
write target of padded tokens: never handed out or freed (SGLang #17404).

Hazards fixed here (sglang-pools.md section 8, hazards 3 and 6): upstream let a
second ``alloc_group_begin`` drop the first reservation (a leak), kept the
reservation across ``clear()`` (so stale reserved slots were issued twice), and
appended freed slots with neither a range nor a membership check.  Here nesting
and unmatched ends raise :class:`~poolfuzz.pools.errors.GroupStateError`, ``clear()``
closes the window, and ``free`` validates against a host-side state table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from poolfuzz.pools.errors import BadBatchError, DoubleFreeError, ForeignIndexError, GroupStateError, ReservedIndexError, check_count
from poolfuzz.pools.free_list import PageFreeList
from poolfuzz.pools.host_views import HostViews

__all__ = ["MambaSlotAllocator"]

# Per-slot states of MambaSlotAllocator._state.
_FREE, _RESERVED, _LIVE = 0, 1, 2
_INT_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})
_SET_AT_MOST = 64
"""A free of at most this many slots looks for a repeat in a Python set; a longer one counts live slots."""


def _check_slot(pool: str, slot: Any, size: int) -> None:
    """Slot 0 is padding (ReservedIndexError); usable slots are ``1..size``."""
    if isinstance(slot, bool) or not isinstance(slot, int):
        raise BadBatchError(pool, f"mamba slot {slot!r} is not an int")
    if slot == 0:
        raise ReservedIndexError(pool, 0, "mamba slot")
    if not 1 <= slot <= size:
        raise ForeignIndexError(pool, [slot], 1, size, "mamba slot")


def _slot_list(pool: str, indices: Any, size: int, name: str = "indices") -> list[int]:
    """Validate an integer index tensor; ``.tolist()`` is one host sync on CUDA."""
    kind = indices.dtype if isinstance(indices, torch.Tensor) else None
    if kind is None or kind == torch.bool or kind.is_floating_point or kind.is_complex:
        raise BadBatchError(pool, f"{name} must be an integer tensor, got {type(indices).__name__}")
    slots = indices.reshape(-1).tolist()
    for slot in slots:
        _check_slot(pool, slot, size)
    return slots


class MambaSlotAllocator(HostViews):
    """Free list of Mamba slots ``1..size``: head pop (FIFO), tail push.

    Invariant: every slot in ``1..size`` is in exactly one place: the free list,
    the open group's unconsumed reservation, or live (handed out, not freed).
    ``available_size()`` counts the free list only, as upstream: inside a group
    window add ``reserved_size()`` for the true room.

    ``_state`` mirrors ownership in a NumPy table on the host.  Slot 0 and a
    sentinel past ``size`` are never live, so one clipped gather counting live
    slots checks a whole ``free`` (range, padding, ownership); the exact error is worked out
    only when it fails.  On CUDA reading the slot ids costs one host sync per
    ``alloc``/``free``.  The free list is a :class:`~poolfuzz.pools.free_list.PageFreeList`:
    a free costs O(slots freed), not upstream's O(pool) ``torch.cat``.
    """

    pool_name = "MambaSlotAllocator"
    _host_views = (("_state_np", "_state"),)

    def __init__(self, size: int, device: str | torch.device = "cpu") -> None:
        self.size = check_count(self.pool_name, "size", size)
        self.device = torch.device(device)
        self._free_list = PageFreeList(self.device)
        self._on_host = self._free_list.on_host
        self._state = bytearray(self.size + 2)  # read slot by slot from Python; [0] and [-1] are never live
        self._state_np = np.frombuffer(self._state, dtype=np.int8)  # the same bytes, read whole-call
        self._reserved: torch.Tensor  # the open group's reservation; [_cursor:] is unconsumed
        self._reserved_slots: tuple[torch.Tensor, ...]  # the same, one single-slot view each (alloc(1) returns one)
        self._reserved_ids: list[int]  # its host mirror; the two above are read only while this is non-empty
        self._group_open: bool
        self._cursor: int
        self.clear()

    @property
    def free_slots(self) -> torch.Tensor:
        """The free list, head first; a view, valid until the next call that changes the pool."""
        return self._free_list.view()

    def available_size(self) -> int:
        """Length of the free list; excludes the unconsumed group reservation."""
        return len(self._free_list)

    def reserved_size(self) -> int:
        """Reserved slots of the open group that ``alloc(1)`` has not handed out yet."""
        return len(self._reserved_ids) - self._cursor

    @property
    def group_open(self) -> bool:
        return self._group_open

    def is_live(self, slot: int) -> bool:
        """True when ``slot`` is handed out and not yet freed."""
        return 1 <= slot <= self.size and self._state[slot] == _LIVE

    def _do_alloc(self, need_size: int, mark: int = _LIVE) -> tuple[torch.Tensor, np.ndarray] | None:
        """Take the head ``need_size`` slots (FIFO), or ``None`` with nothing changed."""
        free_list = self._free_list
        if need_size > free_list.tail - free_list.head:
            return None
        taken, ids = self._free_list.take(need_size), self._free_list.take_host(need_size)
        self._state_np[ids] = mark
        self._free_list.pop(need_size)
        return taken, ids

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """Hand out ``need_size`` slots as an int64 tensor, or ``None`` if short.

        Inside an open group ``alloc(1)`` returns the next reserved slot; other
        sizes, or an exhausted reservation, take the normal path.  ``alloc(0)``
        is empty, never the whole list (the negative-zero slice of seed 000)."""
        if type(need_size) is not int or need_size < 0:
            check_count(self.pool_name, "need_size", need_size)
        if need_size == 1 and self._cursor < len(self._reserved_ids):
            slot = self._reserved_slots[self._cursor]
            self._state[self._reserved_ids[self._cursor]] = _LIVE
            self._cursor += 1
            return slot
        taken = self._do_alloc(need_size)
        return None if taken is None else taken[0]

    def free(self, indices: torch.Tensor) -> None:
        """Return live slots to the tail of the free list; empty is a no-op.

        Raises ReservedIndexError (slot 0), ForeignIndexError (outside 1..size)
        or DoubleFreeError (a duplicate, a free or an unconsumed reserved slot)
        before any change: upstream appended blindly, giving a slot two owners."""
        kind = indices.dtype if isinstance(indices, torch.Tensor) else None
        if kind not in _INT_DTYPES or indices.dim() != 1:
            got = f"{indices.dim()}-D {kind}" if kind is not None else type(indices).__name__
            raise BadBatchError(self.pool_name, f"indices must be a 1-D integer tensor, got {got}")
        count = indices.numel()
        if count == 1:  # a finished request's slot: the common call, checked in Python
            slot = int(indices.item())  # one host sync on a device
            if not 1 <= slot <= self.size or self._state[slot] != _LIVE:
                self._explain_free([slot])
            self._state[slot] = _FREE
            self._free_list.append_one(slot)
            return
        ids = indices.cpu().numpy()  # one host sync on a device; no copy on the host
        if self._state_np.take(ids, mode="clip").tobytes().count(_LIVE) != count:
            self._explain_free(ids.tolist())  # foreign, padding, free or reserved
        if count <= _SET_AT_MOST:
            if len(set(ids.tolist())) < count:
                self._explain_free(ids.tolist())  # a slot named twice
            self._state_np[ids] = _FREE
        else:
            # Every slot named is live, so freeing them ends exactly `count` live slots unless
            # one is named twice; counting the table's bytes is cheaper than looking for the repeat.
            live = self._state.count(_LIVE)
            self._state_np[ids] = _FREE
            if live - self._state.count(_LIVE) != count:
                self._state_np[ids] = _LIVE
                self._explain_free(ids.tolist())
        self._free_list.append(ids if self._on_host else indices.to(self.device, torch.int64))

    def _explain_free(self, slots: list[int]) -> None:
        """Raise the error for the first slot ``free`` may not release, in call order."""
        for slot in slots:
            _check_slot(self.pool_name, slot, self.size)
        seen: set[int] = set()
        for slot in slots:
            if slot in seen or self._state[slot] != _LIVE:
                what = "reserved (unconsumed) mamba slot" if self._state[slot] == _RESERVED else "mamba slot"
                raise DoubleFreeError(self.pool_name, [slot], what)
            seen.add(slot)
        raise AssertionError(f"free of {slots} failed the fast check but breaks no rule")

    def alloc_group_begin(self, num_reqs: int) -> None:
        """Open a group window, reserving ``num_reqs`` slots up front if the pool has them.

        A short pool opens the window with no reservation and ``alloc(1)`` falls
        back to the normal path (upstream behaviour).  Opening a second window
        raises: upstream silently dropped the first reservation, a leak.
        """
        if self._group_open:
            unconsumed = f"begin while open ({self.reserved_size()} reserved slot(s) unconsumed)"
            raise GroupStateError(self.pool_name, "alloc", unconsumed)
        check_count(self.pool_name, "num_reqs", num_reqs)
        taken = self._do_alloc(num_reqs, _RESERVED)
        self._group_open = True
        if taken is not None:
            self._reserved, self._reserved_ids = taken[0], taken[1].tolist()
            self._reserved_slots = taken[0].split(1)

    def alloc_group_end(self) -> None:
        """Give exactly the unconsumed reserved slots back (tail) and close the window."""
        if not self._group_open:
            raise GroupStateError(self.pool_name, "alloc", "end without a matching begin")
        unconsumed = self._reserved_ids[self._cursor :]
        if unconsumed:
            self._state_np[unconsumed] = _FREE
            self._free_list.append(self._reserved[self._cursor :])
        self._close_group()

    def _close_group(self) -> None:
        self._group_open = False
        self._reserved_ids = []
        self._cursor = 0

    def clear(self) -> None:
        """Free every slot and close any group (upstream kept the group
        iterator, so reserved slots already back on the free list were issued twice)."""
        self._free_list.replace(torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device))
        self._state_np.fill(_FREE)  # slot 0 and the sentinel too: never live is all a free checks
        self._close_group()

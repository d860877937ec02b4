"""Mamba canaries: ``MambaSlotAllocator`` and ``HybridReqToTokenPool`` with one historical bug put back.

The group-window bugs are the ones upstream shipped or still has: seed 001's
first version, and the hazards read from 0.5.23 (sglang-pools.md section 8,
hazard 3).  Each class overrides only the method that carried the bug.
"""

from __future__ import annotations

import torch

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.pools.mamba import HybridReqToTokenPool, MambaSlotAllocator
from poolfuzz.pools.mamba_slots import _FREE


class GroupEndLeak(MambaSlotAllocator):
    """``alloc_group_end`` closes the window without returning unconsumed reservations (seed 001).

    Every admission round that reserves for the whole waiting queue but admits
    fewer requests loses the difference for good.  Caught by ``group-window``.
    """

    def alloc_group_end(self) -> None:
        if not self._group_open:
            super().alloc_group_end()
        self._close_group()


class ClearLeavesGroupOpen(MambaSlotAllocator):
    """``clear()`` resets the free list but keeps the open group (0.5.23 keeps ``_alloc_iter``).

    After the clear the unconsumed reserved slots are back on the free list and
    still queued in the window, so ``alloc(1)`` issues them twice.  Caught by
    ``clear-restores``: after a clear every group is closed.
    """

    def clear(self) -> None:
        if not getattr(self, "_group_open", False):  # the constructor's clear() runs before any window exists
            super().clear()
            return
        window = self._reserved, self._reserved_slots, self._reserved_ids, self._cursor
        super().clear()
        self._reserved, self._reserved_slots, self._reserved_ids, self._cursor = window
        self._group_open = True


class NestedGroupDropsReservation(MambaSlotAllocator):
    """A second ``alloc_group_begin`` replaces the first window (0.5.23 resets ``_alloc_iter``).

    The first window's unconsumed reservation is neither returned nor handed
    out again: a leak, with no error to say the scheduler nested two windows.
    Caught by ``misuse-rejected``: nesting must raise ``GroupStateError``.
    """

    def alloc_group_begin(self, num_reqs: int) -> None:
        self._close_group()
        super().alloc_group_begin(num_reqs)


class SilentDoubleFreeSlots(MambaSlotAllocator):
    """``free`` appends without validation (0.5.23, sglang-pools.md section 8, hazard 6).

    A slot freed twice sits on the free list twice and is later handed to two
    requests, whose recurrent states then overwrite each other.  Caught by
    ``misuse-rejected``.
    """

    def free(self, indices: torch.Tensor) -> None:
        slots = indices.reshape(-1).tolist()
        for slot in slots:
            if 0 < slot <= self.size:
                self._state[slot] = _FREE
        if slots:
            self._free_list.append(indices.reshape(-1).to(self.device, torch.int64))


class MappingSizedByMambaSize(HybridReqToTokenPool):
    """The row-to-slot mapping sized by ``mamba_size + 1`` but indexed by row (SGLang #24244).

    With fewer Mamba slots than request rows, binding a high row writes past
    the end of the mapping.  Caught by ``in-bounds``: every table indexed by a
    row needs ``req_to_token.shape[0]`` entries.
    """

    def __init__(self, size: int, max_context_len: int, mamba_size: int, **kwargs: object) -> None:
        super().__init__(size, max_context_len, mamba_size, **kwargs)  # type: ignore[arg-type]
        self.req_index_to_mamba_index_mapping = torch.zeros(mamba_size + 1, dtype=torch.int64, device=self.device)


CANARIES: dict[str, Canary] = {
    "group-end-leak": Canary(
        "mamba_slots",
        "poolfuzz.harness.kits.mamba.canaries:GroupEndLeak",
        "alloc_group_end closes the window without returning unconsumed reserved slots",
        "seed 001",
        "group-window",
    ),
    "clear-leaves-group-open": Canary(
        "mamba_slots",
        "poolfuzz.harness.kits.mamba.canaries:ClearLeavesGroupOpen",
        "clear() keeps the open group window: stale reserved slots are issued twice",
        "sglang-pools.md section 8, hazard 3; SGLang #4698 (same bug in the KV free group)",
        "clear-restores",
    ),
    "nested-group-drops-reservation": Canary(
        "mamba_slots",
        "poolfuzz.harness.kits.mamba.canaries:NestedGroupDropsReservation",
        "a second alloc_group_begin silently replaces the first window's reservation",
        "sglang-pools.md section 8, hazard 3",
        "misuse-rejected",
    ),
    "silent-double-free-mamba": Canary(
        "mamba_slots",
        "poolfuzz.harness.kits.mamba.canaries:SilentDoubleFreeSlots",
        "MambaSlotAllocator.free appends without validation",
        "sglang-pools.md section 8, hazard 6",
        "misuse-rejected",
    ),
    "mamba-mapping-sized-by-mamba-size": Canary(
        "hybrid_req_to_token",
        "poolfuzz.harness.kits.mamba.canaries:MappingSizedByMambaSize",
        "req_index_to_mamba_index_mapping sized by mamba_size but indexed by row",
        "SGLang #24244",
        "in-bounds",
    ),
}

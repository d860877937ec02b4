"""Mamba state: ``MambaPool`` (state tensors) and ``HybridReqToTokenPool`` (request
rows plus one Mamba slot each); the slot free list is :mod:`poolfuzz.pools.mamba_slots`.

Semantics follow SGLang 0.5.23 (``memory_pool.py``).  Slot 0 is the dummy
write target of padded tokens, so every state tensor has ``size + 1`` slots
(SGLang #17404).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from poolfuzz.pools.errors import BadBatchError, DoubleFreeError, check_count
from poolfuzz.pools.mamba_slots import MambaSlotAllocator, _check_slot, _slot_list
from poolfuzz.pools.req_to_token import Req, ReqToTokenPool

__all__ = ["HybridReqToTokenPool", "MambaPool", "MambaSlotAllocator"]


class MambaPool:
    """Conv and temporal (SSM) state, ``[num_layers, size + 1, *shape]``, slot 0 padding.

    Both tensors start zeroed (``torch.zeros``): uninitialised ``torch.empty``
    buffers leaked garbage state into new requests (SGLang #10400).  The pool
    owns tensors only; which slot is free is ``MambaSlotAllocator``'s business.
    """

    pool_name = "MambaPool"

    def __init__(
        self, size: int, num_layers: int, conv_shape: tuple[int, ...], temporal_shape: tuple[int, ...],
        dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
    ) -> None:  # fmt: skip
        self.size = check_count(self.pool_name, "size", size)
        self.num_layers = check_count(self.pool_name, "num_layers", num_layers, 1)
        for dim in conv_shape:
            check_count(self.pool_name, "conv_shape", dim)
        for dim in temporal_shape:
            check_count(self.pool_name, "temporal_shape", dim)
        self.device = torch.device(device)
        self.conv = torch.zeros((num_layers, size + 1, *conv_shape), dtype=dtype, device=self.device)
        self.temporal = torch.zeros((num_layers, size + 1, *temporal_shape), dtype=dtype, device=self.device)

    def _index(self, slots: Sequence[int]) -> torch.Tensor:
        return torch.tensor(list(slots), dtype=torch.int64, device=self.device)

    def clear_slots(self, indices: torch.Tensor) -> None:
        """Zero the conv and temporal state of ``indices`` (slots ``1..size``)."""
        index = self._index(_slot_list(self.pool_name, indices, self.size))
        for state in (self.conv, self.temporal):
            state.index_fill_(1, index, 0)

    def copy_from(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy state ``src[i] -> dst[i]``: same lengths, ``dst`` without duplicates, and
        disjoint (upstream's fused kernel works in place and only debug-asserts this)."""
        src_slots = _slot_list(self.pool_name, src, self.size, "src")
        dst_slots = _slot_list(self.pool_name, dst, self.size, "dst")
        if len(src_slots) != len(dst_slots):
            raise BadBatchError(self.pool_name, f"copy_from of {len(src_slots)} src slot(s) onto {len(dst_slots)}")
        if len(set(dst_slots)) != len(dst_slots):
            raise BadBatchError(self.pool_name, "copy_from dst has duplicate slots")
        shared = sorted(set(src_slots) & set(dst_slots))
        if shared:
            raise BadBatchError(self.pool_name, f"copy_from src and dst overlap at {shared[:8]}")
        src_index, dst_index = self._index(src_slots), self._index(dst_slots)
        for state in (self.conv, self.temporal):
            state.index_copy_(1, dst_index, state.index_select(1, src_index))


class HybridReqToTokenPool(ReqToTokenPool):
    """Request rows plus one Mamba slot per request.

    Invariant: ``req_index_to_mamba_index_mapping[row]`` is the slot of the
    request bound to ``row``, and 0 for every row that is free or whose request
    holds no slot.  The mapping has ``req_to_token.shape[0]`` entries: sizing it
    by ``mamba_size`` while indexing by row went out of bounds when
    ``mamba_size < size`` (SGLang #24244).

    Releasing a request takes two calls, as upstream: ``free_mamba_cache(req)``
    (unless the slot is donated) and ``free(req)``.  Either zeroes the row's
    mapping entry, so no entry names a slot its row no longer owns.
    """

    pool_name = "HybridReqToTokenPool"

    def __init__(
        self, size: int, max_context_len: int, mamba_size: int, *, num_layers: int = 1,
        conv_shape: tuple[int, ...] = (4,), temporal_shape: tuple[int, ...] = (4,),
        dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
    ) -> None:  # fmt: skip
        self.mamba_allocator = MambaSlotAllocator(mamba_size, device)
        self.mamba_pool = MambaPool(mamba_size, num_layers, conv_shape, temporal_shape, dtype, device)
        rows = check_count(self.pool_name, "size", size) + 1  # as many as req_to_token: the mapping is indexed by row
        self.req_index_to_mamba_index_mapping = torch.zeros(rows, dtype=torch.int64, device=torch.device(device))
        super().__init__(size, max_context_len, device)

    def mamba_available_size(self) -> int:
        """Free Mamba slots, excluding an open group's unconsumed reservation."""
        return self.mamba_allocator.available_size()

    def _validate_mamba_handles(self, reqs: Sequence[Req]) -> int:
        """Check every held slot is live and claimed once; return the number of new slots."""
        need = 0
        claimed: set[int] = set()
        for position, req in enumerate(reqs):
            slot = req.mamba_pool_idx
            if slot is None:
                need += 1
                continue
            _check_slot(self.pool_name, slot, self.mamba_allocator.size)
            if not self.mamba_allocator.is_live(slot):
                stale = f"request {req.rid!r} claims mamba slot {slot}, which is not handed out (stale handle)"
                raise BadBatchError(self.pool_name, stale, position=position)
            if slot in claimed:
                raise BadBatchError(self.pool_name, f"mamba slot {slot} claimed by two requests", position=position)
            claimed.add(slot)
        return need

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        """Bind a row and a Mamba slot to every request lacking one; all-or-nothing.

        Capacity is checked on both sides before anything is taken, so a short
        pool returns ``None`` having consumed nothing (upstream took the rows
        and then asserted on the Mamba side).  Inside a group window the slots
        come from the reservation first.  New slots get ``mamba_needs_clear``.
        """
        need_rows = self._validate_batch(reqs)
        need_slots = self._validate_mamba_handles(reqs)
        allocator = self.mamba_allocator
        if need_rows > self.available_size() or need_slots > allocator.available_size() + allocator.reserved_size():
            return None
        rows = self.alloc_rows(need_rows)
        assert rows is not None, "row capacity was checked"
        bound = self._bind_rows(reqs, rows)
        fresh: list[torch.Tensor] = []
        for _ in range(need_slots):
            slot = allocator.alloc(1)
            assert slot is not None, "mamba capacity was checked"
            fresh.append(slot)
        new_slots = iter(torch.cat(fresh).tolist() if fresh else [])
        for req in reqs:
            if req.mamba_pool_idx is None:
                req.mamba_pool_idx = next(new_slots)
                req.mamba_needs_clear = True
        row_index = torch.tensor(bound, dtype=torch.int64, device=self.device)
        slot_values = torch.tensor([req.mamba_pool_idx for req in reqs], dtype=torch.int64, device=self.device)
        self.req_index_to_mamba_index_mapping[row_index] = slot_values
        return bound

    def free_mamba_cache(self, req: Req) -> None:
        """Release the request's Mamba slot (not its row); no slot held is a double free."""
        slot = req.mamba_pool_idx
        if slot is None:
            raise DoubleFreeError(self.pool_name, [], f"mamba slot of request {req.rid!r} (it holds none)")
        _check_slot(self.pool_name, slot, self.mamba_allocator.size)
        self.mamba_allocator.free(torch.tensor([slot], dtype=torch.int64, device=self.device))
        mapping = self.req_index_to_mamba_index_mapping  # whichever row names the slot: no host read of the row
        mapping.masked_fill_(mapping == slot, 0)
        req.mamba_pool_idx = None
        req.mamba_needs_clear = False

    def free(self, req: Req) -> None:
        """Release the row only (the slot needs ``free_mamba_cache``); zero its mapping entry."""
        row = req.req_pool_idx
        super().free(req)
        assert row is not None, "the base free validated the row"
        self.req_index_to_mamba_index_mapping[row] = 0

    def free_rows(self, indices: Iterable[int]) -> None:
        rows = list(indices)
        super().free_rows(rows)
        self.req_index_to_mamba_index_mapping[torch.tensor(rows, dtype=torch.int64, device=self.device)] = 0

    def clear(self) -> None:
        """Free every row and slot, close any group window and zero the mapping.  State
        is not zeroed (fresh slots carry ``mamba_needs_clear``); old handles go stale."""
        super().clear()
        self.mamba_allocator.clear()
        self.req_index_to_mamba_index_mapping.zero_()

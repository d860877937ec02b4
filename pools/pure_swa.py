"""Pure sliding-window KV allocator: ``PureSWATokenToKVPoolAllocator``.

Semantics follow SGLang 0.5.23 (``mem_cache/allocator/swa.py``; sglang-pools.md
section 2.8).  When every layer of a model is sliding-window there is no
full-attention pool: one page-size-1 :class:`TokenToKVPoolAllocator` plays both
sides, behind the calls of :class:`poolfuzz.pools.swa.SWATokenToKVPoolAllocator` (the paged
ones raise).
"""

from __future__ import annotations

import torch

from poolfuzz.pools.errors import BadSizeError
from poolfuzz.pools.kv_allocator import TokenToKVPoolAllocator


class PureSWATokenToKVPoolAllocator:
    """Every layer is sliding-window: one page-size-1 allocator plays both sides.

    ``full_to_swa_index_mapping`` is the identity plus the trailing ``-1``.  As upstream,
    :meth:`free` and :meth:`free_swa` are the same call and drop indices <= 0 (padding);
    the rest are validated strictly.  :meth:`free_full` does nothing: there is no
    full-attention pool to release.  The paged calls raise :class:`BadSizeError`.
    """

    pool_name = "PureSWATokenToKVPoolAllocator"

    def __init__(self, size_swa: int, page_size: int = 1, device: str | torch.device = "cpu", need_sort: bool = False) -> None:
        if page_size != 1:
            raise BadSizeError(self.pool_name, "page_size", page_size, "must be 1")
        self.device = torch.device(device)
        self.page_size = page_size
        self.need_sort = need_sort
        self.swa_attn_allocator = TokenToKVPoolAllocator(size_swa, device, need_sort)
        self.swa_attn_allocator.pool_name = self.pool_name
        self.full_attn_allocator = self.swa_attn_allocator
        self.size_full = self.size_swa = size_swa
        self.full_to_swa_index_mapping = torch.cat(
            [
                torch.arange(size_swa + page_size, dtype=torch.int64, device=self.device),
                torch.full((1,), -1, dtype=torch.int64, device=self.device),
            ]
        )

    @property
    def size(self) -> int:
        return self.size_swa

    def available_size(self) -> int:
        return self.swa_attn_allocator.available_size()

    full_available_size = swa_available_size = available_size

    def new_pages_available(self, num_full_pages: int, num_swa_pages: int) -> bool:
        return max(num_full_pages, num_swa_pages) <= self.available_size()

    @property
    def in_free_group(self) -> bool:
        return self.swa_attn_allocator.in_free_group

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        return kv_indices

    def clear(self) -> None:
        self.swa_attn_allocator.clear()

    def alloc(self, need_size: int) -> torch.Tensor | None:
        return self.swa_attn_allocator.alloc(need_size)

    def _no_paged_calls(self, call: str) -> BadSizeError:
        return BadSizeError(self.pool_name, "page_size", self.page_size, f"{call} needs page_size > 1; use alloc")

    def alloc_extend(self, *args: object, **kwargs: object) -> torch.Tensor | None:
        raise self._no_paged_calls("alloc_extend")

    def alloc_extend_swa_tail(self, *args: object, **kwargs: object) -> torch.Tensor | None:
        raise self._no_paged_calls("alloc_extend_swa_tail")

    def alloc_decode(self, *args: object, **kwargs: object) -> torch.Tensor | None:
        raise self._no_paged_calls("alloc_decode")

    def free(self, free_index: torch.Tensor) -> None:
        if isinstance(free_index, torch.Tensor) and free_index.numel():
            free_index = free_index[free_index > 0]
        self.swa_attn_allocator.free(free_index)

    free_swa = free

    def free_full(self, free_index: torch.Tensor) -> None:
        return None

    def free_group_begin(self) -> None:
        self.swa_attn_allocator.free_group_begin()

    def free_group_end(self) -> None:
        self.swa_attn_allocator.free_group_end()

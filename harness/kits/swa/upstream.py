"""Upstream SGLang 0.5.23's SWA allocators behind :mod:`poolfuzz.pools.swa`'s constructors and API.

``SWATokenToKVPoolAllocator`` and ``PureSWATokenToKVPoolAllocator`` (``mem_cache/allocator/swa.py``,
loaded by :func:`poolfuzz.harness.upstream.sglang_modules.load_sglang_cache`) compose the same
``TokenToKVPoolAllocator`` / ``PagedTokenToKVPoolAllocator`` classes the ``token_kv`` and
``paged_kv`` upstream targets fuzz.  The wrappers translate constructor signatures only
(upstream also takes ``dtype`` and a ``kvcache``, here the buffer-less
:class:`~poolfuzz.harness.upstream.sglang_fakes.SWAKVPoolFake` that holds the mapping) and
forward every call unchanged, so the ``swa_kv`` family judges upstream's behaviour.
``poolfuzz_check_misuse = False``: upstream does not validate, so the harness issues valid
calls only.  The driver reads each side through upstream's sub-allocators themselves
(``get_all_free_pages``, ``available_size``).

``kernel="triton"`` on a CUDA device runs upstream's Triton kernels in the paged
sub-allocators; anything else runs upstream's torch naive path, as on a CPU platform.
``check_layout`` is accepted for signature compatibility: upstream checks no layout.
Upstream's own ``sglang.srt.utils.invariants`` checks (off by default upstream) are
evaluated by the stand-in and recorded, never raised: :meth:`SWAKV.invariant_hits`.
"""

from __future__ import annotations

from typing import Any

import torch

from poolfuzz.harness.upstream.sglang_files import SGLANG
from poolfuzz.harness.upstream.sglang_modules import SglangCacheModules, load_sglang_cache
from poolfuzz.harness.upstream.wrapper import (
    ExtendDecodeForwarding,
    FreeGroupForwarding,
    UpstreamWrapper,
    as_is,
    forwarded,
    inner_attribute,
    runs_upstream,
)
from poolfuzz.pools.protocols import SWAKVAllocator


class _UpstreamSWA(UpstreamWrapper, FreeGroupForwarding, ExtendDecodeForwarding):
    """The surface both SWA wrappers forward to ``inner`` (``poolfuzz.pools.protocols.SWAKVAllocator``).

    ``available_size`` and ``alloc`` are :class:`~poolfuzz.harness.upstream.wrapper.UpstreamWrapper`'s; free groups,
    ``clear``, ``alloc_extend`` and ``alloc_decode`` are forwarded by its mix-ins, as for the paged KV wrapper.
    """

    mods: SglangCacheModules
    page_size: int
    device: torch.device
    need_sort: bool

    def __repr__(self) -> str:
        return (
            f"<upstream sglang=={self.upstream_version} {self.upstream_class} full={self.inner.size_full} "
            f"swa={self.inner.size_swa} page_size={self.page_size}>"
        )

    full_to_swa_index_mapping: inner_attribute[torch.Tensor] = inner_attribute(as_is)
    full_attn_allocator: inner_attribute[Any] = inner_attribute(as_is)
    swa_attn_allocator: inner_attribute[Any] = inner_attribute(as_is)
    size = inner_attribute(int)
    size_full = inner_attribute(int)
    size_swa = inner_attribute(int)

    @property
    def in_free_group(self) -> bool:
        return self.full_attn_allocator.free_group is not None

    def full_available_size(self) -> int:
        return int(self.inner.full_available_size())

    def swa_available_size(self) -> int:
        return int(self.inner.swa_available_size())

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        return self.inner.translate_loc_from_full_to_swa(kv_indices)  # type: ignore[no-any-return]

    alloc_extend_swa_tail = forwarded(SWAKVAllocator, "alloc_extend_swa_tail")
    free = forwarded(SWAKVAllocator, "free")
    free_swa = forwarded(SWAKVAllocator, "free_swa")
    free_full = forwarded(SWAKVAllocator, "free_full")

    def invariant_hits(self) -> list[Any]:
        """Upstream's own ``expect`` checks that failed since the last call (process-wide, drained)."""
        return list(self.mods.signals.drain())


@runs_upstream(SGLANG)
class SWAKV(_UpstreamSWA):
    """``swa_kv``: upstream ``SWATokenToKVPoolAllocator(size, size_swa, page_size, dtype, device, kvcache, need_sort)``."""

    upstream_class = "SWATokenToKVPoolAllocator"
    poolfuzz_contract = "poolfuzz.harness.kits.swa.contracts.swa_kv:CONTRACT"

    def __init__(
        self,
        size: int,
        size_swa: int,
        page_size: int,
        device: str | torch.device = "cpu",
        need_sort: bool = False,
        kernel: str = "vectorized",
        check_layout: bool | None = None,
    ) -> None:
        self.mods = load_sglang_cache()
        self.mods.signals.drain()  # the record is process-wide: what an earlier target (the engine) left is not ours
        self.device, self.page_size, self.need_sort = torch.device(device), page_size, need_sort
        kvcache = self.mods.swa_kv_pool_class()  # the mapping holder, no KV buffers
        self.inner = self.mods.swa.SWATokenToKVPoolAllocator(size, size_swa, page_size, torch.float16, self.device, kvcache, need_sort)
        self.kernel = "triton" if kernel == "triton" and self.device.type == "cuda" else "naive"
        if page_size > 1:
            for side in (self.inner.full_attn_allocator, self.inner.swa_attn_allocator):
                side.use_triton_kernels = self.kernel == "triton"


@runs_upstream(SGLANG)
class PureSWAKV(_UpstreamSWA):
    """``swa_kv`` (pure): upstream ``PureSWATokenToKVPoolAllocator(size_swa, page_size, dtype, device, kvcache, need_sort)``."""

    upstream_class = "PureSWATokenToKVPoolAllocator"
    poolfuzz_contract = "poolfuzz.harness.kits.swa.contracts.pure_swa_kv:CONTRACT"

    def __init__(self, size_swa: int, page_size: int = 1, device: str | torch.device = "cpu", need_sort: bool = False) -> None:
        self.mods = load_sglang_cache()
        self.mods.signals.drain()  # the record is process-wide: what an earlier target (the engine) left is not ours
        self.device, self.page_size, self.need_sort = torch.device(device), page_size, need_sort
        if page_size != 1:  # upstream asserts; say so before it does
            raise ValueError(f"PureSWATokenToKVPoolAllocator supports page_size 1 only, got {page_size}")
        kvcache = self.mods.swa_kv_pool_class()
        self.inner = self.mods.swa.PureSWATokenToKVPoolAllocator(size_swa, 1, torch.float16, self.device, kvcache, need_sort)

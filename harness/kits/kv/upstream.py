"""Upstream SGLang 0.5.23's token and paged KV allocators behind the KV families' constructor signatures.

The wrappers build the real upstream objects (loaded by :mod:`poolfuzz.harness.upstream.loader`) and forward the
family protocol to them (:class:`~poolfuzz.harness.upstream.wrapper.UpstreamWrapper`), translating only signatures:
upstream constructors also take ``dtype`` and ``kvcache`` (unused by the allocator bookkeeping;
``kvcache=None`` as in upstream's own CPU tests).

=================  ====================================  =============================================
family             target spec                           upstream class
=================  ====================================  =============================================
``token_kv``       ``poolfuzz.harness.upstream:TokenKV``          ``TokenToKVPoolAllocator``
``paged_kv``       ``poolfuzz.harness.upstream:PagedKV``          ``PagedTokenToKVPoolAllocator`` (torch naive path)
=================  ====================================  =============================================
"""

from __future__ import annotations

import torch

from poolfuzz.harness.upstream.sglang_files import SGLANG
from poolfuzz.harness.upstream.sglang_modules import load_upstream
from poolfuzz.harness.upstream.wrapper import ExtendDecodeForwarding, FreeGroupForwarding, UpstreamWrapper, empty_indices, runs_upstream


class UpstreamKV(UpstreamWrapper, FreeGroupForwarding):
    """The allocator surface shared by the token and paged wrappers (free groups and ``clear``: :class:`FreeGroupForwarding`)."""

    size: int
    page_size: int
    device: torch.device
    need_sort: bool

    @property
    def free_pages(self) -> torch.Tensor:
        return self.inner.free_pages  # type: ignore[no-any-return]

    @property
    def in_free_group(self) -> bool:
        return self.inner.free_group is not None

    def merge_and_sort_free(self) -> None:
        self.inner.merge_and_sort_free()

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        self.inner.free_segment(free_index, start_pos=start_pos)

    def get_all_free_pages(self) -> torch.Tensor:
        """Free list plus pages released but not yet merged (``need_sort``)."""
        return self.inner.get_all_free_pages()  # type: ignore[no-any-return]

    def pending_free_pages(self) -> torch.Tensor:
        """Pages enqueued in the open free group (upstream keeps token indices; pages here)."""
        pending = self.inner.free_group
        if not pending:
            return empty_indices(self.device)
        return torch.cat(pending) // self.page_size


@runs_upstream(SGLANG)
class TokenKV(UpstreamKV):
    """``token_kv``: upstream ``TokenToKVPoolAllocator(size, dtype, device, kvcache, need_sort)``."""

    upstream_class = "TokenToKVPoolAllocator"
    poolfuzz_contract = "poolfuzz.harness.kits.kv.contracts.token_kv:CONTRACT"

    def __init__(self, size: int, device: str | torch.device = "cpu", need_sort: bool = False, dtype: torch.dtype = torch.float16) -> None:
        upstream = load_upstream().token
        self.inner = upstream.TokenToKVPoolAllocator(size, dtype, torch.device(device), None, need_sort)
        self.size, self.page_size, self.device, self.need_sort = size, 1, torch.device(device), need_sort

    def get_all_free_pages(self) -> torch.Tensor:
        # Upstream's base method; spelled out so the staged pages are always a tensor.
        return torch.cat((self.inner.free_pages, self.inner.release_pages))


@runs_upstream(SGLANG)
class PagedKV(UpstreamKV, ExtendDecodeForwarding):
    """``paged_kv``: upstream ``PagedTokenToKVPoolAllocator(size, page_size, dtype, device, kvcache, need_sort)``.

    ``alloc_extend`` / ``alloc_decode`` are forwarded unchanged (:class:`~poolfuzz.harness.upstream.wrapper.ExtendDecodeForwarding`).

    ``kernel="triton"`` on a CUDA device launches upstream's own Triton kernels; anything
    else (our ``loop``/``vectorized``, or ``triton`` on CPU, where upstream's kernels
    cannot run: they call ``tl.sum``, which triton's interpreter only serves when
    ``TRITON_INTERPRET=1`` was set before triton was imported) runs upstream's torch
    ``alloc_extend_naive`` / ``alloc_decode_naive``, as upstream itself does on a CPU platform.
    ``check_layout`` is accepted for signature compatibility and ignored: upstream
    checks layout only under ``SGLANG_DEBUG_MEMORY_POOL``, which ``debug`` sets per
    instance (off by default, as in production).
    """

    upstream_class = "PagedTokenToKVPoolAllocator"
    poolfuzz_contract = "poolfuzz.harness.kits.kv.contracts.paged_kv:CONTRACT"

    def __init__(
        self,
        size: int,
        page_size: int,
        device: str | torch.device = "cpu",
        need_sort: bool = False,
        kernel: str = "naive",
        check_layout: bool | None = None,
        *,
        dtype: torch.dtype = torch.float16,
        debug: bool = False,
    ) -> None:
        upstream = load_upstream().paged
        self.inner = upstream.PagedTokenToKVPoolAllocator(size, page_size, dtype, torch.device(device), None, need_sort)
        self.size, self.page_size, self.device, self.need_sort = size, page_size, torch.device(device), need_sort
        self.kernel = "triton" if kernel == "triton" and self.device.type == "cuda" else "naive"
        self.inner.use_triton_kernels = self.kernel == "triton"
        self.inner.debug_mode = debug

    @property
    def num_pages(self) -> int:
        return int(self.inner.num_pages)

    def pending_free_pages(self) -> torch.Tensor:
        # free() inside a group keeps token indices, free_page_ids() page ids; group end
        # releases the token pile through free(), i.e. as torch.unique(tokens // ps).
        pages = torch.unique(super().pending_free_pages())
        by_id = self.inner.free_page_ids_group
        return torch.cat((pages, *by_id)) if by_id else pages

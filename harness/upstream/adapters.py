"""Upstream SGLang 0.5.23's allocators behind our families' constructor signatures.

Each wrapper builds the real upstream object (loaded by :mod:`harness.upstream.loader`)
and forwards the family protocol (:mod:`pools.protocols`) to it, translating only
signatures: upstream constructors also take ``dtype`` and ``kvcache`` (unused by the
allocator bookkeeping; ``kvcache=None`` as in upstream's own CPU tests).  No call is
validated or repaired here, so the harness judges upstream's behaviour, not ours.

Upstream does not validate its input, so every wrapper sets
``poolfuzz_check_misuse = False``: machines then issue valid calls only, and every
violation they report is reachable by a caller that keeps the contract.

=================  ====================================  =============================================
family             target spec                           upstream class
=================  ====================================  =============================================
``token_kv``       ``harness.upstream:TokenKV``          ``TokenToKVPoolAllocator``
``paged_kv``       ``harness.upstream:PagedKV``          ``PagedTokenToKVPoolAllocator`` (torch naive path)
``mamba_slots``    ``harness.upstream:MambaSlots``       ``MambaSlotAllocator``
=================  ====================================  =============================================
"""

from __future__ import annotations

import operator
from typing import Any, ClassVar

import torch

from harness.upstream.loader import SUPPORTED_VERSION, load_upstream


def _empty(device: str | torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64, device=device)


class _Upstream:
    """What every wrapper shares: the misuse switch, the wrapped object, provenance."""

    poolfuzz_check_misuse: ClassVar[bool] = False
    upstream_class: ClassVar[str] = ""
    upstream_version: ClassVar[str] = SUPPORTED_VERSION
    inner: Any

    def __repr__(self) -> str:
        return f"<upstream sglang=={self.upstream_version} {self.upstream_class} size={self.inner.size}>"

    def available_size(self) -> int:
        return int(self.inner.available_size())

    def alloc(self, need_size: int) -> torch.Tensor | None:
        return self.inner.alloc(need_size)  # type: ignore[no-any-return]

    def free(self, indices: torch.Tensor) -> None:
        self.inner.free(indices)


class _UpstreamKV(_Upstream):
    """The allocator surface shared by the token and paged wrappers."""

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

    def free_group_begin(self) -> None:
        self.inner.free_group_begin()

    def free_group_end(self) -> None:
        self.inner.free_group_end()

    def merge_and_sort_free(self) -> None:
        self.inner.merge_and_sort_free()

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        self.inner.free_segment(free_index, start_pos=start_pos)

    def clear(self) -> None:
        self.inner.clear()

    def get_all_free_pages(self) -> torch.Tensor:
        """Free list plus pages released but not yet merged (``need_sort``)."""
        return self.inner.get_all_free_pages()  # type: ignore[no-any-return]

    def pending_free_pages(self) -> torch.Tensor:
        """Pages enqueued in the open free group (upstream keeps token indices; pages here)."""
        pending = self.inner.free_group
        if not pending:
            return _empty(self.device)
        return torch.cat(pending) // self.page_size


class TokenKV(_UpstreamKV):
    """``token_kv``: upstream ``TokenToKVPoolAllocator(size, dtype, device, kvcache, need_sort)``."""

    upstream_class = "TokenToKVPoolAllocator"
    poolfuzz_contract = "harness.upstream.contracts.token_kv:CONTRACT"

    def __init__(
        self, size: int, device: str | torch.device = "cpu", need_sort: bool = False, dtype: torch.dtype = torch.float16
    ) -> None:
        upstream = load_upstream().token
        self.inner = upstream.TokenToKVPoolAllocator(size, dtype, torch.device(device), None, need_sort)
        self.size, self.page_size, self.device, self.need_sort = size, 1, torch.device(device), need_sort

    def get_all_free_pages(self) -> torch.Tensor:
        # Upstream's base method; spelled out so the staged pages are always a tensor.
        return torch.cat((self.inner.free_pages, self.inner.release_pages))


class PagedKV(_UpstreamKV):
    """``paged_kv``: upstream ``PagedTokenToKVPoolAllocator(size, page_size, dtype, device, kvcache, need_sort)``.

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
    poolfuzz_contract = "harness.upstream.contracts.paged_kv:CONTRACT"

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

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
    ) -> torch.Tensor | None:
        return self.inner.alloc_extend(  # type: ignore[no-any-return]
            prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens
        )

    def alloc_decode(self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor) -> torch.Tensor | None:
        return self.inner.alloc_decode(seq_lens, seq_lens_cpu, last_loc)  # type: ignore[no-any-return]


class MambaSlots(_Upstream):
    """``mamba_slots``: upstream ``MambaSlotAllocator(size, device)``.

    Upstream keeps a group's reservation as an iterator over length-1 tensors and has
    neither a window flag nor a record of live slots, so this wrapper derives what the
    family protocol reads, without changing what upstream does:

    * :meth:`reserved_slots` reads what is left of the iterator without advancing it;
    * :attr:`group_open` is set by ``alloc_group_begin`` and cleared by ``alloc_group_end``
      (upstream opens no visible window when the pool is short, but the caller's window is
      open all the same).  Upstream's ``clear()`` does not touch the group: afterwards the
      window stays in effect exactly as far as its iterator still has slots to hand out;
    * :meth:`is_live` is "in range, neither free nor reserved": a slot upstream loses
      track of therefore shows up as live, and the conservation audit catches it.
    """

    upstream_class = "MambaSlotAllocator"
    poolfuzz_contract = "harness.upstream.contracts.mamba_slots:CONTRACT"

    def __init__(self, size: int, device: str | torch.device = "cpu") -> None:
        upstream = load_upstream().mamba
        self.inner = upstream.MambaSlotAllocator(size, torch.device(device))
        self.size, self.device = size, torch.device(device)
        self.group_open = False

    @property
    def free_slots(self) -> torch.Tensor:
        return self.inner.free_slots  # type: ignore[no-any-return]

    def reserved_slots(self) -> list[int]:
        """The open group's unconsumed reservation, in hand-out order (read without consuming)."""
        iterator = self.inner._alloc_iter
        if iterator is None:
            return []
        state = iterator.__reduce__()  # (iter, (chunks,), position); an exhausted one drops the position
        chunks, position = state[1][0], (state[2] if len(state) > 2 else 0)
        return [int(chunk) for chunk in chunks[position:]]

    def reserved_size(self) -> int:
        iterator = self.inner._alloc_iter
        return 0 if iterator is None else operator.length_hint(iterator)

    def is_live(self, slot: int) -> bool:
        if not 0 < slot <= self.size:
            return False
        return slot not in self.inner.free_slots.tolist() and slot not in self.reserved_slots()

    def alloc_group_begin(self, num_reqs: int) -> None:
        self.inner.alloc_group_begin(num_reqs)
        self.group_open = True

    def alloc_group_end(self) -> None:
        self.inner.alloc_group_end()
        self.group_open = False

    def clear(self) -> None:
        self.inner.clear()
        self.group_open = self.group_open and self.reserved_size() > 0

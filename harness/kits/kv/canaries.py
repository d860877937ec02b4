"""KV-allocator canaries: ``TokenToKVPoolAllocator`` and ``PagedTokenToKVPoolAllocator`` with one bug put back.

Kernel bugs are planted as broken page-index kernels swapped into an
otherwise correct paged allocator, the way a rewrite would ship them; the
allocator bugs override the one method that carried them upstream.
"""

from __future__ import annotations

import torch
from torch import Tensor

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.pools.kv_allocator import _PENDING, PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import PageKernel
from poolfuzz.pools.page_alloc.vectorized import alloc_decode_vectorized, alloc_extend_vectorized, token_positions

PHASE2_BOUND = 8
"""The compile-time phase-2 bound of :func:`extend_truncated_phase2`, in tokens (upstream: ``chunked_prefill_size``)."""


# ------------------------------------------------------------------ kernels
def extend_without_empty_guard(
    prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int
) -> None:
    """The vectorised extend of seed 002 before its empty-pool guard.

    :func:`~poolfuzz.pools.page_alloc.vectorized.alloc_extend_vectorized` with the
    ``free_pages.numel() == 0`` branch taken out, and nothing else changed.

    ``torch.where`` evaluates the new-page branch for every slot, so the gather
    into ``free_pages`` runs even when every slot continues the prefix's
    partial page; with ``free_pages`` empty the clamp range is ``[0, -1]`` and
    the gather indexes an empty tensor.
    """
    ps = page_size
    num_tokens = out_indices.numel()
    if prefix_lens.numel() == 0 or num_tokens == 0:
        return
    owner, pre, pos = token_positions(prefix_lens, seq_lens, num_tokens)
    first_new_page = (prefix_lens + (ps - 1)) // ps
    in_partial = pos < first_new_page[owner] * ps
    continued = last_loc[owner] + 1 + (pos - pre)
    n_new = (seq_lens + (ps - 1)) // ps - first_new_page
    page_start = torch.cumsum(n_new, 0) - n_new
    page_idx = (page_start[owner] + pos // ps - first_new_page[owner]).clamp(0, free_pages.numel() - 1)
    fresh = free_pages[page_idx] * ps + pos % ps
    out_indices.copy_(torch.where(in_partial, continued, fresh))


def extend_truncated_phase2(
    prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int
) -> None:
    """Phase 2 bounded by a compile-time maximum of :data:`PHASE2_BOUND` tokens (SGLang #9271).

    Whole-page tokens past the bound are never written; the output buffer's
    previous contents stay there.  The buffer is pinned to zeros first so the
    leftovers are deterministic: slot 0, the padding page.
    """
    out_indices.zero_()
    full = torch.empty_like(out_indices)
    alloc_extend_vectorized(prefix_lens, seq_lens, last_loc, free_pages, full, page_size)
    ps = page_size
    written: list[Tensor] = []
    for pre, seq in zip(prefix_lens.tolist(), seq_lens.tolist()):
        pos = torch.arange(pre, seq, dtype=torch.int64)
        phase2_start = -(-pre // ps) * ps
        phase2_end = max(phase2_start, seq // ps * ps)
        in_phase2 = (pos >= phase2_start) & (pos < phase2_end)
        written.append(~in_phase2 | (pos - phase2_start < PHASE2_BOUND))
    if written:
        keep = torch.cat(written).to(out_indices.device)
        out_indices.copy_(torch.where(keep, full, out_indices))


# --------------------------------------------------------------- allocators
class SilentDoubleFreeTokens(TokenToKVPoolAllocator):
    """``free`` appends without validation (0.5.23, sglang-pools.md section 8, hazard 6).

    A slot freed twice is on the free list twice and later goes to two
    requests.  Caught by ``misuse-rejected``: the double free must raise.
    """

    def free(self, indices: Tensor) -> None:
        if indices.numel() == 0:
            return
        slots = indices.to(self.device, torch.int64) // self.page_size  # a copy, as the real free makes
        if self._free_group is not None:
            self._page_state[slots] = _PENDING
            self._free_group.append(slots)
            return
        self._free_now(slots)


class FreeGroupAliasing(PagedTokenToKVPoolAllocator):
    """Deferred frees keep the caller's tensor, not a copy (SGLang #34067).

    Callers pass views of ``req_to_token`` rows and overwrite them before
    ``free_group_end``, which then releases whatever the view holds by then.
    Caught by ``group-window``: a group end releases exactly what was enqueued.
    """

    def free(self, indices: Tensor) -> None:
        if self._free_group is None or not isinstance(indices, Tensor) or indices.numel() == 0:
            super().free(indices)
            return
        pages = self._pages_of(indices)
        self._page_state[pages] = _PENDING
        self._free_group.append(indices)  # the bug: the caller's tensor, not a clone

    def free_group_end(self) -> None:
        if self._free_group is None:
            super().free_group_end()  # raises GroupStateError
            return
        pending, self._free_group = self._free_group, None
        if not pending:
            return
        # Whatever the queued tensors hold now is released, unvalidated, as upstream did.
        pages = torch.unique(torch.cat([t.to(self.device, torch.int64) for t in pending]) // self.page_size)
        self._free_now(pages)


class ExtendWithoutEmptyGuard(PagedTokenToKVPoolAllocator):
    """The vectorised extend kernel without its empty-``free_pages`` guard (seed 002).

    An extend that stays inside the prefix's partial page needs no new page,
    so ``free_pages`` is legitimately empty; the kernel still gathers from it
    and crashes.  Caught by ``valid-call-accepted``.
    """

    def __init__(self, size: int, page_size: int, device: str | torch.device = "cpu", need_sort: bool = False,
                 kernel: str = "vectorized", check_layout: bool | None = None) -> None:
        super().__init__(size, page_size, device, need_sort, "vectorized", check_layout)
        self.kernel = PageKernel("vectorized-no-empty-guard", extend_without_empty_guard, alloc_decode_vectorized)


class TruncatedPhase2(PagedTokenToKVPoolAllocator):
    """An extend kernel whose phase 2 stops after :data:`PHASE2_BOUND` tokens (SGLang #9271).

    Longer extends keep stale output slots: page 0's padding slot here, garbage
    or another request's slot upstream.  Caught by ``page-layout``.
    """

    def __init__(self, size: int, page_size: int, device: str | torch.device = "cpu", need_sort: bool = False,
                 kernel: str = "vectorized", check_layout: bool | None = None) -> None:
        super().__init__(size, page_size, device, need_sort, "vectorized", check_layout)
        self.kernel = PageKernel("truncated-phase2", extend_truncated_phase2, alloc_decode_vectorized)


class CapacityCheckedAfterKernel(PagedTokenToKVPoolAllocator):
    """``alloc_extend`` / ``alloc_decode`` launch before checking capacity (SGLang #34399).

    The kernel is handed the free list as it is, however short.  The snapshot's
    naive kernel (our ``loop``) raises on the short read, as upstream's short
    slice assignment did; the Triton kernel read past the end instead.  Caught
    by ``valid-call-accepted``: a short pool must return ``None``, not crash.
    """

    def __init__(self, size: int, page_size: int, device: str | torch.device = "cpu", need_sort: bool = False,
                 kernel: str = "loop", check_layout: bool | None = None) -> None:
        super().__init__(size, page_size, device, need_sort, "loop", check_layout)
        self._launching = False

    def _take_pages(self, num_pages: int) -> Tensor | None:
        if not self._launching:
            return super()._take_pages(num_pages)
        if num_pages > len(self.free_pages):
            self.merge_and_sort_free()
        return self.free_pages[:num_pages]  # the bug: launched on whatever is there, checked afterwards

    def alloc_extend(self, prefix_lens: Tensor, prefix_lens_cpu: Tensor, seq_lens: Tensor, seq_lens_cpu: Tensor,
                     last_loc: Tensor, extend_num_tokens: int) -> Tensor | None:
        self._launching = True
        try:
            return super().alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                                        extend_num_tokens)
        finally:
            self._launching = False

    def alloc_decode(self, seq_lens: Tensor, seq_lens_cpu: Tensor, last_loc: Tensor) -> Tensor | None:
        self._launching = True
        try:
            return super().alloc_decode(seq_lens, seq_lens_cpu, last_loc)
        finally:
            self._launching = False


class PageSize1DecodeConsumesNothing(PagedTokenToKVPoolAllocator):
    """Decode counts new pages with ``seq % ps == 1`` (upstream ``get_num_new_pages``; sglang-pools.md 3.5).

    At page size 1 the count is always zero: nothing is consumed and the kernel
    gets an empty slice, yet (like the Triton kernel, which indexes the whole
    free list) it reads ``free_pages[rank]`` for every request, so the slots it
    hands out stay on the free list and go out again next step.  Caught by
    ``page-layout``: exactly ``get_num_new_pages`` pages are consumed.
    """

    def __init__(self, size: int, page_size: int, device: str | torch.device = "cpu", need_sort: bool = False,
                 kernel: str = "vectorized", check_layout: bool | None = None) -> None:
        super().__init__(size, page_size, device, need_sort, "vectorized", check_layout)
        self.kernel = PageKernel("vectorized-reads-whole-free-list", alloc_extend_vectorized, self._decode_kernel)
        self._decoding = 0

    def _decode_kernel(self, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor,
                       page_size: int) -> None:
        if page_size != 1:
            alloc_decode_vectorized(seq_lens, last_loc, free_pages, out_indices, page_size)
            return
        # Like the Triton kernel: request i reads the whole free list at its rank, however short the slice.
        whole = self.free_pages
        if whole.numel() == 0:
            out_indices.copy_(last_loc + 1)
            return
        rank = torch.arange(len(seq_lens), device=whole.device).clamp(max=whole.numel() - 1)
        out_indices.copy_(whole[rank])

    def _buggy(self) -> bool:
        # Only where the pool holds a page for every request: short of that the miscount would also pass a
        # short pool (an ``empty-pool-guard`` breach), and the canary plants one bug with one symptom.
        return self.page_size == 1 and 0 < self._decoding <= len(self.free_pages)

    def _take_pages(self, num_pages: int) -> Tensor | None:
        return self.free_pages[:0] if self._buggy() else super()._take_pages(num_pages)

    def _consume(self, num_pages: int) -> None:
        super()._consume(0 if self._buggy() else num_pages)

    def alloc_decode(self, seq_lens: Tensor, seq_lens_cpu: Tensor, last_loc: Tensor) -> Tensor | None:
        self._decoding = len(seq_lens)
        try:
            return super().alloc_decode(seq_lens, seq_lens_cpu, last_loc)
        finally:
            self._decoding = 0


CANARIES: dict[str, Canary] = {
    "silent-double-free-tokens": Canary(
        "token_kv", "poolfuzz.harness.kits.kv.canaries:SilentDoubleFreeTokens",
        "TokenToKVPoolAllocator.free appends without validation: a double free is accepted",
        "sglang-pools.md section 8, hazard 6", "misuse-rejected",
    ),
    "free-group-aliasing": Canary(
        "paged_kv", "poolfuzz.harness.kits.kv.canaries:FreeGroupAliasing",
        "deferred frees keep the caller's tensor instead of a clone",
        "SGLang #34067", "group-window",
    ),
    "extend-without-empty-guard": Canary(
        "paged_kv", "poolfuzz.harness.kits.kv.canaries:ExtendWithoutEmptyGuard",
        "vectorised extend gathers from an empty free_pages (no empty-pool guard)",
        "seed 002", "empty-pool-guard",
    ),
    "truncated-phase2": Canary(
        "paged_kv", "poolfuzz.harness.kits.kv.canaries:TruncatedPhase2",
        f"extend kernel writes only the first {PHASE2_BOUND} phase-2 tokens of a request",
        "SGLang #9271", "reserved-never-handed-out",
    ),
    "capacity-checked-after-kernel": Canary(
        "paged_kv", "poolfuzz.harness.kits.kv.canaries:CapacityCheckedAfterKernel",
        "alloc_extend/alloc_decode launch the kernel before checking capacity",
        "SGLang #34399", "empty-pool-guard",
    ),
    "page-size-1-decode-consumes-nothing": Canary(
        "paged_kv", "poolfuzz.harness.kits.kv.canaries:PageSize1DecodeConsumesNothing",
        "decode counts new pages with seq % ps == 1: zero at page size 1",
        "sglang-pools.md sections 3.5 and 8, hazard 1", "page-layout",
    ),
}

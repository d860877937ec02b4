"""One page-allocation batch as plain data: what the differential engine judges and the strategies draw.

A :class:`PageBatch` is an extend (or decode) batch over an *owned layout*: each
request's prefix holds its own pages, ``last_loc`` is the true slot of token
``prefix - 1`` (``-1`` for an empty prefix) and the free list is made of pages
nobody owns.  It holds ints only; :meth:`PageBatch.tensors` builds the tensors a
kernel or ``alloc_extend`` receives.  It lives in the judge, which never imports
hypothesis; :mod:`poolfuzz.harness.kits.kv.page_moves` builds and draws it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["FreeKind", "PageBatch", "PageTensors"]

FreeKind = Literal["exact", "short", "ample"]


def _ceil_div(x: int, d: int) -> int:
    return -(-x // d)


@dataclass(frozen=True)
class PageTensors:
    """One batch as the tensors a kernel or ``alloc_extend`` receives (int64, on ``device``)."""

    prefix_lens: torch.Tensor
    seq_lens: torch.Tensor
    last_loc: torch.Tensor
    free_pages: torch.Tensor


@dataclass(frozen=True)
class PageBatch:
    """An extend (or decode) batch over an owned page layout.

    ``prefix_pages[i]`` are the pages request ``i``'s prefix holds, in position
    order; ``free_list`` is the allocator's free list, in the order it hands
    pages out.  For kernel-level use the free list holds exactly
    :attr:`needed` pages (``free_kind == "exact"``); allocator-level batches may
    be one page ``"short"`` or have ``"ample"`` spare pages behind the needed
    ones.  Page ids are ``1..num_pages``; pages in neither list are held by
    requests outside the batch.  For a decode batch ``prefix_lens == seq_lens - 1``.
    """

    page_size: int
    prefix_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    last_loc: tuple[int, ...]
    prefix_pages: tuple[tuple[int, ...], ...]
    free_list: tuple[int, ...]
    num_pages: int
    decode: bool = False
    free_kind: FreeKind = "exact"

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    @property
    def pages_per_request(self) -> tuple[int, ...]:
        """Fresh pages each request consumes: ``ceil(seq/ps) - ceil(pre/ps)``
        (for decode the same formula with ``pre = seq - 1``: one page iff ``(seq - 1) % ps == 0``)."""
        ps = self.page_size
        return tuple(_ceil_div(s, ps) - _ceil_div(p, ps) for p, s in zip(self.prefix_lens, self.seq_lens))

    @property
    def needed(self) -> int:
        return sum(self.pages_per_request)

    @property
    def extend_num_tokens(self) -> int:
        return sum(self.seq_lens) - sum(self.prefix_lens)

    @property
    def short(self) -> bool:
        """True when the free list cannot serve the batch (an allocator must return ``None``)."""
        return len(self.free_list) < self.needed

    @property
    def kernel_pages(self) -> tuple[int, ...]:
        """What a kernel receives: exactly the pages the batch consumes, head of the free list."""
        assert not self.short, "a short batch has no kernel input"
        return self.free_list[: self.needed]

    def tensors(self, device: str | torch.device = "cpu", *, free_pages: tuple[int, ...] | None = None) -> PageTensors:
        """Fresh tensors (``free_pages`` defaults to :attr:`kernel_pages`)."""

        def i64(values: tuple[int, ...]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=device)

        pages = self.kernel_pages if free_pages is None else free_pages
        return PageTensors(i64(self.prefix_lens), i64(self.seq_lens), i64(self.last_loc), i64(pages))

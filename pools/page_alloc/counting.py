"""How many new pages a batch needs, and the call signatures every kernel shares.

The allocator asks this module *before* it launches a kernel: the answer is
how many ids it slices off the front of its free list and passes in as
``free_pages``.  Counting first and launching second is what keeps a kernel
from reading the free list past its logical end (SGLang issue #34399: the
snapshot launched, read out of bounds, and only then noticed it was short).

Extend: a request holding ``pre`` tokens and growing to ``seq`` needs
``ceil(seq/ps) - ceil(pre/ps)`` fresh pages -- the partial last page of the
prefix is finished first and costs nothing.

Decode: ``seq`` is the *post-step* length, so the new token sits at position
``seq - 1`` and needs a fresh page exactly when that position opens a page,
i.e. ``(seq - 1) % ps == 0``.  Upstream ``get_num_new_pages(decode=True)``
(sglang ``srt/utils/common.py``; see sglang-pools.md sections 2.9 and 3.5)
counts ``seq % ps == 1`` instead.  The two agree for every page size except 1,
where ``seq % 1 == 1`` is never true: upstream reports **zero** new pages, the
allocator consumes nothing, and the next step hands out the same slots again.
This module uses the correct predicate, so page size 1 costs one page per
request per step.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from poolfuzz.pools.errors import BadBatchError, BadSizeError

__all__ = ["DecodeFn", "ExtendFn", "check_page_size", "get_num_new_pages", "num_new_pages_per_request"]


class ExtendFn(Protocol):
    """Fill ``out_indices`` with the KV slots of every request's extend tokens.

    See the package docstring of :mod:`poolfuzz.pools.page_alloc` for the contract.
    """

    def __call__(
        self, prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int
    ) -> None: ...


class DecodeFn(Protocol):
    """Fill ``out_indices`` (one slot per request) for one decode step.

    See the package docstring of :mod:`poolfuzz.pools.page_alloc` for the contract.
    """

    def __call__(self, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int) -> None: ...


def check_page_size(pool: str, page_size: int) -> None:
    """Raise :class:`BadSizeError` unless ``page_size`` is an int >= 1."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise BadSizeError(pool, "page_size", page_size, "must be an integer >= 1")


def triton_page_size(page_size: int) -> bool:
    """Whether the ``triton`` kernel takes ``page_size`` (an int >= 1): a power of two, since ``tl.arange(0,
    page_size)`` spans a page.  The one statement of the rule: the kernel, the paged allocator, the drivers and the draws ask it."""
    return page_size & (page_size - 1) == 0


def _ceil_div(x: Tensor, d: int) -> Tensor:
    return (x + (d - 1)) // d


def num_new_pages_per_request(
    seq_lens_cpu: Tensor, page_size: int, prefix_lens_cpu: Tensor | None = None, *, decode: bool = False
) -> Tensor:
    """Per-request count of fresh pages, as an int64 tensor shaped like ``seq_lens_cpu``.

    Extend (``decode=False``): ``ceil(seq/ps) - ceil(prefix/ps)``; a missing
    ``prefix_lens_cpu`` means every request starts empty (prefix 0).

    Decode (``decode=True``): 1 where ``(seq - 1) % ps == 0``, else 0.  The
    prefix is implied (``seq - 1``), so passing ``prefix_lens_cpu`` is an
    error.  This deliberately differs from upstream's ``seq % ps == 1``, which
    returns 0 for every request at page size 1 (see the module docstring).

    Raises :class:`BadSizeError` for ``page_size < 1`` and
    :class:`BadBatchError` for ``seq < prefix``, decode ``seq < 1`` or
    mismatched shapes.  Intended for CPU tensors: on a device the checks sync.
    """
    check_page_size("page_alloc.counting", page_size)
    seq = seq_lens_cpu.to(torch.int64)
    if decode:
        if prefix_lens_cpu is not None:
            raise BadBatchError("page_alloc.counting", "decode implies prefix = seq - 1; pass no prefix_lens")
        if seq.numel() and bool((seq < 1).any()):
            raise BadBatchError("page_alloc.counting", "decode seq_lens are post-step lengths and must be >= 1")
        return ((seq - 1) % page_size == 0).to(torch.int64)
    pre = torch.zeros_like(seq) if prefix_lens_cpu is None else prefix_lens_cpu.to(torch.int64)
    if pre.shape != seq.shape:
        shapes = f"prefix_lens shape {tuple(pre.shape)} != seq_lens shape {tuple(seq.shape)}"
        raise BadBatchError("page_alloc.counting", shapes)
    if seq.numel() and bool(((pre < 0) | (seq < pre)).any()):
        raise BadBatchError("page_alloc.counting", "need 0 <= prefix_len <= seq_len for every request")
    return _ceil_div(seq, page_size) - _ceil_div(pre, page_size)


def get_num_new_pages(seq_lens_cpu: Tensor, page_size: int, prefix_lens_cpu: Tensor | None = None, *, decode: bool = False) -> int:
    """Total fresh pages the batch needs: the length ``free_pages`` must have.

    The sum of :func:`num_new_pages_per_request`.  Note the decode count uses
    ``(seq - 1) % ps == 0``, not upstream's ``seq % ps == 1`` (which returns
    0 at page size 1, so the allocator would hand the same slots out twice).
    """
    per_request = num_new_pages_per_request(seq_lens_cpu, page_size, prefix_lens_cpu, decode=decode)
    return int(per_request.sum().item())

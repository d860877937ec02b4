"""The three page-index kernels: hand-worked cases and a differential property.

``loop`` is the oracle; ``vectorized`` and ``triton`` must match it bit for bit.
Every run starts from an ``out_indices`` poisoned with -7, so a slot that a
kernel forgot to write shows up as -7.  Triton runs through its interpreter on
CPU (slow, so its property test draws few, small batches) and is skipped when
triton is not installed; the ``cuda`` variants skip without a CUDA device.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pools.errors import BadBatchError, BadSizeError, UnknownKernelError
from pools.page_alloc import (
    KERNEL_NAMES,
    get_kernel,
    get_num_new_pages,
    num_new_pages_per_request,
    triton_available,
)

HAS_TRITON = triton_available()
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton (with numpy for its interpreter) is not installed")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

KERNELS = ["loop", "vectorized", pytest.param("triton", marks=needs_triton)]
FAST_KERNELS = ["vectorized", pytest.param("triton", marks=needs_triton)]
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
POISON = -7


@dataclass(frozen=True)
class Batch:
    """One call's inputs as plain lists (``prefix_lens`` is unused for decode)."""

    page_size: int
    seq_lens: list[int]
    last_loc: list[int]
    free_pages: list[int]
    prefix_lens: list[int]


def _i64(values: list[int], device: str) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64, device=device)


def run_extend(kernel: str, b: Batch, device: str = "cpu", out: torch.Tensor | None = None) -> list[int]:
    if out is None:
        out = torch.full((sum(b.seq_lens) - sum(b.prefix_lens),), POISON, dtype=torch.int64, device=device)
    args = [_i64(v, device) for v in (b.prefix_lens, b.seq_lens, b.last_loc, b.free_pages)]
    get_kernel(kernel).extend(*args, out, b.page_size)
    return list(out.tolist())


def run_decode(kernel: str, b: Batch, device: str = "cpu") -> list[int]:
    out = torch.full((len(b.seq_lens),), POISON, dtype=torch.int64, device=device)
    args = [_i64(v, device) for v in (b.seq_lens, b.last_loc, b.free_pages)]
    get_kernel(kernel).decode(*args, out, b.page_size)
    return list(out.tolist())


def ceil_div(x: int, d: int) -> int:
    return -(-x // d)


def lay_out_prefixes(page_size: int, prefix_lens: list[int], ids: Iterator[int]) -> list[int]:
    """Give each prefix its own pages from ``ids``; return the true ``last_loc``s."""
    last_loc = []
    for pre in prefix_lens:
        pages = [next(ids) for _ in range(ceil_div(pre, page_size))]
        last_loc.append(pages[-1] * page_size + (pre - 1) % page_size if pre else -1)
    return last_loc


def owned_batch(page_size: int, prefix_lens: list[int], seq_lens: list[int], page_ids: list[int]) -> Batch:
    """An extend batch as a real allocator sees it.

    Prefixes occupy pages taken from ``page_ids`` in order, ``last_loc`` is the
    true slot of token ``prefix - 1``, and the next ``get_num_new_pages`` ids
    become ``free_pages`` -- exactly the pages the batch needs.
    """
    ids = iter(page_ids)
    last_loc = lay_out_prefixes(page_size, prefix_lens, ids)
    needed = get_num_new_pages(torch.tensor(seq_lens), page_size, torch.tensor(prefix_lens, dtype=torch.int64))
    return Batch(page_size, seq_lens, last_loc, [next(ids) for _ in range(needed)], prefix_lens)


def owned_decode_batch(page_size: int, seq_lens: list[int], page_ids: list[int]) -> Batch:
    """A decode step: the first ``seq - 1`` tokens are already laid out."""
    ids = iter(page_ids)
    last_loc = lay_out_prefixes(page_size, [s - 1 for s in seq_lens], ids)
    needed = get_num_new_pages(torch.tensor(seq_lens, dtype=torch.int64), page_size, decode=True)
    return Batch(page_size, seq_lens, last_loc, [next(ids) for _ in range(needed)], [])

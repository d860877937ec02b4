"""Page-index computation for a paged KV allocator, in three interchangeable kernels.

A paged allocator hands out whole pages of ``ps`` (``page_size``) KV slots; slot
``s`` lives on page ``s // ps``.  Given the pages it has just taken off its free
list, it needs the slot of every new token.  That computation is a kernel with
one of three implementations, all writing the same bits:

``loop``        plain per-request Python, the oracle (:mod:`.loop`);
``vectorized``  whole-batch torch ops, no per-request sync (:mod:`.vectorized`);
``triton``      Triton kernels, compiled on CUDA, interpreted on CPU (:mod:`.triton`).

Contract (shared by all three)
------------------------------
* All tensors are 1-D int64 on one device.  For request ``i``:
  ``0 <= prefix_lens[i] <= seq_lens[i]``; ``last_loc[i]`` is the KV slot of token
  ``prefix_lens[i] - 1`` (``-1`` when the prefix is empty), so
  ``(last_loc + 1) % ps == prefix % ps``.
* ``free_pages`` holds **exactly** the pages to consume, in order: its length is
  the number of new pages the batch needs (:func:`get_num_new_pages`; the
  allocator slices its free list).  It may be **empty** when no request needs a
  page (extends inside the prefix's partial page, zero-length extends, decode
  steps that do not open a page).  No implementation reads ``free_pages`` past
  its end (upstream #34399 launched first and read out of bounds before it
  noticed the pool was short; seed 002 added the empty-list guard to the torch
  path).
* Extend: ``out_indices`` has ``sum(seq - prefix)`` entries; request ``i`` fills
  ``out[S_i : S_i + e_i]`` (``e_i = seq_i - pre_i``, ``S_i`` the exclusive prefix
  sum of ``e``) and owns ``free_pages[P_i : P_i + n_i]`` with
  ``n_i = ceil(seq_i/ps) - ceil(pre_i/ps)`` and ``P_i`` the exclusive prefix sum of
  ``n``.  Phase 1 finishes the prefix's partial page: ``last_loc + 1 + k`` for
  ``k < min(seq, ceil(pre/ps)*ps) - pre``.  Phase 2 fills whole new pages: offset
  ``o`` gets ``free_pages[P_i + o // ps] * ps + o % ps``.  Phase 3 starts the last
  new page: ``free_pages[P_i + n_i - 1] * ps + k`` for ``k < seq - floor(seq/ps)*ps``.
  Every slot for position ``p`` satisfies ``slot % ps == p % ps``.  No phase is
  bounded by a compile-time maximum (upstream #9271 truncated phase 2).
* Decode: ``seq_lens`` are post-step lengths (``>= 1``), one output per request.
  If ``(seq - 1) % ps == 0`` the request gets ``free_pages[rank] * ps`` (``rank`` =
  number of earlier requests that need a page), else ``last_loc + 1``.  At page
  size 1 every request needs a page (upstream counted ``seq % ps == 1``: zero).
* ``loop`` and ``vectorized`` accept any ``page_size >= 1``; ``triton`` needs a
  power of two.  Empty batches and batches with no extend tokens are no-ops.

Only ``loop`` validates the full contract (it raises
:class:`~poolfuzz.pools.errors.BadBatchError`); the fast paths check shapes only, since
anything more would sync with the device.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from poolfuzz.pools.errors import KernelUnavailableError, UnknownKernelError
from poolfuzz.pools.page_alloc.counting import DecodeFn, ExtendFn, get_num_new_pages, num_new_pages_per_request
from poolfuzz.pools.page_alloc.loop import alloc_decode_loop, alloc_extend_loop
from poolfuzz.pools.page_alloc.vectorized import alloc_decode_vectorized, alloc_extend_vectorized

__all__ = [
    "KERNEL_NAMES",
    "DecodeFn",
    "ExtendFn",
    "PageKernel",
    "get_kernel",
    "get_num_new_pages",
    "num_new_pages_per_request",
    "triton_available",
]

KERNEL_NAMES: tuple[str, ...] = ("loop", "vectorized", "triton")


@dataclass(frozen=True)
class PageKernel:
    """One implementation: its registry name and its extend/decode entry points."""

    name: str
    extend: ExtendFn
    decode: DecodeFn


@cache
def triton_available() -> bool:
    """Whether the ``triton`` kernel can be loaded here.

    True when ``poolfuzz.pools.page_alloc.triton`` imports, i.e. triton is installed and
    its interpreter (which needs numpy) is importable.  Calling this imports
    triton; merely importing :mod:`pools` does not.  A CUDA device is not
    required: CPU tensors run through the interpreter.
    """
    try:
        importlib.import_module("poolfuzz.pools.page_alloc.triton")
    except ImportError:
        return False
    return True


def get_kernel(name: str) -> PageKernel:
    """Return the implementation called ``name`` (one of :data:`KERNEL_NAMES`).

    Raises :class:`~poolfuzz.pools.errors.UnknownKernelError` for any other name.  The
    triton module is imported only here, on first request; where it cannot load
    (triton not installed, or its interpreter's numpy missing) this raises
    :class:`~poolfuzz.pools.errors.KernelUnavailableError`, an ``ImportError`` too
    (check :func:`triton_available` first).
    """
    if name == "loop":
        return PageKernel(name, alloc_extend_loop, alloc_decode_loop)
    if name == "vectorized":
        return PageKernel(name, alloc_extend_vectorized, alloc_decode_vectorized)
    if name == "triton":
        try:
            from poolfuzz.pools.page_alloc import triton as triton_kernels
        except ImportError as exc:
            raise KernelUnavailableError(name, "triton (and numpy for its CPU interpreter)", str(exc)) from exc
        return PageKernel(name, triton_kernels.alloc_extend_triton, triton_kernels.alloc_decode_triton)
    raise UnknownKernelError(name, KERNEL_NAMES)

"""The page-allocation differential engine: every kernel must write what the loop oracle writes.

Two levels, one verdict (invariant ``kernel-agreement``):

* **Kernel level** -- :func:`check_kernels` runs the loop oracle and each other
  implementation on cloned inputs.  ``out_indices`` is poisoned with
  :data:`POISON` before every run, so a slot an implementation forgot to write
  shows.  Each implementation runs three times: on exactly the pages it
  consumes, as a fresh tensor; on a *view* of those pages inside a longer
  buffer whose tail holds sentinel pages (what an allocator passes: a slice of
  its free list); and, except for the oracle, which rejects it by contract, on
  the whole guarded buffer.  No output may name a sentinel page: reading
  ``free_pages`` past what a batch consumes is the #34399 bug.  Outputs must be
  bit-identical, and the pages they use must be exactly ``free_pages``, in
  order (identical page consumption, invariant ``page-layout`` for the oracle).
* **Allocator level** -- :func:`check_allocators` brings one
  ``PagedTokenToKVPoolAllocator`` per kernel to the batch's state through the
  public API, issues the same ``alloc_extend``/``alloc_decode``, and demands
  identical results and free lists; a batch one page short must return
  ``None`` and consume nothing (``empty-pool-guard``).

Kernels are passed as :class:`~poolfuzz.pools.page_alloc.PageKernel` values, so a test
can hand in a deliberately broken variant and watch this module catch it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from poolfuzz.harness.judge.invariants import InvariantViolation, check, check_slot_layout
from poolfuzz.harness.judge.page_batch import PageBatch
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import PageKernel, get_kernel, triton_available
from poolfuzz.pools.page_alloc.counting import triton_page_size

POISON = -7777
"""Written into ``out_indices`` before each run: no real slot is negative."""

GUARD_PAGES = 4
"""Sentinel pages appended behind ``free_pages`` in the guarded runs."""

AllocatorFactory = Callable[..., Any]


def kernel_names(page_size: int) -> list[str]:
    """The registered kernels that can serve ``page_size`` here (triton: installed and a power of two)."""
    names = ["loop", "vectorized"]
    if triton_available() and triton_page_size(page_size):
        names.append("triton")
    return names


def kernels_for(page_size: int) -> list[PageKernel]:
    return [get_kernel(name) for name in kernel_names(page_size)]


def sentinel_pages(batch: PageBatch, count: int = GUARD_PAGES) -> tuple[int, ...]:
    """Page ids no batch page uses (beyond ``num_pages``), recognisable in any output."""
    return tuple(range(batch.num_pages + 1001, batch.num_pages + 1001 + count))


def locate(batch: PageBatch, index: int) -> dict[str, int]:
    """Which request and token position output slot ``index`` belongs to."""
    start = 0
    for request, (pre, seq) in enumerate(zip(batch.prefix_lens, batch.seq_lens)):
        width = 1 if batch.decode else seq - pre
        if index < start + width:
            return {"request": request, "position": pre + index - start, "prefix_len": pre, "seq_len": seq}
        start += width
    return {"request": -1, "position": -1}


@dataclass(frozen=True)
class Run:
    """One implementation's output on one input variant."""

    kernel: str
    variant: str
    out: list[int]


def run_kernel(kernel: PageKernel, batch: PageBatch, *, device: str = "cpu", variant: str = "exact") -> Run:
    """Run ``kernel`` on fresh tensors; ``variant`` is ``exact``, ``view`` or ``guarded`` (see module doc)."""
    pages = batch.kernel_pages
    if variant == "exact":
        free = batch.tensors(device).free_pages
    else:
        buffer = batch.tensors(device, free_pages=pages + sentinel_pages(batch)).free_pages
        free = buffer[: len(pages)] if variant == "view" else buffer
    t = batch.tensors(device)
    width = batch.batch_size if batch.decode else batch.extend_num_tokens
    out = torch.full((width,), POISON, dtype=torch.int64, device=device)
    if batch.decode:
        kernel.decode(t.seq_lens, t.last_loc, free, out, batch.page_size)
    else:
        kernel.extend(t.prefix_lens, t.seq_lens, t.last_loc, free, out, batch.page_size)
    return Run(kernel.name, variant, out.tolist())


def pages_consumed(batch: PageBatch, out: list[int]) -> list[int]:
    """The fresh pages an output uses, in order of first use (prefix pages are not consumed)."""
    ps, held = batch.page_size, {p for pages in batch.prefix_pages for p in pages}
    seen: dict[int, None] = {}
    for slot in out:
        if slot >= 0 and slot // ps not in held:
            seen.setdefault(slot // ps, None)
    return list(seen)


def check_layout(batch: PageBatch, out: list[int]) -> None:
    """``page-layout`` on the oracle's output: offsets, continuation of ``last_loc``, pages in order."""
    j = 0
    for request, (pre, seq, last) in enumerate(zip(batch.prefix_lens, batch.seq_lens, batch.last_loc)):
        check_slot_layout(out[j: j + seq - pre], prefix=pre, last_loc=last, page_size=batch.page_size,
                          what="oracle output", request=request)
        j += seq - pre
    used = pages_consumed(batch, out)
    check(used == list(batch.kernel_pages), "page-layout", "the pages used are not exactly free_pages, in order",
          used=used[:16], free_pages=list(batch.kernel_pages)[:16])


def _first_difference(batch: PageBatch, expected: Run, actual: Run) -> InvariantViolation | None:
    if expected.out == actual.out:
        return None
    if len(expected.out) != len(actual.out):
        return InvariantViolation("kernel-agreement", f"{actual.kernel} ({actual.variant}) wrote a different length",
                                  expected=len(expected.out), actual=len(actual.out))
    index = next(i for i, (a, b) in enumerate(zip(expected.out, actual.out)) if a != b)
    return InvariantViolation(
        "kernel-agreement",
        f"{actual.kernel} ({actual.variant} free_pages) differs from {expected.kernel} at output {index}",
        index=index, expected=expected.out[index], actual=actual.out[index],
        unwritten=actual.out[index] == POISON, page_size=batch.page_size, **locate(batch, index),
    )


def _run_checked(kernel: PageKernel, batch: PageBatch, device: str, variant: str) -> Run:
    try:
        return run_kernel(kernel, batch, device=device, variant=variant)
    except Exception as exc:
        raise InvariantViolation(
            "kernel-agreement", f"{kernel.name} ({variant} free_pages) raised {type(exc).__name__}: {exc}",
            page_size=batch.page_size, batch_size=batch.batch_size,
        ) from exc


def check_kernels(
    batch: PageBatch, kernels: Sequence[PageKernel] | None = None, *, device: str = "cpu",
    oracle: PageKernel | None = None,
) -> list[int]:
    """Raise ``kernel-agreement`` unless every kernel matches the oracle on every input variant.

    ``kernels`` defaults to every kernel that serves the page size here.  The
    oracle (default: ``loop``) runs on the ``exact`` and ``view`` variants;
    the others on all three.  Returns the oracle's output.
    """
    oracle = oracle or get_kernel("loop")
    expected = run_kernel(oracle, batch, device=device)
    check(POISON not in expected.out, "page-layout", "the oracle left a slot unwritten")
    check_layout(batch, expected.out)
    sentinels = set(sentinel_pages(batch))
    for kernel in kernels if kernels is not None else kernels_for(batch.page_size):
        variants = ("exact", "view") if kernel is oracle or kernel.name == oracle.name else ("exact", "view", "guarded")
        for variant in variants:
            run = _run_checked(kernel, batch, device, variant)
            read_past = sorted({s // batch.page_size for s in run.out if s >= 0} & sentinels)
            check(not read_past, "kernel-agreement", f"{kernel.name} ({variant}) used pages past free_pages",
                  sentinel_pages=read_past, free_pages=len(batch.kernel_pages))
            difference = _first_difference(batch, expected, run)
            if difference is not None:
                raise difference
    return expected.out


# ------------------------------------------------------------ allocator level


def build_allocator(
    batch: PageBatch, kernel: str, *, device: str = "cpu", factory: AllocatorFactory = PagedTokenToKVPoolAllocator
) -> Any:
    """An allocator whose prefixes hold their pages and whose free list is ``batch.free_list``, in order.

    Built through the public API only: take every page, then free the free list
    one page at a time from its tail (the paged allocator prepends frees).
    """
    ps = batch.page_size
    allocator = factory(size=batch.num_pages * ps, page_size=ps, device=device, kernel=kernel)
    assert allocator.alloc(batch.num_pages * ps) is not None
    for page in reversed(batch.free_list):
        allocator.free(torch.tensor([page * ps], dtype=torch.int64, device=device))
    return allocator


@dataclass(frozen=True)
class AllocatorOutcome:
    kernel: str
    out: list[int] | None
    free_after: list[int]


def run_allocator(
    batch: PageBatch, kernel: str, *, device: str = "cpu", factory: AllocatorFactory = PagedTokenToKVPoolAllocator
) -> AllocatorOutcome:
    allocator = build_allocator(batch, kernel, device=device, factory=factory)
    before = allocator.get_all_free_pages().tolist()
    check(before == list(batch.free_list), "conservation", "the allocator's free list is not the one built",
          built=before[:16], wanted=list(batch.free_list)[:16])
    t = batch.tensors(device, free_pages=())
    seq_cpu = t.seq_lens.cpu()
    what = f"alloc_{'decode' if batch.decode else 'extend'} ({kernel})"
    try:
        if batch.decode:
            out = allocator.alloc_decode(t.seq_lens, seq_cpu, t.last_loc)
        else:
            out = allocator.alloc_extend(t.prefix_lens, t.prefix_lens.cpu(), t.seq_lens, seq_cpu, t.last_loc,
                                         batch.extend_num_tokens)
    except Exception as exc:
        raise InvariantViolation("valid-call-accepted", f"{what} raised {type(exc).__name__}: {exc}") from exc
    return AllocatorOutcome(kernel, None if out is None else out.tolist(), allocator.get_all_free_pages().tolist())


def check_allocators(
    batch: PageBatch, kernels: Sequence[str] | None = None, *, device: str = "cpu",
    factory: AllocatorFactory = PagedTokenToKVPoolAllocator,
) -> None:
    """Every kernel choice of the allocator gives the oracle's slots and the same free list.

    A short batch must return ``None`` with the free list untouched; otherwise
    the result equals the loop kernel's output on the free list's head and the
    allocator keeps exactly the rest of its free list.
    """
    free = list(batch.free_list)
    expected_out = None if batch.short else run_kernel(get_kernel("loop"), batch, device=device).out
    expected_free = free if batch.short else free[batch.needed :]
    for kernel in kernels if kernels is not None else kernel_names(batch.page_size):
        got = run_allocator(batch, kernel, device=device, factory=factory)
        if batch.short:
            check(got.out is None, "empty-pool-guard", f"{kernel}: a batch one page short was served",
                  needed=batch.needed, free=len(free))
            check(got.free_after == free, "empty-pool-guard", f"{kernel}: a refused batch consumed pages",
                  before=free[:16], after=got.free_after[:16])
            continue
        check(got.out is not None, "empty-pool-guard", f"{kernel}: refused a batch it had room for",
              needed=batch.needed, free=len(free))
        assert got.out is not None and expected_out is not None
        difference = _first_difference(batch, Run("loop", "allocator", expected_out), Run(kernel, "allocator", got.out))
        if difference is not None:
            raise difference
        check(got.free_after == expected_free, "kernel-agreement", f"{kernel}: free list after the call differs",
              expected=expected_free[:16], actual=got.free_after[:16])

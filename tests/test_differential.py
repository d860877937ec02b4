"""Differential tests: every page-index implementation writes exactly what the loop oracle writes.

The engine is :mod:`poolfuzz.harness.judge.differential`; the inputs come from
:mod:`poolfuzz.harness.kits.kv.page_moves` (owned layouts, exact/short/ample free lists).
On CPU, Triton runs through its interpreter, which is slow, so it gets a few
small batches of its own; on CUDA every kernel, Triton compiled, runs on the
full-size draws.  The last test plants the seed-002 class of bug (floor for
ceil in the vectorised phase arithmetic) and shows the engine catches it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from torch import Tensor

from poolfuzz.harness.judge.differential import check_allocators, check_kernels, kernel_names, kernels_for
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.kv.page_moves import FreeKind, PageBatch, build_page_batch, decode_batches, extend_batches
from poolfuzz.pools.page_alloc import PageKernel, get_kernel, triton_available
from poolfuzz.pools.page_alloc.vectorized import token_positions
from tests.conftest import DEVICES

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton (and numpy for its interpreter) not installed")
ALL_FREE_LISTS: tuple[FreeKind, ...] = ("exact", "short", "ample")
INTERPRETED = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))


def kernels_on(device: str, page_size: int) -> list[PageKernel]:
    """Every kernel on CUDA; on CPU the interpreted Triton kernel has tests of its own."""
    return [k for k in kernels_for(page_size) if device != "cpu" or k.name != "triton"]


@pytest.mark.parametrize("device", DEVICES)
@given(batch=extend_batches())
def test_every_kernel_writes_the_oracles_slots_for_an_extend_batch(device: str, batch: PageBatch) -> None:
    check_kernels(batch, kernels_on(device, batch.page_size), device=device)


@pytest.mark.parametrize("device", DEVICES)
@given(batch=decode_batches())
def test_every_kernel_writes_the_oracles_slots_for_a_decode_batch(device: str, batch: PageBatch) -> None:
    check_kernels(batch, kernels_on(device, batch.page_size), device=device)


@pytest.mark.parametrize("device", DEVICES)
@given(
    batch=st.one_of(
        extend_batches(max_batch=16, max_tokens=256, free_kinds=ALL_FREE_LISTS), decode_batches(max_batch=16, free_kinds=ALL_FREE_LISTS)
    )
)
def test_allocators_with_every_kernel_return_the_same_slots_and_free_lists(device: str, batch: PageBatch) -> None:
    names = [n for n in kernel_names(batch.page_size) if device != "cpu" or n != "triton"]
    check_allocators(batch, names, device=device)


@needs_triton
@INTERPRETED
@given(batch=st.one_of(extend_batches(triton=True, max_batch=4, max_tokens=48, huge=False), decode_batches(triton=True, max_batch=4)))
def test_interpreted_triton_writes_the_oracles_slots_on_small_batches(batch: PageBatch) -> None:
    check_kernels(batch, [get_kernel("triton")])


@needs_triton
@INTERPRETED
@given(batch=extend_batches(triton=True, max_batch=3, max_tokens=32, huge=False, free_kinds=ALL_FREE_LISTS))
def test_an_allocator_on_interpreted_triton_agrees_with_the_loop_allocator(batch: PageBatch) -> None:
    check_allocators(batch, ["loop", "triton"])


@given(batch=decode_batches(max_batch=32))
def test_a_decode_step_writes_what_a_one_token_extend_writes(batch: PageBatch) -> None:
    extend = replace(batch, decode=False)
    assert check_kernels(batch, []) == check_kernels(extend, [])


EDGES = {
    "every extend is zero: empty free_pages": build_page_batch(4, [3, 0, 8], [3, 0, 8]),
    "extends inside the partial page: empty free_pages": build_page_batch(4, [1, 5], [3, 7]),
    "page-aligned prefixes have no phase 1": build_page_batch(4, [4, 8], [6, 13], order="sorted"),
    "page size 1: one page per token": build_page_batch(1, [1, 0, 2], [2, 3, 2], order="reversed"),
    "page size 1 decode consumes a page per request": build_page_batch(1, [0, 4, 7], [1, 5, 8], decode=True),
    "odd page size": build_page_batch(3, [2, 0, 5], [11, 4, 6], seed=7),
    "an extend longer than one Triton block": build_page_batch(8, [5], [5 + 2_500], seed=3),
    "a decode that opens no page": build_page_batch(4, [5, 6], [6, 7], decode=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("edge", EDGES)
def test_every_kernel_agrees_on_the_edges_that_bit_sglang(edge: str, device: str) -> None:
    batch = EDGES[edge]
    small = batch.extend_num_tokens < 64  # small enough for interpreted Triton too
    check_kernels(batch, kernels_for(batch.page_size) if small else kernels_on(device, batch.page_size), device=device)
    for kind in ALL_FREE_LISTS:
        shaped = build_page_batch(
            batch.page_size, list(batch.prefix_lens), list(batch.seq_lens), free_kind=kind, spare=2, decode=batch.decode
        )
        check_allocators(shaped, ["loop", "vectorized"], device=device)


# --- the harness has teeth ---------------------------------------------------


def _extend_with_floor_bug(
    prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int
) -> None:
    """``alloc_extend_vectorized`` with one planted bug: the first new page is floor(pre/ps), not ceil."""
    ps, num_tokens = page_size, out_indices.numel()
    if prefix_lens.numel() == 0 or num_tokens == 0:
        return
    owner, pre, pos = token_positions(prefix_lens, seq_lens, num_tokens)
    first_new_page = prefix_lens // ps  # BUG: should be (prefix_lens + ps - 1) // ps
    in_partial = pos < first_new_page[owner] * ps
    continued = last_loc[owner] + 1 + (pos - pre)
    if free_pages.numel() == 0:
        assert bool(in_partial.all()), "free_pages is empty but the batch needs new pages"
        out_indices.copy_(continued)
        return
    n_new = (seq_lens + ps - 1) // ps - first_new_page
    page_idx = (torch.cumsum(n_new, 0) - n_new)[owner] + pos // ps - first_new_page[owner]
    fresh = free_pages[page_idx.clamp(0, free_pages.numel() - 1)] * ps + pos % ps
    out_indices.copy_(torch.where(in_partial, continued, fresh))


FLOOR_BUG = PageKernel("vectorized-floor-bug", _extend_with_floor_bug, get_kernel("vectorized").decode)


def _catches(batch: PageBatch) -> bool:
    try:
        check_kernels(batch, [FLOOR_BUG])
    except InvariantViolation as violation:
        assert violation.invariant_id == "kernel-agreement", violation
        return True
    return False


def test_a_floor_for_ceil_bug_in_the_vectorized_phase_arithmetic_fails_kernel_agreement() -> None:
    search = settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    minimal = find(extend_batches(max_batch=8, max_tokens=64), _catches, settings=search)
    # Shrunk, it is the textbook case: a mid-page prefix (here or in an earlier request, whose
    # miscounted pages shift every later request's share of free_pages).
    ps = minimal.page_size
    assert ps > 1 and any(p % ps for p in minimal.prefix_lens), minimal
    with pytest.raises(InvariantViolation, match="kernel-agreement"):
        check_kernels(minimal, [FLOOR_BUG])


def test_the_unmodified_vectorized_kernel_passes_where_the_planted_bug_fails() -> None:
    batch = build_page_batch(4, [3], [6], seed=1)
    check_kernels(batch, [get_kernel("vectorized")])
    with pytest.raises(InvariantViolation, match="kernel-agreement"):
        check_kernels(batch, [FLOOR_BUG])

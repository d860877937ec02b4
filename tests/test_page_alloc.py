"""The three page-index kernels: hand-worked cases and a differential property.

``loop`` is the oracle; ``vectorized`` and ``triton`` must match it bit for bit.
Every run starts from an ``out_indices`` poisoned with -7, so a slot that a
kernel forgot to write shows up as -7.  Triton runs through its interpreter on
CPU (slow, so its property test draws few, small batches) and is skipped when
triton is not installed; the ``cuda`` variants skip without a CUDA device.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from poolfuzz.harness.machines.without import without_modules
from poolfuzz.pools.errors import BadBatchError, BadSizeError, KernelUnavailableError, UnknownKernelError
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import KERNEL_NAMES, get_kernel, get_num_new_pages, num_new_pages_per_request, triton_available
from tests.processes import python

HAS_TRITON = triton_available()
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton (with numpy for its interpreter) is not installed")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

KERNELS = ["loop", "vectorized", pytest.param("triton", marks=needs_triton)]
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
    pre, seq, last, free = (_i64(v, device) for v in (b.prefix_lens, b.seq_lens, b.last_loc, b.free_pages))
    get_kernel(kernel).extend(pre, seq, last, free, out, b.page_size)
    return list(out.tolist())


def run_decode(kernel: str, b: Batch, device: str = "cpu") -> list[int]:
    out = torch.full((len(b.seq_lens),), POISON, dtype=torch.int64, device=device)
    seq, last, free = (_i64(v, device) for v in (b.seq_lens, b.last_loc, b.free_pages))
    get_kernel(kernel).decode(seq, last, free, out, b.page_size)
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
    needed = get_num_new_pages(_i64(seq_lens, "cpu"), page_size, _i64(prefix_lens, "cpu"))
    return Batch(page_size, seq_lens, last_loc, [next(ids) for _ in range(needed)], prefix_lens)


def owned_decode_batch(page_size: int, seq_lens: list[int], page_ids: list[int]) -> Batch:
    """A decode step: the first ``seq - 1`` tokens are already laid out."""
    ids = iter(page_ids)
    last_loc = lay_out_prefixes(page_size, [s - 1 for s in seq_lens], ids)
    needed = get_num_new_pages(_i64(seq_lens, "cpu"), page_size, decode=True)
    return Batch(page_size, seq_lens, last_loc, [next(ids) for _ in range(needed)], [])


def assert_extend_layout(b: Batch, slots: list[int]) -> None:
    """The layout invariant, checked on the oracle's output.

    Position ``p`` lands at offset ``p % ps`` of either the prefix's own last
    page or one of the request's new pages, no slot is handed out twice, and
    every page in ``free_pages`` is used.
    """
    ps, start, used_pages = b.page_size, 0, set()
    pages = iter(b.free_pages)
    for pre, seq, last in zip(b.prefix_lens, b.seq_lens, b.last_loc):
        own = {last // ps} if pre % ps else set()
        own |= {next(pages) for _ in range(ceil_div(seq, ps) - ceil_div(pre, ps))}
        for p, slot in zip(range(pre, seq), slots[start : start + seq - pre]):
            assert slot % ps == p % ps and slot // ps in own, (p, slot, own)
        used_pages |= {slot // ps for slot in slots[start : start + seq - pre]}
        start += seq - pre
    assert len(set(slots)) == len(slots) == start
    assert set(b.free_pages) <= used_pages


# --- registry and counting ---------------------------------------------------


def test_every_registered_name_yields_a_kernel_of_that_name() -> None:
    names = [n for n in KERNEL_NAMES if n != "triton" or HAS_TRITON]
    assert [get_kernel(n).name for n in names] == names


def test_an_unknown_kernel_name_raises_unknown_kernel_error() -> None:
    with pytest.raises(UnknownKernelError) as err:
        get_kernel("cuda-graph")
    assert err.value.name == "cuda-graph" and err.value.known == list(KERNEL_NAMES)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed: there is nothing to block")
def test_without_triton_the_kernel_is_reported_missing_and_refused_with_a_typed_error_then_restored() -> None:
    with without_modules(["triton"]):
        assert not triton_available()
        with pytest.raises(KernelUnavailableError, match="needs triton") as err:
            PagedTokenToKVPoolAllocator(64, 4, kernel="triton")
        assert isinstance(err.value, ImportError) and err.value.kernel == "triton"
    assert triton_available()
    assert get_kernel("triton").name == "triton"


class _TakesTriton(random.Random):
    """A chooser whose every uniform draw takes the Triton kernel where the strategy offers it."""

    def random(self) -> float:
        return 0.999


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed: there is nothing to block")
def test_the_kernel_strategy_stops_and_resumes_drawing_triton_with_the_block_whatever_it_drew_before() -> None:
    from poolfuzz.harness.kits.kv.configs import kernel

    assert kernel(_TakesTriton(0), page_size=4) == "triton"  # an answer a cache could keep
    with without_modules(["triton"]):
        assert kernel(_TakesTriton(0), page_size=4) != "triton"
    assert kernel(_TakesTriton(0), page_size=4) == "triton"


def test_importing_the_package_does_not_import_triton() -> None:
    code = "import sys, poolfuzz.pools.page_alloc; assert 'triton' not in sys.modules, 'triton imported eagerly'"
    done = python("-c", code, cwd=Path.cwd(), timeout=120)
    assert done.returncode == 0, done.stderr


def test_extend_page_count_skips_the_partial_prefix_page() -> None:
    seq, pre = _i64([10, 5, 4, 8], "cpu"), _i64([3, 0, 4, 8], "cpu")
    assert num_new_pages_per_request(seq, 4, pre).tolist() == [2, 2, 0, 0]
    assert get_num_new_pages(seq, 4, pre) == 4
    assert get_num_new_pages(seq, 4) == 3 + 2 + 1 + 2  # no prefix: every request starts empty


@pytest.mark.parametrize(("page_size", "expected"), [(1, 3), (4, 2), (3, 1)])
def test_decode_page_count_is_one_per_request_whose_new_token_opens_a_page(page_size: int, expected: int) -> None:
    # Upstream counted seq % ps == 1, which is never true at page size 1 (it said 0).
    per_request = num_new_pages_per_request(_i64([5, 7, 9], "cpu"), page_size, decode=True)
    assert per_request.dtype == torch.int64 and int(per_request.sum()) == expected


def test_page_counts_reject_impossible_inputs() -> None:
    with pytest.raises(BadSizeError):
        get_num_new_pages(_i64([3], "cpu"), 0)
    with pytest.raises(BadBatchError):
        get_num_new_pages(_i64([3], "cpu"), 4, _i64([5], "cpu"))
    with pytest.raises(BadBatchError):
        get_num_new_pages(_i64([0], "cpu"), 4, decode=True)


# --- hand-worked examples ----------------------------------------------------


EXTEND_CASES = {
    # pre 3 finishes page 2 (slot 11), then whole page 5 and the head of page 6;
    # request 1 starts empty on pages 7, 8; request 2 extends by nothing.
    "partial prefix, empty prefix, zero-length": (
        Batch(4, seq_lens=[10, 5, 4], last_loc=[10, -1, 23], free_pages=[5, 6, 7, 8], prefix_lens=[3, 0, 4]),
        [11, 20, 21, 22, 23, 24, 25, 28, 29, 30, 31, 32],
    ),
    # Page-aligned prefixes have no phase 1: the first new token opens a new page.
    "page-aligned prefixes": (
        Batch(4, seq_lens=[6, 13], last_loc=[7, 39], free_pages=[3, 12, 2], prefix_lens=[4, 8]),
        [12, 13, 48, 49, 50, 51, 8],
    ),
    # Both extends stay inside the prefix's partial page: no page is needed.
    "extends inside the partial page need no free pages": (
        Batch(4, seq_lens=[3, 7], last_loc=[40, 52], free_pages=[], prefix_lens=[1, 5]),
        [41, 42, 53, 54],
    ),
    "zero-length extends around a real one": (
        Batch(2, seq_lens=[2, 3, 5], last_loc=[9, -1, 20], free_pages=[4, 6], prefix_lens=[2, 0, 5]),
        [8, 9, 12],
    ),
    "every request extends by zero": (Batch(4, seq_lens=[3, 0], last_loc=[6, -1], free_pages=[], prefix_lens=[3, 0]), []),
    "an empty batch": (Batch(4, seq_lens=[], last_loc=[], free_pages=[], prefix_lens=[]), []),
    "page size 1 hands out free_pages in order": (
        Batch(1, seq_lens=[2, 3], last_loc=[5, 7], free_pages=[9, 3, 4], prefix_lens=[1, 1]),
        [9, 3, 4],
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", list(EXTEND_CASES))
def test_extend_matches_the_hand_worked_example(case: str, kernel: str, device: str) -> None:
    batch, expected = EXTEND_CASES[case]
    assert run_extend(kernel, batch, device) == expected
    assert_extend_layout(batch, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["loop", "vectorized"])
def test_loop_and_vectorized_accept_a_page_size_of_three(kernel: str, device: str) -> None:
    # pre 2 on page 1 (last_loc 4): slot 5 finishes it, then page 7 whole, then the head of page 4.
    batch = Batch(3, seq_lens=[8, 4], last_loc=[4, -1], free_pages=[7, 4, 10, 11], prefix_lens=[2, 0])
    assert run_extend(kernel, batch, device) == [5, 21, 22, 23, 12, 13, 30, 31, 32, 33]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_an_extend_longer_than_one_kernel_block_is_written_to_the_end(kernel: str, device: str) -> None:
    # Upstream #9271: a constexpr bound on the extend length dropped phase 2's tail.
    ps, pages = 4, list(range(3000, 1000, -1))
    batch = owned_batch(ps, [1, 0], [1 + 4 * 1100 + 3, 9], pages)
    assert run_extend(kernel, batch, device) == run_extend("loop", batch)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_extend_writes_through_a_strided_out_indices_view(kernel: str, device: str) -> None:
    batch, expected = EXTEND_CASES["partial prefix, empty prefix, zero-length"]
    backing = torch.full((2 * len(expected),), POISON, dtype=torch.int64, device=device)
    assert run_extend(kernel, batch, device, out=backing[::2]) == expected
    assert set(backing[1::2].tolist()) == {POISON}


DECODE_CASES = {
    # seq 5 and 9 open a page (4 % 4 == 8 % 4 == 0) and take pages 7 and 9; seq 8 continues at 23.
    "two of three requests open a page": (Batch(4, [5, 8, 9], [3, 22, 35], [7, 9], []), [28, 23, 36]),
    "no request opens a page": (Batch(4, [6, 7], [12, 41], [], []), [13, 42]),
    "page size 1 takes one page per request": (Batch(1, [3, 1, 7], [8, -1, 2], [4, 9, 2], []), [4, 9, 2]),
    "a non-power-of-two page size": (Batch(3, [4, 5, 7], [8, 12, 20], [6, 2], []), [18, 13, 6]),
    "an empty batch": (Batch(4, [], [], [], []), []),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", list(DECODE_CASES))
def test_decode_matches_the_hand_worked_example(case: str, kernel: str, device: str) -> None:
    batch, expected = DECODE_CASES[case]
    if kernel == "triton" and batch.page_size & (batch.page_size - 1):
        pytest.skip("the triton kernel needs a power-of-two page size")
    assert run_decode(kernel, batch, device) == expected


def test_the_decode_example_consumes_exactly_the_pages_it_was_counted() -> None:
    batch, _ = DECODE_CASES["two of three requests open a page"]
    assert get_num_new_pages(_i64(batch.seq_lens, "cpu"), batch.page_size, decode=True) == len(batch.free_pages)


# --- contract enforcement ----------------------------------------------------


@needs_triton
@pytest.mark.parametrize("page_size", [3, 6, 12])
def test_triton_rejects_a_page_size_that_is_not_a_power_of_two(page_size: int) -> None:
    batch = owned_batch(page_size, [0], [5], list(range(1, 10)))
    with pytest.raises(BadSizeError) as err:
        run_extend("triton", batch)
    assert (err.value.pool, err.value.name, err.value.value) == ("page_alloc.triton", "page_size", page_size)
    with pytest.raises(BadSizeError):
        run_decode("triton", Batch(page_size, [1], [-1], [4], []))


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_rejects_page_size_zero(kernel: str) -> None:
    with pytest.raises(BadSizeError):
        run_decode(kernel, Batch(0, [1], [-1], [4], []))


@pytest.mark.parametrize("free_pages", [pytest.param([5], id="one page short"), pytest.param([5, 6, 7, 8, 9], id="one page too many")])
def test_the_oracle_rejects_free_pages_of_the_wrong_length(free_pages: list[int]) -> None:
    batch = Batch(4, seq_lens=[10, 5], last_loc=[10, -1], free_pages=free_pages, prefix_lens=[3, 0])
    with pytest.raises(BadBatchError):
        run_extend("loop", batch)


def test_the_oracle_rejects_a_last_loc_off_its_prefix_page_offset() -> None:
    with pytest.raises(BadBatchError) as err:
        run_extend("loop", Batch(4, seq_lens=[6], last_loc=[11], free_pages=[5], prefix_lens=[3]))
    assert err.value.position == 0


# A fresh request of 13 tokens needs 4 pages but is given only 2: a contract
# breach that upstream #34399 turned into reads past the end of the free list.
SHORT = Batch(4, seq_lens=[13], last_loc=[-1], free_pages=[5, 6], prefix_lens=[0])


@needs_triton
def test_triton_masks_reads_past_a_short_free_pages_list_to_page_minus_one() -> None:
    assert run_extend("triton", SHORT) == [20, 21, 22, 23, 24, 25, 26, 27, -4, -3, -2, -1, -4]


def test_vectorized_clamps_reads_past_a_short_free_pages_list_to_its_last_page() -> None:
    assert run_extend("vectorized", SHORT) == [20, 21, 22, 23, 24, 25, 26, 27, 24, 25, 26, 27, 24]


# --- differential property ---------------------------------------------------


@st.composite
def extend_batches(draw: st.DrawFn, page_sizes: tuple[int, ...], max_bs: int, max_len: int) -> Batch:
    ps = draw(st.sampled_from(page_sizes))
    bs = draw(st.integers(0, max_bs))
    prefix_lens = draw(st.lists(st.integers(0, max_len), min_size=bs, max_size=bs))
    extend_lens = draw(st.lists(st.integers(0, max_len), min_size=bs, max_size=bs))
    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    pool = 1 + 2 * bs * (ceil_div(2 * max_len, ps) + 1)  # room for a scattered layout; page 0 stays reserved
    page_ids = random.Random(draw(st.integers(0, 2**32 - 1))).sample(range(1, pool), pool - 1)
    return owned_batch(ps, prefix_lens, seq_lens, page_ids)


@st.composite
def decode_batches(draw: st.DrawFn, page_sizes: tuple[int, ...], max_bs: int, max_len: int) -> Batch:
    ps = draw(st.sampled_from(page_sizes))
    seq_lens = draw(st.lists(st.integers(1, max_len), max_size=max_bs))
    pool = 1 + 2 * len(seq_lens) * (ceil_div(max_len, ps) + 1)
    page_ids = random.Random(draw(st.integers(0, 2**32 - 1))).sample(range(1, pool), pool - 1)
    return owned_decode_batch(ps, seq_lens, page_ids)


ANY_PAGE_SIZE = (1, 2, 3, 4, 5, 8, 16)
POW2_PAGE_SIZE = (1, 2, 4, 8)


def assert_kernels_agree(kernel: str, extend: Batch, decode: Batch, device: str) -> None:
    oracle = run_extend("loop", extend)
    assert_extend_layout(extend, oracle)
    assert run_extend(kernel, extend, device) == oracle
    assert run_decode(kernel, decode, device) == run_decode("loop", decode)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=80, deadline=None)
@given(extend=extend_batches(ANY_PAGE_SIZE, max_bs=6, max_len=40), decode=decode_batches(ANY_PAGE_SIZE, max_bs=8, max_len=40))
def test_vectorized_matches_the_loop_oracle_on_random_owned_batches(extend: Batch, decode: Batch, device: str) -> None:
    assert_kernels_agree("vectorized", extend, decode, device)


@needs_triton
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(extend=extend_batches(POW2_PAGE_SIZE, max_bs=4, max_len=24), decode=decode_batches(POW2_PAGE_SIZE, max_bs=5, max_len=24))
def test_triton_matches_the_loop_oracle_on_random_owned_batches(extend: Batch, decode: Batch, device: str) -> None:
    assert_kernels_agree("triton", extend, decode, device)

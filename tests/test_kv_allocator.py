"""Unit tests of ``poolfuzz.pools.kv_allocator``: the token and the paged KV allocators.

Every test runs on each device of ``tests.conftest.DEVICES`` (CUDA variants skip
without a GPU); the extend/decode tests also run over the page-index kernels
(``triton`` through its CPU interpreter, skipped where it does not import).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from poolfuzz.pools import errors
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import PageKernel, get_kernel, triton_available
from poolfuzz.pools.page_states import DEVICE_PATH_ON_CPU
from tests.conftest import DEVICES
from tests.indices import idx, ints

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton (with numpy for its interpreter) is not installed")
KERNELS = ["loop", "vectorized", pytest.param("triton", marks=needs_triton)]

Allocator = TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator


@pytest.fixture(params=[*DEVICES, "cpu with the device code path"])
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each device, plus the CPU running the torch checks a device pool uses (one host read per call)."""
    if request.param == "cpu with the device code path":
        monkeypatch.setenv(DEVICE_PATH_ON_CPU, "1")
        return "cpu"
    return str(request.param)


def paged(num_pages: int, device: str, ps: int = 4, **kwargs: Any) -> PagedTokenToKVPoolAllocator:
    return PagedTokenToKVPoolAllocator(num_pages * ps, ps, device, **kwargs)


def snapshot(alloc: Allocator) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    return (ints(alloc.free_pages), ints(alloc.get_all_free_pages()), alloc.available_size(),
            alloc.in_free_group, ints(alloc.pending_free_pages()))


def pages_of(slots: list[int], ps: int) -> list[int]:
    return list(dict.fromkeys(s // ps for s in slots))


def extend(alloc: PagedTokenToKVPoolAllocator, pres: list[int], seqs: list[int], lasts: list[int]) -> torch.Tensor | None:
    dev = alloc.device
    pre, seq = torch.tensor(pres, dtype=torch.int64), torch.tensor(seqs, dtype=torch.int64)
    return alloc.alloc_extend(pre.to(dev), pre, seq.to(dev), seq, torch.tensor(lasts, device=dev), sum(seqs) - sum(pres))


def decode(alloc: PagedTokenToKVPoolAllocator, seqs: list[int], lasts: list[int]) -> torch.Tensor | None:
    seq = torch.tensor(seqs, dtype=torch.int64)
    return alloc.alloc_decode(seq.to(alloc.device), seq, torch.tensor(lasts, device=alloc.device))


# ------------------------------------------------------------------ capacity
def test_alloc_of_zero_returns_an_empty_tensor_and_takes_nothing(device: str) -> None:
    for alloc in (TokenToKVPoolAllocator(3, device), paged(3, device)):
        before = snapshot(alloc)
        assert ints(alloc.alloc(0)) == []
        assert snapshot(alloc) == before


def test_the_token_allocator_fills_exactly_and_then_refuses_one_more_slot(device: str) -> None:
    alloc = TokenToKVPoolAllocator(4, device)
    assert alloc.alloc(5) is None and alloc.available_size() == 4
    assert ints(alloc.alloc(4)) == [1, 2, 3, 4]
    before = snapshot(alloc)
    assert alloc.alloc(1) is None
    assert snapshot(alloc) == before == ([], [], 0, False, [])


def test_the_paged_allocator_fills_exactly_and_then_refuses_one_more_page(device: str) -> None:
    alloc = paged(3, device, ps=4)
    assert alloc.alloc(16) is None and alloc.available_size() == 12
    slots = ints(alloc.alloc(12))
    assert slots == list(range(4, 16))  # pages 1..3 whole and in order; page 0 (slots 0..3) stays out
    assert alloc.available_size() == 0 and alloc.alloc(4) is None


def test_page_zero_is_never_handed_out_even_after_everything_was_freed(device: str) -> None:
    alloc = paged(3, device, ps=2)
    first = ints(alloc.alloc(6))
    alloc.free(idx(first, device))
    again = ints(alloc.alloc(6))
    assert sorted(again) == list(range(2, 8)) and min(first) >= 2


# ------------------------------------------------------------- reuse order
def test_the_paged_allocator_reuses_the_most_recently_freed_page_first(device: str) -> None:
    alloc = paged(4, device, ps=2)
    slots = ints(alloc.alloc(6))  # pages 1, 2, 3
    alloc.free(idx(slots[0:2], device))  # page 1
    alloc.free(idx(slots[4:6], device))  # page 3, freed last
    assert ints(alloc.free_pages) == [3, 1, 4]
    assert pages_of(ints(alloc.alloc(2)), 2) == [3]


def test_the_token_allocator_appends_freed_slots_to_the_tail(device: str) -> None:
    alloc = TokenToKVPoolAllocator(4, device)
    assert ints(alloc.alloc(3)) == [1, 2, 3]
    alloc.free(idx([2], device))
    assert ints(alloc.alloc(2)) == [4, 2]


def test_freeing_one_token_of_a_page_frees_the_whole_page_once(device: str) -> None:
    alloc = paged(2, device, ps=4)
    slots = ints(alloc.alloc(8))
    alloc.free(idx([slots[1], slots[2], slots[7]], device))  # two tokens of page 1, one of page 2
    assert sorted(ints(alloc.free_pages)) == [1, 2] and alloc.available_size() == 8


# ----------------------------------------------------------------- staging
def test_need_sort_stages_frees_and_merges_them_sorted_only_when_short(device: str) -> None:
    alloc = paged(4, device, ps=2, need_sort=True)
    slots = ints(alloc.alloc(6))  # pages 1, 2, 3; page 4 free
    alloc.free(idx(slots[4:6], device))
    alloc.free(idx(slots[0:2], device))
    assert ints(alloc.free_pages) == [4] and alloc.available_size() == 6
    assert sorted(ints(alloc.get_all_free_pages())) == [1, 3, 4]
    assert pages_of(ints(alloc.alloc(2)), 2) == [4]  # fits without merging
    assert pages_of(ints(alloc.alloc(4)), 2) == [1, 3]  # short: merged and sorted first


def test_merge_and_sort_free_sorts_the_staged_pages_into_the_free_list(device: str) -> None:
    alloc = TokenToKVPoolAllocator(5, device, need_sort=True)
    alloc.alloc(4)
    alloc.free(idx([3, 1], device))
    assert ints(alloc.free_pages) == [5]
    alloc.merge_and_sort_free()
    assert ints(alloc.free_pages) == [1, 3, 5] and alloc.available_size() == 3


# ------------------------------------------------------------- free groups
@pytest.mark.parametrize("make", [lambda d: TokenToKVPoolAllocator(6, d), lambda d: paged(6, d, ps=1)],
                         ids=["token", "paged"])
def test_a_free_group_releases_what_was_enqueued_even_if_the_caller_overwrites_it(
    make: Callable[[str], Allocator], device: str
) -> None:
    """SGLang #34067: a queued view of req_to_token was overwritten before the group ended."""
    alloc = make(device)
    slots = ints(alloc.alloc(4))
    row = idx(slots, device)
    alloc.free_group_begin()
    alloc.free(row[:2])
    row[:2] = row[2:]  # the row is reused: the queued view now names slots 3 and 4
    assert alloc.available_size() == 2 and ints(alloc.pending_free_pages()) == slots[:2]
    alloc.free_group_end()
    assert sorted(ints(alloc.get_all_free_pages())) == sorted(slots[:2] + [5, 6])


def test_nested_free_group_begin_raises_and_keeps_the_open_group(device: str) -> None:
    alloc = paged(2, device, ps=2)
    slots = ints(alloc.alloc(2))
    alloc.free_group_begin()
    alloc.free(idx(slots, device))
    before = snapshot(alloc)
    with pytest.raises(errors.GroupStateError):
        alloc.free_group_begin()
    assert snapshot(alloc) == before
    alloc.free_group_end()
    assert alloc.available_size() == 4


def test_free_group_end_without_begin_raises(device: str) -> None:
    alloc = TokenToKVPoolAllocator(2, device)
    with pytest.raises(errors.GroupStateError):
        alloc.free_group_end()


def test_clear_closes_the_free_group_and_frees_everything(device: str) -> None:
    alloc = paged(3, device, ps=2, need_sort=True)
    slots = ints(alloc.alloc(6))
    alloc.free(idx(slots[:2], device))
    alloc.free_group_begin()
    alloc.free(idx(slots[2:4], device))
    alloc.clear()
    assert not alloc.in_free_group and ints(alloc.free_pages) == [1, 2, 3] and alloc.available_size() == 6
    alloc.free_group_begin()  # no nesting error: the group was closed


# --------------------------------------------------------- extend / decode
@pytest.mark.parametrize("kernel", KERNELS)
def test_decode_at_page_size_one_takes_one_page_per_request(kernel: str, device: str) -> None:
    """Upstream counted ``seq % ps == 1``: zero pages at page size 1, so slots were handed out twice."""
    alloc = PagedTokenToKVPoolAllocator(6, 1, device, kernel=kernel)
    first = ints(extend(alloc, [0, 0], [2, 1], [-1, -1]))
    assert first == [1, 2, 3]
    out = ints(decode(alloc, [3, 2], [first[1], first[2]]))
    assert out == [4, 5] and alloc.available_size() == 1
    assert decode(alloc, [4, 3], [4, 5]) is None and alloc.available_size() == 1


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_full_pool_still_extends_and_decodes_inside_partial_pages(kernel: str, device: str) -> None:
    """Seed 002: an empty free list is a normal input when no request needs a page."""
    ps = 4 if kernel == "triton" else 3
    alloc = PagedTokenToKVPoolAllocator(2 * ps, ps, device, kernel=kernel)
    slots = ints(extend(alloc, [0, 0], [1, 1], [-1, -1]))  # two requests, one page each
    assert alloc.available_size() == 0
    more = ints(extend(alloc, [1, 1], [2, ps - 1], slots))
    assert more == [slots[0] + 1] + [slots[1] + k for k in range(1, ps - 1)]
    step = ints(decode(alloc, [3], [more[0]]))
    assert step == [slots[0] + 2] and alloc.available_size() == 0
    assert extend(alloc, [3], [ps + 1], [step[0]]) is None  # crossing the page edge needs a page: refused


@pytest.mark.parametrize("kernel", KERNELS)
def test_extend_takes_new_pages_off_the_free_list_in_batch_order(kernel: str, device: str) -> None:
    alloc = PagedTokenToKVPoolAllocator(8 * 4, 4, device, kernel=kernel)
    taken = ints(alloc.alloc(12))  # pages 1, 2, 3
    alloc.free(idx(taken[8:], device))  # page 3
    alloc.free(idx(taken[:4], device))  # page 1: free list is now 1, 3, 4, 5, ...
    out = ints(extend(alloc, [0, 0], [5, 3], [-1, -1]))  # needs 2 + 1 pages
    assert out == [4, 5, 6, 7, 12] + [16, 17, 18]


class RecordingKernel:
    """A page kernel fake: remembers every ``free_pages`` it was given, then runs the oracle."""

    def __init__(self) -> None:
        self.seen: list[list[int]] = []
        loop = get_kernel("loop")

        def extend_fn(prefix_lens: torch.Tensor, seq_lens: torch.Tensor, last_loc: torch.Tensor,
                      free_pages: torch.Tensor, out_indices: torch.Tensor, page_size: int) -> None:
            self.seen.append(ints(free_pages))
            loop.extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size)

        def decode_fn(seq_lens: torch.Tensor, last_loc: torch.Tensor, free_pages: torch.Tensor,
                      out_indices: torch.Tensor, page_size: int) -> None:
            self.seen.append(ints(free_pages))
            loop.decode(seq_lens, last_loc, free_pages, out_indices, page_size)

        self.kernel = PageKernel("recording", extend_fn, decode_fn)


def test_capacity_is_checked_before_the_kernel_sees_the_free_list(device: str) -> None:
    """SGLang #34399: the kernel ran on a too-short free list before the pool noticed it was short."""
    alloc = paged(3, device, ps=2)
    fake = RecordingKernel()
    alloc.kernel = fake.kernel
    assert extend(alloc, [0], [7], [-1]) is None  # needs 4 pages, 3 free
    assert fake.seen == []
    out = ints(extend(alloc, [0], [5], [-1]))
    assert fake.seen == [[1, 2, 3]]
    # Position 5 shares page 3: a decode that opens no page is answered from last_loc, without the kernel.
    assert ints(decode(alloc, [6], [out[-1]])) == [out[-1] + 1] and len(fake.seen) == 1
    assert decode(alloc, [7], [out[-1] + 1]) is None and len(fake.seen) == 1


# ------------------------------------------------------------------ misuse
def _misuse_cases() -> list[Any]:
    """``(name, make, call, error)``: each call breaks the contract on a pool with pages 1, 2 live."""

    def token(d: str) -> Allocator:
        alloc = TokenToKVPoolAllocator(4, d)
        alloc.alloc(2)
        return alloc

    def paged2(d: str) -> Allocator:
        alloc = paged(4, d, ps=2, check_layout=True)  # last_loc checks are opt-in on CUDA (a sync per call)
        extend(alloc, [0], [3], [-1])  # pages 1, 2: slots 2, 3, 4
        return alloc

    def grouped(d: str) -> Allocator:
        alloc = paged2(d)
        alloc.free_group_begin()
        alloc.free(idx([2], d))
        return alloc

    cases = [
        ("token double free of a free slot", token, lambda a, d: a.free(idx([3], d)), errors.DoubleFreeError),
        ("token slot twice in one call", token, lambda a, d: a.free(idx([1, 1], d)), errors.DoubleFreeError),
        ("token slot past the end", token, lambda a, d: a.free(idx([5], d)), errors.ForeignIndexError),
        ("token negative slot", token, lambda a, d: a.free(idx([-1], d)), errors.ForeignIndexError),
        ("token slot 0", token, lambda a, d: a.free(idx([0, 1], d)), errors.ReservedIndexError),
        ("token negative alloc", token, lambda a, d: a.alloc(-1), errors.BadSizeError),
        ("token bool alloc", token, lambda a, d: a.alloc(True), errors.BadSizeError),
        ("token float indices", token, lambda a, d: a.free(torch.tensor([1.0], device=d)), errors.BadBatchError),
        ("token 2-D indices", token, lambda a, d: a.free(idx([1], d)[None]), errors.BadBatchError),
        ("paged double free of a free page", paged2, lambda a, d: a.free(idx([6], d)), errors.DoubleFreeError),
        ("paged token of page 0", paged2, lambda a, d: a.free(idx([1], d)), errors.ReservedIndexError),
        ("paged token past the end", paged2, lambda a, d: a.free(idx([10], d)), errors.ForeignIndexError),
        ("paged unaligned alloc", paged2, lambda a, d: a.alloc(3), errors.BadSizeError),
        ("paged negative alloc", paged2, lambda a, d: a.alloc(-2), errors.BadSizeError),
        ("paged free of a pending page", grouped, lambda a, d: a.free(idx([3], d)), errors.DoubleFreeError),
        ("paged extend seq < prefix", paged2, lambda a, d: extend(a, [3], [2], [4]), errors.BadBatchError),
        ("paged extend misaligned last_loc", paged2, lambda a, d: extend(a, [3], [4], [5]), errors.BadBatchError),
        ("paged extend continuing a free page", paged2, lambda a, d: extend(a, [1], [2], [6]), errors.BadBatchError),
        ("paged extend a page-aligned prefix with last_loc -1", paged2,
         lambda a, d: extend(a, [2], [3], [-1]), errors.BadBatchError),
        ("paged extend an empty prefix with a last_loc", paged2, lambda a, d: extend(a, [0], [1], [4]), errors.BadBatchError),
        ("paged extend wrong token count", paged2,
         lambda a, d: a.alloc_extend(idx([0], d), torch.tensor([0]), idx([2], d), torch.tensor([2]), idx([-1], d), 3),
         errors.BadBatchError),
        ("paged decode seq 0", paged2, lambda a, d: decode(a, [0], [-1]), errors.BadBatchError),
        ("paged decode misaligned last_loc", paged2, lambda a, d: decode(a, [4], [3]), errors.BadBatchError),
        ("paged nested group", grouped, lambda a, d: a.free_group_begin(), errors.GroupStateError),
    ]
    return [pytest.param(make, call, error, id=name) for name, make, call, error in cases]


@pytest.mark.parametrize(("make", "call", "error"), _misuse_cases())
def test_misuse_raises_its_typed_error_and_leaves_the_allocator_unchanged(
    make: Callable[[str], Allocator], call: Callable[[Any, str], Any], error: type[errors.PoolError], device: str
) -> None:
    alloc = make(device)
    before = snapshot(alloc)
    with pytest.raises(error):
        call(alloc, device)
    assert snapshot(alloc) == before


@pytest.mark.parametrize(
    "build",
    [lambda: PagedTokenToKVPoolAllocator(10, 4), lambda: PagedTokenToKVPoolAllocator(0, 0),
     lambda: TokenToKVPoolAllocator(-1), lambda: TokenToKVPoolAllocator(8.0),  # type: ignore[arg-type]
     lambda: PagedTokenToKVPoolAllocator(8, 2.0), lambda: PagedTokenToKVPoolAllocator(True, 1)],  # type: ignore[arg-type]
    ids=["unaligned", "page-size-0", "negative", "float-size", "float-page-size", "bool-size"],
)
def test_constructors_reject_impossible_sizes_with_bad_size(build: Callable[[], Any]) -> None:
    with pytest.raises(errors.BadSizeError):
        build()


@needs_triton
def test_the_triton_kernel_refuses_a_page_size_that_is_not_a_power_of_two() -> None:
    with pytest.raises(errors.BadSizeError):
        PagedTokenToKVPoolAllocator(6, 3, kernel="triton")


# ------------------------------------------------------------------ free_segment
def _state(pool: PagedTokenToKVPoolAllocator) -> tuple[list[int], list[int], int]:
    return pool.free_pages.tolist(), pool.pending_free_pages().tolist(), pool.available_size()


def test_free_segment_releases_the_rows_pages_in_row_order_and_a_last_page_it_ends_inside_whole() -> None:
    pool = PagedTokenToKVPoolAllocator(32, 4)
    row = pool.alloc(12)
    assert row is not None
    shuffled = torch.cat((row[8:12], row[0:4]))  # a row whose pages were handed out out of order: 3, then 1
    pool.free_segment(shuffled[:6], start_pos=0)  # ends inside page 1
    assert pool.free_pages.tolist()[:2] == [3, 1]


def test_free_segment_inside_a_group_waits_apart_and_is_released_after_frees_pages() -> None:
    pool = PagedTokenToKVPoolAllocator(32, 4)
    row = pool.alloc(16)
    assert row is not None
    pool.free_group_begin()
    pool.free_segment(row[12:16], start_pos=12)
    pool.free(row[0:4])
    assert sorted(pool.pending_free_pages().tolist()) == [1, 4]
    pool.free_group_end()
    assert pool.free_pages.tolist()[:2] == [4, 1]  # upstream: free_page_ids_group goes to the head last


@pytest.mark.parametrize(("segment", "start_pos", "error"), [
    (slice(4, 8), 2, errors.BadSizeError),  # a start off the page grid
    (slice(4, 8), -4, errors.BadSizeError),
    (None, 0, errors.BadBatchError),        # page 2's tokens in two runs
], ids=["start off the page grid", "negative start", "a page in two runs"])
def test_a_malformed_free_segment_is_refused_and_changes_nothing(segment: slice | None, start_pos: int,
                                                                 error: type[errors.PoolError]) -> None:
    pool = PagedTokenToKVPoolAllocator(32, 4)
    row = pool.alloc(12)
    assert row is not None
    indices = row[segment] if segment is not None else torch.cat((row[4:6], row[8:10], row[6:8]))
    before = _state(pool)
    with pytest.raises(error):
        pool.free_segment(indices, start_pos=start_pos)
    assert _state(pool) == before


def _segment_oracle(live: set[int], indices: list[int], ps: int, last: int) -> list[int] | type[errors.PoolError]:
    """What ``free_segment`` must do with ``indices``, from the contract alone: the error, in the order
    ``free`` reports them, or the pages it releases (the heads of the runs of equal page ids)."""
    if any(i < 0 or i > last for i in indices):
        return errors.ForeignIndexError
    if min(indices) < ps:
        return errors.ReservedIndexError
    pages = [i // ps for i in indices]
    if any(p not in live for p in pages):
        return errors.DoubleFreeError
    runs = [p for k, p in enumerate(pages) if k == 0 or pages[k - 1] != p]
    return errors.BadBatchError if len(set(runs)) < len(runs) else runs


@pytest.mark.parametrize("device_path", [False, True], ids=["host checks", "the device code path"])
@settings(max_examples=300)
@given(tokens=st.lists(st.integers(-2, 41), min_size=1, max_size=24), dtype=st.sampled_from([torch.int64, torch.int32]))
def test_free_segment_frees_exactly_its_runs_pages_or_refuses_as_the_contract_says_and_changes_nothing(
        device_path: bool, tokens: list[int], dtype: torch.dtype) -> None:
    with pytest.MonkeyPatch.context() as patch:
        if device_path:
            patch.setenv(DEVICE_PATH_ON_CPU, "1")
        pool = paged(9, "cpu")  # pages 1..9, tokens 4..39; 40 and 41 are past the pool
    assert pool.alloc(16) is not None and pool.alloc(8) is not None
    pool.free(idx([8], "cpu"))  # page 2 freed: live pages 1, 3, 4, 5, 6
    expected = _segment_oracle({1, 3, 4, 5, 6}, tokens, 4, 39)
    before = snapshot(pool)
    if isinstance(expected, list):
        pool.free_segment(torch.tensor(tokens, dtype=dtype), start_pos=0)
        assert ints(pool.free_pages)[:len(expected)] == expected
        assert pool.available_size() == before[2] + 4 * len(expected)
    else:
        with pytest.raises(expected):
            pool.free_segment(torch.tensor(tokens, dtype=dtype), start_pos=0)
        assert snapshot(pool) == before


def test_a_free_segment_of_pages_already_freed_is_a_double_free() -> None:
    pool = PagedTokenToKVPoolAllocator(32, 4)
    row = pool.alloc(8)
    assert row is not None
    pool.free_segment(row[4:8], start_pos=4)
    before = _state(pool)
    with pytest.raises(errors.DoubleFreeError):
        pool.free_segment(row[4:8], start_pos=4)
    assert _state(pool) == before


def test_the_token_allocators_free_segment_is_its_free_after_the_start_check() -> None:
    pool = TokenToKVPoolAllocator(8)
    slots = pool.alloc(3)
    assert slots is not None
    pool.free_segment(slots[1:], start_pos=1)
    assert pool.free_pages.tolist()[-2:] == slots[1:].tolist()
    with pytest.raises(errors.BadSizeError):
        pool.free_segment(slots[:1], start_pos=True)  # type: ignore[arg-type]

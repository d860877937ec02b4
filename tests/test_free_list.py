"""The cheap-validation building blocks: ``PageFreeList``, ``PageStateTable`` and the bulk paths of the pools.

The pools' own tests (``test_kv_allocator.py``, ``test_mamba.py``) and the
machines judge behaviour through the public calls; these tests pin the
properties the speed-ups rely on: the order of reuse, memory handed out never
rewritten, and every check giving the same answer on its NumPy path, its torch
(device) path and its long-call path.
"""

from __future__ import annotations

import pytest
import torch

from poolfuzz.pools.errors import DoubleFreeError, ForeignIndexError, ReservedIndexError
from poolfuzz.pools.free_list import PageFreeList
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.mamba import MambaSlotAllocator
from poolfuzz.pools.page_states import DEVICE_PATH_ON_CPU, FREE, LIVE, RESERVED, PageStateTable

CPU = torch.device("cpu")


def ids(values: list[int] | range) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int64)


@pytest.fixture(params=["host", "device code path"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each check on its NumPy path and on the torch path a device pool takes."""
    if request.param == "device code path":
        monkeypatch.setenv(DEVICE_PATH_ON_CPU, "1")
    return str(request.param)


# ------------------------------------------------------------------ PageFreeList
def test_the_free_list_pops_from_the_head_and_appends_and_prepends_in_order(path: str) -> None:
    free = PageFreeList(CPU)
    free.replace(ids([1, 2, 3]))
    assert free.take(2).tolist() == [1, 2]
    free.pop(2)
    free.append(ids([7, 8]))
    free.prepend(ids([5, 6]))
    free.append(ids([9]) if path != "host" else [9])
    free.append_one(10)
    assert free.view().tolist() == [5, 6, 3, 7, 8, 9, 10] and len(free) == 7


def test_memory_handed_out_by_take_is_never_rewritten_by_later_appends(path: str) -> None:
    """The token allocator returns ``take`` views to callers, as upstream returns slices of its free list."""
    free = PageFreeList(CPU)
    free.replace(ids(range(1, 9)))
    handed = [free.take(2)]
    free.pop(2)
    for round_ in range(200):  # enough appends to move the buffer several times
        free.append(ids([100 + round_]))
        handed.append(free.take(1))
        free.pop(1)
    assert handed[0].tolist() == [1, 2]
    assert [int(t) for t in handed[1:7]] == [3, 4, 5, 6, 7, 8]


def test_moves_of_the_buffer_amortise_to_a_constant_per_page(path: str) -> None:
    free = PageFreeList(CPU)
    free.replace(ids([1]))
    buffers = set()
    for page in range(2, 5_000):
        free.append_one(page)
        buffers.add(free.view().untyped_storage().data_ptr())
    assert len(buffers) <= 12  # doubling slack: log2(5000 / 64) + a few, not one per append
    assert free.view().tolist() == list(range(1, 5_000))


def test_replace_copies_its_input(path: str) -> None:
    pages = ids([3, 4])
    free = PageFreeList(CPU)
    free.replace(pages)
    pages[0] = 99
    assert free.view().tolist() == [3, 4]


# ------------------------------------------------------------------ PageStateTable
def test_a_clipped_lookup_rejects_negative_ids_page_zero_and_ids_past_the_pool(path: str) -> None:
    table = PageStateTable(4, CPU)
    table.mark(ids([1, 2, 3, 4]), LIVE)
    assert table.valid_free(ids([1, 4]), distinct=True)
    for bad in ([-1], [0], [5], [1 << 40], [1, -7]):
        assert not table.valid_free(ids(bad), distinct=False), bad
    table.mark(ids([2]), FREE)
    assert not table.valid_free(ids([1, 2]), distinct=False)
    assert int(table.states[0]) == RESERVED and int(table.states[-1]) == RESERVED


@pytest.mark.parametrize("length", [2, 64, 65, 300])
def test_a_repeated_id_is_found_wherever_it_sits_in_short_and_long_calls(path: str, length: int) -> None:
    table = PageStateTable(1_000, CPU)
    distinct = ids(range(1, length + 1))
    table.mark(distinct, LIVE)
    assert table.valid_free(distinct, distinct=True)
    for first, second in {(0, 1), (0, length - 1), (length // 2 - 1, length - 1)}:
        repeated = distinct.clone()
        repeated[second] = repeated[first]
        assert not table.valid_free(repeated, distinct=True), (first, second)
        assert table.valid_free(repeated, distinct=False)


def test_unique_sorts_and_deduplicates_like_torch_unique(path: str) -> None:
    table = PageStateTable(50, CPU)
    pages = ids([9, 3, 3, 7, 9, 1, 3])
    assert table.unique(pages).tolist() == torch.unique(pages).tolist() == [1, 3, 7, 9]


# ------------------------------------------------------------------ long calls on the pools
def test_a_token_free_of_many_slots_naming_one_twice_is_refused_and_changes_nothing(path: str) -> None:
    alloc = TokenToKVPoolAllocator(512)
    slots = alloc.alloc(200)
    assert slots is not None
    before = alloc.free_pages.tolist()
    bad = torch.cat([slots, slots[17:18]])
    with pytest.raises(DoubleFreeError, match="twice in one call"):
        alloc.free(bad)
    assert alloc.free_pages.tolist() == before
    alloc.free(slots)
    assert alloc.available_size() == 512


def test_a_token_free_naming_more_slots_than_the_pool_holds_is_a_double_free_not_a_crash(path: str) -> None:
    alloc = TokenToKVPoolAllocator(64)
    slots = alloc.alloc(64)
    assert slots is not None
    before = alloc.free_pages.tolist()
    with pytest.raises(DoubleFreeError, match="twice in one call"):
        alloc.free(torch.cat([slots, slots[:10]]))  # 74 ids, 66 page values: the repeat finder has no room
    assert alloc.free_pages.tolist() == before


def test_a_paged_free_of_many_tokens_frees_each_page_once_in_ascending_order(path: str) -> None:
    alloc = PagedTokenToKVPoolAllocator(64 * 4, 4)
    slots = alloc.alloc(40 * 4)
    assert slots is not None
    alloc.free(slots.flip(0))
    assert alloc.free_pages.tolist()[:40] == list(range(1, 41))


def test_a_mamba_free_of_many_slots_naming_one_twice_is_refused_and_changes_nothing(path: str) -> None:
    alloc = MambaSlotAllocator(300)
    slots = alloc.alloc(100)
    assert slots is not None
    before = alloc.free_slots.tolist()
    with pytest.raises(DoubleFreeError):
        alloc.free(torch.cat([slots, slots[50:51]]))
    assert alloc.free_slots.tolist() == before and all(alloc.is_live(s) for s in slots.tolist())
    alloc.free(slots)
    assert alloc.available_size() == 300


@pytest.mark.parametrize(("bad", "error"), [(0, ReservedIndexError), (301, ForeignIndexError), (-1, ForeignIndexError)])
def test_a_mamba_free_of_one_slot_checks_it_like_a_long_call(path: str, bad: int, error: type[Exception]) -> None:
    alloc = MambaSlotAllocator(300)
    alloc.alloc(1)
    for call in (ids([bad]), torch.cat([ids([bad]), ids(range(2, 80))])):
        with pytest.raises(error):
            alloc.free(call)
    with pytest.raises(DoubleFreeError):
        alloc.free(ids([2]))  # never handed out


def test_runs_keeps_the_first_id_of_each_run_in_order_and_repeats_finds_an_id_named_twice(path: str) -> None:
    table = PageStateTable(8, CPU)
    heads = table.runs(ids([3, 3, 1, 1, 1, 3, 5]))
    assert heads.tolist() == [3, 1, 3, 5]
    assert table.repeats(heads)
    assert not table.repeats(table.runs(ids([4, 4, 2, 6, 6])))
    assert not table.repeats(ids([7]))

"""Unit tests of ``poolfuzz.pools.mamba``: the slot allocator, the state pool and the hybrid row pool."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from poolfuzz.pools import errors
from poolfuzz.pools.mamba import HybridReqToTokenPool, MambaPool, MambaSlotAllocator
from poolfuzz.pools.req_to_token import Req, ReqToTokenPool
from tests.conftest import DEVICES
from tests.indices import idx, ints


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ------------------------------------------------------------------ allocator
@pytest.fixture
def allocator(device: str) -> Callable[[int], MambaSlotAllocator]:
    return lambda size: MambaSlotAllocator(size, device)


def snapshot(alloc: MambaSlotAllocator) -> tuple[Any, ...]:
    live = [slot for slot in range(alloc.size + 2) if alloc.is_live(slot)]
    return ints(alloc.free_slots), live, alloc.reserved_size(), alloc.group_open


def assert_partition(alloc: MambaSlotAllocator) -> None:
    """Free list, unconsumed reservation and live slots split 1..size exactly."""
    free = ints(alloc.free_slots)
    live = [slot for slot in range(alloc.size + 1) if alloc.is_live(slot)]
    assert len(set(free)) == len(free)
    assert 0 not in free and not set(free) & set(live)
    assert set(free) | set(live) <= set(range(1, alloc.size + 1))
    assert len(free) + len(live) + alloc.reserved_size() == alloc.size


def busy(alloc: MambaSlotAllocator, group: bool) -> tuple[list[int], list[int]]:
    """Slots 1 and 3 live, 2 freed to the tail; with ``group`` slots 4 and 5 reserved."""
    live = ints(alloc.alloc(3))
    alloc.free(idx([2], str(alloc.device)))
    reserved: list[int] = []
    if group:
        alloc.alloc_group_begin(2)
        reserved = [4, 5]
    return [live[0], live[2]], reserved


def test_alloc_of_zero_returns_an_empty_int64_tensor_and_takes_nothing(allocator: Any) -> None:
    alloc = allocator(4)
    assert ints(alloc.alloc(0)) == []
    assert alloc.available_size() == 4


def test_alloc_of_exactly_the_whole_pool_hands_out_every_slot_but_zero(allocator: Any) -> None:
    alloc = allocator(5)
    assert ints(alloc.alloc(5)) == [1, 2, 3, 4, 5]
    assert alloc.available_size() == 0
    assert_partition(alloc)


def test_alloc_one_over_capacity_returns_none_and_changes_nothing(allocator: Any) -> None:
    alloc = allocator(5)
    alloc.alloc(2)
    before = snapshot(alloc)
    assert alloc.alloc(4) is None
    assert snapshot(alloc) == before


def test_slot_zero_is_never_handed_out(allocator: Any, device: str) -> None:
    alloc = allocator(3)
    for _ in range(3):
        alloc.alloc_group_begin(2)
        taken = ints(alloc.alloc(1)) + ints(alloc.alloc(1)) + ints(alloc.alloc(1))
        alloc.alloc_group_end()
        assert 0 not in taken and alloc.alloc(1) is None
        alloc.free(idx(taken, device))


def test_slots_are_handed_out_fifo_and_freed_slots_join_the_tail(allocator: Any, device: str) -> None:
    alloc = allocator(5)
    assert ints(alloc.alloc(2)) == [1, 2]
    alloc.free(idx([2, 1], device))
    assert ints(alloc.free_slots) == [3, 4, 5, 2, 1]
    assert ints(alloc.alloc(4)) == [3, 4, 5, 2]


def test_free_of_an_empty_tensor_is_a_no_op(allocator: Any, device: str) -> None:
    alloc = allocator(3)
    alloc.alloc(1)
    before = snapshot(alloc)
    alloc.free(idx([], device))
    assert snapshot(alloc) == before


def test_group_hands_out_the_reservation_in_order_then_falls_back_to_the_free_list(allocator: Any) -> None:
    alloc = allocator(5)
    alloc.alloc_group_begin(2)
    assert (alloc.available_size(), alloc.reserved_size()) == (3, 2)
    assert [ints(alloc.alloc(1)) for _ in range(3)] == [[1], [2], [3]]
    assert (alloc.available_size(), alloc.reserved_size()) == (2, 0)
    assert all(alloc.is_live(slot) for slot in (1, 2, 3))
    alloc.alloc_group_end()
    assert ints(alloc.free_slots) == [4, 5]


def test_alloc_of_more_than_one_inside_a_group_takes_the_normal_path(allocator: Any) -> None:
    alloc = allocator(6)
    alloc.alloc_group_begin(2)
    assert ints(alloc.alloc(2)) == [3, 4]
    assert alloc.reserved_size() == 2
    assert ints(alloc.alloc(1)) == [1]


def test_group_end_returns_exactly_the_unconsumed_reservation(allocator: Any) -> None:
    alloc = allocator(6)
    alloc.alloc_group_begin(4)
    assert ints(alloc.alloc(1)) == [1]
    alloc.alloc_group_end()
    assert ints(alloc.free_slots) == [5, 6, 2, 3, 4]
    assert not alloc.group_open and alloc.reserved_size() == 0
    assert_partition(alloc)


def test_clear_closes_the_group_so_stale_reserved_slots_are_not_issued_twice(allocator: Any) -> None:
    alloc = allocator(4)
    alloc.alloc_group_begin(3)
    alloc.alloc(1)
    alloc.clear()
    assert not alloc.group_open and alloc.reserved_size() == 0
    assert ints(alloc.alloc(4)) == [1, 2, 3, 4]
    assert alloc.alloc(1) is None
    alloc.alloc_group_begin(0)
    alloc.alloc_group_end()


def test_short_pool_opens_the_group_with_no_reservation(allocator: Any) -> None:
    alloc = allocator(3)
    alloc.alloc(1)
    alloc.alloc_group_begin(3)
    assert alloc.group_open and alloc.reserved_size() == 0 and alloc.available_size() == 2
    assert ints(alloc.alloc(1)) == [2]
    alloc.alloc_group_end()
    assert ints(alloc.free_slots) == [3]


@pytest.mark.parametrize(
    ("group", "misuse", "error"),
    [
        (False, lambda a, live, res, dev: a.alloc(-1), errors.BadSizeError),
        (False, lambda a, live, res, dev: a.alloc(1.0), errors.BadSizeError),
        (False, lambda a, live, res, dev: a.free(idx([live[0], 0], dev)), errors.ReservedIndexError),
        (False, lambda a, live, res, dev: a.free(idx([live[0], 9], dev)), errors.ForeignIndexError),
        (False, lambda a, live, res, dev: a.free(idx([-1], dev)), errors.ForeignIndexError),
        (False, lambda a, live, res, dev: a.free(idx([live[0], 2], dev)), errors.DoubleFreeError),
        (False, lambda a, live, res, dev: a.free(idx([live[0], live[0]], dev)), errors.DoubleFreeError),
        (False, lambda a, live, res, dev: a.free(torch.tensor([1.0], device=dev)), errors.BadBatchError),
        (False, lambda a, live, res, dev: a.free(idx(live[:2], dev).reshape(1, -1)), errors.BadBatchError),
        (False, lambda a, live, res, dev: a.free(idx(live[:1], dev).reshape(())), errors.BadBatchError),
        (False, lambda a, live, res, dev: a.alloc_group_end(), errors.GroupStateError),
        (False, lambda a, live, res, dev: a.alloc_group_begin(-1), errors.BadSizeError),
        (True, lambda a, live, res, dev: a.free(idx([live[1], res[0]], dev)), errors.DoubleFreeError),
        (True, lambda a, live, res, dev: a.alloc_group_begin(1), errors.GroupStateError),
        (True, lambda a, live, res, dev: a.alloc(-2), errors.BadSizeError),
    ],
    ids=[
        "negative-alloc",
        "float-alloc",
        "slot-zero",
        "foreign-slot",
        "negative-slot",
        "free-slot",
        "duplicate-in-call",
        "float-indices",
        "2-d-indices",
        "0-d-indices",
        "end-without-begin",
        "negative-group",
        "unconsumed-reserved-slot",
        "nested-begin",
        "negative-alloc-in-group",
    ],
)
def test_allocator_misuse_raises_its_typed_error_and_leaves_the_allocator_unchanged(
    allocator: Any, device: str, group: bool, misuse: Callable[..., Any], error: type[errors.PoolError]
) -> None:
    alloc = allocator(8)
    live, reserved = busy(alloc, group)
    before = snapshot(alloc)
    with pytest.raises(error):
        misuse(alloc, live, reserved, device)
    assert snapshot(alloc) == before
    assert_partition(alloc)


def test_nested_group_begin_keeps_the_first_reservation(allocator: Any) -> None:
    alloc = allocator(6)
    alloc.alloc_group_begin(2)
    with pytest.raises(errors.GroupStateError):
        alloc.alloc_group_begin(3)
    alloc.alloc_group_end()
    assert sorted(ints(alloc.free_slots)) == [1, 2, 3, 4, 5, 6]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abfgec"), st.integers(0, 4)), max_size=30))
def test_free_list_reservation_and_live_slots_always_partition_the_pool(ops: list[tuple[str, int]]) -> None:
    alloc = MambaSlotAllocator(6)
    live: list[int] = []
    for op, n in ops:
        try:
            if op == "a":
                live += ints(alloc.alloc(n)) if alloc.available_size() >= n else []
            elif op == "b":
                live += ints(alloc.alloc(1)) if alloc.available_size() + alloc.reserved_size() else []
            elif op == "f" and live:
                alloc.free(idx(live[: n + 1], "cpu"))
                del live[: n + 1]
            elif op == "g":
                alloc.alloc_group_begin(n)
            elif op == "e":
                alloc.alloc_group_end()
            elif op == "c":
                alloc.clear()
                live.clear()
        except errors.GroupStateError:
            pass
        assert_partition(alloc)
        assert sorted(live) == [slot for slot in range(7) if alloc.is_live(slot)]


# ------------------------------------------------------------------- MambaPool
@pytest.fixture
def state_pool(device: str) -> MambaPool:
    pool = MambaPool(4, 2, (3,), (2, 2), dtype=torch.float32, device=device)
    for state in (pool.conv, pool.temporal):
        state.copy_(torch.arange(state.numel(), dtype=state.dtype).reshape(state.shape) + 1)
    return pool


def states(pool: MambaPool) -> tuple[torch.Tensor, torch.Tensor]:
    return pool.conv.cpu().clone(), pool.temporal.cpu().clone()


def test_state_tensors_start_zeroed_with_a_padding_slot(device: str) -> None:
    pool = MambaPool(3, 2, (4, 2), (5,), dtype=torch.bfloat16, device=device)
    assert pool.conv.shape == (2, 4, 4, 2) and pool.temporal.shape == (2, 4, 5)
    assert pool.conv.dtype == pool.temporal.dtype == torch.bfloat16
    assert not pool.conv.any() and not pool.temporal.any()


def test_clear_slots_zeroes_only_the_named_slots(state_pool: MambaPool, device: str) -> None:
    before = states(state_pool)
    state_pool.clear_slots(idx([2, 4], device))
    for old, new in zip(before, states(state_pool)):
        assert not new[:, [2, 4]].any()
        assert torch.equal(new[:, [0, 1, 3]], old[:, [0, 1, 3]])


def test_copy_from_copies_conv_and_temporal_state(state_pool: MambaPool, device: str) -> None:
    before = states(state_pool)
    state_pool.copy_from(idx([1, 1], device), idx([3, 4], device))
    for old, new in zip(before, states(state_pool)):
        assert torch.equal(new[:, 3], old[:, 1]) and torch.equal(new[:, 4], old[:, 1])
        assert torch.equal(new[:, :3], old[:, :3])


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda p, dev: p.clear_slots(idx([1, 0], dev)), errors.ReservedIndexError),
        (lambda p, dev: p.clear_slots(idx([1, 5], dev)), errors.ForeignIndexError),
        (lambda p, dev: p.copy_from(idx([1, 2], dev), idx([3], dev)), errors.BadBatchError),
        (lambda p, dev: p.copy_from(idx([1, 2], dev), idx([2, 3], dev)), errors.BadBatchError),
        (lambda p, dev: p.copy_from(idx([1, 2], dev), idx([3, 3], dev)), errors.BadBatchError),
        (lambda p, dev: p.copy_from(idx([0], dev), idx([3], dev)), errors.ReservedIndexError),
        (lambda p, dev: p.copy_from(idx([1], dev), idx([7], dev)), errors.ForeignIndexError),
    ],
    ids=["clear-slot-zero", "clear-foreign", "length-mismatch", "overlap", "dst-duplicate", "src-zero", "dst-foreign"],
)
def test_state_pool_misuse_raises_and_leaves_the_state_unchanged(
    state_pool: MambaPool, device: str, call: Callable[..., Any], error: type[errors.PoolError]
) -> None:
    before = states(state_pool)
    with pytest.raises(error):
        call(state_pool, device)
    for old, new in zip(before, states(state_pool)):
        assert torch.equal(old, new)


# ------------------------------------------------------------------ hybrid pool
@pytest.fixture
def hybrid(device: str) -> Callable[..., HybridReqToTokenPool]:
    return lambda size=4, mamba_size=4: HybridReqToTokenPool(size, 16, mamba_size, device=device)


def reqs(n: int) -> list[Req]:
    return [Req(rid=i) for i in range(n)]


def hybrid_snapshot(pool: HybridReqToTokenPool, batch: list[Req]) -> tuple[Any, ...]:
    fields = [(r.req_pool_idx, r.mamba_pool_idx, r.mamba_needs_clear) for r in batch]
    mapping = pool.req_index_to_mamba_index_mapping.tolist()
    return list(pool.free_slots), snapshot(pool.mamba_allocator), mapping, fields


def assert_mapping_matches(pool: HybridReqToTokenPool, batch: list[Req]) -> None:
    expected = [0] * pool.req_to_token.shape[0]
    for r in batch:
        if r.req_pool_idx is not None and r.mamba_pool_idx is not None:
            expected[r.req_pool_idx] = r.mamba_pool_idx
    assert pool.req_index_to_mamba_index_mapping.tolist() == expected


def test_alloc_binds_a_row_and_a_fresh_slot_to_every_request(hybrid: Any) -> None:
    pool, batch = hybrid(), reqs(3)
    rows = pool.alloc(batch)
    assert rows == [r.req_pool_idx for r in batch] and len(set(rows)) == 3
    assert [r.mamba_pool_idx for r in batch] == [1, 2, 3]
    assert all(type(r.mamba_pool_idx) is int and r.mamba_needs_clear for r in batch)
    assert_mapping_matches(pool, batch)


@pytest.mark.parametrize(("size", "mamba_size"), [(4, 2), (2, 4)], ids=["mamba-short", "rows-short"])
def test_alloc_is_all_or_nothing_when_either_side_is_short(hybrid: Any, size: int, mamba_size: int) -> None:
    pool, batch = hybrid(size, mamba_size), reqs(3)
    before = hybrid_snapshot(pool, batch)
    assert pool.alloc(batch) is None
    assert hybrid_snapshot(pool, batch) == before


def test_alloc_that_fits_only_with_the_group_reservation_draws_from_it(hybrid: Any) -> None:
    pool, batch = hybrid(4, 3), reqs(3)
    pool.mamba_allocator.alloc_group_begin(3)
    assert pool.mamba_available_size() == 0
    assert pool.alloc(batch) is not None
    assert [r.mamba_pool_idx for r in batch] == [1, 2, 3]
    assert pool.mamba_allocator.reserved_size() == 0


def test_reuse_keeps_both_the_row_and_the_slot(hybrid: Any) -> None:
    pool, (old, new) = hybrid(), reqs(2)
    pool.alloc([old])
    held = (old.req_pool_idx, old.mamba_pool_idx)
    old.mamba_needs_clear = False
    pool.alloc([old, new])
    assert (old.req_pool_idx, old.mamba_pool_idx, old.mamba_needs_clear) == (*held, False)
    pool.free(old)
    pool.alloc([old])
    assert old.mamba_pool_idx == held[1]
    assert_mapping_matches(pool, [old, new])


def test_free_releases_only_the_row_and_zeroes_its_mapping(hybrid: Any) -> None:
    pool, batch = hybrid(), reqs(2)
    pool.alloc(batch)
    pool.free(batch[0])
    assert batch[0].req_pool_idx is None and pool.mamba_allocator.is_live(1)
    assert_mapping_matches(pool, batch)


def test_free_mamba_cache_twice_raises_double_free(hybrid: Any) -> None:
    pool, batch = hybrid(), reqs(1)
    pool.alloc(batch)
    pool.free_mamba_cache(batch[0])
    assert (batch[0].mamba_pool_idx, batch[0].mamba_needs_clear) == (None, False)
    assert_mapping_matches(pool, batch)
    before = hybrid_snapshot(pool, batch)
    with pytest.raises(errors.DoubleFreeError):
        pool.free_mamba_cache(batch[0])
    assert hybrid_snapshot(pool, batch) == before


@pytest.mark.parametrize(
    ("handle", "error"),
    [(4, errors.BadBatchError), (0, errors.ReservedIndexError), (9, errors.ForeignIndexError), ("1", errors.BadBatchError)],
    ids=["stale-slot", "slot-zero", "foreign-slot", "not-an-int"],
)
def test_bad_mamba_handle_is_rejected_without_consuming_anything(hybrid: Any, handle: Any, error: type[errors.PoolError]) -> None:
    pool, batch = hybrid(), reqs(3)
    pool.alloc(batch[:1])
    batch[2].mamba_pool_idx = handle
    before = hybrid_snapshot(pool, batch)
    with pytest.raises(error):
        pool.alloc(batch)
    assert hybrid_snapshot(pool, batch) == before


def test_two_requests_claiming_one_slot_are_rejected(hybrid: Any) -> None:
    pool, batch = hybrid(), reqs(2)
    pool.alloc(batch[:1])
    batch[1].mamba_pool_idx = batch[0].mamba_pool_idx
    with pytest.raises(errors.BadBatchError):
        pool.alloc(batch)


def test_mapping_is_sized_by_request_rows_not_by_mamba_size(hybrid: Any) -> None:
    pool, batch = hybrid(8, 2), reqs(2)
    assert pool.req_index_to_mamba_index_mapping.shape == (9,)
    assert pool.alloc(batch) == [7, 8]
    assert_mapping_matches(pool, batch)


def test_clear_resets_rows_slots_group_and_mapping(hybrid: Any) -> None:
    pool, batch = hybrid(), reqs(2)
    pool.alloc(batch)
    pool.mamba_allocator.alloc_group_begin(1)
    pool.clear()
    assert pool.available_size() == 4 and pool.mamba_available_size() == 4
    assert not pool.mamba_allocator.group_open
    assert not pool.req_index_to_mamba_index_mapping.any()
    with pytest.raises(errors.BadBatchError):
        pool.alloc([Req(rid="stale", mamba_pool_idx=batch[0].mamba_pool_idx)])


def test_hybrid_pool_is_still_a_request_row_pool(hybrid: Any) -> None:
    pool = hybrid()
    assert issubclass(HybridReqToTokenPool, ReqToTokenPool)
    assert pool.alloc([]) == [] and pool.mamba_available_size() == 4

"""Unit tests of ReqToTokenPool and DecodeReqToTokenPool: edges, reuse, misuse."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from poolfuzz.pools import (
    BadBatchError,
    BadSizeError,
    DecodeReqToTokenPool,
    DoubleFreeError,
    ForeignIndexError,
    PoolError,
    Req,
    ReqToTokenPool,
    ReservedIndexError,
)
from tests.conftest import DEVICES

RowPool = ReqToTokenPool | DecodeReqToTokenPool


def make_pool(kind: str, size: int = 4, device: str = "cpu") -> RowPool:
    if kind == "decode":
        return DecodeReqToTokenPool(size - 1, 8, device, pre_alloc_size=1)
    return ReqToTokenPool(size, 8, device)


def snapshot(pool: RowPool) -> tuple[Any, ...]:
    return (list(pool.free_slots), pool.req_generation.tolist(), pool.req_to_token.clone())


def assert_rejected_unchanged(pool: RowPool, error: type[PoolError], call: Callable[[], Any]) -> PoolError:
    before = snapshot(pool)
    with pytest.raises(error) as info:
        call()
    after = snapshot(pool)
    assert before[:2] == after[:2] and torch.equal(before[2], after[2])
    return info.value


@pytest.fixture(params=["tail", "decode"])
def pool(request: pytest.FixtureRequest) -> RowPool:
    return make_pool(request.param)


def test_the_table_has_a_padding_row_on_top_of_the_usable_rows(pool: RowPool) -> None:
    assert pool.req_to_token.shape == (5, 8)
    assert pool._alloc_size == 5
    assert sorted(pool.free_slots) == [1, 2, 3, 4]
    assert pool.req_generation.shape == (5,) and pool.req_generation.device.type == "cpu"


def test_need_zero_returns_an_empty_list_and_consumes_nothing(pool: RowPool) -> None:
    assert pool.alloc_rows(0) == []
    assert pool.available_size() == 4


def test_exactly_full_then_one_over_returns_none_and_changes_nothing(pool: RowPool) -> None:
    rows = pool.alloc_rows(4)
    assert rows is not None and sorted(rows) == [1, 2, 3, 4]
    before = snapshot(pool)
    assert pool.alloc_rows(1) is None
    assert snapshot(pool)[:2] == before[:2]


def test_a_short_pool_binds_no_request_of_the_batch(pool: RowPool) -> None:
    pool.alloc_rows(3)
    reqs = [Req(rid=i) for i in range(2)]
    assert pool.alloc(reqs) is None
    assert all(r.req_pool_idx is None for r in reqs)
    assert pool.available_size() == 1


def test_tail_pop_reuses_the_most_recently_freed_row_first() -> None:
    pool = ReqToTokenPool(4, 8)
    assert pool.alloc_rows(2) == [3, 4]
    pool.free_rows([3])
    assert pool.alloc_rows(1) == [3]


def test_decode_pool_pops_from_the_head() -> None:
    pool = DecodeReqToTokenPool(2, 8, pre_alloc_size=2)
    assert pool.alloc_rows(2) == [1, 2]
    pool.free_rows([1])
    assert pool.alloc_rows(2) == [3, 4]


def test_a_request_holding_a_row_keeps_it_and_only_new_requests_consume(pool: RowPool) -> None:
    chunked = Req(rid="chunked")
    first = pool.alloc([chunked])
    assert first is not None
    newcomer = Req(rid="new")
    second = pool.alloc([chunked, newcomer])
    assert second is not None and second[0] == first[0] and second[1] != first[0]
    assert pool.available_size() == 2


def test_generation_rises_once_per_binding_and_survives_clear(pool: RowPool) -> None:
    rows = pool.alloc_rows(4)
    assert rows is not None
    pool.clear()
    rows_again = pool.alloc_rows(4)
    assert rows_again is not None
    assert pool.req_generation[1:].tolist() == [2, 2, 2, 2]
    assert int(pool.req_generation[0]) == 0


def test_free_returns_the_row_and_clears_the_handle(pool: RowPool) -> None:
    req = Req(rid=1)
    pool.alloc([req])
    pool.free(req)
    assert req.req_pool_idx is None and pool.available_size() == 4


def test_freeing_a_request_twice_raises_double_free(pool: RowPool) -> None:
    req = Req(rid=1)
    pool.alloc([req])
    pool.free(req)
    assert_rejected_unchanged(pool, DoubleFreeError, lambda: pool.free(req))


@pytest.mark.parametrize(
    ("rows", "error"), [([0], ReservedIndexError), ([5], ForeignIndexError), ([-1], ForeignIndexError), ([2, 2], DoubleFreeError)]
)
def test_free_rows_misuse_raises_its_typed_error_with_the_pool_unchanged(pool: RowPool, rows: list[int], error: type[PoolError]) -> None:
    pool.alloc_rows(4)
    assert_rejected_unchanged(pool, error, lambda: pool.free_rows(rows))


def test_freeing_a_free_row_is_a_double_free_that_names_the_row(pool: RowPool) -> None:
    err = assert_rejected_unchanged(pool, DoubleFreeError, lambda: pool.free_rows([2]))
    assert isinstance(err, DoubleFreeError) and err.indices == [2]


def test_a_partially_bad_batch_releases_nothing(pool: RowPool) -> None:
    pool.alloc_rows(4)
    assert_rejected_unchanged(pool, ForeignIndexError, lambda: pool.free_rows([1, 2, 99]))
    assert pool.available_size() == 0


@pytest.mark.parametrize("need", [-1, -5])
def test_negative_sizes_raise_bad_size(pool: RowPool, need: int) -> None:
    err = assert_rejected_unchanged(pool, BadSizeError, lambda: pool.alloc_rows(need))
    assert isinstance(err, BadSizeError) and err.value == need


def test_a_batch_naming_one_request_twice_is_malformed(pool: RowPool) -> None:
    req = Req(rid=1)
    assert_rejected_unchanged(pool, BadBatchError, lambda: pool.alloc([req, req]))


def test_a_stale_handle_after_clear_is_rejected(pool: RowPool) -> None:
    req = Req(rid=1)
    pool.alloc([req])
    pool.clear()
    assert_rejected_unchanged(pool, BadBatchError, lambda: pool.alloc([req]))
    assert_rejected_unchanged(pool, DoubleFreeError, lambda: pool.free(req))


def test_writing_row_zero_is_refused_and_other_rows_are_written(pool: RowPool) -> None:
    assert_rejected_unchanged(pool, ReservedIndexError, lambda: pool.write((0, slice(0, 2)), torch.ones(2, dtype=torch.int32)))
    req = Req(rid=1)
    rows = pool.alloc([req])
    assert rows is not None
    pool.write((rows[0], slice(0, 3)), torch.tensor([7, 8, 9], dtype=torch.int32))
    assert pool.req_to_token[rows[0], :3].tolist() == [7, 8, 9]
    assert not pool.req_to_token[0].any()


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        (slice(None), ReservedIndexError),
        (slice(0, 2), ReservedIndexError),
        ([1, 0], ReservedIndexError),
        (torch.tensor([-5]), ForeignIndexError),
        (torch.tensor([1, 5]), ForeignIndexError),
        (-1, ForeignIndexError),
        ([5], ForeignIndexError),
        (True, BadBatchError),
        (torch.ones(5, dtype=torch.bool), BadBatchError),
        (torch.tensor([1.0]), BadBatchError),
        (slice(2, None, -1), BadBatchError),
        (slice(1, None, 0), BadBatchError),
        (None, BadBatchError),
    ],
    ids=[
        "whole-table",
        "slice-from-0",
        "list-with-0",
        "tensor-wrapping-to-0",
        "tensor-past-end",
        "negative-int",
        "list-past-end",
        "bool",
        "bool-mask",
        "float-tensor",
        "backward-slice",
        "step-0-slice",
        "none",
    ],
)
def test_a_write_whose_rows_reach_row_0_or_past_the_table_is_refused(rows: Any, error: type[PoolError]) -> None:
    pool = ReqToTokenPool(4, 8)
    pool.alloc_rows(4)
    assert_rejected_unchanged(pool, error, lambda: pool.write((rows, 0), 7))


def test_slices_lists_and_tensors_of_real_rows_are_written() -> None:
    pool = ReqToTokenPool(4, 8)
    for rows in (slice(1, None, 2), [2, 4], torch.tensor([3]), slice(0, 0)):
        pool.write((rows, 0), 7)
    assert pool.req_to_token[:, 0].tolist() == [0, 7, 7, 7, 7]


@pytest.mark.parametrize("bad", [dict(size=-1), dict(max_context_len=0), dict(size=2.0), dict(max_context_len=4.5)])
def test_impossible_constructor_sizes_raise_bad_size(bad: dict[str, Any]) -> None:
    kwargs = {"size": 2, "max_context_len": 4, **bad}
    with pytest.raises(BadSizeError):
        ReqToTokenPool(kwargs["size"], kwargs["max_context_len"])


def test_an_empty_pool_hands_out_nothing() -> None:
    pool = ReqToTokenPool(0, 4)
    assert pool.alloc_rows(0) == [] and pool.alloc_rows(1) is None
    assert pool.alloc([Req(rid=1)]) is None


@pytest.mark.parametrize("device", DEVICES)
def test_the_table_lives_on_the_requested_device(device: str) -> None:
    pool = ReqToTokenPool(3, 4, device)
    assert pool.req_to_token.device.type == device
    req = Req(rid=0)
    rows = pool.alloc([req])
    assert rows is not None
    pool.write((rows[0], slice(0, 2)), torch.tensor([1, 2], dtype=torch.int32, device=device))
    assert pool.req_to_token[rows[0], :2].cpu().tolist() == [1, 2]


def test_two_requests_claiming_one_row_are_malformed(pool: RowPool) -> None:
    owner = Req(rid="owner")
    rows = pool.alloc([owner])
    assert rows is not None
    impostor = Req(rid="impostor", req_pool_idx=rows[0])
    assert_rejected_unchanged(pool, BadBatchError, lambda: pool.alloc([owner, impostor]))

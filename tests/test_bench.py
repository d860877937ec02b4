"""The benchmark's inputs and baselines compute what the pools compute; its quick run writes a table."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from poolfuzz.harness.bench.baselines import HeadSliceReqToTokenPool, extend_inputs, extend_per_request_torch
from poolfuzz.harness.bench.detect import route_rates
from poolfuzz.harness.bench.run import main
from poolfuzz.pools import ReqToTokenPool
from poolfuzz.pools.page_alloc import get_kernel


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_the_per_request_baseline_writes_what_the_oracle_writes(batch: int) -> None:
    pre, seq, last, pages, out = extend_inputs(batch, 16, seed=batch)
    expected, actual = out.clone().fill_(-7), out.clone().fill_(-7)
    get_kernel("loop").extend(pre, seq, last, pages, expected, 16)
    extend_per_request_torch(pre, seq, last, pages, actual, 16)
    assert torch.equal(actual, expected)


def test_the_head_slice_baseline_hands_out_the_rows_a_head_pop_would() -> None:
    pool = HeadSliceReqToTokenPool(6, 1)
    assert pool.alloc_rows(2) == [1, 2]
    assert sorted(pool.free_slots) == [3, 4, 5, 6]


def test_generation_bumps_are_exact_for_small_and_large_batches() -> None:
    pool = ReqToTokenPool(40, 1)
    small, large = pool.alloc_rows(3), pool.alloc_rows(30)
    assert small is not None and large is not None
    pool.free_rows(small + large)
    pool.alloc_rows(40)
    assert pool.req_generation[1:].tolist().count(2) == 33 and pool.req_generation[1:].tolist().count(1) == 7


def test_the_quick_bench_writes_its_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "benchmarks.md"
    assert main(["--smoke", "--output", str(output)]) == 0
    text = output.read_text()
    for heading in ("alloc_rows", "Extend index computation", "Mamba admission", "Harness throughput"):
        assert heading in text


def test_both_fuzzing_routes_count_the_steps_they_ran() -> None:
    """A zero in either column is a counting bug, not a slow route: hypothesis runs a subclass of the bench's machine."""
    rates = route_rates("req_to_token", seconds=0.6, slices=2)
    assert not isinstance(rates, str), rates
    walk, hypothesis = rates
    assert walk > 0 and hypothesis > 0, rates

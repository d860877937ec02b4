"""The scheduler machine: rows, Mamba slots and paged KV driven together, for each kernel and KV mode.

Each run checks the pool invariants, the scheduler conservation equation, and
every extend/decode against the loop oracle on the same state.  Unpinned runs
draw the KV mode (plain, prefix cache, sliding window); two runs pin the cache
and the window so both regions are reached on every CI run.  Interpreted Triton
is slow on CPU, so it gets a small example budget; on CUDA it runs compiled.
The last tests plant two historical leaks in the plain mode, where they live,
and show the machine reports them: the #4977 retract rule (a driver variant)
and the #34067 free-group aliasing (a fake allocator).  Step-level tests of the
cache and window options are in ``tests/test_scheduler_options.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import Phase

from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.scheduler.canaries import CeilRetractScheduler as CeilRetractDriver
from poolfuzz.harness.kits.scheduler.driver import SchedulerDriver, SchedulerPools, build_scheduler_pools
from poolfuzz.harness.kits.scheduler.machine import scheduler_machine
from poolfuzz.harness.machines import run_machine, settings_for
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import triton_available
from tests.conftest import DEVICES
from tests.machine_coverage import MEASURED

needs_triton = pytest.mark.skipif(not triton_available(), reason="triton (and numpy for its interpreter) not installed")
KERNELS = ["loop", "vectorized", pytest.param("triton", marks=needs_triton)]


def budget(kernel: str, device: str) -> dict[str, int]:
    """The active profile, except interpreted Triton: a few short runs."""
    return {"max_examples": 8, "stateful_step_count": 12} if kernel == "triton" and device == "cpu" else {}


@MEASURED
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_the_scheduler_machine_finds_no_violation_with_each_kernel(kernel: str, device: str, target_overrides: dict[str, str]) -> None:
    machine = scheduler_machine(kernel, device=device, overrides=target_overrides)
    run_machine(machine, settings=settings_for(**budget(kernel, device)))


@pytest.mark.parametrize("device", DEVICES)
def test_the_scheduler_machine_finds_no_violation_at_page_size_one(device: str, target_overrides: dict[str, str]) -> None:
    # Page size 1 is where upstream's decode page count said "no new page" (sglang-pools.md 3.5).
    run_machine(scheduler_machine("vectorized", device=device, page_size=1, overrides=target_overrides))


@MEASURED
@pytest.mark.parametrize("device", DEVICES)
def test_the_scheduler_machine_finds_no_violation_over_hybrid_rows(device: str, target_overrides: dict[str, str]) -> None:
    run_machine(scheduler_machine("vectorized", device=device, hybrid=True, overrides=target_overrides))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["prefix_cache", "sliding_window"])
def test_the_scheduler_machine_finds_no_violation_with_each_kv_option(mode: str, device: str, target_overrides: dict[str, str]) -> None:
    run_machine(scheduler_machine("vectorized", device=device, mode=mode, overrides=target_overrides))


def test_a_retract_that_frees_from_the_ceiling_is_reported_as_a_leak() -> None:
    # Generation only, unshrunk: shrinking a scheduler run costs ~10 s; the next test is the shrunk case.
    machine = scheduler_machine("vectorized", mode="plain", driver=CeilRetractDriver)
    search = settings_for(max_examples=200, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
    with pytest.raises(InvariantViolation) as caught:
        run_machine(machine, settings=search, shrink=False)
    assert caught.value.invariant_id in {"scheduler-conservation", "conservation"}
    assert "leaked" in caught.value.numbers or caught.value.invariant_id == "conservation"


def test_the_planted_retract_bug_leaks_exactly_the_partial_page() -> None:
    config = {"size": 2, "max_context_len": 16, "page_size": 4, "kv_pages": 4, "kernel": "loop", "device": "cpu"}
    driver = CeilRetractDriver(build_scheduler_pools, config, audit_period=1)  # the equation runs with audits
    (handle,) = driver.step("admit", requests=[[7, 7]])
    with pytest.raises(InvariantViolation, match="scheduler-conservation") as caught:
        driver.step("retract", handle=handle, keep=5)  # keeps tokens 0..3; tokens 4..6 sit on the leaked page
    assert len(caught.value.numbers["leaked"]) == 1


def test_the_correct_retract_keeps_the_whole_pages_and_frees_the_rest() -> None:
    config = {"size": 2, "max_context_len": 16, "page_size": 4, "kv_pages": 4, "kernel": "loop", "device": "cpu"}
    driver = SchedulerDriver(build_scheduler_pools, config)
    (handle,) = driver.step("admit", requests=[[7, 7]])
    driver.step("retract", handle=handle, keep=5)
    state = driver.model.live[handle]
    assert state.length == 4 and state.prefilling and len(driver.model.free_pages) == 3
    driver.step("prefill", handles=[handle], chunk=16)  # re-prefills to its old length on the same row
    driver.step("decode", handles=[handle])
    driver.step("finish", handles=[handle])
    driver.teardown()
    assert len(driver.model.free_pages) == 4


class ViewKeepingAllocator(PagedTokenToKVPoolAllocator):
    """A fake with the #34067 bug: a deferred free keeps the caller's tensor, not its values."""

    def free(self, indices: torch.Tensor) -> None:
        if self._free_group is None or indices.numel() == 0:
            super().free(indices)
            return
        self._pages_of(indices)  # validate as the real one does
        self._free_group.append(indices)  # the bug: a view, resolved at group end

    def free_group_end(self) -> None:
        if self._free_group:  # resolve the views now: an overwritten row names page 0, which is skipped
            pages = torch.unique(torch.cat([view.to(torch.int64) for view in self._free_group]) // self.page_size)
            self._free_group = [pages[pages > 0]]
        super().free_group_end()


def view_keeping_pools(**config: Any) -> SchedulerPools:
    pools = build_scheduler_pools(**config)
    kv = pools.token_to_kv_pool_allocator
    pools.token_to_kv_pool_allocator = ViewKeepingAllocator(
        kv.size, kv.page_size, device=config.get("device", "cpu"), need_sort=kv.need_sort, kernel=config["kernel"]
    )
    return pools


def test_a_free_group_that_resolves_views_at_its_end_is_reported_as_a_leak() -> None:
    # finish() overwrites the freed row before free_group_end, as the row's next owner would.
    machine = scheduler_machine("vectorized", mode="plain", spec=f"{__name__}:view_keeping_pools")
    search = settings_for(max_examples=100, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
    with pytest.raises(InvariantViolation, match="scheduler-conservation"):
        run_machine(machine, settings=search, shrink=False)

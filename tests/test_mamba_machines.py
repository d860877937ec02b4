"""The Mamba machines: green on the real pools, and red, with the right invariant id, on broken ones.

The broken pools below each put back one historical bug (sglang-pools.md
section 8, hazard 3; seed 001; SGLang #24244).  They live here, never in
``pools/``, and are bound with ``make_machine(family, "module:attr")`` exactly
as a user's own implementation would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.mamba.driver import MambaSlotDriver
from poolfuzz.harness.kits.mamba.hybrid import HybridDriver
from poolfuzz.harness.machines import make_machine, pinned_settings, run_machine
from poolfuzz.pools.mamba import HybridReqToTokenPool, MambaSlotAllocator
from poolfuzz.pools.req_to_token import Req, ReqToTokenPool

FAMILIES = ["mamba_slots", "hybrid_req_to_token"]


# ------------------------------------------------------------------ broken pools
class GroupEndKeepsReservation(MambaSlotAllocator):
    """Seed 001: ``alloc_group_end`` closes the window but the unconsumed reservation never comes back."""

    def alloc_group_end(self) -> None:
        if not self.group_open:
            super().alloc_group_end()
        self._close_group()


class ClearKeepsWindowOpen(MambaSlotAllocator):
    """Hazard 3: ``clear`` refills the free list but the open window keeps its reservation,
    so ``alloc(1)`` would hand out slots that are also free."""

    def clear(self) -> None:
        window = {k: v for k, v in vars(self).items() if k in ("_group_open", "_reserved", "_reserved_ids", "_cursor")}
        super().clear()
        if window.get("_group_open"):
            vars(self).update(window)


class RowsBeforeSlots(HybridReqToTokenPool):
    """Upstream's order: rows are bound first, then the Mamba side is found short; the rows leak."""

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        allocator = self.mamba_allocator
        need_slots = sum(req.mamba_pool_idx is None for req in reqs)
        if need_slots > allocator.available_size() + allocator.reserved_size():
            ReqToTokenPool.alloc(self, reqs)
            return None
        return super().alloc(reqs)


class MappingSizedByMambaSize(HybridReqToTokenPool):
    """SGLang #24244: the row-indexed mapping sized by ``mamba_size`` instead of by request rows."""

    def __init__(self, size: int, max_context_len: int, mamba_size: int, **kwargs: Any) -> None:
        super().__init__(size, max_context_len, mamba_size, **kwargs)
        self.req_index_to_mamba_index_mapping = torch.zeros(mamba_size + 1, dtype=torch.int64, device=self.device)


def violated_invariant(family: str, broken: type) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as info:
        run_machine(make_machine(family, f"{__name__}:{broken.__name__}"), settings=pinned_settings())
    return info.value


# ------------------------------------------------------------------ the real pools
def test_slot_driver_predicts_the_reservation_order_and_what_group_end_returns() -> None:
    driver = MambaSlotDriver(MambaSlotAllocator, {"size": 5, "device": "cpu"})
    driver.step("alloc", need_size=1)
    driver.step("group_begin", num_reqs=3)
    reserved = list(driver.model.reserved)
    assert driver.step("alloc", need_size=1) == [1]
    assert driver.handles[1] == reserved[0]
    driver.step("group_end")
    assert driver.model.free == set(range(1, 6)) - {driver.handles[0], driver.handles[1]}
    driver.teardown()


def test_hybrid_driver_treats_a_stale_handle_after_clear_as_a_double_free() -> None:
    driver = HybridDriver(HybridReqToTokenPool, {"size": 2, "max_context_len": 4, "mamba_size": 1, "device": "cpu"})
    assert driver.step("alloc", batch=[None]) == [0]
    driver.step("clear")
    driver.step("free_mamba_cache", handle=0)  # the pool must raise DoubleFreeError and change nothing
    driver.step("free", handle=0)
    driver.teardown()


# ------------------------------------------------------------------ broken pools are caught
def test_group_end_that_keeps_the_unconsumed_reservation_violates_group_window() -> None:
    assert violated_invariant("mamba_slots", GroupEndKeepsReservation).invariant_id == "group-window"


def test_clear_that_keeps_the_window_open_violates_clear_restores() -> None:
    assert violated_invariant("mamba_slots", ClearKeepsWindowOpen).invariant_id == "clear-restores"


def test_hybrid_alloc_that_binds_rows_before_finding_slots_short_violates_empty_pool_guard() -> None:
    violation = violated_invariant("hybrid_req_to_token", RowsBeforeSlots)
    assert violation.invariant_id == "empty-pool-guard"
    assert "shrunk by replay to" in str(violation)


def test_mapping_sized_by_mamba_size_violates_in_bounds() -> None:
    violation = violated_invariant("hybrid_req_to_token", MappingSizedByMambaSize)
    assert violation.invariant_id == "in-bounds"
    assert violation.numbers["mapping"][0] != violation.numbers["rows"]

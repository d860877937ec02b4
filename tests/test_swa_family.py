"""The ``swa_kv`` and ``pure_swa_kv`` families: scripted driver runs, no hypothesis.

Each historical bug (``harness/kits/swa/canaries.py``) is caught by its invariant on a short
script that passes on our pool; ``swa-mapping`` and per-side ``conservation`` are shown to
trip by broken pools defined here; every misuse probe is rejected by our pool and skipped
when misuse is off; the bench workloads and the walk's sampled configurations (the families' move
tables, :mod:`poolfuzz.harness.kits.swa.moves`) run clean.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import torch

from poolfuzz.harness.judge.driver import Driver
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.swa.canaries import (
    CANARIES,
    NonAtomicDecode,
    TailHeadKeepsOldEntries,
    TombstoneKeepsItsEntry,
    UnmapsOnlyNamedTokens,
)
from poolfuzz.harness.kits.swa.driver import SWAKVDriver
from poolfuzz.harness.kits.swa.moves import pure_swa_kv_table, swa_kv_table
from poolfuzz.harness.kits.swa.pure import PureSWAKVDriver
from poolfuzz.harness.kits.swa.random_moves import CORNER_RECYCLED_TAIL, CORNER_SWA_SHORT_DECODE
from poolfuzz.pools.swa import PureSWATokenToKVPoolAllocator, SWATokenToKVPoolAllocator
from poolfuzz.strategies.table import MoveTable, step_of

Steps = list[tuple[str, dict[str, Any]]]
PS = 4
PAGED = {"size": 8 * PS, "size_swa": 4 * PS, "page_size": PS}


def drive(
    factory: Callable[..., Any],
    config: dict[str, Any],
    steps: Steps,
    *,
    check_misuse: bool = True,
    driver_class: type[Driver] = SWAKVDriver,
) -> Driver:
    driver = driver_class(factory, {**config, "device": "cpu"}, check_misuse=check_misuse)
    for op, args in steps:
        driver.step(op, **args)
    driver.teardown()
    return driver


def tripped(factory: Callable[..., Any], config: dict[str, Any], steps: Steps, **kwargs: Any) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as caught:
        drive(factory, config, steps, **kwargs)
    return caught.value


def new(*lengths: int) -> tuple[str, dict[str, Any]]:
    return "extend", {"batch": [[None, n] for n in lengths]}


# ----------------------------------------------------------------- canaries
CANARY_SCRIPTS: dict[str, tuple[type[SWATokenToKVPoolAllocator], dict[str, Any], Steps]] = {
    "swa-tail-head-keeps-old-entries": (
        TailHeadKeepsOldEntries,
        PAGED,
        [
            new(PS),
            ("free", {"handle": 0}),
            ("tail", {"handle": None, "extend_len": 2 * PS, "swa_tail_len": PS}),  # its head reuses the freed page
        ],
    ),
    "swa-free-unmaps-only-named-tokens": (UnmapsOnlyNamedTokens, PAGED, [new(2 * PS), ("free", {"handle": 0, "sparse": True})]),
    "swa-tombstone-keeps-its-entry": (TombstoneKeepsItsEntry, PAGED, [new(2 * PS), ("free_swa", {"handle": 0, "pages": 1})]),
    "swa-non-atomic-decode": (
        NonAtomicDecode,
        {"size": 8 * PS, "size_swa": 2 * PS, "page_size": PS},
        [
            new(2 * PS),
            ("decode", {"handles": [0]}),  # the SWA side has no page left, the full side has six
        ],
    ),
}


def test_every_swa_canary_has_a_script() -> None:
    assert set(CANARY_SCRIPTS) == set(CANARIES)


@pytest.mark.parametrize("name", sorted(CANARY_SCRIPTS))
def test_each_canary_is_caught_by_its_invariant_on_a_script_our_pool_passes(name: str) -> None:
    canary, config, steps = CANARY_SCRIPTS[name]
    drive(SWATokenToKVPoolAllocator, config, steps)
    assert tripped(canary, config, steps).invariant_id == CANARIES[name].invariant


# ------------------------------------------------------------ broken pools
class FreeSwaKeepsTheSwaPage(SWATokenToKVPoolAllocator):
    """``free_swa`` unmaps the pages but never gives their SWA pages back: an SWA-side leak."""

    def _release_peers(self, slots: torch.Tensor, peers: torch.Tensor) -> None:
        if self._in_free_swa:
            self._clear_mapping(slots)
        else:
            super()._release_peers(slots, peers)

    _in_free_swa = False

    def free_swa(self, free_index: torch.Tensor) -> None:
        self._in_free_swa = True
        try:
            super().free_swa(free_index)
        finally:
            self._in_free_swa = False


class FreeFullKeepsTheFullPages(SWATokenToKVPoolAllocator):
    """``free_full`` validates and returns without releasing anything: a full-side leak."""

    def free_full(self, free_index: torch.Tensor) -> None:
        self._touched_slots(free_index)


class MapsTwoTokensToOneSwaSlot(SWATokenToKVPoolAllocator):
    """An extend maps its last token onto the SWA slot of the token a page before it (same offset):
    an SWA slot mapped twice."""

    def alloc_extend(self, *args: Any) -> torch.Tensor | None:
        out = super().alloc_extend(*args)
        if out is not None and len(out) > self.page_size:
            self.full_to_swa_index_mapping[out[-1]] = self.full_to_swa_index_mapping[out[-1 - self.page_size]]
        return out


class PureWithoutTheIdentity(PureSWATokenToKVPoolAllocator):
    """A pure pool whose mapping lost its identity entries past the first slot."""

    def alloc(self, need_size: int) -> torch.Tensor | None:
        self.full_to_swa_index_mapping[2:-1] = 0
        return super().alloc(need_size)


@pytest.mark.parametrize(
    ("pool", "steps", "invariant", "side"),
    [
        (FreeSwaKeepsTheSwaPage, [new(2 * PS), ("free_swa", {"handle": 0, "pages": 1})], "conservation", "SWA"),
        (FreeFullKeepsTheFullPages, [new(PS), ("free_swa", {"handle": 0}), ("free_full", {"handle": 0})], "conservation", "full"),
        (MapsTwoTokensToOneSwaSlot, [new(2 * PS)], "swa-mapping", None),
    ],
    ids=["swa-side-leak", "full-side-leak", "swa-slot-mapped-twice"],
)
def test_a_broken_pool_trips_its_invariant_on_the_side_it_breaks(
    pool: type[SWATokenToKVPoolAllocator], steps: Steps, invariant: str, side: str | None
) -> None:
    drive(SWATokenToKVPoolAllocator, PAGED, steps)
    violation = tripped(pool, PAGED, steps)
    assert violation.invariant_id == invariant
    assert violation.numbers.get("side") == side


def test_a_pure_pool_whose_mapping_is_not_the_identity_trips_swa_mapping() -> None:
    steps: Steps = [("alloc", {"need_size": 3}), ("free_swa", {"handle": 0})]
    drive(PureSWATokenToKVPoolAllocator, {"size_swa": 6}, steps, driver_class=PureSWAKVDriver)
    violation = tripped(PureWithoutTheIdentity, {"size_swa": 6}, steps, driver_class=PureSWAKVDriver)
    assert violation.invariant_id == "swa-mapping"


# ------------------------------------------------------------------ misuse
MISUSE: dict[str, tuple[dict[str, Any], Steps]] = {
    "paged": (
        PAGED,
        [
            new(2 * PS, 1),
            ("free_swa", {"handle": 0, "pages": 2}),
            ("decode", {"handles": [0]}),  # its last token left the window
            ("extend", {"batch": [[0, 1]]}),
            ("free_swa_again", {"handle": 0}),
            ("free_full", {"handle": 1}),  # still in the window
            ("tail", {"handle": None, "extend_len": 5, "swa_tail_len": 2}),  # the tail would start mid-page
            ("tail", {"handle": None, "extend_len": 5, "swa_tail_len": 6}),
            ("alloc", {"need_size": PS}),  # the page-size-1 call
            ("free", {"handle": 1}),
            ("free_again", {"handle": 1, "call": "free"}),
            ("free_again", {"handle": 1, "call": "free_swa"}),
            ("free_again", {"handle": 1, "call": "free_full"}),
            ("free_indices", {"indices": [1], "call": "free"}),  # page 0
            ("free_indices", {"indices": [9 * PS], "call": "free_swa"}),  # past the pool
            ("free_indices", {"indices": [-1], "call": "free_full"}),
            ("group_end", {}),
            ("group_begin", {}),
            ("group_begin", {}),
            ("group_end", {}),
        ],
    ),
    "page size 1": (
        {"size": 6, "size_swa": 4, "page_size": 1},
        [
            ("alloc", {"need_size": 2}),
            ("alloc", {"need_size": -1}),
            ("tail", {"handle": None, "extend_len": 1, "swa_tail_len": 1}),  # the paged call
            ("free_swa", {"handle": 0, "pages": 1}),
            ("free_swa_again", {"handle": 0}),
            ("free_indices", {"indices": [2, 2], "call": "free"}),  # one slot named twice
        ],
    ),
}


@pytest.mark.parametrize("regime", sorted(MISUSE))
def test_every_misuse_probe_is_rejected_by_our_pool_and_skipped_with_misuse_off(regime: str) -> None:
    config, steps = MISUSE[regime]
    checked = drive(SWATokenToKVPoolAllocator, config, steps)
    unchecked = drive(SWATokenToKVPoolAllocator, config, steps, check_misuse=False)
    assert len(checked.trace.steps) == len(steps)
    assert len(unchecked.trace.steps) < len(steps)


def test_a_free_of_a_request_partly_out_of_the_window_and_a_tail_over_a_prefix_stay_clean() -> None:
    drive(
        SWATokenToKVPoolAllocator,
        PAGED,
        [
            new(3 * PS - 1),
            ("free_swa", {"handle": 0, "pages": 1}),
            ("decode", {"handles": [0]}),
            ("decode", {"handles": [0]}),  # the second opens a page on both sides
            ("tail", {"handle": 0, "extend_len": PS + 1, "swa_tail_len": PS}),  # head continues the prefix's page
            ("group_begin", {}),
            ("free", {"handle": 0, "sparse": True}),
            ("group_end", {}),
        ],
    )


PAGE_SIZE_1 = {"size": 8, "size_swa": 4, "page_size": 1}
PARTLY_OUT = [new(4), ("free_swa", {"handle": 0, "pages": 1}), ("free", {"handle": 0}), new(3)]
"""At page size 1 a request whose first token left the window is freed whole, then the slots are reused."""


class RecordsFrees(SWATokenToKVPoolAllocator):
    """Our pool, recording which free calls it was sent and with how many slots."""

    poolfuzz_check_misuse = False
    calls: list[tuple[str, int]] = []

    def free(self, free_index: torch.Tensor) -> None:
        self.calls.append(("free", int(free_index.numel())))
        super().free(free_index)

    def free_full(self, free_index: torch.Tensor) -> None:
        self.calls.append(("free_full", int(free_index.numel())))
        super().free_full(free_index)


def test_a_target_that_does_not_validate_gets_the_frees_upstreams_callers_send(monkeypatch: pytest.MonkeyPatch) -> None:
    """free at page size 1 needs every peer mapped (allocator/swa.py:467-475, :558-560), so a request partly out of
    the window goes as free_kv_row_segments sends it: free_full of the part without peers, then free of the rest."""
    from poolfuzz.harness.kits.swa.contract import CONTRACT, rule_for

    assert rule_for("free", 1).needs == "peers mapped" and rule_for("free", 4).needs == "live pages"
    assert rule_for("free_full", 1) is rule_for("free_full", 4) and all(rule.evidence for rule in CONTRACT)
    monkeypatch.setattr(RecordsFrees, "calls", [])
    drive(RecordsFrees, PAGE_SIZE_1, PARTLY_OUT, check_misuse=False)
    assert RecordsFrees.calls == [("free_full", 1), ("free", 3)]
    monkeypatch.setattr(RecordsFrees, "calls", [])
    drive(RecordsFrees, PAGE_SIZE_1, PARTLY_OUT)  # a validating target: our pool takes one free of the whole request
    assert RecordsFrees.calls == [("free", 4)]


@pytest.mark.skipif(not __import__("importlib").util.find_spec("sglang"), reason="upstream SGLang not installed")
def test_upstream_swa_frees_a_request_partly_out_of_the_window_at_page_size_1_cleanly() -> None:
    """The driver no longer sends upstream free() after free_swa() (its _SWA_PEER_MAPPED case)."""
    from poolfuzz.harness.judge.families import load_factory

    driver = drive(load_factory("poolfuzz.harness.upstream:SWAKV"), {**PAGE_SIZE_1, "need_sort": False}, PARTLY_OUT, check_misuse=False)
    assert "free split as free_kv_row_segments does: free_full below the window, free for the rest" in driver.events
    assert not driver.pool.invariant_hits()


def test_the_pure_pool_drops_padding_and_its_free_full_changes_nothing() -> None:
    drive(
        PureSWATokenToKVPoolAllocator,
        {"size_swa": 6, "need_sort": True},
        [
            ("alloc", {"need_size": 2}),
            ("alloc", {"need_size": 2}),
            ("free_full", {"handle": 0}),
            ("free_padded", {"handle": 0}),
            ("free_indices", {"indices": [0, -1]}),
            ("free_indices", {"indices": [1]}),
            ("free_swa", {"handle": 1}),
            ("alloc", {"need_size": 5}),
        ],
        driver_class=PureSWAKVDriver,
    )


# -------------------------------------------------------------------- walks
@pytest.mark.parametrize(
    ("driver_class", "factory", "config", "table"),
    [
        (SWAKVDriver, SWATokenToKVPoolAllocator, {"size": 64 * PS, "size_swa": 24 * PS, "page_size": PS}, swa_kv_table),
        (PureSWAKVDriver, PureSWATokenToKVPoolAllocator, {"size_swa": 64}, pure_swa_kv_table),
    ],
    ids=["swa_kv", "pure_swa_kv"],
)
def test_the_bench_walk_runs_clean_on_our_pools(
    driver_class: type[Driver], factory: Callable[..., Any], config: dict[str, Any], table: Callable[[], MoveTable]
) -> None:
    driver = driver_class(factory, {**config, "device": "cpu"})
    workload, rng = table().workload(), random.Random(0)
    for _ in range(300):
        op, args = workload(driver, rng)
        driver.step(op, **args)  # the table's moves take exactly the driver's keywords
    driver.teardown()


def test_the_walk_reaches_its_corners_on_sampled_configurations() -> None:
    table, rng = swa_kv_table(), random.Random(1)
    moves, reached = table.walk_moves, set()
    for _ in range(40):
        driver = SWAKVDriver(SWATokenToKVPoolAllocator, table.configs(rng))
        view = table.view(driver)
        for _ in range(30):
            for move in rng.sample(moves, len(moves)):
                found = step_of(move, view, rng)
                if found is not None:
                    corner, (op, args) = found
                    driver.step(op, **args)
                    reached.add(corner)
                    break
        driver.teardown()
    assert {CORNER_SWA_SHORT_DECODE, CORNER_RECYCLED_TAIL} <= reached, reached

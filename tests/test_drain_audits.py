"""Drain audits: a family's drain plan run on a copy of the pool, so state no step reads is judged anyway.

A wrong age in a prefix cache, or a free list handing out in the wrong order, shows
only once a later sequence asks for it; the drain asks now (``Driver.drain_audit``).
These tests hold the three promises a drain makes: it finds such a bug with a trace
that replays to it without the drain, it leaves the driver it copies as it was, and on
our pools (and upstream's, copied by replay) it finds nothing.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest
import torch

from poolfuzz.harness.bench.workloads import workload_for
from poolfuzz.harness.fuzz.walk import WalkRun, walk_for
from poolfuzz.harness.judge.driver import MAX_DRAIN_STEPS, DrainCopyDiverged, Driver
from poolfuzz.harness.judge.families import FAMILIES, family, family_unavailable, load_factory, resolve
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.prefix_cache.driver import PrefixCacheDriver
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.pools.free_list import PageFreeList
from poolfuzz.pools.prefix_cache import build_prefix_cache, kv_allocator_for
from poolfuzz.pools.radix_cache import MatchResult, RadixCache, TokenIds

DRAINED = [name for name in FAMILIES if walk_for(name).drain is not None]
UPSTREAM = [
    ("prefix_cache", "poolfuzz.harness.upstream:RadixCache"),
    ("block_pool", "poolfuzz.harness.upstream:VllmBlockPool"),
    ("token_kv", "poolfuzz.harness.upstream:TokenKV"),
    ("pure_swa_kv", "poolfuzz.harness.upstream:PureSWAKV"),
]


class MatchKeepsStaleAges(RadixCache):
    """``match_prefix`` walks the tree without stamping what it matched: a hit path keeps its old age.

    No step reads an age until an eviction asks which leaf is oldest, and then LRU
    evicts the prefix just reused.  The shape of a lost ``_touch`` in a vectorised
    match (prefix-cache reference, eviction policies)."""

    def match_prefix(self, key: TokenIds) -> MatchResult:
        walk = self._tree.descend(self._aligned(self._tokens(key)))
        path = self._tree.split(walk)
        return MatchResult(self._cat([n.value for n in path]), path[-1] if path else self.root, walk.matched)


def build_stale_ages(size: int, page_size: int, eviction_policy: str = "lru", device: str = "cpu") -> RadixCache:
    return MatchKeepsStaleAges(kv_allocator_for(size, page_size, device), eviction_policy=eviction_policy)


class ModuleHoldingCache(RadixCache):
    """Our cache holding a module, as upstream's executed classes do: ``copy.deepcopy`` refuses it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.math = math


def build_module_holding(size: int, page_size: int, eviction_policy: str = "lru", device: str = "cpu") -> RadixCache:
    return ModuleHoldingCache(kv_allocator_for(size, page_size, device), eviction_policy=eviction_policy)


REUSED_PREFIX = [("insert", {"prompt": [1, 1, 1, 1]}), ("insert", {"prompt": [2, 2, 2, 2]}), ("match", {"prompt": [1, 1, 1, 1]})]
"""Two cached prompts, the older one matched again: LRU must evict the other first."""


def prefix_driver(factory: Any, *, drains: bool) -> PrefixCacheDriver:
    driver = PrefixCacheDriver(factory, {"size": 16, "page_size": 2, "eviction_policy": "lru", "device": "cpu"})
    plan = walk_for("prefix_cache").drain_plan()
    if drains and plan is not None:
        driver.enable_drains(plan, family("prefix_cache").drain_period)
    return driver


def run(driver: Driver, steps: list[tuple[str, dict[str, Any]]]) -> None:
    for op, args in steps:
        driver.step(op, **args)
    driver.teardown()


def bench_driver(name: str, steps: int, seed: int = 0) -> Driver:
    """A driver of ``name`` on its bench configuration, ``steps`` bench-workload steps in, drains enabled."""
    fam = family(name)
    driver: Driver = resolve(fam.driver)(load_factory(fam.default), fam.bench_kwargs, implementation=fam.default)
    plan = walk_for(name).drain_plan()
    assert plan is not None
    driver.enable_drains(plan, 0)
    workload, rng = workload_for(name), random.Random(seed)
    for _ in range(steps):
        op, args = workload(driver, rng)
        driver.step(op, **args)
    return driver


# ------------------------------------------------------------------ finding
def test_a_stale_age_no_step_reads_passes_the_steps_and_the_final_audit() -> None:
    run(prefix_driver(build_stale_ages, drains=False), REUSED_PREFIX)


def test_the_teardown_drain_finds_the_stale_age_and_says_a_drain_found_it() -> None:
    with pytest.raises(InvariantViolation) as raised:
        run(prefix_driver(build_stale_ages, drains=True), REUSED_PREFIX)
    assert raised.value.invariant_id == "eviction-order"
    assert "found by a drain audit after step 3" in str(raised.value)


def test_a_drain_found_trace_replays_to_the_same_invariant_without_any_drain() -> None:
    with pytest.raises(InvariantViolation) as raised:
        run(prefix_driver(build_stale_ages, drains=True), REUSED_PREFIX)
    trace = raised.value.trace
    assert trace is not None and len(trace.steps) > len(REUSED_PREFIX)
    replayed = replay_trace(trace, factory=build_stale_ages, target="stale ages")
    assert (replayed.outcome, replayed.invariant) == ("violation", "eviction-order")
    assert replay_trace(trace, target="poolfuzz.pools.prefix_cache:build_prefix_cache").outcome == "pass"


def test_a_periodic_drain_finds_the_stale_age_before_the_run_ends() -> None:
    driver = prefix_driver(build_stale_ages, drains=True)
    driver.drain_period = len(REUSED_PREFIX)
    with pytest.raises(InvariantViolation) as raised:
        for op, args in REUSED_PREFIX:
            driver.step(op, **args)
    found = raised.value.trace
    assert raised.value.invariant_id == "eviction-order" and found is not None
    assert driver.trace.steps == found.steps[: len(REUSED_PREFIX)]
    assert len(driver.trace.steps) == len(REUSED_PREFIX), "the periodic drain ran on a copy"


def test_the_walk_reports_a_drain_found_violation_with_the_drains_steps() -> None:
    walk = WalkRun("prefix_cache", seed=0, spec="tests.test_drain_audits:build_stale_ages", shrink=False)
    finding = walk.run(max_steps=5000)
    assert finding is not None and finding.violation is not None
    assert finding.violation.invariant_id == "eviction-order"
    assert replay_trace(finding.trace).invariant == "eviction-order"


# ------------------------------------------------------------------ leaving the driver as it was
@pytest.mark.parametrize("name", DRAINED)
def test_a_passing_drain_audit_leaves_the_driver_it_copied_unchanged(name: str) -> None:
    if reason := family_unavailable(name):
        pytest.skip(reason)
    driver = bench_driver(name, 120)
    before, steps = driver.observe(), copy.deepcopy(driver.trace.steps)
    driver.drain_audit()
    assert driver.drains == 1
    assert driver.observe() == before
    assert driver.trace.steps == steps
    driver.audit()
    workload, rng = workload_for(name), random.Random(1)
    for _ in range(40):  # and it goes on as if nothing happened
        op, args = workload(driver, rng)
        driver.step(op, **args)
    driver.teardown()


def test_a_copy_of_a_free_list_reads_and_writes_its_own_buffer() -> None:
    """The copy's NumPy view is re-taken from the copy's tensor (:mod:`poolfuzz.pools.host_views`), not shared."""
    free = PageFreeList(torch.device("cpu"))
    free.replace(torch.arange(1, 9))
    twin = copy.deepcopy(free)
    twin.pop(3)
    twin.append([42])
    assert free.take_host(8).tolist() == list(range(1, 9))
    assert twin.take_host(8).tolist() == [4, 5, 6, 7, 8, 42]


class StaleCopies(PrefixCacheDriver):
    """A driver whose drain copies are not its pool: each is a stale-ages cache that replayed the trace."""

    def _drain_copy(self) -> Driver:
        twin = PrefixCacheDriver(build_stale_ages, self.config)
        for recorded in self.trace.steps:
            twin.step(recorded["op"], **recorded["args"])
        return twin


def test_a_violation_only_the_copy_shows_is_a_harness_error_not_a_finding() -> None:
    driver = StaleCopies(build_prefix_cache, {"size": 16, "page_size": 2, "eviction_policy": "lru", "device": "cpu"})
    plan = walk_for("prefix_cache").drain_plan()
    assert plan is not None
    driver.enable_drains(plan, 0)
    for op, args in REUSED_PREFIX:
        driver.step(op, **args)
    with pytest.raises(DrainCopyDiverged, match=r"found \[eviction-order\], which a fresh driver"):
        driver.drain_audit()


def test_a_pool_that_cannot_be_deep_copied_is_copied_by_replay_and_drained_at_teardown_only() -> None:
    driver = prefix_driver(build_module_holding, drains=True)
    driver.drain_period = 1
    for op, args in REUSED_PREFIX:
        driver.step(op, **args)
    assert driver.drains == 1, "the first periodic drain copies by replay; later ones wait for teardown"
    before = driver.observe()
    driver.drain_audit()
    assert (driver.drains, driver.observe()) == (2, before)
    driver.teardown()
    assert driver.drains == 3


def test_a_drain_plan_that_never_runs_dry_is_cut_at_the_step_limit() -> None:
    driver = prefix_driver(build_stale_ages, drains=False)
    driver.enable_drains(lambda d: iter(lambda: ("match", {"prompt": [3, 3]}), None), 0)
    driver.drain_audit(in_place=True)
    assert (driver.drains, driver.steps) == (1, MAX_DRAIN_STEPS)


# ------------------------------------------------------------------ finding nothing
@pytest.mark.parametrize("name", DRAINED)
def test_every_drained_family_walks_clean_with_drains_on(name: str) -> None:
    if reason := family_unavailable(name):
        pytest.skip(reason)
    walk = WalkRun(name, seed=3, shrink=False)
    walk.drain_period = 32
    assert walk.run(max_steps=1500) is None
    assert walk.drains > walk.episodes


@pytest.mark.parametrize(("name", "spec"), UPSTREAM)
def test_upstream_targets_drain_clean_at_teardown(name: str, spec: str) -> None:
    try:
        walk = WalkRun(name, seed=3, spec=spec, shrink=False)
    except Exception as exc:  # noqa: BLE001 - an upstream not installed here
        pytest.skip(f"{spec}: {exc}")
    assert walk.run(max_steps=1500) is None
    assert walk.drains >= walk.episodes  # each teardown drains; pools that deep-copy drain between too

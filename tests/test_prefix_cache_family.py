"""The ``prefix_cache`` family: its model, its driver on our cache, and each planted bug caught by its id.

The canaries are driven here by short scripted steps (no hypothesis), so each test
names the exact situation a bug needs; ``tests/test_canaries.py`` finds the same
bugs by fuzzing.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from poolfuzz.harness.bench.workloads import workload_for
from poolfuzz.harness.judge.driver import Driver
from poolfuzz.harness.judge.families import FAMILIES, load_factory, resolve
from poolfuzz.harness.judge.invariants import INVARIANTS, InvariantViolation
from poolfuzz.harness.kits.prefix_cache.canaries import CANARIES
from poolfuzz.harness.kits.prefix_cache.driver import PrefixCacheDriver
from poolfuzz.harness.kits.prefix_cache.model import PrefixCacheModel
from poolfuzz.pools.prefix_cache import build_prefix_cache
from poolfuzz.pools.protocols import PrefixCache
from tests.conftest import DEVICES

NEW_INVARIANTS = ("cache-accounting", "lock-balance", "evict-spares-locked", "match-returns-inserted", "kv-accounting")
Steps = list[tuple[str, dict[str, Any]]]


def driver(
    ps: int,
    *,
    size_pages: int = 8,
    policy: str = "lru",
    spec: str = "",
    device: str = "cpu",
    driver_class: type[PrefixCacheDriver] = PrefixCacheDriver,
    check_misuse: bool = True,
) -> PrefixCacheDriver:
    factory = load_factory(spec) if spec else build_prefix_cache
    config = {"size": size_pages * ps, "page_size": ps, "eviction_policy": policy, "device": device}
    return driver_class(factory, config, check_misuse=check_misuse)


def caught(d: Driver, steps: Steps) -> str | None:
    """The invariant the steps trip (teardown audit included), or ``None``."""
    try:
        for op, args in steps:
            d.step(op, **args)
        d.teardown()
    except InvariantViolation as violation:
        return violation.invariant_id
    return None


# ------------------------------------------------------------------ model
@pytest.mark.parametrize("split_ages", ["inherit", "fresh"])
def test_a_match_ending_inside_a_node_splits_it_there_and_returns_the_inserted_indices(split_ages: str) -> None:
    model = PrefixCacheModel(num_pages=8, page_size=2, policy="lru", split_ages=split_ages)
    model.take([1, 2, 3])
    assert model.insert((0, 1, 0, 1, 0, 1), [2, 3, 4, 5, 6, 7]).prefix_len == 0
    match = model.match((0, 1, 0, 2, 9))
    assert (match.prefix_len, match.indices, match.split) == (2, [2, 3], True)
    assert set(model.nodes) == {(0, 1), (0, 1, 0, 1, 0, 1)}
    upper, lower = model.nodes[(0, 1)], model.nodes[(0, 1, 0, 1, 0, 1)]
    assert upper.last_access > lower.last_access
    if split_ages == "inherit":  # SGLang 0.5.23's default UnifiedTreeCore: the child's creation
        assert upper.created == lower.created
    else:  # the legacy RadixCache: created at the split
        assert upper.created > lower.last_access


@pytest.mark.parametrize(("split_ages", "order"), [("inherit", [[0], [1]]), ("fresh", [[1], [0]])])
def test_fifo_after_a_split_takes_the_upper_half_by_its_childs_age_or_by_the_split(split_ages: str, order: list[list[int]]) -> None:
    """Finding 4's sequence: insert [0, 0], insert [1], match [0, 1] (splits [0, 0]), evict 2 under FIFO."""
    model = PrefixCacheModel(num_pages=8, page_size=1, policy="fifo", split_ages=split_ages)
    model.take([1, 2, 3])
    model.insert((0, 0), [1, 2])
    model.insert((1,), [3])
    model.match((0, 1))
    plan = model.evict(2)
    assert plan.victims == [(0, 0), *map(tuple, order)][:2]


def test_insert_reports_the_cached_prefix_and_keeps_only_the_new_pages() -> None:
    model = PrefixCacheModel(num_pages=8, page_size=1, policy="lru")
    model.take([1, 2, 3, 4, 5])
    model.insert((7, 7, 7), [1, 2, 3])
    again = model.insert((7, 7, 8), [4, 5, 6])
    assert (again.prefix_len, again.split, again.added) == (2, True, 1)
    assert model.match((7, 7, 8)).indices == [1, 2, 6]
    assert model.total == 4 and model.held_pages() == {1, 2, 3, 6}


def test_locks_count_every_page_of_the_path_and_protected_follows_them() -> None:
    model = PrefixCacheModel(num_pages=8, page_size=1, policy="lru")
    model.take([1, 2, 3])
    model.insert((1, 2, 3), [1, 2, 3])
    assert model.lock((1, 2, 3)) == -3 and model.lock((1, 2, 3)) == 0
    assert (model.protected, model.evictable) == (3, 0)
    assert model.unlock((1, 2, 3)) == 0 and model.unlock((1, 2, 3)) == 3
    assert model.protected == 0


@pytest.mark.parametrize(("policy", "order"), [("lru", [2, 3, 1]), ("mru", [1, 3, 2]), ("fifo", [1, 2, 3]), ("filo", [3, 2, 1])])
def test_evict_takes_leaves_in_the_policy_order(policy: str, order: list[int]) -> None:
    model = PrefixCacheModel(num_pages=8, page_size=1, policy=policy)
    for first in (1, 2, 3):
        model.take([first])
        model.insert((first,), [first])
    model.match((1,))
    assert [model.evict(1).victims[0][0] for _ in order] == order


def test_evict_frees_whole_leaves_then_the_parents_they_expose_and_spares_locked_paths() -> None:
    model = PrefixCacheModel(num_pages=8, page_size=1, policy="lru")
    model.take([1, 2, 3, 4])
    model.insert((5, 5, 5), [1, 2, 3])
    model.match((5,))  # a one-token parent over a two-token leaf
    model.insert((6,), [4])
    model.lock((6,))
    plan = model.evict(100)
    assert (plan.freed_tokens, sorted(plan.freed_pages), plan.victims) == (3, [1, 2, 3], [(5, 5, 5), (5,)])
    assert model.held_pages() == {4} and model.free == {1, 2, 3, 5, 6, 7, 8}


def test_clear_frees_every_page_and_gives_the_root_a_new_identity() -> None:
    model = PrefixCacheModel(num_pages=4, page_size=2, policy="fifo")
    root = model.serial_at(())
    model.take([1])
    model.insert((0, 0), [2, 3])
    model.clear()
    assert model.free == {1, 2, 3, 4} and model.total == 0 and model.serial_at(()) != root


# ------------------------------------------------------------------ driver on our cache
def test_the_factory_builds_a_cache_over_its_allocator_that_satisfies_the_protocol() -> None:
    cache = build_prefix_cache(16, 4, "mru")
    assert isinstance(cache, PrefixCache)
    assert (cache.allocator.size, cache.allocator.page_size, cache.eviction_policy) == (16, 4, "mru")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ps", [1, 2, 4])
@pytest.mark.parametrize("policy", ["lru", "mru", "fifo", "filo"])
def test_a_seeded_scheduler_walk_on_our_cache_breaks_no_invariant(ps: int, policy: str, device: str) -> None:
    d, rng = driver(ps, policy=policy, device=device), random.Random(ps * 31 + len(policy))
    workload = workload_for("prefix_cache")
    for _ in range(120):
        op, args = workload(d, rng)
        d.step(op, **args)
    d.teardown()
    assert {"request hit the cache", "finish cached the request", "match split a node"} <= set(d.events)


def test_requests_share_what_an_earlier_one_cached_and_release_leaves_only_the_tree() -> None:
    d = driver(2)
    first = d.step("request", prompt=[0, 1, 0, 1, 2])
    d.step("finish", handle=first, cache=True)
    second = d.step("request", prompt=[0, 1, 0, 1, 0])
    assert d.holders[second].cpl == 4 and d.holders[second].row[:4] == d.holders[first].row[:4]
    d.step("finish", handle=second, cache=False)
    d.teardown()
    assert d.pool.protected_size() == 0 and d.kv.available_size() + d.pool.total_size() == d.size


def test_a_request_the_pool_cannot_hold_is_refused_and_its_lock_rolled_back() -> None:
    d = driver(1, size_pages=4)
    d.step("insert", prompt=[0, 0])
    assert d.step("lock", prompt=[0, 0]) == 0
    assert d.step("request", prompt=[1, 1, 1]) is None
    assert d.pool.protected_size() == 2 and d.events.count("allocation refused: KV short after eviction") == 1
    d.teardown()


def test_a_second_unlock_is_misuse_only_where_a_pool_can_tell() -> None:
    d = driver(1)
    d.step("insert", prompt=[3, 3])
    shared, other, root = (d.step("lock", prompt=[3, 3]), d.step("lock", prompt=[3, 3]), d.step("lock", prompt=[9]))
    for handle in (shared, root):
        d.step("unlock", handle=handle)
    assert d.unlocked_handles() == []  # [3, 3] is still locked by `other`; the root's unlock is a no-op
    d.step("unlock", handle=other)
    assert d.unlocked_handles() == [shared, other]
    d.step("unlock", handle=shared)  # rejected with LockStateError by our cache
    assert "second unlock" in d.events
    d.teardown()


def test_misuse_steps_are_skipped_for_targets_that_do_not_validate() -> None:
    d = driver(1, check_misuse=False)
    d.step("insert", prompt=[1, 2])
    misuse: Steps = [("recache", {"prompt": [5, 5]}), ("insert_mismatched", {"prompt": [1], "extra": 1}), ("evict", {"num_tokens": -1})]
    for op, args in misuse:
        d.step(op, **args)
    assert d.trace.steps == [{"op": "insert", "args": {"prompt": [1, 2]}}]


# ------------------------------------------------------------------ canaries and invariant teeth
SCRIPTS: dict[str, tuple[int, Steps]] = {
    "evictable-counts-key-length": (4, [("insert", {"prompt": [0] * 6})]),
    "double-unlock-goes-negative": (
        1,
        [("insert", {"prompt": [0, 0]}), ("lock", {"prompt": [0, 0]}), ("unlock", {"handle": 0}), ("unlock", {"handle": 0})],
    ),
    "insert-leaks-split-duplicates": (1, [("insert", {"prompt": [0, 0, 0]}), ("insert", {"prompt": [0, 0]})]),
    "evict-takes-locked-leaf": (
        1,
        [("insert", {"prompt": [0, 0]}), ("lock", {"prompt": [0, 0]}), ("insert", {"prompt": [1, 1]}), ("evict", {"num_tokens": 1})],
    ),
    "shared-page-counted-twice": (1, [("insert", {"prompt": [0, 0]}), ("recache", {"prompt": [1, 1]})]),
    "match-reuses-partial-page": (2, [("insert", {"prompt": [0, 1, 0, 1]}), ("match", {"prompt": [0, 1, 0, 2]})]),
    "release-frees-cached-prefix": (1, [("request", {"prompt": [0, 0, 0]}), ("finish", {"handle": 0, "cache": True})]),
}


def test_every_prefix_cache_canary_has_a_script_and_every_new_invariant_a_canary() -> None:
    mine = {name for name, c in CANARIES.items() if c.family == "prefix_cache"}
    assert mine == set(SCRIPTS)
    assert {CANARIES[name].invariant for name in mine} == set(NEW_INVARIANTS)
    assert set(NEW_INVARIANTS) <= set(INVARIANTS) and set(NEW_INVARIANTS) <= set(FAMILIES["prefix_cache"].invariants)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_canary_is_caught_by_its_invariant_and_our_cache_passes_the_same_steps(name: str) -> None:
    ps, steps = SCRIPTS[name]
    canary = CANARIES[name]
    driver_class = resolve(canary.driver) if canary.driver else PrefixCacheDriver
    assert caught(driver(ps, spec=canary.spec, driver_class=driver_class), steps) == canary.invariant
    assert caught(driver(ps), steps) is None

"""The scheduler family's KV options, step by step: the prefix cache and the sliding window.

Each test drives :class:`SchedulerDriver` by hand on a tiny pool (page size 4) with a
full audit after every step.  The cache tests show the leak equation
``available + evictable + protected + uncached == total`` accepting pages several
requests share, and catching a leaked, a doubly-owned and a leaked-and-doubly-owned
page (the last balances the count; only the page-level audit sees it).  The window
tests show out-of-window tokens giving back whole SWA pages and conservation per
side.  The planted canaries of both options are caught here on their shortest
traces; ``tests/test_canaries.py`` finds them by fuzzing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings

from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.scheduler.canaries import cached_part_freeing_pools, lock_keeping_pools, window_keeping_pools
from poolfuzz.harness.kits.scheduler.config import SchedulerConfig
from poolfuzz.harness.kits.scheduler.driver import SchedulerDriver, build_scheduler_pools
from poolfuzz.harness.machines.table import config_strategy

PS = 4
PROMPT = list(range(1, 10))  # two whole pages and one token more
OTHER = [9] * 12


def make(factory: Any = build_scheduler_pools, **options: Any) -> SchedulerDriver:
    config = {"size": 4, "max_context_len": 24, "page_size": PS, "kv_pages": 6, "kernel": "loop", "device": "cpu", **options}
    return SchedulerDriver(factory, config, audit_period=1)


def cached(factory: Any = build_scheduler_pools, **options: Any) -> SchedulerDriver:
    return make(factory, prefix_cache=True, **options)


def windowed(factory: Any = build_scheduler_pools, **options: Any) -> SchedulerDriver:
    return make(factory, sliding_window=2, swa_pages=4, **options)


def admit(driver: SchedulerDriver, *prompts: list[int], chunk: int = 24) -> list[int]:
    handles: list[int] = driver.step("admit", requests=[[len(p), chunk] for p in prompts], tokens=list(prompts))
    return handles


def served_once(driver: SchedulerDriver) -> None:
    """``PROMPT`` ran and finished: its two whole pages are cached, unlocked."""
    driver.step("finish", handles=admit(driver, PROMPT))


def row(driver: SchedulerDriver, handle: int) -> list[int]:
    state = driver.model.live[handle]
    return [int(v) for v in driver.rows.req_to_token[state.row, : state.length].tolist()]


def violation(call: Any) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as caught:
        call()
    return caught.value


# ------------------------------------------------------------------ prefix cache
def test_a_finished_prompt_is_cached_and_a_later_request_extends_only_the_rest() -> None:
    driver = cached()
    served_once(driver)
    assert driver.cache is not None and driver.cache.sizes() == (2 * PS, 0, 2 * PS)
    (handle,) = admit(driver, PROMPT)
    state = driver.model.live[handle]
    assert state.cached == 2 * PS and state.length == len(PROMPT)
    assert "cache hit at admission" in driver.events and driver.cache.sizes() == (0, 2 * PS, 2 * PS)
    driver.teardown()


def test_the_leak_equation_accepts_pages_shared_by_several_requests() -> None:
    driver = cached()
    served_once(driver)
    first, second = admit(driver, PROMPT, PROMPT)
    assert row(driver, first)[: 2 * PS] == row(driver, second)[: 2 * PS]  # the same cached pages, twice
    assert driver.cache is not None and driver.cache.sizes()[1] == 2 * PS  # protected once, not per holder
    assert driver.full.available_size() + sum(driver.cache.sizes()[:2]) + driver.model.uncached_tokens() == 6 * PS
    driver.cache.check_ledger()
    driver.audit()
    driver.step("finish", handles=[first, second])
    driver.teardown()


def test_the_leak_equation_catches_a_leaked_page() -> None:
    driver = cached()
    served_once(driver)
    admit(driver, PROMPT, PROMPT)
    driver.full.alloc(PS)  # a page taken behind the scheduler's back: nobody owns it
    assert driver.cache is not None
    caught = violation(driver.cache.check_ledger)
    assert caught.invariant_id == "kv-accounting"
    assert (
        caught.numbers["available"] + caught.numbers["evictable"] + caught.numbers["protected"] + caught.numbers["uncached"]
        == caught.numbers["total"] - PS
    )


def test_the_leak_equation_catches_a_doubly_owned_page() -> None:
    driver = cached()
    served_once(driver)
    first, _ = admit(driver, PROMPT, PROMPT)
    driver.full.free(torch.tensor(row(driver, first)[2 * PS :]))  # its own page, free while it still holds it
    assert driver.cache is not None
    assert violation(driver.cache.check_ledger).invariant_id == "kv-accounting"


def test_a_leak_that_a_double_owner_hides_balances_the_count_but_not_the_pages() -> None:
    driver = cached()
    served_once(driver)
    first, _ = admit(driver, PROMPT, PROMPT)
    driver.full.alloc(PS)
    driver.full.free(torch.tensor(row(driver, first)[2 * PS :]))
    assert driver.cache is not None
    driver.cache.check_ledger()  # the counts balance
    caught = violation(driver.check_equation)
    assert caught.invariant_id == "kv-accounting"
    assert len(caught.numbers["leaked"]) == 1 and len(caught.numbers["free_and_held"]) == 1


def test_a_short_pool_evicts_the_cache_before_it_refuses() -> None:
    driver = cached(kv_pages=4)
    served_once(driver)  # 2 pages cached, 2 free
    (handle,) = admit(driver, OTHER)  # needs 3
    assert handle in driver.model.live and "eviction before refusal" in driver.events
    assert driver.cache is not None and driver.cache.sizes()[2] < 2 * PS
    driver.teardown()


def test_eviction_spares_the_pages_a_live_request_locks() -> None:
    driver = cached(kv_pages=4)
    served_once(driver)
    admit(driver, PROMPT)  # locks the 2 cached pages, takes 1 more
    assert admit(driver, OTHER) == []  # 1 free page and nothing evictable
    assert {"KV short after eviction", "admission rolled back: KV short"} <= set(driver.events)
    assert driver.cache is not None and driver.cache.sizes() == (0, 2 * PS, 2 * PS)
    driver.teardown()


def test_retract_with_the_cache_releases_the_request_and_unlocks_its_prefix() -> None:
    driver = cached()
    served_once(driver)
    (handle,) = admit(driver, PROMPT)
    driver.step("retract", handle=handle, keep=5)
    assert handle not in driver.model.live and "retract released through the cache" in driver.events
    assert driver.cache is not None and driver.cache.sizes() == (2 * PS, 0, 2 * PS)
    driver.teardown()


def test_a_chunked_request_is_checkpointed_and_protects_what_it_computed() -> None:
    driver = cached()
    (handle,) = admit(driver, OTHER, chunk=5)
    assert driver.model.live[handle].cached == PS and driver.cache is not None
    assert driver.cache.sizes() == (0, PS, PS)
    driver.step("prefill", handles=[handle], chunk=24)
    driver.step("finish", handles=[handle])
    assert driver.cache.sizes() == (3 * PS, 0, 3 * PS)
    driver.teardown()


def test_a_release_frees_the_pages_someone_else_cached_meanwhile() -> None:
    driver = cached()
    first, second = admit(driver, PROMPT, PROMPT)  # one batch: neither hits, both compute the prompt
    driver.step("finish", handles=[first])
    driver.step("finish", handles=[second])
    assert "release freed duplicates" in driver.events
    assert driver.cache is not None and driver.cache.sizes() == (2 * PS, 0, 2 * PS)
    driver.teardown()


def test_a_release_path_that_frees_the_cached_part_is_caught_by_the_leak_equation() -> None:
    driver = cached(cached_part_freeing_pools)
    (handle,) = admit(driver, PROMPT)
    assert violation(lambda: driver.step("finish", handles=[handle])).invariant_id == "kv-accounting"


def test_a_retract_that_keeps_its_lock_is_caught_by_the_lock_balance() -> None:
    driver = cached(lock_keeping_pools)
    served_once(driver)
    (handle,) = admit(driver, PROMPT)
    assert violation(lambda: driver.step("retract", handle=handle, keep=0)).invariant_id == "lock-balance"


# ------------------------------------------------------------------ sliding window
def test_decoding_past_the_window_gives_back_whole_swa_pages_and_keeps_the_last() -> None:
    driver = windowed()
    (handle,) = admit(driver, [0] * 6)
    for _ in range(4):
        driver.step("decode", handles=[handle])
    state = driver.model.live[handle]
    assert state.length == 10 and state.swa_evicted == PS  # pre_len 6 - window 2 -> page boundary 4
    mapping = driver.kv.translate_loc_from_full_to_swa(torch.tensor(row(driver, handle))).tolist()
    assert mapping[:PS] == [0] * PS and all(mapping[PS:])
    assert driver.kv.swa_available_size() == 2 * PS and driver.kv.full_available_size() == 3 * PS
    assert "out-of-window SWA release" in driver.events
    driver.teardown()


def test_a_retract_into_the_released_window_restarts_the_request() -> None:
    driver = windowed()
    (handle,) = admit(driver, [0] * 10)
    driver.step("decode", handles=[handle])  # releases tokens 0..8
    driver.step("retract", handle=handle, keep=9)  # position 7 has no SWA slot left to continue from
    state = driver.model.live[handle]
    assert state.length == 0 and state.target == 11
    assert "retract past the window: re-prefill from the start" in driver.events
    driver.step("prefill", handles=[handle], chunk=24)
    driver.step("finish", handles=[handle])
    driver.teardown()


def test_a_window_that_is_never_released_is_caught_on_the_swa_side() -> None:
    driver = windowed(window_keeping_pools)
    (handle,) = admit(driver, [0] * 6)
    caught = violation(lambda: driver.step("decode", handles=[handle]))
    assert caught.invariant_id == "scheduler-conservation" and "in_window" in caught.numbers


# ------------------------------------------------------------------ config
@settings(max_examples=60, derandomize=True, database=None)
@given(config_strategy("scheduler"))
def test_the_config_draws_the_cache_and_the_window_exclusively_and_without_mamba(config: SchedulerConfig) -> None:
    assert not (config.prefix_cache and config.sliding_window)
    if config.prefix_cache or config.sliding_window:
        assert not config.hybrid
    if config.sliding_window:
        assert config.page_size > 1 and config.swa_pages >= 1

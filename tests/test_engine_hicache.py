"""HiCache's device-host tier under upstream's scheduler (poolfuzz.harness.upstream.engine_hicache): a prefix evicted to the
host pool is hit there and loaded back, under the engine judges, for both write policies and both page sizes."""

from __future__ import annotations

import sys
from collections import Counter
from types import FrameType
from typing import Any

import pytest

from poolfuzz.harness.upstream.sglang_modules import unavailable_reason

pytestmark = pytest.mark.skipif(bool(reason := unavailable_reason("Engine")), reason=reason or "")

CALLS = (
    "init_load_back",
    "backup_from_device_all_layer_physical",
    "load_to_device_per_layer_physical",
    "check_hicache_events",
    "transfer_kv_direct",
    "load_back",
)


def prompt_evicted_then_sent_again(driver: Any) -> Any:
    """A 14-token prompt runs and finishes, a crowd's decode evicts its pages from the device (written to host first), and
    the same prompt arrives again: the queued request, whose prefix is now on the host only."""
    driver.step("arrive", stem=2, length=14, tail=0, max_new=2)
    driver.step("run", iterations=6)
    driver.step("crowd", count=2, max_new=8)
    driver.step("run", iterations=16)
    driver.step("arrive", stem=2, length=14, tail=3, max_new=2)
    return driver.loop.waiting_queue[-1]


@pytest.mark.parametrize(("policy", "page_size", "cache"), [("write_through", 1, "unified-python"), ("write_back", 4, "unified-rust")])
def test_a_prefix_evicted_to_the_host_pool_is_hit_there_and_loaded_back(policy: str, page_size: int, cache: str) -> None:
    """A finished prompt is cached; a crowd evicts it to the host pool (backed up first, on write-back at eviction); the
    prompt again is a host hit that ``init_load_back`` copies back to device (schedule_policy.py:1470-1517).  Every step and
    the teardown are judged; the scheduler polls the transfers every iteration (scheduler.py:3889)."""
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine

    driver = EngineDriver(build_engine, EngineTargetConfig(cache=cache, page_size=page_size, rows=2, tokens=24, context=64, hicache=policy))
    loop = driver.loop
    assert loop.s.enable_hierarchical_cache and loop.tree_cache.cache_controller is not None
    seen: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name in CALLS:
            seen[frame.f_code.co_name] += 1

    sys.setprofile(profile)
    try:
        again = prompt_evicted_then_sent_again(driver)
        driver.step("run", iterations=6)
    finally:
        sys.setprofile(None)
    assert again.finished() and again.host_hit_length >= 12  # past load_back_threshold (10 tokens): loaded, not recomputed
    assert all(seen[name] for name in CALLS), seen
    driver.teardown()


def test_a_hicache_shape_runs_without_the_host_tier_on_the_reenacted_loop_and_is_refused_where_0_5_23_has_none() -> None:
    """The re-enacted loop does not poll transfers, so it builds no host tier; the legacy cache, hybrid models, speculation
    and poolfuzz's pools are refused with HiCache (config.py)."""
    from poolfuzz.harness.kits.engine.config import EngineShapeError, EngineTargetConfig
    from poolfuzz.harness.upstream.engine import EngineLoop

    shape: dict[str, Any] = dict(cache="unified-rust", rows=2, tokens=24, context=64, hicache="write_through")
    assert EngineLoop(EngineTargetConfig(**shape)).tree_cache.cache_controller is None
    for refused in ({"cache": "radix"}, {"pools": "poolfuzz"}, {"speculative_num_steps": 2}, {"hicache": "write_around"}):
        with pytest.raises(EngineShapeError):
            EngineTargetConfig(**{**shape, **refused})


def test_a_copy_to_host_in_flight_keeps_its_pages_in_the_tree_and_its_ack_lands_when_the_fuzzer_said() -> None:
    """With copies taking 4 iterations, a finished request's write-through copy is in flight (its device pages reported as
    read, the tree's lock held, ``ongoing_write_through``) for four iteration boundaries; a request that needs those pages
    waits through idle iterations that are not a hang, and is admitted once ``check_hicache_events`` takes the ack."""
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine
    from poolfuzz.harness.kits.engine.observe import TREE, in_flight

    driver = EngineDriver(
        build_engine, EngineTargetConfig(cache="unified-rust", page_size=4, rows=2, tokens=24, context=64, hicache="write_through")
    )
    loop, tree = driver.loop, driver.loop.tree_cache
    driver.step("transfer_delay", iterations=4)
    waiting = prompt_evicted_then_sent_again(driver)
    kinds = []
    for _ in range(10):
        if loop.hicache_in_flight():
            flights = [f for f in in_flight(loop) if f.batch.startswith("HiCache")]
            assert flights and all(read.reader == TREE and read.ids for f in flights for read in f.reads)
            assert tree.ongoing_write_through and tree.protected_size() > 0
        kinds.append(driver.step("iterate", eos=[]))
    assert kinds.count("idle") >= 3 and "prefill" in kinds, kinds
    assert waiting.host_hit_length >= 12
    driver.teardown()


def test_the_host_pool_is_judged_and_a_host_slot_neither_free_nor_in_use_is_a_leak() -> None:
    """The observation has the host pool (free list and ``slot_used``); with one used slot's mark cleared by hand the slot is
    on neither, and the conservation judge reports it."""
    from poolfuzz.harness.judge.invariants import InvariantViolation
    from poolfuzz.harness.kits.engine.checks import judge
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine
    from poolfuzz.harness.upstream.sglang_modules import active

    driver = EngineDriver(build_engine, EngineTargetConfig(cache="unified-python", rows=2, tokens=24, context=64, hicache="write_through"))
    driver.step("arrive", stem=2, length=14, tail=0, max_new=2)
    driver.step("run", iterations=6)
    loop, target = driver.loop, driver.targets[0]
    host = loop.tree_cache.cache_controller.mem_pool_host.anchor_entry.host_pool
    used = host.slot_used.nonzero().flatten().tolist()
    assert used, "the finished prompt was written through to the host pool"
    with active(loop.m):
        judge(loop, target.checker)
        host.slot_used[used[0]] = False
        with pytest.raises(InvariantViolation, match="HiCache host slot"):
            judge(loop, target.checker)

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
        driver.step("arrive", stem=2, length=14, tail=0, max_new=2)
        driver.step("run", iterations=6)
        driver.step("crowd", count=2, max_new=8)
        driver.step("run", iterations=16)
        driver.step("arrive", stem=2, length=14, tail=3, max_new=2)
        again = loop.waiting_queue[-1]
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

"""The target that runs ``poolfuzz.pools.block_pool`` beside vLLM's ``BlockPool`` under vLLM's scheduler in every shape
that allows it: what the issue's "our block pool under vLLM's scheduler for 10 minutes" run fuzzes."""

from __future__ import annotations

import pytest

from poolfuzz.harness.upstream.vllm_files import vllm_unavailable_reason

MISSING = vllm_unavailable_reason()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"vLLM unavailable: {MISSING}")

SHAPE = {"block_size": 4, "num_blocks": 24, "max_num_seqs": 3, "max_num_batched_tokens": 12, "max_model_len": 32, "pools": "upstream"}


def test_a_shape_drawn_over_vllms_pool_alone_runs_beside_ours_too() -> None:
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver, build_vllm_engine_beside_our_pool

    driver = VllmEngineDriver(build_vllm_engine_beside_our_pool, SHAPE)
    assert driver.config.pools == "both" and driver.trace.config["pools"] == "both"
    assert [engine.config.pools for engine in driver.engines] == ["upstream", "poolfuzz"]
    driver.step("arrive", stem=0, length=9, tail=2, max_new=4)
    driver.step("run", iterations=6)
    driver.teardown()


def test_a_shape_our_pool_cannot_take_runs_over_vllms_alone() -> None:
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver, build_vllm_engine_beside_our_pool

    eagle_with_caching = {**SHAPE, "speculative_method": "eagle", "num_speculative_tokens": 2, "enable_prefix_caching": True}
    driver = VllmEngineDriver(build_vllm_engine_beside_our_pool, eagle_with_caching)
    assert driver.config.pools == "upstream" and len(driver.engines) == 1


def test_the_default_target_runs_the_shape_as_drawn() -> None:
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver
    from poolfuzz.harness.kits.vllm_engine.target import build_vllm_engine

    assert VllmEngineDriver(build_vllm_engine, SHAPE).config.pools == "upstream"

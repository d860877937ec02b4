"""vLLM 0.33.0's own v1 scheduler as an engine target: it loads, fuzzes clean sync and async, and its canaries bite."""

from __future__ import annotations

import importlib
import random
from functools import partial
from typing import Any

import pytest

from poolfuzz.harness.engines import judges
from poolfuzz.harness.engines.interface import EngineTarget, Submission
from poolfuzz.harness.upstream.vllm_files import vllm_unavailable_reason
from tests.vllm_driver_walk import driver_walk

MISSING = vllm_unavailable_reason()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"vLLM unavailable: {MISSING}")


def _judge(engine: Any) -> Any:
    from poolfuzz.harness.kits.vllm_engine.observe import check_structures

    observation = engine.observe()
    judges.judge(observation, engine_checks=lambda: check_structures(engine, observation))
    return observation


def _walk(async_scheduling: bool, sliding_window: int | None, steps: int = 300) -> None:
    from poolfuzz.harness.kits.vllm_engine.target import EOS, STOP, build_vllm_engine

    rng = random.Random(7)
    engine = build_vllm_engine(
        block_size=4, num_blocks=24, max_num_seqs=3, max_num_batched_tokens=12, max_model_len=32,
        async_scheduling=async_scheduling, sliding_window=sliding_window,
    )  # fmt: skip
    assert isinstance(engine, EngineTarget)
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.3:
            prompt = (11, 12, 13, 14, 15, 16)[: rng.randint(1, 6)] + tuple(rng.randint(20, 60) for _ in range(rng.randint(0, 12)))
            engine.submit(Submission(prompt, rng.randint(1, 20)))
        elif roll < 0.35 and engine.live():
            engine.abort(rng.choice(engine.live()))
        else:
            engine.step({rid: rng.choice((EOS, STOP, 100, 100, 100)) for rid in engine.live()})
        _judge(engine)
    for _ in range(200):
        if not engine.scheduler.requests and not engine.flights:
            break
        engine.step(dict.fromkeys(engine.live(), EOS))
    engine.step({})
    assert _judge(engine).at_rest
    pool = engine.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == len(pool.blocks) - 1


def test_the_target_loads_vllms_own_scheduler_classes() -> None:
    import poolfuzz.harness.upstream
    from poolfuzz.harness.upstream.vllm_files import load_vllm_scheduler

    build = poolfuzz.harness.upstream.VllmEngine
    engine = build(block_size=4, num_blocks=16, max_model_len=16, max_num_batched_tokens=16)
    modules = load_vllm_scheduler()
    assert type(engine.scheduler) is modules["vllm.v1.core.sched.scheduler"].Scheduler
    assert type(engine.scheduler.kv_cache_manager.block_pool).__module__ == "vllm.v1.core.block_pool"
    assert (
        build(block_size=4, num_blocks=16, max_model_len=16, max_num_batched_tokens=16, async_scheduling=True).scheduler.__class__.__name__
        == "AsyncScheduler"
    )


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("sliding_window", [None, 4], ids=["full", "full+swa"])
def test_a_walk_of_a_few_hundred_steps_is_clean_and_drains_to_rest(async_scheduling: bool, sliding_window: int | None) -> None:
    _walk(async_scheduling, sliding_window)


def test_a_shape_vllm_would_not_start_is_refused_when_the_config_is_built() -> None:
    from poolfuzz.harness.judge.limits import LimitError
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig

    with pytest.raises(LimitError, match="max_model_len"):
        VllmEngineConfig(block_size=4, num_blocks=4, max_model_len=64)


VLLM_ENGINE_CANARIES = [
    "vllm-engine-duplicate-in-free-blocks",
    "vllm-engine-preemption-keeps-blocks",
    "vllm-engine-placeholders-survive-preemption",
    "vllm-engine-evicted-hash-left-in-map",
    "vllm-engine-free-order-reversed",
    "vllm-engine-null-block-left-queued",
    "vllm-engine-table-entry-left-after-free",
    "vllm-engine-reset-leaves-block-hashes",
    "vllm-engine-hit-on-stale-hash",
    "vllm-engine-block-handed-out-twice",
]


def test_the_family_has_at_least_eight_canaries_each_listed_here() -> None:
    from poolfuzz.harness.kits.vllm_engine.canaries import CANARIES

    assert sorted(CANARIES) == sorted(VLLM_ENGINE_CANARIES)


def _first_violation(spec: str, config: Any, seed: int, steps: int = 400) -> str | None:
    """A seeded walk of the family's operations through its driver over the canary's factory: the first invariant."""
    from poolfuzz.harness.judge.invariants import InvariantViolation
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver

    module, _, attr = spec.partition(":")
    driver = VllmEngineDriver(getattr(importlib.import_module(module), attr), config)
    try:
        driver_walk(driver, random.Random(seed), steps, abort_below=0.34, reset_below=0.37, run_below=0.45)
    except InvariantViolation as violation:
        return violation.invariant_id
    return None


@pytest.mark.parametrize("canary", VLLM_ENGINE_CANARIES[2:])
def test_each_new_canary_is_caught_by_its_invariant_in_a_short_seeded_walk(canary: str) -> None:
    """The canaries added with the both-pools mirror, each caught within a few hundred driver steps on a tight shape
    (async for the placeholders, both pools for the free order); selfcheck catches them too (docs/engine-vllm.md)."""
    from poolfuzz.harness.canaries import CANARIES
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig

    entry = CANARIES[canary]
    config = VllmEngineConfig(
        block_size=4, num_blocks=10, max_num_seqs=3, max_num_batched_tokens=12, max_model_len=32,
        async_scheduling=canary.endswith("preemption"), pools="both" if canary.endswith("reversed") else "upstream",
    )  # fmt: skip
    assert _first_violation(entry.spec, config, seed=0) == entry.invariant


@pytest.mark.parametrize("canary", VLLM_ENGINE_CANARIES[:2])
def test_each_planted_bug_is_caught_by_its_invariant(canary: str) -> None:
    from poolfuzz.harness.canaries.selfcheck import check_canary

    outcome = check_canary(canary, seconds=20, shrink=False)
    assert outcome.status == "caught", outcome


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("sliding_window", [None, 4], ids=["full", "full+swa"])
def test_our_block_pool_under_vllms_scheduler_agrees_with_vllms_own(async_scheduling: bool, sliding_window: int | None) -> None:
    """poolfuzz.pools.block_pool in vLLM's BlockPool's place (the real coordinator and managers call it): the same steps leave
    what a user sees equal to vLLM's own pool's, both judged clean, for a few hundred steps and a drain."""
    from poolfuzz.harness.kits.vllm_engine.observe import check_structures
    from poolfuzz.harness.kits.vllm_engine.target import EOS, STOP, build_vllm_engine
    from poolfuzz.pools.block_pool import BlockPool

    rng = random.Random(11)
    shape: dict[str, Any] = dict(
        block_size=4, num_blocks=24, max_num_seqs=3, max_num_batched_tokens=12, max_model_len=32,
        async_scheduling=async_scheduling, sliding_window=sliding_window,
    )  # fmt: skip
    engines = [build_vllm_engine(pools=pools, **shape) for pools in ("upstream", "poolfuzz")]
    assert isinstance(engines[1].scheduler.kv_cache_manager.coordinator.block_pool, BlockPool)
    for manager in engines[1].scheduler.kv_cache_manager.coordinator.single_type_managers:
        assert manager.block_pool is engines[1].scheduler.kv_cache_manager.block_pool

    def judged() -> list[Any]:
        observations = []
        for engine in engines:
            observation = engine.observe()
            judges.judge(observation, engine_checks=partial(check_structures, engine, observation))
            observations.append(observation)
        judges.agree(*observations)
        return observations

    hits = 0
    for _ in range(300):
        roll = rng.random()
        if roll < 0.3:
            prompt = (11, 12, 13, 14, 15, 16)[: rng.randint(1, 6)] + tuple(rng.randint(20, 60) for _ in range(rng.randint(0, 12)))
            request = Submission(prompt, rng.randint(1, 20))
            for engine in engines:
                engine.submit(request)
        elif roll < 0.35 and engines[0].live():
            rid = rng.choice(engines[0].live())
            for engine in engines:
                engine.abort(rid)
        elif roll < 0.37:
            for engine in engines:
                engine.reset_prefix_cache()
        else:
            samples = {rid: rng.choice((EOS, STOP, 100, 100, 100)) for rid in engines[0].live()}
            for engine in engines:
                engine.step(samples)
        judged()
        hits += len(engines[1].scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block) > 0
    for _ in range(200):
        if not any(engine.scheduler.requests or engine.flights for engine in engines):
            break
        for engine in engines:
            engine.step(dict.fromkeys(engine.live(), EOS))
    for engine in engines:
        engine.step({})
    assert all(observation.at_rest for observation in judged())
    assert hits, "our pool cached nothing: the prefix-cache path was not reached"


def test_a_both_pools_shape_runs_a_mirror_over_our_pool_in_the_driver() -> None:
    import poolfuzz.harness.upstream
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver

    config = VllmEngineConfig(block_size=4, num_blocks=24, max_num_seqs=3, max_num_batched_tokens=12, max_model_len=32, pools="both")
    driver = VllmEngineDriver(poolfuzz.harness.upstream.VllmEngine, config)
    assert [engine.config.pools for engine in driver.engines] == ["upstream", "poolfuzz"]
    driver.arrive(0, 8, 2, 6)
    driver.run(12)
    driver.teardown()


def test_a_request_resumed_after_preemption_is_scheduled_with_a_copy_of_its_tokens() -> None:
    """Two arrivals in a pool of four usable blocks: async scheduling preempts one and resumes it, and the scheduler
    copies its tokens (scheduler.py:1962, ``ConstantList.copy``); the drain is clean (found by fuzzing, seed 4301)."""
    import poolfuzz.harness.upstream
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver

    config = VllmEngineConfig(
        block_size=2, num_blocks=5, max_num_seqs=2, max_num_batched_tokens=4, max_model_len=8,
        enable_prefix_caching=False, async_scheduling=True,
    )  # fmt: skip
    driver = VllmEngineDriver(poolfuzz.harness.upstream.VllmEngine, config)
    driver.arrive(0, 0, 0, 0)
    driver.arrive(0, 7, 0, 0)
    driver.teardown()


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_the_seeded_walk_over_the_clean_engine_finds_nothing(async_scheduling: bool) -> None:
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig

    config = VllmEngineConfig(
        block_size=4, num_blocks=10, max_num_seqs=3, max_num_batched_tokens=12, max_model_len=32,
        async_scheduling=async_scheduling, pools="both",
    )  # fmt: skip
    assert _first_violation("poolfuzz.harness.upstream:VllmEngine", config, seed=0) is None


def test_a_vllm_engine_finding_is_classified_reachable_not_latent(tmp_path: Any) -> None:
    import json

    from poolfuzz.harness.upstream.classify import classify

    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"config": {"async_scheduling": True, "pools": "both"}, "steps": [{"op": "arrive"}, {"op": "run"}]}))
    found = classify("vllm_engine", "poolfuzz.harness.upstream:VllmEngine", "ref-count", str(trace))
    assert found is not None and found.kind == "reachable", found
    assert "async" in found.note and "arrive, run" in found.note
    agreed = classify("vllm_engine", "poolfuzz.harness.upstream:VllmEngine", "implementations-agree", str(trace))
    assert agreed is not None and agreed.kind == "divergence"


@pytest.mark.parametrize(
    ("async_scheduling", "method"),
    [(False, "ngram"), (True, "ngram_gpu"), (False, "eagle"), (True, "eagle")],
    ids=["sync-ngram", "async-ngram_gpu", "sync-eagle", "async-eagle"],
)
def test_a_walk_with_speculation_accepts_and_rejects_drafts_and_drains_to_rest(async_scheduling: bool, method: str) -> None:
    """300 driver steps with K=3 drafts, the fuzzer choosing drafts and acceptance, on a pool tight enough to preempt
    (both pools for n-gram; the CPU drafter sync, ``ngram_gpu`` async, as vLLM runs them): judged after every step,
    drafts scheduled, and the drain ends at rest."""
    import poolfuzz.harness.upstream
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver

    config = VllmEngineConfig(
        block_size=4, num_blocks=12, max_num_seqs=3, max_num_batched_tokens=12, max_model_len=32,
        async_scheduling=async_scheduling, speculative_method=method, num_speculative_tokens=3,
        pools="both" if method.startswith("ngram") else "upstream",
    )  # fmt: skip
    driver = VllmEngineDriver(poolfuzz.harness.upstream.VllmEngine, config)
    scheduler = driver.engine.scheduler
    assert scheduler.num_spec_tokens == 3 and scheduler.num_lookahead_tokens == (3 if method == "eagle" else 0)
    schedule, seen = scheduler.schedule, {"drafts": 0, "preempted": 0}

    def counted(*args: Any, **kwargs: Any) -> Any:
        output = schedule(*args, **kwargs)
        seen["drafts"] += sum(map(len, output.scheduled_spec_decode_tokens.values()))
        seen["preempted"] += len(output.preempted_req_ids or ())
        return output

    scheduler.schedule = counted

    def speculate(driver: Any, rng: random.Random) -> None:
        driver.speculate(rng.randint(0, 3), rng.randint(0, 3), [rng.randrange(4)] if rng.random() < 0.15 else [])

    driver_walk(driver, random.Random(3), 300, otherwise=speculate)
    assert seen["drafts"] > 100 and seen["preempted"] > 0, seen
    assert driver.engine.observe().at_rest


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_lookahead_blocks_kept_after_preemption_are_caught(async_scheduling: bool) -> None:
    from poolfuzz.harness.canaries import CANARIES
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig

    entry = CANARIES["vllm-engine-lookahead-blocks-kept-after-preemption"]
    config = VllmEngineConfig(
        block_size=4, num_blocks=10, max_num_seqs=3, max_num_batched_tokens=12, max_model_len=32,
        async_scheduling=async_scheduling, speculative_method="eagle", num_speculative_tokens=3,
    )  # fmt: skip
    assert _first_violation(entry.spec, config, seed=0) == entry.invariant
    assert _first_violation("poolfuzz.harness.upstream:VllmEngine", config, seed=0) is None


def test_a_trace_config_without_the_speculation_fields_replays_with_speculation_off() -> None:
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
    from poolfuzz.harness.kits.vllm_engine.target import vllm_config

    config = VllmEngineConfig(block_size=4, num_blocks=16, max_model_len=16, max_num_batched_tokens=16)
    assert (config.speculative_method, config.num_speculative_tokens) == (None, 0)
    stand_in = vllm_config(config)
    assert stand_in.speculative_config is None and stand_in.num_lookahead_tokens == 0

"""vLLM 0.33.0's hybrid KV cache groups under the engine judges: chunked local attention, Mamba (none and align modes)
and the hybrids vLLM builds, each group's tables judged over the one pool, and the prefix-hit soundness judge."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from poolfuzz.harness.engines import judges
from poolfuzz.harness.engines.interface import Submission
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.upstream.vllm_files import vllm_unavailable_reason
from tests.vllm_driver_walk import driver_walk

MISSING = vllm_unavailable_reason()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"vLLM unavailable: {MISSING}")

LAYOUTS: dict[str, dict[str, Any]] = {
    "local": {"full_attention": False, "attention_chunk_size": 8},
    "full+local": {"attention_chunk_size": 8},
    "mamba": {"full_attention": False, "mamba": True},
    "full+mamba": {"mamba": True},
    "full+swa+mamba": {"mamba": True, "sliding_window": 4},
}
SHAPE: dict[str, Any] = {"block_size": 4, "num_blocks": 30, "max_num_seqs": 3, "max_num_batched_tokens": 12, "max_model_len": 32}


def _judged_walk(engine: Any, seed: int, steps: int = 200) -> list[Any]:
    """A seeded walk of arrivals sharing a prefix, EOS and aborts, judged after each step as the driver judges it
    (hits first); drained to rest at the end.  Returns the hits judged."""
    from poolfuzz.harness.kits.vllm_engine.hits import check_hits
    from poolfuzz.harness.kits.vllm_engine.observe import check_structures
    from poolfuzz.harness.kits.vllm_engine.target import EOS

    rng = random.Random(seed)
    seen: list[Any] = []

    def judge() -> Any:
        hits, engine.hits = engine.hits, []
        check_hits(hits)
        seen.extend(hits)
        observation = engine.observe()
        judges.judge(observation, engine_checks=lambda: check_structures(engine, observation))
        return observation

    for _ in range(steps):
        roll = rng.random()
        if roll < 0.3:
            prompt = (11, 12, 13, 14, 15, 16, 17, 18)[: rng.randint(1, 8)] + tuple(rng.randint(20, 60) for _ in range(rng.randint(0, 10)))
            engine.submit(Submission(prompt, rng.randint(1, 16)))
        elif roll < 0.33 and engine.live():
            engine.abort(rng.choice(engine.live()))
        else:
            engine.step({rid: EOS for rid in engine.live() if rng.random() < 0.05})
        judge()
    for _ in range(200):
        if not engine.scheduler.requests and not engine.flights:
            break
        engine.step(dict.fromkeys(engine.live(), EOS))
        judge()
    engine.step({})
    assert judge().at_rest
    return seen


@pytest.mark.parametrize("caching", [False, True], ids=["no-caching", "caching"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_group_layout_walks_clean_under_every_judge_and_drains_to_rest(layout: str, caching: bool) -> None:
    from poolfuzz.harness.kits.vllm_engine.target import build_vllm_engine

    engine = build_vllm_engine(**SHAPE, **LAYOUTS[layout], enable_prefix_caching=caching, async_scheduling=caching)
    hits = _judged_walk(engine, seed=len(layout))
    assert bool(hits) == caching  # the shared prefix is hit exactly when caching is on


def test_the_kv_cache_config_is_vllms_own_specs_and_the_hybrid_coordinator_runs_them() -> None:
    from poolfuzz.harness.kits.vllm_engine.target import build_vllm_engine

    engine = build_vllm_engine(**SHAPE, sliding_window=4, mamba=True)
    coordinator = engine.scheduler.kv_cache_manager.coordinator
    assert type(coordinator).__name__ == "HybridKVCacheCoordinator"
    assert [type(m).__name__ for m in coordinator.single_type_managers] == ["FullAttentionManager", "SlidingWindowManager", "MambaManager"]
    assert coordinator.single_type_managers[2].mamba_cache_mode == "align"
    assert [type(g.kv_cache_spec).__module__ for g in coordinator.kv_cache_config.kv_cache_groups] == ["vllm.v1.kv_cache_interface"] * 3
    local = build_vllm_engine(**SHAPE, attention_chunk_size=8).scheduler.kv_cache_manager.coordinator.single_type_managers[1]
    assert type(local).__name__ == "ChunkedLocalAttentionManager"


def test_a_none_mode_mamba_state_block_spans_max_model_len_and_sets_the_scheduler_block_size() -> None:
    """Without prefix caching the Mamba block is max_model_len (MambaModelConfig), so resolve_kv_cache_block_sizes gives
    the scheduler the LCM: 32 here, over 4-token attention blocks."""
    from poolfuzz.harness.kits.vllm_engine.target import build_vllm_engine

    engine = build_vllm_engine(**SHAPE, mamba=True, enable_prefix_caching=False)
    mamba = engine.scheduler.kv_cache_manager.coordinator.single_type_managers[1]
    assert (mamba.mamba_cache_mode, mamba.block_size, engine.block_sizes.scheduler, engine.block_sizes.hash) == ("none", 32, 32, 32)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"mamba": True, "enable_chunked_prefill": False, "max_num_batched_tokens": 32}, "needs chunked prefill"),
        ({"mamba": True, "pools": "both"}, "cache_partial_block"),
        ({"full_attention": False}, "at least one KV cache group"),
        ({"mamba": True, "num_blocks": 9}, "max_model_len"),
        ({"attention_chunk_size": 8, "speculative_method": "eagle", "num_speculative_tokens": 2}, "EAGLE with chunked local"),
    ],
    ids=["mamba-caching-unchunked", "mamba-align-over-ours", "no-group", "too-few-blocks", "eagle-chunked-local-caching"],
)
def test_a_group_layout_that_cannot_run_is_refused_with_its_reason(fields: dict[str, Any], reason: str) -> None:
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig, VllmShapeError

    with pytest.raises(VllmShapeError, match=reason):
        VllmEngineConfig(**{**SHAPE, **fields})


def test_the_move_table_draws_every_layout_and_both_mamba_modes() -> None:
    from poolfuzz.harness.kits.vllm_engine.moves import corners, vllm_config

    drawn = Counter(tuple(corners(vllm_config(random.Random(seed)))[1:3]) for seed in range(300))
    layouts = {groups for groups, _ in drawn}
    assert layouts == {
        "full attention",
        "full attention + sliding window",
        "chunked local",
        "full attention + chunked local",
        "mamba",
        "full attention + mamba",
        "full attention + sliding window + mamba",
    }
    assert {mode for _, mode in drawn} == {"no mamba", "mamba_cache_mode none", "mamba_cache_mode align"}


def _hit(**fields: Any) -> Any:
    from poolfuzz.harness.kits.vllm_engine.hits import GroupHit, Hit

    base: dict[str, Any] = {
        "rid": "0",
        "step": 3,
        "tokens": 8,
        "length": 12,
        "caching": True,
        "hash_block_size": 4,
        "groups": (GroupHit(0, "full", ((5, b"a", b"a"), (6, b"b", b"b"))), GroupHit(1, "swa", ((None, None, b"a"), (7, b"b", b"b")))),
    }
    return Hit(**{**base, **fields})


def test_a_sound_hit_passes_and_each_unsound_one_is_caught_as_match_returns_inserted() -> None:
    from poolfuzz.harness.kits.vllm_engine.hits import GroupHit, check_hits

    check_hits([_hit()])
    unsound = [
        _hit(caching=False),
        _hit(length=8),
        _hit(tokens=6),
        _hit(groups=(GroupHit(0, "full", ((5, b"a", b"a"), (6, b"stale", b"b"))),)),
        _hit(groups=(GroupHit(0, "full", ((None, None, b"a"), (6, b"b", b"b"))),)),
        _hit(groups=(GroupHit(0, "full", ((5, b"a", b"a"),)),)),
    ]
    for hit in unsound:
        with pytest.raises(InvariantViolation) as caught:
            check_hits([hit])
        assert caught.value.invariant_id == "prefix-hit-sound", hit


def test_a_request_sharing_a_cached_prefix_is_recorded_as_a_hit_on_the_blocks_that_hold_it() -> None:
    from poolfuzz.harness.kits.vllm_engine.hits import check_hits
    from poolfuzz.harness.kits.vllm_engine.target import EOS, build_vllm_engine

    engine = build_vllm_engine(**SHAPE, mamba=True, sliding_window=4)
    prompt = tuple(range(11, 24))
    first = engine.submit(Submission(prompt, 2))
    for _ in range(4):
        engine.step({first: EOS} if first else {})
    engine.hits.clear()
    engine.submit(Submission(prompt, 2))
    engine.step({})
    [hit] = engine.hits
    check_hits([hit])
    assert hit.tokens == 12 and [g.kind for g in hit.groups] == ["full", "swa", "mamba"]
    full, swa, mamba = hit.groups
    assert all(block is not None for block, _, _ in full.blocks)
    assert swa.blocks[0][0] is None and mamba.blocks[-1][0] is not None  # left of the window / before the last state: null


def test_a_block_in_two_groups_tables_and_a_null_block_in_full_attention_are_caught() -> None:
    from poolfuzz.harness.kits.vllm_engine.groups import check_groups
    from poolfuzz.harness.kits.vllm_engine.target import build_vllm_engine

    engine = build_vllm_engine(**SHAPE, sliding_window=4)
    engine.submit(Submission(tuple(range(11, 21)), 4))
    engine.step({})
    full, swa = engine.scheduler.kv_cache_manager.coordinator.single_type_managers
    check_groups([full, swa])
    swa.req_to_blocks["0"].append(full.req_to_blocks["0"][0])
    with pytest.raises(InvariantViolation, match="two KV cache groups") as caught:
        check_groups([full, swa])
    assert caught.value.invariant_id == "no-double-allocation"
    swa.req_to_blocks["0"].pop()
    full.req_to_blocks["0"].append(engine.scheduler.kv_cache_manager.block_pool.null_block)
    with pytest.raises(InvariantViolation) as caught:
        check_groups([full, swa])
    assert caught.value.invariant_id == "reserved-never-handed-out"


def test_a_finding_names_its_groups_in_the_classification() -> None:
    from poolfuzz.harness.kits.vllm_engine.contracts.engine import classify_failure

    note = classify_failure({"mamba": True, "sliding_window": 4, "enable_prefix_caching": False}, ["iterate"]).note
    assert "full attention + sliding window + mamba (none mode)" in note


@pytest.mark.parametrize(
    "fields",
    [
        {"attention_chunk_size": 8},
        {"mamba": True, "enable_prefix_caching": False},
        {"mamba": True, "sliding_window": 4, "enable_prefix_caching": False},
    ],
    ids=["full+local", "full+mamba-none", "full+swa+mamba-none"],
)
def test_our_block_pool_runs_the_new_groups_in_step_with_vllms_own(fields: dict[str, Any]) -> None:
    """pools="both" over chunked local and none-mode Mamba groups: the driver's mirror over poolfuzz.pools.block_pool is
    judged after every step and agrees with vLLM's pool on what a user sees and on the free queue's order."""
    import poolfuzz.harness.upstream
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver

    driver = VllmEngineDriver(poolfuzz.harness.upstream.VllmEngine, VllmEngineConfig(**SHAPE, **fields, pools="both"))
    driver_walk(driver, random.Random(5), 150, longest_output=16, longest_run=10)


def test_a_lone_mamba_align_request_that_preempts_itself_at_the_startup_minimum_is_not_a_hang() -> None:
    """The fuzzer's shrunk trace (seed 1, docs/engine-vllm.md): a pure Mamba model in align mode with K=4 n-gram drafts
    over 1 + (2 + K) blocks, the minimum vLLM's startup check accepts.  The lone request needs one block more than
    MambaSpec sizes for, preempts itself, and the step that preempted admits nothing by design (scheduler.py:1050);
    the next step resumes it on its own prefix hit.  That step advanced: the progress judge must not call it a hang."""
    import poolfuzz.harness.upstream
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
    from poolfuzz.harness.kits.vllm_engine.driver import VllmEngineDriver

    config = VllmEngineConfig(
        block_size=4, num_blocks=7, max_num_seqs=1, max_num_batched_tokens=5, max_model_len=10,
        full_attention=False, mamba=True, speculative_method="ngram", num_speculative_tokens=4,
    )  # fmt: skip
    driver = VllmEngineDriver(poolfuzz.harness.upstream.VllmEngine, config)
    driver.run(1)
    driver.arrive(0, 0, 0, 5)
    driver.run(2)
    scheduler = driver.engine.scheduler
    [request] = scheduler.requests.values()
    driver.iterate([0], [])  # EOS: the step whose allocation fails and preempts the request
    assert request.num_preemptions == 1 and not scheduler.running and driver.engine.last_advanced
    driver.teardown()

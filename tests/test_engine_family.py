"""The engine target: SGLang 0.5.23's scheduler memory path, loaded from the installed files and judged twice."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.judge.families import family_unavailable
from poolfuzz.harness.upstream.placeholders import StandIn, StandInReached
from tests.engine_walk import walk

REASON = family_unavailable("engine")
needs_engine = pytest.mark.skipif(REASON is not None, reason=f"the engine target cannot load here: {REASON}")


def test_a_placeholder_lets_a_file_import_but_refuses_to_run() -> None:
    placeholder = StandIn("sglang.srt.layers.some_kernel")
    with pytest.raises(StandInReached, match="some_kernel"):
        placeholder(1, 2)
    with pytest.raises(StandInReached, match="truth"):
        bool(placeholder)

    class Derived(placeholder):  # type: ignore[misc,valid-type]  # a class deriving from a placeholder derives from object
        pass

    assert Derived.__mro__ == (Derived, object)


def _run(config: dict[str, object], seed: int, steps: int = 80) -> object:
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine

    driver = EngineDriver(build_engine, config)
    walk(driver, seed, steps)
    driver.teardown()
    return driver


CONFIGS = [
    {"cache": cache, "page_size": page_size, "rows": 4, "tokens": 48, "context": 64, "chunk": chunk, "new_token_ratio": 0.1}
    for cache in ("radix", "unified-rust", "unified-python")
    for page_size, chunk in ((1, None), (4, 8))
]


@needs_engine
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c['cache']}-page{c['page_size']}-chunk{c['chunk']}")
def test_upstreams_scheduler_path_runs_clean_under_both_judges(config: dict[str, object]) -> None:
    driver = _run(config, seed=3)
    kinds = " ".join(driver.events)  # type: ignore[attr-defined]
    assert "iteration: prefill" in kinds and "iteration: decode" in kinds


@needs_engine
def test_the_unified_cache_runs_the_core_it_names() -> None:
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.upstream.engine import EngineLoop

    rust = EngineLoop(EngineTargetConfig(cache="unified-rust")).tree_cache.tree_core
    python = EngineLoop(EngineTargetConfig(cache="unified-python")).tree_cache.tree_core
    assert type(rust).__name__ == "RustUnifiedTreeCore"
    assert type(python).__name__ == "UnifiedTreeCore"


@needs_engine
def test_low_admission_ratio_drives_decode_into_retraction() -> None:
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.upstream.engine import EOS, EngineLoop

    loop = EngineLoop(EngineTargetConfig(rows=4, tokens=40, context=64, new_token_ratio=0.1))
    for i in range(4):
        loop.arrive([11, 12, 13, 14, 20 + i, 30 + i], max_new_tokens=20)
    retracted = 0
    for _ in range(40):
        before = len(loop.waiting_queue)
        loop.iterate({})
        retracted += max(0, len(loop.waiting_queue) - before)
    assert retracted > 0
    for _ in range(40):
        loop.iterate({r.rid: EOS for r in loop.running_batch.reqs})
    assert loop.is_idle()


@needs_engine
@pytest.mark.parametrize(
    "name", ["engine-release-frees-protected-prefix", "engine-release-keeps-lock", "engine-overallocated-decode-not-returned"]
)
def test_an_engine_canary_is_caught_by_its_invariant(name: str) -> None:
    from poolfuzz.harness.canaries import collected
    from poolfuzz.harness.judge.families import resolve

    canary = collected()[name]
    violation = _caught(resolve(canary.spec), CONFIGS[0], seeds=20)
    caught = violation.invariant_id if violation is not None else None  # type: ignore[attr-defined]
    assert caught == canary.invariant


MAMBA: dict[str, Any] = {"page_size": 1, "rows": 4, "tokens": 48, "context": 64, "chunk": None, "new_token_ratio": 0.1, "mamba_slots": 12}


@needs_engine
@pytest.mark.parametrize("cache", ["unified-rust", "unified-python"])
def test_a_hybrid_mamba_shape_runs_clean_under_both_judges(cache: str) -> None:
    import torch

    from poolfuzz.harness.upstream.engine_mamba import mamba_cache_params
    from poolfuzz.harness.upstream.sglang_modules import active

    driver = _run({**MAMBA, "cache": cache}, seed=3)
    loop = driver.loop  # type: ignore[attr-defined]
    with active(loop.m):
        assert type(loop.req_to_token_pool).__name__ == "HybridReqToTokenPool"
        assert loop.tree_cache.supports_mamba()
        params = mamba_cache_params(loop.m)
        assert isinstance(params, loop.m.memory_pool.BaseLinearStateParams)  # the real class, not a placeholder
        states = loop.req_to_token_pool.mamba_pool.mamba_cache
        assert states.temporal.shape[0] == 1 and states.temporal.dtype == torch.float32 and states.temporal.device.type == "cpu"
        checker = driver.checkers[0].checker  # type: ignore[attr-defined]
        assert checker.is_hybrid_ssm
        # Drained and idle: every Mamba slot is free or a cached state, as both judges just agreed.
        pool = loop.req_to_token_pool
        assert pool.mamba_allocator.available_size() + loop.tree_cache.mamba_evictable_size() == pool.mamba_pool.size
    kinds = " ".join(driver.events)  # type: ignore[attr-defined]
    assert "iteration: prefill" in kinds and "iteration: decode" in kinds


@needs_engine
def test_a_mamba_and_sliding_window_model_runs_clean_under_both_judges() -> None:
    from poolfuzz.harness.upstream.sglang_modules import active

    # The waiting timeout on: a sliding window can reach finding 5's admission hang (docs/engine.md), which this test is not about.
    shape = {**MAMBA, "cache": "unified-python", "sliding_window": 4, "swa_tokens": 24, "swa_eviction_interval": 1, "waiting_timeout": True}
    driver = _run(shape, seed=5)
    loop = driver.loop  # type: ignore[attr-defined]
    with active(loop.m):
        assert type(loop.allocator).__name__ == "SWATokenToKVPoolAllocator"
        assert loop.tree_cache.supports_swa() and loop.tree_cache.supports_mamba()
    assert loop.fully_idle and "iteration: decode" in " ".join(driver.events)  # type: ignore[attr-defined]


@needs_engine
def test_a_mamba_shape_refuses_what_0_5_23_does_not_build_here() -> None:
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig

    for bad in ({"cache": "radix"}, {"page_size": 4, "tokens": 48}, {"pools": "poolfuzz"}, {"rows": 5}):
        with pytest.raises(ValueError):
            EngineTargetConfig(**{**MAMBA, "cache": "unified-rust", **bad})


def test_the_server_shape_is_declared_once_and_every_engine_target_takes_exactly_its_fields() -> None:
    import dataclasses
    import inspect

    from poolfuzz.harness.canaries import collected
    from poolfuzz.harness.judge.families import resolve
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.kits.engine.driver import (
        build_embedding_engine,
        build_engine,
        build_engine_with_waiting_timeout,
        build_poolfuzz_engine,
    )

    fields = {f.name: f.default for f in dataclasses.fields(EngineTargetConfig) if not f.name.startswith("_")}
    canaries = [resolve(c.spec) for c in collected().values() if c.family == "engine"]
    for target in [build_engine, build_engine_with_waiting_timeout, build_poolfuzz_engine, build_embedding_engine, *canaries]:
        parameters = inspect.signature(target).parameters
        assert {name: p.default for name, p in parameters.items()} == fields, target
        assert all(p.kind is p.KEYWORD_ONLY for p in parameters.values()), target


def test_a_shape_0_5_23_does_not_build_is_refused_when_the_config_is_built_before_any_loop() -> None:
    from poolfuzz.harness.judge.limits import LimitError
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig

    with pytest.raises(LimitError, match="not a shape 0.5.23 builds"):
        EngineTargetConfig(cache="radix", sliding_window=4, swa_tokens=24)
    with pytest.raises(LimitError, match="not a shape 0.5.23 builds"):
        EngineTargetConfig.from_mapping({"pools": "both", "cache": "unified-rust", "sliding_window": 4, "swa_tokens": 24})


def _leaky_mamba_engine(where: str) -> object:
    """A factory whose loop takes one Mamba slot and drops it: after a decode step (``busy``) or at idle."""
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.upstream.engine import EngineLoop

    class DropsAMambaSlot(EngineLoop):
        dropped = False

        def _drop(self) -> None:
            if not self.dropped and self.req_to_token_pool.mamba_allocator.available_size() > 0:
                self.req_to_token_pool.mamba_allocator.alloc(1)
                self.dropped = True

        def _decoded(self, batch: object) -> None:
            if where == "busy":
                self._drop()

        def _iterate(self, next_tokens: dict[str, int]) -> str:
            kind = super()._iterate(next_tokens)
            if where == "idle" and self.fully_idle:
                self._drop()
            return kind

    def build(**config: object) -> object:
        config.pop("device", None)
        return DropsAMambaSlot(EngineTargetConfig(**config))  # type: ignore[arg-type]

    return build


def _caught(factory: object, config: Mapping[str, object], *, seeds: int = 10) -> object:
    from poolfuzz.harness.judge.invariants import InvariantViolation
    from poolfuzz.harness.kits.engine.driver import EngineDriver
    from poolfuzz.harness.kits.engine.moves import engine_table

    # The moves the re-enacted loop runs (it has no pause); drawn from alone, the seeds' sequences stay as they were.
    moves = [m for m in engine_table().moves if m.name in {"iterate", "arrive", "crowd", "run", "abort"}]
    for seed in range(seeds):
        driver = EngineDriver(factory, config)  # type: ignore[arg-type]
        try:
            walk(driver, seed, 80, moves)
            driver.teardown()
        except InvariantViolation as violation:
            return violation
    return None


@needs_engine
@pytest.mark.parametrize("where, seen_by", [("busy", "upstream checks no Mamba pool while busy"), ("idle", "both judges")])
def test_the_mamba_slot_accounting_catches_a_dropped_slot(where: str, seen_by: str) -> None:
    violation = _caught(_leaky_mamba_engine(where), {**MAMBA, "cache": "unified-rust"})
    assert violation is not None
    assert violation.invariant_id == "kv-accounting"  # type: ignore[attr-defined]
    assert "Mamba" in str(violation) and seen_by in str(violation)


@needs_engine
def test_a_mamba_count_only_upstream_sees_is_a_checker_disagreement() -> None:
    from poolfuzz.harness.judge.invariants import InvariantViolation
    from poolfuzz.harness.kits.engine.checks import UpstreamChecker, judge
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.upstream.engine import EngineLoop

    loop = EngineLoop(EngineTargetConfig(**{**MAMBA, "cache": "unified-python"}))
    for i in range(3):
        loop.arrive([11, 12, 13, 14, 20 + i], max_new_tokens=3)
    for _ in range(12):
        loop.iterate({})
    assert loop.is_idle() and loop.fully_idle
    checker = UpstreamChecker(loop)
    judge(loop, checker)  # clean
    drift = loop.tree_cache.mamba_evictable_size() + 1
    loop.tree_cache.mamba_evictable_size = lambda: drift  # upstream's counter drifts; the tree's values do not
    with pytest.raises(InvariantViolation) as caught:
        judge(loop, checker)
    assert caught.value.invariant_id == "checker-agreement" and "upstream's invariant checker" in str(caught.value)


def test_without_sglang_the_engine_family_is_skipped_with_the_reason_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    from poolfuzz.harness.fuzz.options import select_targets
    from poolfuzz.harness.upstream import loading

    monkeypatch.setattr(loading, "_copies", {})
    monkeypatch.setattr(loading, "_failed", {("sglang", None): "upstream SGLang is not installed (a stand-in for this test)"})
    assert "not installed" in (family_unavailable("engine") or "")
    targets, skipped = select_targets([])
    assert "engine" not in {t.family for t in targets}
    assert any(s["family"] == "engine" and "not installed" in s["reason"] for s in skipped)


@needs_engine
def test_finding_5_a_hybrid_swa_server_hangs_with_requests_queued_and_nothing_running() -> None:
    """The committed trace (corpus/engine/engine-swa-admission-hangs.json) still breaks scheduler-progress on 0.5.23:
    while this holds, upstream's SWA admission (prefill_budget.py:230-268) still refuses an idle pool's queue head."""
    from pathlib import Path

    from poolfuzz.harness.traces.replay import replay_trace
    from poolfuzz.harness.traces.schema import load_trace

    trace = load_trace(Path(__file__).resolve().parents[1] / "corpus" / "engine" / "engine-swa-admission-hangs.json")
    result = replay_trace(trace)
    assert (result.outcome, result.invariant) == ("violation", "scheduler-progress"), result.describe()


@needs_engine
def test_with_the_waiting_timeout_on_the_hung_queue_head_is_aborted_and_the_server_goes_on() -> None:
    from pathlib import Path

    from poolfuzz.harness.traces.replay import replay_trace
    from poolfuzz.harness.traces.schema import load_trace

    trace = load_trace(Path(__file__).resolve().parents[1] / "corpus" / "engine" / "engine-swa-admission-hangs.json")
    result = replay_trace(trace, target="poolfuzz.harness.kits.engine.driver:build_engine_with_waiting_timeout")
    assert result.outcome == "pass", result.describe()


@needs_engine
def test_a_trace_naming_a_shape_no_server_builds_is_refused_as_bad_input(tmp_path: Path) -> None:
    from poolfuzz.harness.traces.replay import replay_trace
    from poolfuzz.harness.traces.schema import load_trace

    data = json.loads((Path(__file__).resolve().parents[1] / "corpus" / "engine" / "engine-swa-admission-hangs.json").read_text())
    data["config"]["cache"] = "radix"  # 0.5.23 has no SWA component for the legacy cache
    path = tmp_path / "unbuildable.json"
    path.write_text(json.dumps(data))
    result = replay_trace(load_trace(path))
    assert result.outcome == "invalid" and "not a shape 0.5.23 builds" in result.describe(), result.describe()


@needs_engine
@pytest.mark.parametrize("page_size", [1, 4])
def test_an_aborted_chunked_request_is_released_before_its_next_chunk_and_the_pools_balance(page_size: int) -> None:
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine

    config = {"cache": "radix", "page_size": page_size, "rows": 4, "tokens": 48, "context": 64, "chunk": 8}
    driver = EngineDriver(build_engine, config)
    driver.step("arrive", stem=0, length=30, tail=2, max_new=4)
    driver.step("iterate", eos=[])
    chunked = driver.loop.chunked_req
    assert chunked is not None, "a 32-token prompt under an 8-token chunk is still chunked after one iteration"
    assert driver.step("abort", pick=0) is None
    assert [loop.pending_chunked_abort for loop in driver.loops] == [loop.chunked_req for loop in driver.loops]
    driver.step("run", iterations=4)  # audited after every iteration, by both judges
    for loop in driver.loops:
        assert loop.chunked_req is None and loop.pending_chunked_abort is None
        assert loop.is_idle(), "nothing of the aborted request is queued, running or chunked"
    assert chunked.finished() and not chunked.kv.holds_kv
    assert "abort of a chunked request" in driver.events
    driver.teardown()


@needs_engine
def test_sglangs_loop_is_an_engine_target_whose_observation_the_engine_judges_pass() -> None:
    from poolfuzz.harness.engines import judges
    from poolfuzz.harness.engines.interface import EngineTarget, HolderKind, Submission
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.kits.engine.target import SGLangEngine
    from poolfuzz.harness.upstream.engine import EOS, EngineLoop

    engine = SGLangEngine(EngineLoop(EngineTargetConfig(cache="unified-python", page_size=4, rows=4, tokens=48, context=64)))
    assert isinstance(engine, EngineTarget)
    rids = [engine.submit(Submission((11, 12, 13, 14, 20 + i), 3)) for i in range(2)]
    assert None not in rids
    first = engine.step({})
    assert first.kind == "prefill" and first.scheduled == first.landed == tuple(rids)  # the normal loop lands what it scheduled
    observation = engine.observe()
    assert not observation.in_flight and {"request row", "KV page"} <= {pool.name for pool in observation.pools}
    holders = {h.holder.name for h in observation.pool("KV page").holdings if h.holder.kind is HolderKind.REQUEST}
    assert holders == set(rids)
    judges.judge(observation)
    for _ in range(6):
        engine.step({rid: EOS for rid in rids if rid})
        judges.judge(engine.observe())
    assert engine.observe().at_rest

"""The engine target: SGLang 0.5.23's scheduler memory path, loaded from the installed files and judged twice."""

from __future__ import annotations

import random

import pytest

from harness.upstream.engine_loader import StandIn, StandInReached, engine_unavailable_reason

REASON = engine_unavailable_reason()
needs_engine = pytest.mark.skipif(REASON is not None, reason=f"the engine target cannot load here: {REASON}")


def test_a_placeholder_lets_a_file_import_but_refuses_to_run() -> None:
    placeholder = StandIn("sglang.srt.layers.some_kernel")
    with pytest.raises(StandInReached, match="some_kernel"):
        placeholder(1, 2)
    with pytest.raises(StandInReached, match="truth"):
        bool(placeholder)

    class Derived(placeholder):  # type: ignore[misc]  # a class deriving from a placeholder derives from object
        pass

    assert Derived.__mro__ == (Derived, object)


def _run(config: dict[str, object], seed: int, steps: int = 80) -> object:
    from harness.judge.drivers.engine import EngineDriver, build_engine
    from strategies.engine import EngineView, engine_table

    table = engine_table()
    driver = EngineDriver(build_engine, config)
    view = EngineView(driver)
    rng = random.Random(seed)
    for _ in range(steps):
        move = rng.choices(table.moves, weights=[m.weight for m in table.moves])[0]
        step = move.draw(view, rng)
        if step is not None:
            driver.step(step[0], **step[1])
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
    from harness.upstream.engine import EngineConfig, EngineLoop

    rust = EngineLoop(EngineConfig(cache="unified-rust")).tree_cache.tree_core
    python = EngineLoop(EngineConfig(cache="unified-python")).tree_cache.tree_core
    assert type(rust).__name__ == "RustUnifiedTreeCore"
    assert type(python).__name__ == "UnifiedTreeCore"


@needs_engine
def test_low_admission_ratio_drives_decode_into_retraction() -> None:
    from harness.upstream.engine import EOS, EngineConfig, EngineLoop

    loop = EngineLoop(EngineConfig(rows=4, tokens=40, context=64, new_token_ratio=0.1))
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
@pytest.mark.parametrize("name", [
    "engine-release-frees-protected-prefix", "engine-release-keeps-lock", "engine-overallocated-decode-not-returned",
])
def test_an_engine_canary_is_caught_by_its_invariant(name: str) -> None:
    from harness.canaries import collected
    from harness.judge.drivers.engine import EngineDriver
    from harness.judge.families import resolve
    from harness.judge.invariants import InvariantViolation
    from strategies.engine import EngineView, engine_table

    canary = collected()[name]
    factory = resolve(canary.spec)
    table = engine_table()
    caught = None
    for seed in range(20):
        driver = EngineDriver(factory, CONFIGS[0])
        view, rng = EngineView(driver), random.Random(seed)
        try:
            for _ in range(80):
                move = rng.choices(table.moves, weights=[m.weight for m in table.moves])[0]
                step = move.draw(view, rng)
                if step is not None:
                    driver.step(step[0], **step[1])
            driver.teardown()
        except InvariantViolation as violation:
            caught = violation.invariant_id
            break
    assert caught == canary.invariant


def test_without_sglang_the_engine_family_is_skipped_with_the_reason_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.fuzz.options import select_targets
    from harness.judge.families import family_unavailable
    from harness.upstream import engine_loader

    monkeypatch.setattr(engine_loader, "_loaded", None)
    monkeypatch.setattr(engine_loader, "_failure", "upstream SGLang is not installed (a stand-in for this test)")
    assert "not installed" in (family_unavailable("engine") or "")
    targets, skipped = select_targets([])
    assert "engine" not in {t.family for t in targets}
    assert any(s["family"] == "engine" and "not installed" in s["reason"] for s in skipped)

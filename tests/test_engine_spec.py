"""Speculative decoding on upstream's scheduler (harness/upstream/engine_spec.py): an EAGLE server's decode allocation,
verify commit and release run from SGLang 0.5.23's files under every engine judge, and the planted spec-decode canary is
caught by its expected invariant."""

from __future__ import annotations

import random
from typing import Any

import pytest

from poolfuzz.harness.judge.families import family_unavailable
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.engine.ops import EngineOps as Ops
from tests.engine_walk import run_engine

REASON = family_unavailable("engine")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"the engine target cannot load here: {REASON}")

STEPS = 3
SHAPE: dict[str, Any] = {
    "cache": "unified-rust",
    "page_size": 1,
    "rows": 4,
    "tokens": 96,
    "context": 64,
    "new_token_ratio": 0.1,
    "speculative_num_steps": STEPS,
}

STREAM: tuple[tuple[str, dict[str, Any]], ...] = (
    (Ops.arrive, {"stem": 0, "length": 10, "tail": 2, "max_new": 9}),
    (Ops.arrive, {"stem": 1, "length": 6, "tail": 1, "max_new": 14}),
    (Ops.speculate, {"eos": [], "accepts": [0, 3]}),
    (Ops.speculate, {"eos": [], "accepts": [3, 0]}),
    (Ops.speculate, {"eos": [], "accepts": [1, 2]}),
    (Ops.speculate, {"eos": [1], "accepts": [2, 3]}),
    (Ops.crowd, {"count": 4, "max_new": 24}),
    (Ops.run, {"iterations": 12}),
)
"""Two requests verified with chosen accept lengths (none, all, some drafts), an EOS inside a run, then a crowd decoding
under memory pressure (retraction with the reserve held) to its budgets."""


def _first_violation(factory: Any, shape: dict[str, Any], walk_seed: int | None = None, verifies: int = 0) -> InvariantViolation | None:
    """The first violation of the stream (or an 80-move walk of the engine table from ``walk_seed``) and the teardown's
    drain on ``factory``'s loop, after at least ``verifies`` verify results were processed."""
    driver, violation = run_engine(factory, shape, STREAM, walk_seed, moves=80)
    if violation is None:
        assert driver.loop.verifies >= verifies
    return violation


@pytest.mark.parametrize(("loop", "page_size"), [("overlap", 1), ("overlap", 4), ("normal", 1), ("normal", 4)])
def test_an_eagle_server_runs_the_stream_and_a_seeded_walk_clean_under_every_judge(loop: str, page_size: int) -> None:
    from poolfuzz.harness.kits.engine.driver import build_engine

    shape = {**SHAPE, "loop": loop, "page_size": page_size}
    assert _first_violation(build_engine, shape, verifies=10) is None
    assert _first_violation(build_engine, shape, walk_seed=1, verifies=60) is None


def test_upstreams_decode_reserves_twice_the_draft_window_and_its_processor_commits_the_accepted_run() -> None:
    from poolfuzz.harness.kits.engine.driver import build_engine
    from poolfuzz.harness.kits.engine.target import SGLangEngine
    from poolfuzz.harness.upstream.engine_config import EOS
    from poolfuzz.harness.upstream.sglang_modules import active

    loop = build_engine(**{**SHAPE, "loop": "normal"})
    target = SGLangEngine(loop)
    reserve = 2 * (STEPS + 1)  # get_alloc_reserve_per_decode (allocation_sizing.py:64-70)
    with active(loop.m):
        req = loop.arrive([11, 12, 13, 14, 15], 20)
        target.step({})  # prefill: the prompt is committed, the first token sampled
        assert (req.kv.kv_committed_len, req.kv.kv_allocated_len) == (5, 5)
        committed = 5
        for drafts in (0, STEPS, 1, 2):
            loop.accepted = {req.rid: drafts}
            target.step({})
            # eagle_prepare_for_decode -> alloc_for_spec_decode reserved from the committed length before the verify,
            # and _resolve_spec_v2_tokens then committed the accepted drafts and the bonus token.
            assert req.kv.kv_allocated_len >= committed + reserve
            committed += drafts + 1
            assert req.kv.kv_committed_len == committed
        assert req.spec_verify_ct == 4
        loop.accepted = {}
        free_before_release = loop.allocator.available_size()
        target.step({req.rid: EOS})  # EOS inside the next verify's run: the request finishes
        assert req.finished() and not req.kv.holds_kv
        # release_kv_cache returned the whole row past the tree's part, the rejected drafts' slots and the reserve included.
        assert loop.allocator.available_size() > free_before_release


def test_a_speculative_shape_runs_only_where_upstreams_spec_path_is_driven() -> None:
    from poolfuzz.harness.kits.engine.config import EngineShapeError, EngineTargetConfig

    EngineTargetConfig(**SHAPE)
    refused = (
        {"loop": "reenacted"},
        {"pools": "poolfuzz"},
        {"pools": "both"},
        {"embedding": True},
        {"sliding_window": 4, "swa_tokens": 32, "cache": "unified-rust"},
        {"mamba_slots": 12},
    )
    for change in refused:
        with pytest.raises(EngineShapeError):
            EngineTargetConfig(**{**SHAPE, **change})


def test_the_move_table_draws_eagle_servers_in_a_share_of_full_attention_shapes() -> None:
    from poolfuzz.harness.kits.engine.moves import engine_config

    shapes = [engine_config(random.Random(seed)) for seed in range(200)]  # type: ignore[arg-type]
    speculative = [s for s in shapes if s.speculative_num_steps]
    assert 10 < len(speculative) < 100
    assert all(s.pools == "upstream" and s.sliding_window is None and not s.mamba_slots for s in speculative)


@pytest.mark.parametrize("name", ["engine-spec-rejected-drafts-never-freed", "engine-spec-reserve-one-window"])
def test_a_spec_decode_canary_is_caught_by_its_expected_invariant_and_plants_on_its_own_instance(name: str) -> None:
    from poolfuzz.harness.canaries import collected
    from poolfuzz.harness.judge.families import resolve
    from poolfuzz.harness.kits.engine.driver import build_engine
    from poolfuzz.harness.upstream.sglang_files import sglang_copy

    canary = collected()[name]
    assert canary.family == "engine"
    violation = _first_violation(resolve(canary.spec), {**SHAPE, "speculative_num_steps": 0})
    assert violation is not None, f"{name} went uncaught"
    assert violation.invariant_id == canary.invariant, str(violation)
    clean = build_engine(**SHAPE)
    eagle_utils = sglang_copy().load(("sglang.srt.speculative.eagle_utils",))[0]["sglang.srt.speculative.eagle_utils"]
    assert "free_kv_row" not in vars(clean.tree_cache) and "update_running_batch" not in vars(clean.s)
    assert eagle_utils.get_alloc_reserve_per_decode.__name__ == "get_alloc_reserve_per_decode"


POOL_UNDER_THE_RESERVE: dict[str, Any] = {
    "page_size": 1,
    "rows": 2,
    "tokens": 12,
    "context": 12,
    "speculative_num_steps": 5,
    "max_queued_requests": 2,
    "running_timeout": True,
}
"""A 12-slot pool under EAGLE with 5 draft steps: each decode reserves ``2 * 6`` slots past the committed length
(allocation_sizing.py:64-70), so no request can decode and ``retract_decode`` aborts the last one at its first decode
(schedule_batch.py:3508-3530).  0.5.23 starts such a server (tp_worker.py:420-425 checks ``max_req_len`` only)."""

ABORTED_ALONE: tuple[tuple[str, dict[str, Any]], ...] = (
    (Ops.arrive, {"stem": 0, "length": 0, "tail": 1, "max_new": 2}),
    (Ops.iterate, {"eos": [0]}),
    (Ops.arrive, {"stem": 0, "length": 0, "tail": 0, "max_new": 0}),
    (Ops.crowd, {"count": 1, "max_new": 5}),
    (Ops.speculate, {"eos": [], "accepts": []}),
)
"""fuzz --target engine --seed 4402's shrunk trace: the request queued behind the running one is refused while it runs, then
the running one is aborted for memory in an iteration that forms no batch; the next iteration admits the queued one."""


@pytest.mark.parametrize(("cache", "loop"), [("radix", "overlap"), ("unified-rust", "overlap"), ("unified-rust", "normal")])
def test_an_iteration_whose_decode_aborts_the_last_request_for_memory_advances_and_the_queue_drains(cache: str, loop: str) -> None:
    """``scheduler-progress`` judges a hang only after an iteration that changed nothing: one that formed no batch but saw a
    running request leave (``update_running_batch``'s ``retract_decode``, scheduler.py:4469-4540) released its KV, and the
    queue head it blocked is admitted next (the harness judged this a hang before ``EngineLoop._active_rids``)."""
    from poolfuzz.harness.kits.engine.driver import build_engine

    shape = {**POOL_UNDER_THE_RESERVE, "cache": cache, "loop": loop}
    driver, violation = run_engine(build_engine, shape, ABORTED_ALONE)
    assert violation is None
    assert driver.loop.fully_idle and driver.loop.is_idle()

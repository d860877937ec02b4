"""vLLM engine target, speculative shapes: which n-gram drafter runs async, and the padded decode the long-prefill cap clips.

vLLM 0.33.0 refuses async scheduling with the CPU ``ngram`` drafter under the V1 model runner
(config/vllm.py:1652-1679, or turns async off, :1711-1717) and keeps it for ``ngram_gpu``; the scheduler's path reads
nothing that tells the two apart.  Finding 2 of docs/upstream-findings-vllm.md: a waiting request with one token to
compute is padded to ``1 + K`` rows (scheduler.py:1311-1330), the long-prefill cap clips it (:1332-1333), and
``assert num_new_tokens == 1 + self.num_spec_tokens`` (:1579) fails, sync or async, with any drafter.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from poolfuzz.harness.engines.interface import Submission
from poolfuzz.harness.upstream.vllm_files import vllm_unavailable_reason

MISSING = vllm_unavailable_reason()
needs_vllm = pytest.mark.skipif(MISSING is not None, reason=f"vLLM unavailable: {MISSING}")

SHAPE: dict[str, Any] = {"block_size": 4, "num_blocks": 32, "max_num_seqs": 4, "max_num_batched_tokens": 32, "max_model_len": 32}


def test_async_scheduling_with_the_cpu_ngram_drafter_is_refused_as_vllm_refuses_it() -> None:
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig, VllmShapeError

    with pytest.raises(VllmShapeError, match="ngram_gpu"):
        VllmEngineConfig(**SHAPE, async_scheduling=True, speculative_method="ngram", num_speculative_tokens=2)
    for async_scheduling, method in ((False, "ngram"), (True, "ngram_gpu"), (False, "ngram_gpu")):
        VllmEngineConfig(**SHAPE, async_scheduling=async_scheduling, speculative_method=method, num_speculative_tokens=2)


def test_a_trace_written_with_async_ngram_replays_as_ngram_gpu_and_a_sync_one_keeps_ngram() -> None:
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig

    old = {**SHAPE, "async_scheduling": True, "speculative_method": "ngram", "num_speculative_tokens": 4}
    read = VllmEngineConfig.from_mapping(old)
    assert read.speculative_method == "ngram_gpu" and read.to_json() == {**old, "speculative_method": "ngram_gpu", "device": "cpu"}
    assert VllmEngineConfig.from_mapping({**old, "async_scheduling": False}).speculative_method == "ngram"


def test_the_move_table_draws_both_ngram_drafters_never_a_refused_shape_nor_a_cap_at_most_k() -> None:
    from poolfuzz.harness.kits.vllm_engine.moves import vllm_config

    drawn = [vllm_config(random.Random(seed)) for seed in range(300)]  # each one checked by VllmEngineConfig itself
    pairs = {(c.async_scheduling, c.speculative_method) for c in drawn}
    assert {(False, "ngram"), (True, "ngram_gpu")} <= pairs and (True, "ngram") not in pairs
    caps = {(c.num_speculative_tokens, c.long_prefill_token_threshold) for c in drawn if c.num_speculative_tokens}
    assert (4, 5) in caps and not any(0 < cap <= k for k, cap in caps), caps  # finding 2 steered around


@needs_vllm
def test_the_scheduler_reads_no_drafter_method_so_both_ngram_drafters_build_the_same_scheduler() -> None:
    """The stand-in holds no ``method`` (reading one raises); the scheduler built for each drafter holds the same
    speculative settings, read from the same fields."""
    from poolfuzz.harness.kits.vllm_engine.target import build_vllm_engine, vllm_config
    from poolfuzz.harness.upstream.placeholders import StandInReached

    def settings(method: str) -> tuple[Any, ...]:
        s = build_vllm_engine(**SHAPE, speculative_method=method, num_speculative_tokens=3).scheduler
        return s.num_spec_tokens, s.num_lookahead_tokens, s.num_prefill_lookahead, s.use_eagle, s.use_eagle_block_drop

    assert settings("ngram") == settings("ngram_gpu") == (3, 0, 0, False, False)
    from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig

    stand_in = vllm_config(VllmEngineConfig(**SHAPE, speculative_method="ngram_gpu", num_speculative_tokens=3))
    with pytest.raises(StandInReached, match="method"):
        stand_in.speculative_config.method  # noqa: B018 (the read is the test)


def _one_token_prompt_beside_a_decode(**shape: Any) -> str | None:
    """A 6-token request decodes; a 1-token prompt then arrives.  The error the next steps raise, if any."""
    from poolfuzz.harness.kits.vllm_engine.target import build_vllm_engine

    engine = build_vllm_engine(**SHAPE, **shape)
    engine.submit(Submission((40, 41, 42, 43, 44, 45), 20))
    try:
        for _ in range(3):
            engine.step({})
        engine.submit(Submission((7,), 5))
        for _ in range(3):
            engine.step({})
    except AssertionError as failed:
        frame = failed.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        assert frame is not None
        return f"{frame.tb_frame.f_code.co_filename.rpartition('vllm/')[2]}:{frame.tb_lineno}"
    return None


@needs_vllm
@pytest.mark.parametrize(
    ("async_scheduling", "method"),
    [(False, "ngram"), (True, "ngram_gpu"), (False, "eagle"), (True, "eagle")],
    ids=["sync-ngram", "async-ngram_gpu", "sync-eagle", "async-eagle"],
)
def test_a_one_token_prompt_padded_past_a_long_prefill_cap_below_one_plus_k_fails_vllms_assert(async_scheduling: bool, method: str) -> None:
    """Finding 2 (docs/upstream-findings-vllm.md) on vLLM 0.33.0: the cap 4 with K=4 raises at scheduler.py:1579, with
    or without prefix caching; K=3 (the cap holds 1 + K) and no cap run clean.  When vLLM fixes it, this fails: drop the
    move table's steering (moves.py::vllm_config) and the finding's pin."""
    shape = {"async_scheduling": async_scheduling, "speculative_method": method}
    for caching in (True, False):
        clipped = _one_token_prompt_beside_a_decode(
            **shape, num_speculative_tokens=4, long_prefill_token_threshold=4, enable_prefix_caching=caching
        )
        assert clipped == "v1/core/sched/scheduler.py:1579"
    assert _one_token_prompt_beside_a_decode(**shape, num_speculative_tokens=3, long_prefill_token_threshold=4) is None
    assert _one_token_prompt_beside_a_decode(**shape, num_speculative_tokens=4, long_prefill_token_threshold=0) is None


def _arrive(length: int, max_new: int, stem: int, tail: int) -> dict[str, Any]:
    return {"op": "arrive", "args": {"length": length, "max_new": max_new, "stem": stem, "tail": tail}}


FUZZER_TRACES = {
    # The first find (seed 2893553758, 2026-12-06), written as async with "ngram" before the drafters were told apart.
    "async-ngram-read-as-ngram_gpu": (
        {"async_scheduling": True, "block_size": 4, "long_prefill_token_threshold": 4, "max_model_len": 26,
         "max_num_batched_tokens": 10, "max_num_seqs": 3, "num_blocks": 16, "num_speculative_tokens": 4,
         "speculative_method": "ngram"},
        [_arrive(8, 0, 2, 0), _arrive(0, 0, 0, 3), _arrive(13, 3, 0, 4), _arrive(0, 5, 0, 4), _arrive(9, 2, 2, 7),
         {"op": "run", "args": {"iterations": 7}}],
    ),
    # poolfuzz fuzz --target vllm_engine --seconds 300 --workers 1 --seed 43004 --database none: shrunk to 4 steps.
    "sync-ngram-both-pools": (
        {"async_scheduling": False, "block_size": 3, "long_prefill_token_threshold": 4, "max_model_len": 18,
         "max_num_batched_tokens": 8, "max_num_seqs": 2, "num_blocks": 11, "num_speculative_tokens": 4,
         "pools": "both", "speculative_method": "ngram"},
        [_arrive(17, 0, 0, 0), _arrive(0, 9, 0, 4), _arrive(0, 0, 0, 0), {"op": "run", "args": {"iterations": 4}}],
    ),
}  # fmt: skip


@needs_vllm
@pytest.mark.parametrize("name", sorted(FUZZER_TRACES))
def test_the_fuzzers_traces_of_finding_2_still_fail_vllms_assert_on_replay(name: str, tmp_path: Any) -> None:
    """The fuzzer's shrunk traces (not committed: corpus/known.toml does not list the finding yet) replay to the assert."""
    import json

    from poolfuzz.harness.traces.replay import replay_trace
    from poolfuzz.harness.traces.schema import load_trace

    config, steps = FUZZER_TRACES[name]
    implementation = "poolfuzz.harness.upstream:VllmEngine"
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({
        "schema": 1, "family": "vllm_engine", "implementation": implementation, "audit_period": 1,
        "config": {"device": "cpu", "enable_chunked_prefill": True, "enable_prefix_caching": True, "sliding_window": None,
                   "pools": "upstream", **config},
        "expect": {"implementation": implementation, "invariant": "valid-call-accepted", "outcome": "violation"},
        "steps": steps,
    }))  # fmt: skip
    replayed = replay_trace(load_trace(path))
    assert (replayed.outcome, replayed.invariant) == ("violation", "valid-call-accepted"), replayed.describe()
    assert "AssertionError" in (replayed.message or ""), replayed.describe()

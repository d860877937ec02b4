"""The calls vLLM 0.33.0's engine core makes on its v1 scheduler, as :class:`poolfuzz.harness.kits.vllm_engine.target.VllmEngine`
makes them (target ``poolfuzz.harness.upstream:VllmEngine``).

The fuzzer does not call a pool: it chooses arrivals, the tokens results carry, aborts and cache resets, and the
target makes the engine core's own scheduler calls in their order (``EngineCore.step``, or
``step_with_batch_queue`` for the async scheduler).  The contract is descriptive: the recording proxy does not
apply (``upstream_attr=""``).  Paths are relative to the ``vllm`` package folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract
from poolfuzz.harness.kits.vllm_engine.ops import VllmEngineOps as Ops
from poolfuzz.harness.upstream.classify import Classification

CORE = "v1/engine/core.py"


def _at(line: int, text: str, note: str = "", path: str = CORE) -> Cite:
    return Cite(path, line, text, package="vllm", note=note)


LENGTH = _at(
    574, "if prompt_len > max_prompt_len:", note="and :593, a prompt as long as max_model_len", path="v1/engine/input_processor.py"
)
ADD = _at(558, "self.scheduler.add_request(request)")
SCHEDULE = _at(677, "scheduler_output = self.scheduler.schedule(", note="EngineCore.step")
UPDATE = _at(691, "engine_core_outputs = self.scheduler.update_from_output(")
SCHEDULE_ASYNC = _at(735, "scheduler_output = self.scheduler.schedule(", note="step_with_batch_queue")
UPDATE_ASYNC = _at(793, "engine_core_outputs = self.scheduler.update_from_output(", note="the oldest batch's result")
ABORT = _at(569, "self.scheduler.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)")
DRAFTS = _at(706, "self.scheduler.update_draft_token_ids(draft_token_ids)", note="EngineCore.post_step, sync only")
RESET = _at(886, "return self.scheduler.reset_prefix_cache(")
STEP_CITES = (SCHEDULE, UPDATE, SCHEDULE_ASYNC, UPDATE_ASYNC)

CONTRACT: Contract[object] = Contract(
    target="poolfuzz.harness.upstream:VllmEngine",
    release="vllm==0.33.0",
    rules=(
        CallRule(Ops.arrive, ("add_request",), "one tokenized request, refused at max_model_len tokens or more", (LENGTH, ADD)),
        CallRule(Ops.iterate, ("schedule", "update_from_output"), "one engine-core step (sync, or async with one batch ahead)", STEP_CITES),
        CallRule(Ops.run, ("schedule", "update_from_output"), "iterate, n times with plain tokens", STEP_CITES),
        CallRule(
            Ops.speculate,
            ("schedule", "update_from_output", "update_draft_token_ids"),
            "one step whose results accept some scheduled drafts; sync, then the drafter's next proposals",
            (*STEP_CITES, DRAFTS),
        ),
        CallRule(Ops.abort, ("finish_requests",), "abort_requests: finish_requests(ids, FINISHED_ABORTED)", (ABORT,)),
        CallRule(Ops.reset_cache, ("reset_prefix_cache",), "reset_prefix_cache(): refused unless only the null block is used", (RESET,)),
    ),
    upstream_attr="",
    ops=Ops,
)


def _groups(config: Mapping[str, Any]) -> list[str]:
    """The trace's KV cache groups, in words (a trace written before the chunked-local and Mamba fields has neither)."""
    mamba = f"mamba ({'align' if config.get('enable_prefix_caching', True) else 'none'} mode)"
    kinds = (
        ("full attention", config.get("full_attention", True)),
        ("sliding window", config.get("sliding_window")),
        ("chunked local", config.get("attention_chunk_size")),
        (mamba, config.get("mamba")),
    )
    return [words for words, present in kinds if present]


def classify_failure(config: Mapping[str, Any], ops: Sequence[str]) -> Classification:
    """The class of a violation by the vLLM engine target (the kit's ``classifier``): ``reachable`` by construction.

    Every step is an engine-core call on vLLM 0.33.0's own ``Scheduler``/``AsyncScheduler`` (add_request, schedule,
    update_from_output, finish_requests, reset_prefix_cache: the contract above); admission, chunking, prefix hits,
    preemption and frees are its decisions, and only the model's sampled tokens are chosen.  The server shape is one
    vLLM starts (``VllmEngineConfig`` refuses the rest), its ``KVCacheConfig`` built by hand from vLLM's classes."""
    kinds = sorted(set(ops))
    shape = ", ".join(
        part
        for part in (
            "async" if config.get("async_scheduling") else "sync",
            " + ".join(_groups(config)),
            f"pools {config.get('pools', 'upstream')}",
            f"{config.get('speculative_method')} drafts" if config.get("speculative_method") else "",
        )
        if part
    )
    return Classification(
        "reachable",
        "vLLM 0.33.0's own v1 scheduler decides every memory call; the fuzzer chooses only arrivals, sampled tokens "
        f"(EOS, stop), drafts and how many are accepted, aborts and prefix-cache resets (docs/engine-vllm.md); shape: {shape}; "
        f"the trace's steps: {', '.join(kinds) or 'none'}",
    )

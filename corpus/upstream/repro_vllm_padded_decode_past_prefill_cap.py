"""Standalone reproduction of vLLM finding 2 (``vllm-padded-decode-past-prefill-cap``, docs/upstream-findings-vllm.md).

vLLM 0.33.0's v1 scheduler pads a waiting request that has one token to compute to ``1 + K`` rows when speculative
decoding is on (``v1/core/sched/scheduler.py:1311-1330``), then applies the long-prefill cap to it
(``if 0 < long_prefill_token_threshold < num_new_tokens``, :1332-1333), and asserts the padded count survived
(``assert num_new_tokens == 1 + self.num_spec_tokens``, :1579).  With ``--long-prefill-token-threshold`` at most K and
another request in the batch, the cap clips the padding and the assert raises inside ``schedule()``: the engine core
dies.  Nothing refuses the pair at startup (``SchedulerConfig`` checks only ``threshold <= max_model_len``,
config/scheduler.py:355-360).

Two servers, identical to the scheduler but for async scheduling, both as vLLM starts them with the V1 model runner:
``--speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
--long-prefill-token-threshold 4`` (async turned off, config/vllm.py:1711-1717) and the same with ``"ngram_gpu"``
(async kept on, :1652-1666).  A 17-token request decodes; a 1-token prompt arrives; the next ``schedule()`` raises.

This script imports nothing from poolfuzz: it runs the wheel's own scheduler files through ``_wheel_vllm.py``
beside it, with the configuration object holding exactly the fields the scheduler reads.

    pip install --no-deps vllm==0.33.0 && python corpus/upstream/repro_vllm_padded_decode_past_prefill_cap.py

It prints what happened and exits 1 when the assert fires on both servers, 0 otherwise.
"""

from __future__ import annotations

import sys
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _wheel_vllm import NoGrammar, Strict, load, sha256  # the sibling loader, on the path set above

K = 4
"""``num_speculative_tokens``."""
BLOCK = 16


def config(*, async_scheduling: bool, threshold: int) -> Strict:
    """The ``VllmConfig`` an n-gram server builds (``ngram`` sync, ``ngram_gpu`` async: the scheduler reads no method),
    each field with the scheduler line that reads it; a field not listed raises when read."""
    batched = 2048
    return Strict(
        "VllmConfig",
        scheduler_config=Strict(
            "SchedulerConfig", max_num_seqs=256, max_num_active_seqs=None, max_num_scheduled_tokens=None,  # :131-140
            max_num_batched_tokens=batched, long_prefill_token_threshold_adaptive=False, policy="fcfs",  # :142-226
            watermark=0.0, prefill_schedule_interval=1, scheduler_reserve_full_isl=False,  # :366, :405, :427
            long_prefill_token_threshold=threshold, enable_chunked_prefill=True,  # :614, :1338
            async_scheduling=async_scheduling, disable_chunked_mm_input=False,  # :1945, :2099
        ),
        cache_config=Strict("CacheConfig", num_gpu_blocks=1024, enable_prefix_caching=True,  # :215, :355
                            enable_mamba_shared_prefix_checkpoint=False, mamba_cache_mode="none", block_size=BLOCK),
        lora_config=None, kv_events_config=None, kv_transfer_config=None, ec_transfer_config=None,  # :101-210
        model_config=Strict("ModelConfig", uses_mrope=False, is_encoder_decoder=False, max_model_len=4096,  # :102-147
                            runner_type="generate", is_diffusion=False, supports_multimodal_inputs=False,  # :157-266
                            return_sampling_mask=False),  # :487
        parallel_config=Strict("ParallelConfig", data_parallel_index=0, decode_context_parallel_size=1,
                               prefill_context_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1),
        observability_config=Strict("ObservabilityConfig", per_request_spec_decode_metrics=False, kv_cache_metrics=False,
                                    enable_mfu_metrics=False, enable_logging_iteration_details=False),
        is_mm_encoder_only=False,  # :118
        ec_manager_config=Strict("ECManagerConfig", get_encoder_cache_manager_obj=lambda: None),  # :284
        # SpeculativeConfig as speculative.py computes it for ngram and ngram_gpu alike (:2058, :2116-2147): no EAGLE,
        # no extra drafting slots, no dynamic K.
        speculative_config=Strict("SpeculativeConfig", num_speculative_tokens=K, num_speculative_tokens_per_batch_size=None,
                                  use_eagle=lambda: False, use_eagle_block_drop=lambda: False,
                                  needs_eagle_block_drop=lambda: False, disable_eagle_block_drop=False,
                                  max_num_new_slots_for_drafting=0),
        num_speculative_tokens=K, num_lookahead_tokens=0, num_prefill_lookahead_tokens=0,  # config/vllm.py:616-675
        num_hash_lookahead_tokens=0, use_v2_model_runner=False,  # :678-692; scheduler.py:320
        max_in_flight_tokens=(2 if async_scheduling else 1) * batched,  # scheduler.py:354
        aux_output_config=Strict("AuxOutputConfig", enabled=False),  # :484
        max_concurrent_batches=2 if async_scheduling else 1,  # :193
    )  # fmt: skip


def params(max_tokens: int) -> Strict:
    """The ``SamplingParams`` fields a plain generate request carries on the scheduler's path (v1/request.py,
    v1/core/sched/utils.py)."""
    return Strict(
        "SamplingParams", max_tokens=max_tokens, eos_token_id=2, stop_token_ids=[], all_stop_token_ids={2}, min_tokens=0,
        ignore_eos=False, extra_args=None, skip_reading_prefix_cache=None, repetition_detection=None, logprobs=None,
        num_logprobs=-1, prompt_logprobs=None, structured_outputs=None, thinking_token_budget=None,
        routed_experts_prompt_start=0, trace_decode_token_ids=None,
    )  # fmt: skip


def serve(m: dict[str, Any], *, async_scheduling: bool, threshold: int) -> str | None:
    """The engine core's calls: A (17 tokens) is scheduled and decodes; B (1 token) arrives; the next ``schedule()``.
    The failing upstream line, or ``None`` when every call returned."""
    interface, request = m["v1.kv_cache_interface"], m["v1.request"]
    spec = interface.FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=8, dtype=torch.float16)
    kv_cache_config = interface.KVCacheConfig(num_blocks=1024, kv_cache_tensors=[],
                                              kv_cache_groups=[interface.KVCacheGroupSpec(["layer.0"], spec)])
    kind = m["v1.core.sched.async_scheduler"].AsyncScheduler if async_scheduling else m["v1.core.sched.scheduler"].Scheduler
    scheduler = kind(config(async_scheduling=async_scheduling, threshold=threshold), kv_cache_config, NoGrammar(),
                     block_size=BLOCK, log_stats=False)
    utils = m["v1.core.kv_cache_utils"]
    utils.init_none_hash(sha256)  # as the engine core does before any request (prefix caching is on by default)
    hasher = utils.get_request_block_hasher(BLOCK, sha256)

    def add(rid: str, prompt: list[int], max_tokens: int) -> None:
        scheduler.add_request(request.Request(rid, prompt, params(max_tokens), None, block_hasher=hasher))

    try:
        add("A", list(range(1000, 1017)), 32)
        first = scheduler.schedule()  # A's whole prompt
        if async_scheduling:
            # EngineCore.step_with_batch_queue (v1/engine/core.py:735-793): step 2 is scheduled before step 1 lands;
            # A is a running decode with its output placeholder.
            add("B", [7], 8)
            scheduler.schedule()
        else:
            # EngineCore.step (core.py:677-691): step 1 lands (A samples a token; the drafter proposed nothing).
            output = m["v1.outputs"].ModelRunnerOutput(req_ids=["A"], req_id_to_index={"A": 0}, sampled_token_ids=[[100]])
            scheduler.update_from_output(first, output)
            add("B", [7], 8)
            scheduler.schedule()  # A decodes (a scheduled running request); B waits with one token to compute
    except AssertionError:
        frame = traceback.extract_tb(sys.exc_info()[2])[-1]
        return f"{frame.filename.rpartition('vllm/')[2]}:{frame.lineno}: {frame.line}"
    return None


def main() -> int:
    version = metadata.version("vllm")
    assert version == "0.33.0", f"this reproduces vllm 0.33.0; installed: {version}"
    m = load()
    failed = []
    for async_scheduling, method in ((False, "ngram"), (True, "ngram_gpu")):
        for threshold in (K, K + 1):
            where = serve(m, async_scheduling=async_scheduling, threshold=threshold)
            mode = "async" if async_scheduling else "sync"
            print(f"{method:9} {mode:5} K={K} --long-prefill-token-threshold {threshold}: "
                  f"{'AssertionError at ' + where if where else 'every call returned'}")  # fmt: skip
            if where and threshold <= K:
                failed.append(method)
            elif where:
                print("  unexpected: a cap that holds 1 + K failed too")
                return 0
    reproduced = len(failed) == 2
    print("REPRODUCED: a 1-token prompt padded to 1 + K rows, clipped by the long-prefill cap, fails the scheduler's "
          "assert" if reproduced else "not reproduced")  # fmt: skip
    return 1 if reproduced else 0


if __name__ == "__main__":
    sys.exit(main())

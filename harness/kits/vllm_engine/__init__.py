"""The vLLM engine kit: vLLM 0.33.0's own v1 ``Scheduler`` / ``AsyncScheduler`` under the engine judges.

``config`` (the server shape, declared once), ``ops`` and ``moves`` (arrivals, tokens at results, aborts,
cache resets), ``target`` (the engine protocol over the real scheduler, with the fake model), ``observe``
(the raw state as an engine-neutral observation, and vLLM's own structures checked), ``driver``,
``canaries``.  Everything the scheduler decides runs from vLLM's files (:data:`poolfuzz.harness.upstream.vllm_files.VLLM`).
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import Family
from poolfuzz.harness.judge.limits import REQUEST
from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
from poolfuzz.harness.kits.vllm_engine.ops import VllmEngineOps as Ops

FAMILIES = (
    Family(
        name="vllm_engine",
        summary="vLLM 0.33.0's v1 Scheduler and AsyncScheduler over its KVCacheManager and BlockPool, a fake model "
        "(full attention, full + sliding window, chunked local, full + chunked local, Mamba, full + Mamba, "
        "full + SWA + Mamba, Mamba in its none and align cache modes; prefix caching, chunked prefill, preemption, aborts; n-gram (ngram "
        "sync, ngram_gpu async) or EAGLE drafts, accepted and rejected); "
        "poolfuzz.pools.block_pool in its BlockPool's place beside it (pools='both')",
        default="poolfuzz.harness.upstream:VllmEngine",
        driver="poolfuzz.harness.kits.vllm_engine.driver:VllmEngineDriver",
        moves="poolfuzz.harness.kits.vllm_engine.moves:vllm_engine_table",
        audit_period=1,
        drain_period=0,
        bench_config=VllmEngineConfig(
            block_size=4,
            num_blocks=24,
            max_num_seqs=4,
            max_num_batched_tokens=16,
            max_model_len=32,
            long_prefill_token_threshold=0,
            enable_chunked_prefill=True,
            enable_prefix_caching=True,
            async_scheduling=False,
            sliding_window=None,
            device="cpu",
        ),
        canaries=("poolfuzz.harness.kits.vllm_engine.canaries", "poolfuzz.harness.kits.vllm_engine.spec_canaries"),
        classifier="poolfuzz.harness.kits.vllm_engine.contracts.engine:classify_failure",
        upstream=("poolfuzz.harness.upstream:VllmEngine",),
        not_covered=(
            "vLLM's KV cache config builder (kv_cache_planning.get_kv_cache_configs): it sizes blocks from GPU memory "
            "and imports vllm.config's SpeculativeConfig (pydantic, transformers); the KVCacheConfig is built from "
            "vLLM's own classes by hand",
            "EAGLE with prefix caching over our pool (lookahead block hashes are not bridged), dynamic K, parallel drafting, "
            "MTP and draft models, KV connectors "
            "(P/D, offload, defer_block_free), KV events, multimodal inputs, structured output, pipeline parallel: "
            "not driven yet",
            "Mamba align mode (prefix caching) over our pool: it calls BlockPool.cache_partial_block/move_block_hashes, "
            "which ours.py does not bridge; the config refuses it",
            "enable_mamba_shared_prefix_checkpoint: held off; it takes effect only with an EAGLE draft group "
            "(KVCacheGroupSpec.is_eagle_group) and a prefix_match_unit below the Mamba block (kv_cache_manager.py:188-193), "
            "neither of which this hand-built KVCacheConfig has, so turning it on would change nothing",
            "Mamba align mode's state blocks per request are not bounded by a judge: a request holds 3 + K between steps, "
            "one more than MambaSpec.max_memory_usage_bytes sizes (docs/engine-vllm.md, not triaged); none mode's 1 + K is",
            "prefix_match_unit (hash blocks finer than a group's block: Mamba partial hits) and groups of different "
            "attention block sizes: every attention group and an align-mode Mamba group share block_size",
            "a long-prefill cap of at most K under speculation: the move table steers around vLLM finding 2 "
            "(docs/upstream-findings-vllm.md), which such a cap hits",
        ),
        invariants=(
            "valid-call-accepted",
            "reserved-never-handed-out",
            "no-double-allocation",
            "scheduler-conservation",
            "ref-count",
            "free-queue-order",
            "cache-map",
            "in-flight-reuse",
            "scheduler-progress",
            "implementations-agree",
            "async-placeholders",
            "prefix-hit-sound",
        ),
        limits=VllmEngineConfig.with_args(
            {
                Ops.at(Ops.arrive, "length"): REQUEST,
                Ops.at(Ops.arrive, "tail"): REQUEST,
                Ops.at(Ops.arrive, "max_new"): REQUEST,
                Ops.at(Ops.iterate, "eos", "[*]"): REQUEST,
                Ops.at(Ops.iterate, "stop", "[*]"): REQUEST,
                Ops.at(Ops.run, "iterations"): REQUEST,
                Ops.at(Ops.speculate, "drafts"): REQUEST,
                Ops.at(Ops.speculate, "accepted"): REQUEST,
                Ops.at(Ops.speculate, "eos", "[*]"): REQUEST,
            }
        ),
        ops=Ops,
    ),
)

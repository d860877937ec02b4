"""The engine kit: SGLang 0.5.23's scheduler memory path, upstream's own calls on its own pools and cache.

``config`` (the server shape, declared once: every target's keywords), ``moves`` (arrivals, iterations,
aborts, crowds), ``driver`` (one scheduler iteration a step, through upstream's ``allocation.py`` and
``common.py``, driving the loop through the engine protocol of ``target``), ``observe`` (the loop's raw
state as an engine-neutral observation) and ``checks`` (every step judged twice: the engine judges of
:mod:`poolfuzz.harness.engines.judges` and upstream's own ``invariant_checker.py``), ``canaries``.  The engine
itself is built by :mod:`poolfuzz.harness.upstream.engine_build` from the installed SGLang.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import Family
from poolfuzz.harness.judge.limits import REQUEST, ROWS
from poolfuzz.harness.kits.engine.config import EngineTargetConfig
from poolfuzz.harness.kits.engine.ops import EngineOps as Ops

FAMILIES = (
    Family(
        name="engine",
        summary="SGLang 0.5.23's scheduler memory path: upstream's own calls on its pools and prefix cache "
        "(RadixCache, UnifiedRadixCache over the Rust or Python core; full attention, hybrid SWA or hybrid Mamba)",
        default="poolfuzz.harness.upstream:Engine",
        driver="poolfuzz.harness.kits.engine.driver:EngineDriver",
        moves="poolfuzz.harness.kits.engine.moves:engine_table",
        audit_period=1,
        bench_config=EngineTargetConfig(
            cache="radix",
            page_size=1,
            rows=4,
            tokens=32,
            context=64,
            chunk=None,
            new_token_ratio=0.1,
            pools="upstream",
            sliding_window=None,
            swa_tokens=0,
            swa_eviction_interval=128,
            mamba_slots=0,
            device="cpu",
        ),
        canaries=("poolfuzz.harness.kits.engine.canaries",),
        upstream=("poolfuzz.harness.upstream:Engine",),
        classifier="poolfuzz.harness.kits.engine.contracts.engine:classify_failure",
        not_covered=(
            "speculative decoding: alloc_for_spec_decode writes rows with Triton, or sgl_kernel on CPU "
            "(allocation.py:745-763); neither runs without a GPU build",
            "Mamba above page size 1 (MambaComponent asserts page 1, components/mamba.py:74-79) and the Mamba extra "
            "buffer (track_mask_cpu.pin_memory(), schedule_batch.py:3830, raises on a CPU torch)",
            "SWA or Mamba over pools/: poolfuzz.pools.swa and poolfuzz.pools.mamba predate the 0.5.23 interfaces",
            "mixed chunks, HiCache, streaming sessions, PD disaggregation, LoRA, grammar, embedding models: "
            "0.5.23 paths this loop does not drive",
        ),
        invariants=(
            "valid-call-accepted",
            "reserved-never-handed-out",
            "no-double-allocation",
            "scheduler-conservation",
            "kv-accounting",
            "lock-balance",
            "prompt-prefilled",
            "swa-mapping",
            "scheduler-progress",
            "checker-agreement",
            "implementations-agree",
        ),
        limits=EngineTargetConfig.with_args(
            {
                Ops.at(Ops.arrive, "length"): REQUEST,
                Ops.at(Ops.arrive, "tail"): REQUEST,
                Ops.at(Ops.arrive, "max_new"): REQUEST,
                Ops.at(Ops.iterate, "eos", "[*]"): REQUEST,
                Ops.at(Ops.crowd, "count"): ROWS,
                Ops.at(Ops.crowd, "max_new"): REQUEST,
                Ops.at(Ops.run, "iterations"): REQUEST,
            }
        ),
        ops=Ops,
    ),
)

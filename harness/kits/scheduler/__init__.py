"""The scheduler kit: rows, Mamba slots and KV (paged, prefix-cached or SWA) driven as scheduler steps.

``moves`` (the table), ``machine`` (its hypothesis machine, pinned to a kernel or mode per
variant), ``model`` and ``cache_model`` (the scheduler's ledger and its prefix cache), ``driver``
over ``base``, ``kv``, ``cache`` and ``swa`` (one per memory path), ``canaries``.  The pools are
our own (rows, Mamba, KV, prefix cache, SWA) composed by :func:`~poolfuzz.harness.kits.scheduler.driver.build_scheduler_pools`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import ALLOCATOR_INVARIANTS, Family, settings
from poolfuzz.harness.judge.limits import REQUEST
from poolfuzz.harness.kits.scheduler.config import SchedulerConfig
from poolfuzz.harness.kits.scheduler.ops import SchedulerOps as Ops

FAMILIES = (
    Family(name="scheduler",
           summary="rows, Mamba slots and KV (paged, prefix-cached or SWA) driven as scheduler steps",
           default="poolfuzz.harness.kits.scheduler.driver:build_scheduler_pools",
           driver="poolfuzz.harness.kits.scheduler.driver:SchedulerDriver",
           moves="poolfuzz.harness.kits.scheduler.moves:scheduler_table", audit_period=4,
           variants=(("loop", settings(kernels=("loop",))), ("vectorized", settings(kernels=("vectorized",))),
                     ("page_size=1", settings(kernels=("vectorized",), page_size=1)),
                     ("hybrid", settings(kernels=("vectorized",), hybrid=True)),
                     ("prefix_cache", settings(kernels=("vectorized",), mode="prefix_cache")),
                     ("sliding_window", settings(kernels=("vectorized",), mode="sliding_window"))),
           bench_config=SchedulerConfig(size=6, max_context_len=48, page_size=4, kv_pages=48, hybrid=True, mamba_size=6,
                                        kernel="vectorized", device="cpu"),
           canaries=("poolfuzz.harness.kits.scheduler.canaries", "poolfuzz.harness.canaries.combinations",
                     "poolfuzz.harness.canaries.combinations_caches"),
           invariants=(*ALLOCATOR_INVARIANTS, "page-layout", "group-window", "clear-restores", "kernel-agreement",
                       "scheduler-conservation", "kv-accounting", "lock-balance", "cache-accounting",
                       "match-returns-inserted", "evict-spares-locked", "swa-mapping"),
           limits=SchedulerConfig.with_args(
               {Ops.at(Ops.admit, "requests", "[*][*]"): REQUEST, Ops.at(Ops.admit, "reserve_extra"): REQUEST,
                Ops.at(Ops.prefill, "chunk"): REQUEST, Ops.at(Ops.retract, "keep"): REQUEST}),
           ops=Ops),
)

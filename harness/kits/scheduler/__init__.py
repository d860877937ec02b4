"""The scheduler kit: rows, Mamba slots and KV (paged, prefix-cached or SWA) driven as scheduler steps.

``moves`` (the table), ``machine`` (its hypothesis machine, pinned to a kernel or mode per
variant), ``model`` and ``cache_model`` (the scheduler's ledger and its prefix cache), ``driver``
over ``base``, ``kv``, ``cache`` and ``swa`` (one per memory path), ``canaries``.  The pools are
our own (rows, Mamba, KV, prefix cache, SWA) composed by :func:`~harness.kits.scheduler.driver.build_scheduler_pools`.
"""

from __future__ import annotations

from harness.judge.kit import ALLOCATOR_INVARIANTS, Family, settings
from harness.judge.limits import REQUEST
from harness.kits.scheduler.config import SchedulerConfig
from harness.kits.scheduler.ops import SchedulerOps as Ops

FAMILIES = (
    Family(name="scheduler",
           summary="rows, Mamba slots and KV (paged, prefix-cached or SWA) driven as scheduler steps",
           default="harness.kits.scheduler.driver:build_scheduler_pools",
           driver="harness.kits.scheduler.driver:SchedulerDriver",
           moves="harness.kits.scheduler.moves:scheduler_table", audit_period=4,
           variants=(("loop", settings(kernels=("loop",))), ("vectorized", settings(kernels=("vectorized",))),
                     ("page_size=1", settings(kernels=("vectorized",), page_size=1)),
                     ("hybrid", settings(kernels=("vectorized",), hybrid=True)),
                     ("prefix_cache", settings(kernels=("vectorized",), mode="prefix_cache")),
                     ("sliding_window", settings(kernels=("vectorized",), mode="sliding_window"))),
           bench_config=SchedulerConfig(size=6, max_context_len=48, page_size=4, kv_pages=48, hybrid=True, mamba_size=6,
                                        kernel="vectorized", device="cpu"),
           canaries=("harness.kits.scheduler.canaries", "harness.canaries.combinations",
                     "harness.canaries.combinations_caches"),
           invariants=(*ALLOCATOR_INVARIANTS, "page-layout", "group-window", "clear-restores", "kernel-agreement",
                       "scheduler-conservation", "kv-accounting", "lock-balance", "cache-accounting",
                       "match-returns-inserted", "evict-spares-locked", "swa-mapping"),
           limits=SchedulerConfig.with_args(
               {Ops.at(Ops.admit, "requests", "[*][*]"): REQUEST, Ops.at(Ops.admit, "reserve_extra"): REQUEST,
                Ops.at(Ops.prefill, "chunk"): REQUEST, Ops.at(Ops.retract, "keep"): REQUEST}),
           ops=Ops),
)

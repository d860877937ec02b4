"""The block-pool kit: vLLM-v1-style ref-counted blocks (prefix hits, an LRU free queue, eviction).

``moves`` (the table), ``catalogue`` (misuse and corners), ``views``, ``model`` (ref counts, the
free queue's order, the cache map), ``driver`` and ``misuse``, ``canaries``.  The pool is
:mod:`poolfuzz.pools.block_pool`; vLLM's ``BlockPool`` is its upstream target.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import ALLOCATOR_INVARIANTS, Family
from poolfuzz.harness.judge.limits import REQUEST
from poolfuzz.harness.kits.block_pool.config import BlockPoolConfig
from poolfuzz.harness.kits.block_pool.ops import BlockPoolOps as Ops

FAMILIES = (
    Family(
        name="block_pool",
        summary="vLLM-v1-style ref-counted blocks: prefix hits, LRU free queue, eviction",
        default="poolfuzz.harness.kits.block_pool.driver:build_block_pool",
        driver="poolfuzz.harness.kits.block_pool.driver:BlockPoolDriver",
        moves="poolfuzz.harness.kits.block_pool.moves:block_pool_table",
        bench_config=BlockPoolConfig(num_gpu_blocks=33, enable_caching=True, device="cpu"),
        canaries=("poolfuzz.harness.kits.block_pool.canaries",),
        upstream=("poolfuzz.harness.upstream:VllmBlockPool",),
        invariants=(*ALLOCATOR_INVARIANTS, "ref-count", "free-queue-order", "cache-map"),
        realistic=(("num_gpu_blocks", 4), (Ops.at(Ops.allocate, "num_blocks"), 1), (Ops.at(Ops.admit, "tokens"), 1)),
        protocol="poolfuzz.pools.protocols:BlockPoolLike",
        limits=BlockPoolConfig.with_args(
            {Ops.at(Ops.allocate, "num_blocks"): REQUEST, Ops.at(Ops.cache, "num_full"): REQUEST, Ops.at(Ops.slide, "num_skipped"): REQUEST}
        ),
        ops=Ops,
    ),
)

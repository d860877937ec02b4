"""The prefix-cache kit: a radix tree over its KV allocator (match, insert, lock, evict, release).

``moves`` (the table), ``model`` (the tree as prefixes, locks and ages), ``driver`` over ``calls``
(one operation per cache call) and ``misuse``, ``bench`` (the eviction-heavy bench workload),
``canaries``.  The cache is :mod:`poolfuzz.pools.prefix_cache`; upstream's ``RadixCache`` and Rust tree
core are its upstream targets.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import Family, pages
from poolfuzz.harness.judge.limits import PAGE, REQUEST
from poolfuzz.harness.kits.prefix_cache.config import PrefixCacheConfig
from poolfuzz.harness.kits.prefix_cache.ops import PrefixCacheOps as Ops

FAMILIES = (
    Family(
        name="prefix_cache",
        summary="radix prefix cache over its KV allocator: match, insert, lock, evict, release",
        default="poolfuzz.pools.prefix_cache:build_prefix_cache",
        driver="poolfuzz.harness.kits.prefix_cache.driver:PrefixCacheDriver",
        moves="poolfuzz.harness.kits.prefix_cache.moves:prefix_cache_table",
        audit_period=4,
        bench_config=PrefixCacheConfig(size=64, page_size=4, eviction_policy="lru", device="cpu"),
        canaries=("poolfuzz.harness.kits.prefix_cache.canaries",),
        upstream=("poolfuzz.harness.upstream:RadixCache", "poolfuzz.harness.upstream:RustTreeCore"),
        invariants=(
            "valid-call-accepted",
            "misuse-rejected",
            "empty-pool-guard",
            "reserved-never-handed-out",
            "no-double-allocation",
            "page-layout",
            "cache-accounting",
            "lock-balance",
            "evict-spares-locked",
            "eviction-order",
            "match-returns-inserted",
            "kv-accounting",
        ),
        realistic=(("size", pages(4)), *((Ops.at(op, "prompt"), 1) for op in (Ops.request, Ops.insert, Ops.match, Ops.lock))),
        protocol="poolfuzz.pools.protocols:PrefixCache",
        device_path=True,
        limits=PrefixCacheConfig.with_args(
            {
                Ops.at(Ops.evict, "num_tokens"): REQUEST,
                Ops.at(Ops.insert_mismatched, "extra"): REQUEST,
                Ops.at(Ops.cache_over, "page_size"): PAGE,
            }
        ),
        ops=Ops,
    ),
)

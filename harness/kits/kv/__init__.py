"""The KV allocator kit: ``token_kv`` (page size 1) and ``paged_kv`` (``PagedTokenToKVPoolAllocator``).

``moves`` (the tables), ``configs`` (pool shapes), ``views``, ``page_moves`` (page-edge moves the
SWA kit shares), ``catalogue`` (misuse and corners), ``model``, ``driver`` (the token allocator),
``paged`` (its paged subclass), ``misuse`` and ``batches`` (malformed calls and their expected
errors), ``page_kernel`` (the extend/decode kernels against the loop reference), ``canaries``.
The pools are :mod:`poolfuzz.pools.kv_allocator` and :mod:`poolfuzz.pools.page_alloc`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import ALLOCATOR_INVARIANTS, Family, pages
from poolfuzz.harness.judge.limits import REQUEST
from poolfuzz.harness.kits.kv.config import PagedKVConfig, TokenKVConfig
from poolfuzz.harness.kits.kv.ops import ONE_TOKEN, PagedKVOps, TokenKVOps

KV_ARGS = {
    TokenKVOps.at(TokenKVOps.alloc, "need_size"): REQUEST,
    TokenKVOps.at(TokenKVOps.free_part, "count"): REQUEST,
    TokenKVOps.at(TokenKVOps.free_segment, "start_page"): REQUEST,
    TokenKVOps.at(TokenKVOps.free_segment, "trim"): REQUEST,
}
KV_INVARIANTS = (*ALLOCATOR_INVARIANTS, "page-layout", "group-window", "clear-restores", "kernel-agreement")

FAMILIES = (
    Family(
        name="token_kv",
        summary="KV token slots, page size 1",
        default="poolfuzz.pools:TokenToKVPoolAllocator",
        driver="poolfuzz.harness.kits.kv.driver:TokenKVDriver",
        moves="poolfuzz.harness.kits.kv.moves:token_kv_table",
        bench_config=TokenKVConfig(size=64, device="cpu"),
        canaries=("poolfuzz.harness.kits.kv.canaries",),
        upstream=("poolfuzz.harness.upstream:TokenKV",),
        invariants=KV_INVARIANTS,
        realistic=(("size", 16), (TokenKVOps.at(TokenKVOps.alloc, "need_size"), 1)),
        protocol="poolfuzz.pools.protocols:TokenKVAllocator",
        device_path=True,
        limits=TokenKVConfig.with_args(KV_ARGS),
        ops=TokenKVOps,
    ),
    Family(
        name="paged_kv",
        summary="paged KV allocator: alloc, free groups, extend, decode",
        default="poolfuzz.pools:PagedTokenToKVPoolAllocator",
        driver="poolfuzz.harness.kits.kv.paged:PagedKVDriver",
        moves="poolfuzz.harness.kits.kv.moves:paged_kv_table",
        bench_config=PagedKVConfig(size=256, page_size=4, device="cpu"),
        canaries=("poolfuzz.harness.kits.kv.canaries",),
        upstream=("poolfuzz.harness.upstream:PagedKV",),
        known_findings="poolfuzz.harness.kits.kv.contracts.paged_kv:KNOWN_FINDINGS",
        invariants=KV_INVARIANTS,
        realistic=(("size", pages(4)), *ONE_TOKEN),
        protocol="poolfuzz.pools.protocols:PagedKVAllocator",
        device_path=True,
        optional_imports=("triton",),
        rate_target=4_000,
        limits=PagedKVConfig.with_args({**KV_ARGS, PagedKVOps.at(PagedKVOps.extend, "batch", "[*][1]"): REQUEST}),
        ops=PagedKVOps,
    ),
)

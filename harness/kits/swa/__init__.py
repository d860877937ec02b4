"""The sliding-window kit: ``swa_kv`` (full and SWA pools in step) and ``pure_swa_kv`` (SWA only).

``moves`` (the tables), ``random_moves`` and ``pure_moves`` (each family's random moves),
``catalogue``, ``views``, ``model`` (both sides and their mapping), ``driver``, ``pure`` (the
pure variant's driver), ``contract`` (which frees are allowed, with upstream's evidence),
``batches``, ``checks`` and ``misuse``, ``canaries``.  It builds on the KV kit's driver and
page moves.  The pools are :mod:`poolfuzz.pools.swa`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import ALLOCATOR_INVARIANTS, Family, pages
from poolfuzz.harness.judge.limits import REQUEST
from poolfuzz.harness.kits.kv import KV_ARGS
from poolfuzz.harness.kits.kv.ops import ONE_TOKEN
from poolfuzz.harness.kits.swa.config import PureSWAKVConfig, SWAKVConfig
from poolfuzz.harness.kits.swa.ops import PureSWAKVOps, SWAKVOps

SWA_INVARIANTS = (*ALLOCATOR_INVARIANTS, "page-layout", "group-window", "clear-restores", "swa-mapping")

FAMILIES = (
    Family(name="swa_kv",
           summary="full and sliding-window KV in step: alloc, extend, SWA tail, decode, free_swa, groups",
           default="poolfuzz.pools:SWATokenToKVPoolAllocator", driver="poolfuzz.harness.kits.swa.driver:SWAKVDriver",
           moves="poolfuzz.harness.kits.swa.moves:swa_kv_table",
           bench_config=SWAKVConfig(size=256, size_swa=96, page_size=4, device="cpu"),
           canaries=("poolfuzz.harness.kits.swa.canaries",), upstream=("poolfuzz.harness.upstream:SWAKV",),
           known_findings="poolfuzz.harness.kits.swa.contracts.swa_kv:KNOWN_FINDINGS",
           invariants=(*ALLOCATOR_INVARIANTS, "in-bounds", "page-layout", "group-window", "clear-restores",
                       "swa-mapping"),
           realistic=(("size", pages(2)), ("size_swa", pages(1)), *ONE_TOKEN, (SWAKVOps.at(SWAKVOps.tail, "extend_len"), 1)),
           protocol="poolfuzz.pools.protocols:SWAKVAllocator", device_path=True,
           limits=SWAKVConfig.with_args(
               {SWAKVOps.at(SWAKVOps.alloc, "need_size"): REQUEST, SWAKVOps.at(SWAKVOps.alloc_non_int, "need_size"): REQUEST,
                SWAKVOps.at(SWAKVOps.extend, "batch", "[*][1]"): REQUEST, SWAKVOps.at(SWAKVOps.tail, "extend_len"): REQUEST,
                SWAKVOps.at(SWAKVOps.tail, "swa_tail_len"): REQUEST, SWAKVOps.at(SWAKVOps.free_swa, "pages"): REQUEST}),
           ops=SWAKVOps),
    Family(name="pure_swa_kv", summary="sliding-window KV only: one token pool, identity mapping, padding dropped",
           default="poolfuzz.pools:PureSWATokenToKVPoolAllocator", driver="poolfuzz.harness.kits.swa.pure:PureSWAKVDriver",
           moves="poolfuzz.harness.kits.swa.moves:pure_swa_kv_table",
           bench_config=PureSWAKVConfig(size_swa=64, device="cpu"), upstream=("poolfuzz.harness.upstream:PureSWAKV",),
           invariants=SWA_INVARIANTS,
           realistic=(("size_swa", pages(2)), (PureSWAKVOps.at(PureSWAKVOps.alloc, "need_size"), 1)),
           protocol="poolfuzz.pools.protocols:SWAKVAllocator",
           limits=PureSWAKVConfig.with_args(KV_ARGS), ops=PureSWAKVOps),
)

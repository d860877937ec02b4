"""Production pool implementations with SGLang 0.5.23 semantics and its latent hazards fixed.

Nothing here imports hypothesis or the harness: these are the classes under test.

The names below load on first use (PEP 562), so ``poolfuzz.pools.errors`` (which the harness's coordinator
needs to name a contract breach) costs no torch import: ``poolfuzz fuzz``'s parent process only coordinates
its workers and stays free of torch, which takes about two seconds to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {
    # errors: standard library only
    "AlreadyCachedError": "errors",
    "BadBatchError": "errors",
    "BadSizeError": "errors",
    "BlockStateError": "errors",
    "DoubleFreeError": "errors",
    "ForeignIndexError": "errors",
    "GroupStateError": "errors",
    "InsufficientBlocksError": "errors",
    "KernelUnavailableError": "errors",
    "KeyValueMismatchError": "errors",
    "LockStateError": "errors",
    "PoolError": "errors",
    "ReservedIndexError": "errors",
    "TreeInvariantError": "errors",
    "TreeNodeError": "errors",
    "UnknownEvictionPolicyError": "errors",
    "UnknownKernelError": "errors",
    # the pools
    "BlockPool": "block_pool",
    "DecodeReqToTokenPool": "req_to_token",
    "FreeKVCacheBlockQueue": "block_pool",
    "HybridReqToTokenPool": "mamba",
    "KVCacheBlock": "block_pool",
    "MambaPool": "mamba",
    "MambaSlotAllocator": "mamba",
    "MatchResult": "radix_cache",
    "PagedTokenToKVPoolAllocator": "kv_allocator",
    "PureSWATokenToKVPoolAllocator": "swa",
    "RadixCache": "radix_cache",
    "Req": "req_to_token",
    "ReqToTokenPool": "req_to_token",
    "RequestCacheResult": "radix_cache",
    "SWATokenToKVPoolAllocator": "swa",
    "TokenToKVPoolAllocator": "kv_allocator",
    "TreeNode": "radix_cache",
}
"""Each public name and the module of this package that defines it."""

__all__ = [
    "AlreadyCachedError",
    "BadBatchError",
    "BadSizeError",
    "BlockPool",
    "BlockStateError",
    "DecodeReqToTokenPool",
    "DoubleFreeError",
    "ForeignIndexError",
    "FreeKVCacheBlockQueue",
    "GroupStateError",
    "HybridReqToTokenPool",
    "InsufficientBlocksError",
    "KVCacheBlock",
    "KernelUnavailableError",
    "KeyValueMismatchError",
    "LockStateError",
    "MambaPool",
    "MambaSlotAllocator",
    "MatchResult",
    "PagedTokenToKVPoolAllocator",
    "PoolError",
    "PureSWATokenToKVPoolAllocator",
    "RadixCache",
    "Req",
    "ReqToTokenPool",
    "RequestCacheResult",
    "ReservedIndexError",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
    "TreeInvariantError",
    "TreeNode",
    "TreeNodeError",
    "UnknownEvictionPolicyError",
    "UnknownKernelError",
]
assert sorted(_WHERE) == __all__


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: later lookups are plain module attributes
    return value


if TYPE_CHECKING:
    from poolfuzz.pools.block_pool import BlockPool, FreeKVCacheBlockQueue, KVCacheBlock
    from poolfuzz.pools.errors import (
        AlreadyCachedError,
        BadBatchError,
        BadSizeError,
        BlockStateError,
        DoubleFreeError,
        ForeignIndexError,
        GroupStateError,
        InsufficientBlocksError,
        KernelUnavailableError,
        KeyValueMismatchError,
        LockStateError,
        PoolError,
        ReservedIndexError,
        TreeInvariantError,
        TreeNodeError,
        UnknownEvictionPolicyError,
        UnknownKernelError,
    )
    from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from poolfuzz.pools.mamba import HybridReqToTokenPool, MambaPool, MambaSlotAllocator
    from poolfuzz.pools.radix_cache import MatchResult, RadixCache, RequestCacheResult, TreeNode
    from poolfuzz.pools.req_to_token import DecodeReqToTokenPool, Req, ReqToTokenPool
    from poolfuzz.pools.swa import PureSWATokenToKVPoolAllocator, SWATokenToKVPoolAllocator

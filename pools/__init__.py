"""Production pool implementations with SGLang 0.5.23 semantics and its latent hazards fixed.

Nothing here imports hypothesis or the harness: these are the classes under test.
"""

from poolfuzz.pools.errors import (
    BadBatchError,
    BadSizeError,
    DoubleFreeError,
    ForeignIndexError,
    GroupStateError,
    KernelUnavailableError,
    PoolError,
    ReservedIndexError,
    UnknownKernelError,
)
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.mamba import HybridReqToTokenPool, MambaPool, MambaSlotAllocator
from poolfuzz.pools.req_to_token import DecodeReqToTokenPool, Req, ReqToTokenPool

__all__ = [
    "BadBatchError",
    "BadSizeError",
    "DecodeReqToTokenPool",
    "DoubleFreeError",
    "ForeignIndexError",
    "GroupStateError",
    "HybridReqToTokenPool",
    "MambaPool",
    "MambaSlotAllocator",
    "PagedTokenToKVPoolAllocator",
    "PoolError",
    "Req",
    "ReqToTokenPool",
    "ReservedIndexError",
    "TokenToKVPoolAllocator",
    "KernelUnavailableError",
    "UnknownKernelError",
]

from poolfuzz.pools.block_pool import BlockPool, FreeKVCacheBlockQueue, KVCacheBlock
from poolfuzz.pools.errors import BlockStateError, InsufficientBlocksError

__all__ += ["BlockPool", "BlockStateError", "FreeKVCacheBlockQueue", "InsufficientBlocksError", "KVCacheBlock"]

from poolfuzz.pools.errors import (  # noqa: E402
    AlreadyCachedError,
    KeyValueMismatchError,
    LockStateError,
    TreeInvariantError,
    TreeNodeError,
    UnknownEvictionPolicyError,
)
from poolfuzz.pools.radix_cache import MatchResult, RadixCache, RequestCacheResult, TreeNode  # noqa: E402

__all__ += [
    "AlreadyCachedError",
    "KeyValueMismatchError",
    "LockStateError",
    "MatchResult",
    "RadixCache",
    "RequestCacheResult",
    "TreeInvariantError",
    "TreeNode",
    "TreeNodeError",
    "UnknownEvictionPolicyError",
]

from poolfuzz.pools.swa import PureSWATokenToKVPoolAllocator, SWATokenToKVPoolAllocator  # noqa: E402

__all__ += ["PureSWATokenToKVPoolAllocator", "SWATokenToKVPoolAllocator"]

"""One config, one prefix cache: the KV allocator and the :class:`~poolfuzz.pools.radix_cache.RadixCache` over it.

SGLang builds its ``token_to_kv_pool_allocator`` and the tree cache from the same
server arguments; :func:`build_prefix_cache` does the same from ``size``,
``page_size`` and ``eviction_policy``, so the ``prefix_cache`` family (and any
substitute target) is constructed from one plain config.  The allocator is the
cache's ``allocator`` attribute: a scheduler takes a request's uncached tail
from it and the cache frees evicted leaves through it.
"""

from __future__ import annotations

import torch

from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.radix_cache import RadixCache

KVAllocator = TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator


def kv_allocator_for(size: int, page_size: int, device: str | torch.device = "cpu") -> KVAllocator:
    """``size`` KV token slots: the token allocator at page size 1, the paged one above, as upstream picks."""
    if page_size == 1:
        return TokenToKVPoolAllocator(size, device)
    return PagedTokenToKVPoolAllocator(size, page_size, device)


def build_prefix_cache(size: int, page_size: int, eviction_policy: str = "lru", device: str | torch.device = "cpu") -> RadixCache:
    """A radix cache over a fresh ``size``-slot KV allocator; the allocator is ``cache.allocator``."""
    return RadixCache(kv_allocator_for(size, page_size, device), eviction_policy=eviction_policy)

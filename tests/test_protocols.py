"""Every pool in :mod:`pools` satisfies the protocol of its family."""

from __future__ import annotations

import pytest

from poolfuzz.pools import (
    DecodeReqToTokenPool,
    HybridReqToTokenPool,
    MambaSlotAllocator,
    PagedTokenToKVPoolAllocator,
    ReqToTokenPool,
    TokenToKVPoolAllocator,
)
from poolfuzz.pools.protocols import HybridRowPool, MambaSlotPool, PagedKVAllocator, RequestRowPool, TokenKVAllocator


@pytest.mark.parametrize(
    ("pool", "protocol"),
    [
        (ReqToTokenPool(2, 4), RequestRowPool),
        (DecodeReqToTokenPool(2, 4, pre_alloc_size=1), RequestRowPool),
        (HybridReqToTokenPool(2, 4, 2), HybridRowPool),
        (MambaSlotAllocator(2), MambaSlotPool),
        (TokenToKVPoolAllocator(4), TokenKVAllocator),
        (PagedTokenToKVPoolAllocator(8, 4), PagedKVAllocator),
    ],
    ids=lambda v: getattr(v, "__name__", type(v).__name__),
)
def test_each_pool_satisfies_its_family_protocol(pool: object, protocol: type) -> None:
    assert isinstance(pool, protocol)

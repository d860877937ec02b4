"""The prefix cache family's configuration: a radix cache over a paged KV allocator of ``size`` tokens."""

from __future__ import annotations

from dataclasses import dataclass

from poolfuzz.harness.judge.config import PoolConfig, bounded, setting
from poolfuzz.harness.judge.limits import PAGE, TOKENS


@dataclass(frozen=True, kw_only=True)
class PrefixCacheConfig(PoolConfig):
    """``build_prefix_cache``: ``size`` KV tokens in pages of ``page_size``, evicted by ``eviction_policy``."""

    family = "prefix_cache"

    size: int = bounded(0, TOKENS)
    page_size: int = bounded(1, PAGE)
    eviction_policy: str = setting("lru")

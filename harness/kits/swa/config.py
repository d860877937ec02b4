"""The sliding-window families' configurations: full and SWA pools in step, and the SWA-only pool."""

from __future__ import annotations

from dataclasses import dataclass

from poolfuzz.harness.judge.config import PoolConfig, bounded, setting
from poolfuzz.harness.judge.limits import PAGE, TOKENS
from poolfuzz.harness.kits.kv.config import PagedKVConfig


@dataclass(frozen=True, kw_only=True)
class SWAKVConfig(PagedKVConfig):
    """``SWATokenToKVPoolAllocator``: ``size`` full-attention tokens and ``size_swa`` sliding-window tokens."""

    family = "swa_kv"

    size_swa: int = bounded(0, TOKENS)


@dataclass(frozen=True, kw_only=True)
class PureSWAKVConfig(PoolConfig):
    """``PureSWATokenToKVPoolAllocator``: one pool of ``size_swa`` tokens, pages of ``page_size``."""

    family = "pure_swa_kv"

    size_swa: int = bounded(0, TOKENS)
    page_size: int = bounded(1, PAGE, default=1)
    need_sort: bool = setting(False)

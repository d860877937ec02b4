"""The KV allocators' configurations: token slots (page size 1) and pages (the SWA kit's build on these)."""

from __future__ import annotations

from dataclasses import dataclass

from poolfuzz.harness.judge.config import PoolConfig, bounded, setting
from poolfuzz.harness.judge.limits import PAGE, TOKENS


@dataclass(frozen=True, kw_only=True)
class TokenKVConfig(PoolConfig):
    """``TokenToKVPoolAllocator``: ``size`` token slots (slot 0 the padding slot); ``need_sort`` merges frees
    back in order."""

    family = "token_kv"

    size: int = bounded(0, TOKENS)
    need_sort: bool = setting(False)


@dataclass(frozen=True, kw_only=True)
class PagedKVConfig(TokenKVConfig):
    """``PagedTokenToKVPoolAllocator``: ``size`` tokens in pages of ``page_size``, its page kernel ``kernel``,
    and ``check_layout`` (``None``: the pool decides, on for CPU tensors)."""

    family = "paged_kv"

    page_size: int = bounded(1, PAGE)
    kernel: str = setting("vectorized")
    check_layout: bool | None = setting(None)

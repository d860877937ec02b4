"""The scheduler family's configuration: the pools one server builds, sized together."""

from __future__ import annotations

from dataclasses import dataclass

from poolfuzz.harness.judge.config import PoolConfig, bounded, setting
from poolfuzz.harness.judge.limits import CELLS, CONTEXT, PAGE, ROWS, TOKENS, Footprint


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig(PoolConfig):
    """``build_scheduler_pools``: ``size`` request rows of ``max_context_len``, ``kv_pages`` KV pages of
    ``page_size``; ``hybrid`` adds ``mamba_size`` Mamba slots, ``prefix_cache`` a radix cache with
    ``eviction_policy``, ``sliding_window`` an SWA pool of ``swa_pages`` pages."""

    family = "scheduler"
    footprints = (
        Footprint("size x max_context_len", CELLS, lambda n: n("size", 0) * n("max_context_len", 0)),
        Footprint("kv_pages x page_size", TOKENS, lambda n: n("kv_pages", 0) * n("page_size", 1)),
        Footprint("swa_pages x page_size", TOKENS, lambda n: n("swa_pages", 0) * n("page_size", 1)),
    )

    size: int = bounded(0, ROWS)
    max_context_len: int = bounded(1, CONTEXT)
    page_size: int = bounded(1, PAGE)
    kv_pages: int = bounded(0, TOKENS)
    hybrid: bool = setting(False)
    mamba_size: int = bounded(0, ROWS, default=0)
    need_sort: bool = setting(False)
    kernel: str = setting("vectorized")
    prefix_cache: bool = setting(False)
    eviction_policy: str = setting("lru")
    sliding_window: int | None = bounded(0, CONTEXT, nullable=True, default=None)
    swa_pages: int = bounded(0, TOKENS, default=0)

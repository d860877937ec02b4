"""The engine family's configuration: the server shape its target builds (``build_engine``'s keywords).

Which shapes 0.5.23 builds is the loop's own check (:class:`~harness.upstream.engine_config.EngineConfig`,
raised as a ``LimitError`` when the target is built); this class holds the types and the size limits, and
``pools="both"`` (the driver runs upstream's pools and ours side by side), which no single loop is.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.judge.config import PoolConfig, bounded, setting
from harness.judge.limits import CELLS, CONTEXT, PAGE, ROWS, TOKENS, Footprint


@dataclass(frozen=True, kw_only=True)
class EngineTargetConfig(PoolConfig):
    """One server: ``rows`` requests, ``tokens`` KV slots in pages of ``page_size``, contexts of ``context``."""

    family = "engine"
    footprints = (Footprint("rows x context", CELLS, lambda n: n("rows", 0) * n("context", 0)),)

    cache: str = setting("radix")
    page_size: int = bounded(1, PAGE, default=1)
    rows: int = bounded(1, ROWS, default=8)
    tokens: int = bounded(1, TOKENS, default=256)
    context: int = bounded(8, CONTEXT, default=128)
    chunk: int | None = bounded(1, CONTEXT, nullable=True, default=None)
    new_token_ratio: float = setting(0.7)
    pools: str = setting("upstream")
    sliding_window: int | None = bounded(1, CONTEXT, nullable=True, default=None)
    swa_tokens: int = bounded(0, TOKENS, default=0)
    swa_eviction_interval: int = bounded(1, CONTEXT, default=128)
    mamba_slots: int = bounded(0, ROWS, default=0)
    waiting_timeout: bool = setting(False)

"""The server shape of an engine loop: what SGLang 0.5.23's memory configurator would build.

Kept apart from :mod:`harness.upstream.engine` so the strategies and the limits read the shapes
(caches, pools, which combinations 0.5.23 builds) without loading the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.judge.limits import LimitError


class EngineShapeError(LimitError):
    """A server shape 0.5.23 does not build (a combination, or a pool its startup checks refuse).

    A :class:`~harness.judge.limits.LimitError`, so a trace naming one is refused as bad input
    (replay: ``BAD``, exit 2) before any step runs, like a size past the family's limits.
    """

    def __init__(self, problem: str) -> None:
        super().__init__("engine", "config", None, None, f"is not a shape 0.5.23 builds: {problem}")


CACHES = ("radix", "unified-rust", "unified-python")
"""``radix``: the legacy Python ``RadixCache``; ``unified-*``: ``UnifiedRadixCache`` over a tree core."""
POOLS = ("upstream", "poolfuzz")
"""Whose ``ReqToTokenPool`` and KV allocator the loop runs: upstream's, or ours behind upstream's interface."""

EOS = 2
"""The token id every engine request treats as end of sequence (its ``eos_token_ids``)."""


@dataclass(frozen=True)
class EngineConfig:
    """One server's memory shape: what ``kv_cache_builder.py`` would build for a full-attention model."""

    cache: str = "radix"
    page_size: int = 1
    rows: int = 8
    tokens: int = 256
    context: int = 128
    chunk: int | None = None
    """``chunked_prefill_size``; ``None`` disables chunked prefill."""
    pools: str = "upstream"
    """:data:`POOLS`: ``poolfuzz`` puts ``pools/``'s row pool and KV allocator under the same loop."""
    new_token_ratio: float = 0.7
    """``new_token_ratio_tracker.current``: the share of ``max_new_tokens`` admission reserves for decode."""
    sliding_window: int | None = None
    """A hybrid sliding-window model's window; ``None`` is full attention.  With a window the loop
    builds what ``kv_cache_configurator.py:2874`` builds: ``SWATokenToKVPoolAllocator`` (full and SWA
    pools) under ``UnifiedRadixCache`` with the FULL and SWA components (``registry.py:165-169``)."""
    swa_tokens: int = 0
    """The SWA pool's slots (``swa_max_total_num_tokens``), used with ``sliding_window``."""
    swa_eviction_interval: int = 128
    """``SGLANG_SWA_EVICTION_INTERVAL`` (environ.py, default 128): tokens past the window before
    ``maybe_evict_swa`` frees a request's out-of-window SWA slots (schedule_batch.py:4063-4066)."""
    waiting_timeout: bool = False
    """``SGLANG_REQ_WAITING_TIMEOUT > 0`` (default -1, off): the scheduler aborts a request that waited past the
    timeout (``_poll_timeout_aborts``, scheduler.py:3598-3620).  The loop has no clock; a request left waiting
    on a server where nothing runs waits past any timeout, so with the knob on such an iteration aborts the
    queue head as the timeout would, and the server goes on (the way past finding 5's hang)."""
    mamba_slots: int = 0
    """A hybrid Mamba (linear attention) model's state slots (``max_mamba_cache_size``); 0 is no Mamba.
    With slots the loop builds what ``kv_cache_configurator.py`` builds for a hybrid-SSM model:
    ``HybridReqToTokenPool`` (a ``MambaPool`` of one float32 layer and its ``mamba_allocator``,
    :1700-1753) over ``TokenToKVPoolAllocator`` (:2914-2922), under ``UnifiedRadixCache`` with the FULL
    and MAMBA components (``registry.py:165-169``); see :mod:`harness.upstream.engine_mamba`.  It needs
    ``rows <= mamba_slots // 3`` (``max_running_requests`` is capped so, kv_cache_configurator.py:3134-3150).

    Not built here, with the reason: page size > 1 (``MambaComponent`` asserts page 1 without the extra
    buffer, components/mamba.py:74-79); the extra buffer (``track_mask_cpu.pin_memory()`` at
    schedule_batch.py:3830 raises on a CPU torch); the legacy ``RadixCache`` (no Mamba component; a
    hybrid-SSM server gets UnifiedRadixCache, registry.py:146); poolfuzz's pools (``engine_ours`` has
    no adapter putting ``pools.mamba`` behind the 0.5.23 ``req.kv`` interface).  With ``sliding_window`` too
    it is the model that is both (an Inkling-class hybrid): ``HybridReqToTokenPool`` (:1593-1597) under
    ``SWATokenToKVPoolAllocator`` (:2874-2884) and a FULL + SWA + MAMBA tree, as 0.5.23's default
    (non-unified) memory path builds it; it loads and runs on CPU."""

    @property
    def hybrid_swa(self) -> bool:
        return self.sliding_window is not None

    @property
    def hybrid_ssm(self) -> bool:
        """A hybrid Mamba shape (``is_hybrid_ssm`` in the scheduler, scheduler.py:605)."""
        return self.mamba_slots > 0

    def __post_init__(self) -> None:
        if self.cache not in CACHES:
            raise EngineShapeError(f"cache must be one of {CACHES}, not {self.cache!r}")
        if self.pools not in POOLS:
            raise EngineShapeError(f"pools must be one of {POOLS}, not {self.pools!r}")
        if self.page_size < 1 or self.tokens % self.page_size:
            raise EngineShapeError(f"tokens ({self.tokens}) must be a positive multiple of page_size ({self.page_size})")
        if self.sliding_window is not None:
            if self.cache == "radix" or self.pools != "upstream":
                raise EngineShapeError(
                    "a sliding window runs on UnifiedRadixCache over upstream's SWA allocator only "
                    "(the legacy RadixCache has no SWA component; pools/ has no 0.5.23-interface SWA allocator)"
                )
            if self.sliding_window < 1 or self.swa_tokens < self.page_size or self.swa_tokens % self.page_size:
                raise EngineShapeError(
                    f"sliding_window ({self.sliding_window}) must be >= 1 and swa_tokens ({self.swa_tokens}) "
                    f"a positive multiple of page_size ({self.page_size})"
                )
            if self.sliding_window + self.page_size >= self.swa_tokens:
                # The server refuses this at startup (validate_swa_pool_size, model_executor/pool_configurator.py:198-216):
                # prefill charges window + page of SWA headroom per request, so no request could ever be admitted.
                raise EngineShapeError(
                    f"SWA pool ({self.swa_tokens} tokens) cannot hold even one request: sliding_window "
                    f"({self.sliding_window}) + page_size ({self.page_size}) must stay below it"
                )
        if self.mamba_slots < 0:
            raise EngineShapeError(f"mamba_slots ({self.mamba_slots}) must be >= 0")
        if self.hybrid_ssm:
            from harness.upstream.engine_mamba import MAMBA_REQUESTS_RATIO

            if self.cache == "radix" or self.pools != "upstream" or self.page_size != 1:
                raise EngineShapeError(
                    "a Mamba shape runs on UnifiedRadixCache over upstream's pools at page size 1 "
                    "(see EngineConfig.mamba_slots for why each other combination does not run)"
                )
            if self.rows > self.mamba_slots // MAMBA_REQUESTS_RATIO:
                raise EngineShapeError(
                    f"rows ({self.rows}) must be at most mamba_slots // {MAMBA_REQUESTS_RATIO} "
                    f"({self.mamba_slots // MAMBA_REQUESTS_RATIO}): kv_cache_configurator.py:3134-3150 caps "
                    "max_running_requests there"
                )

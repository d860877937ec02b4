"""What SGLang 0.5.23's scheduler builds before its loop runs: the pools, the tree cache, the model stand-ins.

:class:`~poolfuzz.harness.upstream.engine.EngineLoop` builds them once, as ``Scheduler.__init__`` does
through ``kv_cache_configurator`` and ``create_tree_cache``: the row pool (hybrid rows with Mamba
slots for a hybrid SSM model), the KV allocator (token, paged or SWA; or ours, for a side-by-side
run) and a ``RadixCache`` or ``UnifiedRadixCache`` over them.  Everything is upstream's own
class, built with the arguments its builders pass.
"""

from __future__ import annotations

from typing import Any

import torch

from poolfuzz.harness.kits.engine.config import EngineTargetConfig
from poolfuzz.harness.upstream.engine_hicache import init_hicache, kv_pool
from poolfuzz.harness.upstream.sglang_modules import EngineModules

__all__ = ["ModelConfigStandIn", "NoSpeculation", "build_pools", "tree_cache"]


class ModelConfigStandIn:
    """The ``ModelConfig`` fields ``ScheduleBatch`` reads for a decoder-only text model."""

    vocab_size = 32000
    is_encoder_decoder = False
    is_multimodal = False
    is_hybrid_swa = False
    attention_chunk_size = None
    self_opened_think_start_ids = None
    """No reasoning parser: ``_maybe_update_reasoning_tokens`` (batch_result_processor.py:1502) counts nothing."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the engine target's model config has no {name!r} (ScheduleBatch read it)")


class NoSpeculation:
    """``SpeculativeAlgorithm.NONE`` as the batch asks it (``spec_algorithm.is_none()`` and peers)."""

    def is_none(self) -> bool:
        return True

    def carries_draft_hidden_states(self) -> bool:
        """``init_disaggregation`` sizes the PD metadata's hidden states by it (scheduler.py:1540); no draft, none."""
        return False

    def build_disagg_draft_input(self, batch: Any, last_tokens: Any, future_map: Any) -> None:
        """A PD decode server's prebuilt batch carries no draft input without speculation (spec_info.py:202-230)."""
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("is_"):
            return lambda: False
        raise AttributeError(name)


def build_pools(m: EngineModules, config: EngineTargetConfig) -> tuple[Any, Any]:
    """The row pool and KV allocator ``kv_cache_configurator.py:2850-2890`` builds for this shape."""
    upstream_allocator = m.token.TokenToKVPoolAllocator if config.page_size == 1 else m.paged.PagedTokenToKVPoolAllocator
    if config.pools == "poolfuzz":
        from poolfuzz.harness.upstream.engine_ours import OurReqToTokenPool, our_allocator

        return OurReqToTokenPool(config.rows, config.context, "cpu"), our_allocator(upstream_allocator, config.tokens, config.page_size)
    if config.hybrid_ssm:
        from poolfuzz.harness.upstream.engine_mamba import hybrid_req_to_token_pool

        rows = hybrid_req_to_token_pool(m, rows=config.rows, context=config.context, mamba_slots=config.mamba_slots)
    else:
        rows = m.memory_pool.ReqToTokenPool(size=config.rows, max_context_len=config.context, device="cpu", enable_memory_saver=False)
    if config.hybrid_swa:
        from poolfuzz.harness.upstream.engine_swa import swa_kv_layout

        swa = m.modules["swa_allocator"]
        allocator = swa.SWATokenToKVPoolAllocator(
            config.tokens,
            config.swa_tokens,
            page_size=config.page_size,
            dtype=torch.float16,
            device="cpu",
            kvcache=swa_kv_layout(m),
            need_sort=False,
            req_to_token_pool=rows,
        )
    else:
        # HiCache's host pool mirrors the device KV pool's buffers, and a PD server registers them with its transfer backend
        # (_init_kv_manager, disaggregation/prefill.py:292), so these shapes get a real one (engine_hicache.kv_pool)
        real_kv = config.hicache or config.disaggregation
        kvcache = kv_pool(m, config.tokens, config.page_size) if real_kv else None
        if config.page_size == 1:
            allocator = upstream_allocator(config.tokens, torch.float16, "cpu", kvcache, False)
        else:
            allocator = upstream_allocator(config.tokens, config.page_size, torch.float16, "cpu", kvcache, False)
    return rows, allocator


def tree_cache(m: EngineModules, config: EngineTargetConfig, rows: Any, allocator: Any) -> Any:
    """The tree cache ``create_tree_cache`` (registry.py) builds over ``rows`` and ``allocator``: a ``RadixCache``,
    or a ``UnifiedRadixCache`` with FULL, plus SWA for hybrid SWA, plus MAMBA for hybrid SSM (registry.py:165-169)."""
    params = m.cache_init_params.CacheInitParams(
        disable=False,
        req_to_token_pool=rows,
        token_to_kv_pool_allocator=allocator,
        page_size=config.page_size,
        chunked_prefill_size=config.chunk,
        sliding_window_size=config.sliding_window,
        **_core_params(m, config),
    )
    if config.cache == "radix":
        return m.radix_cache.RadixCache(params)
    cache = m.unified_radix_cache.UnifiedRadixCache(params)
    if config.hicache:
        init_hicache(cache, params, config.hicache)  # registry.py:196-200, --enable-hierarchical-cache
    return cache


def _core_params(m: EngineModules, config: EngineTargetConfig) -> dict[str, Any]:
    if config.cache == "radix":
        return {}
    kinds = m.component_type.ComponentType
    # create_unified_radix_cache (registry.py:165-169): FULL, plus SWA for hybrid SWA, plus MAMBA for hybrid SSM.
    components = (kinds.FULL, *((kinds.SWA,) if config.hybrid_swa else ()), *((kinds.MAMBA,) if config.hybrid_ssm else ()))
    core = {"tree_components": components, "tree_core_backend": config.cache.removeprefix("unified-")}
    # --enable-session-radix-cache, passed as kv_cache_builder.py:412 passes it
    return {**core, "enable_session_radix_cache": True} if config.session_radix_cache else core

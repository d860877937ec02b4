"""The row pool a hybrid Mamba (linear attention) engine loop runs: 0.5.23's ``HybridReqToTokenPool``.

Built as ``kv_cache_configurator.py`` builds it for a hybrid-SSM model on the default (non-unified)
memory path: ``_build_req_to_token_pool`` picks ``_build_hybrid_req_pool`` for a ``mambaish_config``
(:1593-1597), which constructs ``HybridReqToTokenPool`` (:1718-1753) with a ``MambaPool`` of
``max_mamba_cache_size`` slots and a ``MambaSlotAllocator`` (memory_pool.py:1426-1466).  The KV side is the
plain ``TokenToKVPoolAllocator`` at page size 1 (kv_cache_configurator.py:2914-2922); the state tensors
(``cache_params``) are the smallest a Mamba2 layer has: one layer, one head of one dimension, a state of
one, a conv kernel of two, float32 on CPU.  Nothing here moves state data: the pool's tensors exist
because upstream's constructor allocates them, and its COW/clear paths write them as upstream does.

What 0.5.23 does not run here, and why:

* the **extra buffer** (``mamba_radix_cache_strategy=extra_buffer``, ping-pong tracking slots):
  ``prepare_for_decode`` pins ``track_mask_cpu`` without the ``is_pin_memory_available`` guard
  (schedule_batch.py:3830), which raises RuntimeError on a CPU torch; without it ``MambaComponent``
  requires page size 1 (components/mamba.py:74-79), so every Mamba shape is page 1;
* the **legacy** ``RadixCache`` has no Mamba component: a hybrid-SSM server always gets
  ``UnifiedRadixCache`` with FULL and MAMBA (registry.py:146, :165-169);
* **poolfuzz's pools**: :mod:`poolfuzz.harness.upstream.engine_ours` has no adapter putting ``poolfuzz.pools.mamba`` behind the
  0.5.23 interface (slots in ``req.kv`` records).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from poolfuzz.harness.kits.engine.config import MAMBA_REQUESTS_RATIO
from poolfuzz.harness.upstream.sglang_modules import EngineModules

MAMBA_LAYER_IDS = (0,)
"""One Mamba layer (``_get_mamba_layer_ids_for_req_pool``, kv_cache_configurator.py:1603-1610, on one rank)."""


def mamba_cache_params(modules: EngineModules) -> Any:
    """The real ``Mamba2CacheParams`` (configs/mamba_utils.py:294) of the smallest Mamba2 layer.

    As a hybrid model's config builds it (e.g. ``FalconH1Config.mamba2_cache_params``, configs/falcon_h1.py:301-315):
    ``Mamba2StateShape.create`` (mamba_utils.py:194-243) at one attention-TP rank, then the params over the
    Mamba layer ids.  The dtype is float32 for both states (what ``SGLANG_MAMBA_CONV_DTYPE=float32`` and
    the default SSM dtype give, mamba_utils.py:47-107).
    """
    from poolfuzz.harness.upstream.sglang_modules import active

    with active(modules):
        mu = importlib.import_module("sglang.srt.configs.mamba_utils")
        shape = mu.Mamba2StateShape.create(
            tp_world_size=1, intermediate_size=1, n_groups=1, num_heads=1, head_dim=1, state_size=1, conv_kernel=2
        )
        dtype = mu.Mamba2StateDType(conv=torch.float32, temporal=torch.float32)
        return mu.Mamba2CacheParams(shape=shape, layers=list(MAMBA_LAYER_IDS), dtype=dtype)


def hybrid_req_to_token_pool(modules: EngineModules, *, rows: int, context: int, mamba_slots: int) -> Any:
    """``HybridReqToTokenPool`` as ``_build_hybrid_req_pool`` (kv_cache_configurator.py:1700-1753) builds it.

    ``size`` and ``mamba_spec_state_size`` are ``max_num_reqs``; ``mamba_size`` is ``max_mamba_cache_size``;
    no speculative decoding (``speculative_num_draft_tokens=None``, ``speculative_eagle_topk=None``), no
    extra buffer, no ReplaySSM, no envelope layout, no PLE side states (``_get_ple_req_pool_kwargs`` is
    empty for a model that is not Qwen4-Exp, :1612-1616), and no overlap schedule (the engine loop is
    ``event_loop_normal``), which only sizes the ping-pong buffer the extra buffer would use.
    """
    return modules.memory_pool.HybridReqToTokenPool(
        size=rows,
        mamba_size=mamba_slots,
        mamba_spec_state_size=rows,
        max_context_len=context,
        device="cpu",
        enable_memory_saver=False,
        cache_params=mamba_cache_params(modules),
        mamba_layer_ids=list(MAMBA_LAYER_IDS),
        enable_mamba_extra_buffer=False,
        enable_mamba_extra_buffer_lazy=False,
        speculative_num_draft_tokens=None,
        speculative_eagle_topk=None,
        enable_overlap_schedule=False,
        start_layer=0,
    )


__all__ = ["MAMBA_LAYER_IDS", "MAMBA_REQUESTS_RATIO", "hybrid_req_to_token_pool", "mamba_cache_params"]

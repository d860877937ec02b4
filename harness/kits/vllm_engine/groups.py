"""The ``KVCacheConfig`` of one ``vllm_engine`` shape, and the block sizes vLLM's engine core resolves from it.

Every group is one of vLLM 0.33.0's own specs (v1/kv_cache_interface.py): ``FullAttentionSpec`` (:619),
``SlidingWindowSpec`` (:901), ``ChunkedLocalAttentionSpec`` (:861) and ``MambaSpec`` (:1094), each in a
``KVCacheGroupSpec`` (:1505), all over one block pool (``KVCacheConfig.num_blocks``, :1526) with one
``KVCacheTensor`` (:1475) per group naming its layer.  vLLM's own builder (``kv_cache_planning.get_kv_cache_configs``,
``kv_cache_config_builder.py``) does not load here: it imports ``vllm.config.SpeculativeConfig`` (pydantic,
transformers) and ``vllm.utils.mem_utils``, and sizes ``num_blocks`` from GPU memory; so the config is put together
from those classes by hand, as the builder's output for a model with these layers would read.

The block sizes are vLLM's: ``resolve_kv_cache_block_sizes`` (kv_cache_utils.py:816-918), called as
``EngineCore._initialize_kv_caches`` (v1/engine/core.py:356-369) and ``EngineCore.__init__`` (:176-188) call it:
the scheduler's block size is the LCM of the groups' (a ``none``-mode Mamba group's block is ``max_model_len``),
and the hash block size is what ``Request.block_hashes`` is computed at.

:func:`check_groups` judges the groups' tables over the one pool, after every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig

HEAD = {"num_kv_heads": 1, "head_size": 8}
"""One tiny head per attention layer: the scheduler reads only block counts; page bytes size the tensors below."""


def kv_cache_config(config: VllmEngineConfig, interface: Any) -> Any:
    """``KVCacheConfig``: one group per kind of layer in :meth:`VllmEngineConfig.group_kinds`, over one block pool.

    The Mamba spec is what ``MambaBase.get_kv_cache_spec`` builds (model_executor/layers/mamba/abstract.py:72-90):
    ``block_size`` the ``mamba_block_size``, ``mamba_cache_mode`` the cache config's, one speculative state block per
    draft token (``num_speculative_blocks = num_speculative_tokens``, no ReplaySSM).
    """
    import torch

    attention = {"block_size": config.block_size, "dtype": torch.float16, **HEAD}
    specs: dict[str, Any] = {}
    for kind in config.group_kinds():
        if kind == "full":
            specs["full.0"] = interface.FullAttentionSpec(**attention)
        elif kind == "swa":
            specs["swa.0"] = interface.SlidingWindowSpec(**attention, sliding_window=config.sliding_window)
        elif kind == "local":
            specs["local.0"] = interface.ChunkedLocalAttentionSpec(**attention, attention_chunk_size=config.attention_chunk_size)
        else:
            specs["mamba.0"] = interface.MambaSpec(
                block_size=config.mamba_block_size,
                shapes=((2, 4),),
                dtypes=(torch.float16,),
                mamba_cache_mode=config.mamba_cache_mode,
                num_speculative_blocks=config.num_speculative_tokens,
            )
    groups = [interface.KVCacheGroupSpec([layer], spec) for layer, spec in specs.items()]
    tensors = [
        interface.KVCacheTensor(
            size=spec.page_size_bytes * config.num_blocks, layers=[layer], layer_stride=0, block_stride=spec.page_size_bytes
        )
        for layer, spec in specs.items()
    ]
    return interface.KVCacheConfig(num_blocks=config.num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)


@dataclass(frozen=True)
class BlockSizes:
    """``(scheduler_block_size, hash_block_size)`` as the engine core resolves them for the scheduler."""

    scheduler: int
    hash: int


def resolve_block_sizes(utils: Any, kv_config: Any, vllm_config: Any) -> BlockSizes:
    """``resolve_kv_cache_block_sizes`` and the two fields the engine core sets from it (core.py:356-369).

    The cache-hit alignment is ``resolve_cache_hit_alignment_tokens``'s where the loaded release has it (0.33.0,
    kv_cache_utils.py:921); an older release's config has neither field and is left as built.
    """
    scheduler_block_size, hash_block_size = utils.resolve_kv_cache_block_sizes(kv_config, vllm_config)
    resolve_alignment = getattr(utils, "resolve_cache_hit_alignment_tokens", None)
    if resolve_alignment is not None:
        kv_config.hash_block_size = hash_block_size
        kv_config.cache_hit_alignment_tokens = resolve_alignment(kv_config, vllm_config, scheduler_block_size, hash_block_size)
    return BlockSizes(int(scheduler_block_size), int(hash_block_size))


def spec_kind(spec: Any) -> str:
    """``full``, ``swa``, ``local`` or ``mamba`` for one group's spec (``FullAttentionSpec`` has the window and chunk
    fields too, ``None``: kv_cache_interface.py:628-632)."""
    if getattr(spec, "sliding_window", None) is not None:
        return "swa"
    if getattr(spec, "attention_chunk_size", None) is not None:
        return "local"
    return "mamba" if hasattr(spec, "mamba_cache_mode") else "full"


def skipped_tokens(spec: Any, computed: int) -> int:
    """Tokens left of what a step starting at ``computed`` still reads in a group, from each layer kind's documented
    semantics (not its manager's code): full attention reads all; a window of ``w`` reads the last ``w - 1`` before
    the step (``SlidingWindowSpec``); chunked local attention reads from the start of the current chunk
    (``ChunkedLocalAttentionSpec``); Mamba reads the one state that holds position ``computed - 1``, in its block."""
    window = getattr(spec, "sliding_window", None)
    if window is not None:
        return max(0, computed - window + 1)
    chunk = getattr(spec, "attention_chunk_size", None)
    if chunk is not None:
        return computed // chunk * chunk
    if hasattr(spec, "mamba_cache_mode"):
        return max(0, computed - 1) // spec.block_size * spec.block_size
    return 0


def check_groups(managers: Sequence[Any]) -> None:
    """Every group's tables over the one shared pool (run after the partition, which sees them concatenated).

    - A block is in one group's tables at a time (``no-double-allocation``): the groups' ``KVCacheTensor``s overlay
      the same bytes, which is sound only "because a block ID is owned by one group at a time"
      (kv_cache_interface.py:1475-1487); no table names one block twice; and two requests share a block only through
      a prefix hit, so a shared block carries a hash (a fresh block from ``get_new_blocks`` is written by its one
      request: block_pool.py's ``get_new_blocks`` hands out only ``ref_cnt == 0`` blocks).
    - A full-attention table never names the null block (``reserved-never-handed-out``): full attention reads every
      earlier token, so no position of it is skipped; only a window, a local chunk or a Mamba state before the last
      is the null block (``get_num_skipped_tokens``, single_type_kv_cache_manager.py:722-733).
    - A ``none``-mode Mamba group holds at most ``1 + num_speculative_blocks`` state blocks per request
      (``scheduler-conservation``): the bound vLLM sizes the pool with (``MambaSpec.max_memory_usage_bytes``,
      kv_cache_interface.py:1131-1137).  Align mode is not bounded here (docs/engine-vllm.md: it holds one more than
      its ``2 + K`` between steps, not yet triaged).
    """
    group_of: dict[int, int] = {}
    for group, manager in enumerate(managers):
        sharers: dict[int, list[str]] = {}
        for rid, blocks in manager.req_to_blocks.items():
            for block in blocks:
                if not block.is_null and block.block_hash is None:
                    sharers.setdefault(block.block_id, []).append(rid)
        shared = {i: rids for i, rids in sharers.items() if len(set(rids)) > 1}
        check(
            not shared,
            "no-double-allocation",
            "a block without a hash is in two requests' tables (only a prefix hit shares a block, and a hit is hashed)",
            group=group,
            blocks=dict(sorted(shared.items())[:8]),
        )
        spec = manager.kv_cache_spec
        full = spec_kind(spec) == "full"
        bound = 1 + spec.num_speculative_blocks if getattr(spec, "mamba_cache_mode", None) == "none" else None
        for rid, blocks in manager.req_to_blocks.items():
            ids = [block.block_id for block in blocks if not block.is_null]
            twice = sorted({i for i in ids if ids.count(i) > 1})
            check(
                not twice, "no-double-allocation", "a request's table in one group names a block twice", request=rid, group=group, ids=twice
            )
            if full:
                check(
                    len(ids) == len(blocks),
                    "reserved-never-handed-out",
                    "a full-attention table names the null block (no position of full attention is skipped)",
                    request=rid,
                    group=group,
                )
            if bound is not None:
                check(
                    len(ids) <= bound,
                    "scheduler-conservation",
                    "a none-mode Mamba group holds more state blocks for a request than MambaSpec sizes the pool for",
                    request=rid,
                    group=group,
                    held=len(ids),
                    bound=bound,
                )
            for i in ids:
                other = group_of.setdefault(i, group)
                check(
                    other == group,
                    "no-double-allocation",
                    "a block is in the tables of two KV cache groups at once (their layers overlay one block)",
                    block=i,
                    groups=(other, group),
                    request=rid,
                )

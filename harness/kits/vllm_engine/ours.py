"""poolfuzz's own block pool (``poolfuzz.pools.block_pool.BlockPool``) behind the interface vLLM 0.33.0's KV cache
coordinator and single-type managers call, so vLLM's real scheduler runs over it (``pools="poolfuzz"``/``"both"``).

Only signatures are bridged; every decision (which block, which order, what is cached) is our pool's:

* ``BlockPool(num_gpu_blocks, enable_caching, hash_block_size, enable_kv_cache_events, metrics_collector,
  num_hash_lookahead_tokens, medium)`` (kv_cache_coordinator.py:120-127): ours takes the first two; events and
  metrics are off on this path (``kv_events_config=None``, ``log_stats=False``), so the rest are recorded and
  must be their off values;
* ``get_cached_block(block_hash, kv_cache_group_ids)`` returns one block per group or ``None``
  (single_type_kv_cache_manager.py:795): ours is asked per group under vLLM's own key, the hash with the group id
  appended (``make_block_hash_with_group_id``, kv_cache_utils.py:60-69);
* ``cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks, block_size, kv_cache_group_id,
  block_mask)`` (:532-540): ours caches ``blocks[i]`` under ``hashes[i]`` over one range, so the request's hashes
  are keyed with the group id and each run of blocks the mask keeps is cached as one range;
* ``take_events`` (kv_cache_manager.py:712), ``emit_cached_block_events`` (kv_cache_coordinator.py:390) and
  ``is_block_writable`` (:1929): no events, and the writable test as vLLM states it.

What ours lacks and is not bridged, because no shape this family drives reaches it: ``cache_partial_block``,
``move_block_hashes`` and ``_maybe_evict_cached_block`` (Mamba align mode and the partial-block prefix cache),
and the ``block.pool`` field vLLM's ``free_blocks`` reads to route deferred frees to other pools (KV connectors).
Reaching one raises ``AttributeError``, a ``valid-call-accepted`` finding naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from poolfuzz.pools.block_pool import BlockPool
from poolfuzz.pools.block_queue import FreeKVCacheBlockQueue, KVCacheBlock

MEDIUM_GPU = "GPU"


class VllmFacingBlock(KVCacheBlock):
    """Our block with the one field vLLM reads that ours does not keep: ``block_hash_num_tokens``, the prefix tokens
    its hash covers (kv_cache_manager.py:780, ``estimate_cached_tokens`` for a finished prefill's stats).  Recorded
    when the adapter caches the block; ``None`` once our pool drops the hash."""

    hash_tokens: int | None = None

    @property
    def block_hash_num_tokens(self) -> int | None:
        return self.hash_tokens if self.block_hash is not None else None


def our_block_pool(make_key: Callable[[bytes, int], bytes]) -> Any:
    """Our ``BlockPool`` with vLLM 0.33.0's coordinator-facing signatures; ``make_key`` is vLLM's
    ``make_block_hash_with_group_id`` (the key its hash map uses)."""

    class VllmFacingBlockPool(BlockPool):
        """``poolfuzz.pools.block_pool.BlockPool`` as vLLM's coordinator constructs and calls it (see the module docstring)."""

        def __init__(
            self,
            num_gpu_blocks: int,
            enable_caching: bool,
            hash_block_size: int,
            enable_kv_cache_events: bool = False,
            metrics_collector: Any = None,
            num_hash_lookahead_tokens: int = 0,
            medium: str = MEDIUM_GPU,
        ) -> None:
            if enable_kv_cache_events or metrics_collector is not None or num_hash_lookahead_tokens:
                raise NotImplementedError("KV cache events, block metrics and hash lookahead are not bridged to poolfuzz.pools.block_pool")
            super().__init__(num_gpu_blocks, enable_caching)
            # The same blocks and queue as BlockPool.__init__ builds, of the block class that answers vLLM's reads.
            self.blocks = [VllmFacingBlock(block_id) for block_id in range(num_gpu_blocks)]
            self.null_block = self.blocks[0]
            self.null_block.is_null = True
            self.free_block_queue = FreeKVCacheBlockQueue(self.blocks[1:])
            self.hash_block_size = hash_block_size
            self.num_hash_lookahead_tokens = num_hash_lookahead_tokens
            self.enable_kv_cache_events = False
            self.metrics_collector = None
            self.medium = medium

        def get_cached_block(self, block_hash: Any, kv_cache_group_ids: Sequence[int]) -> list[KVCacheBlock] | None:  # type: ignore[override]
            found = []
            for group in kv_cache_group_ids:
                block = super().get_cached_block(make_key(block_hash, group))
                if block is None:
                    return None
                found.append(block)
            return found

        def cache_full_blocks(  # type: ignore[override]
            self,
            request: Any,
            blocks: list[KVCacheBlock],
            num_cached_blocks: int,
            num_full_blocks: int,
            block_size: int,
            kv_cache_group_id: int,
            block_mask: list[bool] | None = None,
        ) -> None:
            if num_cached_blocks >= num_full_blocks:
                return
            if block_size != self.hash_block_size:
                raise NotImplementedError("group block sizes other than the hash block size are not bridged")
            keys = [make_key(h, kv_cache_group_id) for h in request.block_hashes[:num_full_blocks]]
            keep = [True] * (num_full_blocks - num_cached_blocks) if block_mask is None else list(block_mask)
            start = None
            for i, kept in enumerate([*keep, False]):
                position = num_cached_blocks + i
                if kept and start is None:
                    start = position
                elif not kept and start is not None:
                    super().cache_full_blocks(blocks, keys, start, position)
                    for index in range(start, position):
                        block = blocks[index]
                        if isinstance(block, VllmFacingBlock):
                            block.hash_tokens = (index + 1) * block_size
                    start = None

        def take_events(self) -> list[Any]:
            return []

        def emit_cached_block_events(self, request: Any, num_cached_blocks: int, block_size: int, kv_cache_group_id: int) -> None:
            return None

        def is_block_writable(self, block: KVCacheBlock) -> bool:
            return not block.is_null and block.ref_cnt == 1 and block.block_hash is None

    return VllmFacingBlockPool


def put_our_pool(scheduler: Any, make_key: Callable[[bytes, int], bytes]) -> Any:
    """Put our pool in the place of the ``BlockPool`` vLLM's coordinator built for ``scheduler`` (no request held yet):
    the coordinator, the manager and every single-type manager (``block_pool`` and ``_null_block``,
    single_type_kv_cache_manager.py:111, :135) hold it; vLLM's classes are not touched."""
    manager = scheduler.kv_cache_manager
    coordinator = manager.coordinator
    theirs = coordinator.block_pool
    assert theirs.get_num_free_blocks() == theirs.num_gpu_blocks - 1, "the pool is swapped before any request"
    ours: Any = our_block_pool(make_key)(
        theirs.num_gpu_blocks,
        theirs.enable_caching,
        theirs.hash_block_size,
        theirs.enable_kv_cache_events,
        theirs.metrics_collector,
        getattr(theirs, "num_hash_lookahead_tokens", 0),  # 0.31.0/0.32.0's BlockPool has none
        theirs.medium,
    )
    coordinator.block_pool = manager.block_pool = ours
    for single in coordinator.single_type_managers:
        single.block_pool = ours
        single._null_block = ours.null_block
    return ours

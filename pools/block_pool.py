"""A ref-counted KV block pool with vLLM v1 semantics: ``BlockPool``.

Semantics follow vLLM 0.33.0 (``v1/core/block_pool.py``, ``v1/core/kv_cache_utils.py``):

* Blocks ``0..num_gpu_blocks-1`` exist.  Block 0 is the null block, a
  placeholder for skipped positions (sliding-window tables): it is never in the
  free queue, never handed out, its ``ref_cnt`` is not maintained, and
  ``touch`` / ``free_blocks`` / ``cache_full_blocks`` skip it.
* The free queue is a doubly linked list ordered by eviction priority.  A
  non-null block is in it iff ``ref_cnt == 0``.  ``get_new_blocks`` pops from
  the front and drops the hash of a cached block it reuses.
* ``free_blocks(ordered_blocks)`` decrements each block once per occurrence.
  Blocks reaching zero without a hash go to the *front* in call order (reused
  first); hashed blocks go to the *tail* in call order (LRU eviction).  With
  caching off every block goes to the front.
* ``touch`` takes a cached free block off the queue and adds a reference.
* ``unpin_blocks(blocks, on_reuse)`` drops one reference per occurrence and
  appends every block reaching zero to the *tail*, hashed or not (vLLM's
  HiSparse coordinator releases resident pages this way); ``on_reuse(block)``
  fires when ``get_new_blocks`` hands the block out, or on a successful
  ``reset_prefix_cache``.
* ``evict_blocks`` drops hashes and moves nothing: a free block keeps its
  place in the queue (vLLM 0.33.0 ``evict_blocks`` touches neither ``ref_cnt``
  nor the queue).
* Several blocks may be cached under one hash (vLLM never de-duplicates, so a
  request's block ids never change); ``get_cached_block`` returns the one
  cached first.
* ``reset_prefix_cache`` succeeds only when the null block is the sole used block.

Hazards fixed here: upstream ``free_blocks`` decrements without a floor, so a
block freed twice reaches ``ref_cnt == -1`` and is linked into the queue twice
(vLLM #42571, CPU offload with sliding window).  Every call here validates its
whole batch first -- counting a block named twice in one call -- and raises a
typed :class:`~poolfuzz.pools.errors.PoolError` with the pool unchanged.

Deliberate deviations from vLLM 0.33.0:

* ``get_new_blocks`` over capacity raises
  :class:`~poolfuzz.pools.errors.InsufficientBlocksError` (a ``PoolError`` *and* a
  ``ValueError``), not ``None``: vLLM's callers must check the free count
  first, so it is a contract breach.
* A block holds at most one hash (no partial-block entries), and caching an
  already-hashed block, a free block, or anything with caching off raises
  :class:`~poolfuzz.pools.errors.BlockStateError` (upstream asserts or corrupts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from poolfuzz.pools.block_queue import BlockHash, FreeKVCacheBlockQueue, KVCacheBlock
from poolfuzz.pools.errors import BadBatchError, BadSizeError, BlockStateError, DoubleFreeError, ForeignIndexError, InsufficientBlocksError

__all__ = ["BlockHash", "BlockPool", "FreeKVCacheBlockQueue", "KVCacheBlock"]


class BlockPool:
    """Blocks ``1..num_gpu_blocks-1`` handed out by reference count, with a prefix cache.

    Failure tiers: a contract breach raises a :class:`~poolfuzz.pools.errors.PoolError`
    subclass before anything changes (double free, foreign block, touching a
    free uncached block, asking for more blocks than are free);
    ``reset_prefix_cache`` returns ``False`` while blocks are in use.
    """

    pool_name = "BlockPool"

    def __init__(self, num_gpu_blocks: int, enable_caching: bool = True) -> None:
        if isinstance(num_gpu_blocks, bool) or not isinstance(num_gpu_blocks, int) or num_gpu_blocks < 1:
            raise BadSizeError(self.pool_name, "num_gpu_blocks", num_gpu_blocks, "must be an int >= 1 (block 0 is the null block)")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(block_id) for block_id in range(num_gpu_blocks)]
        self.null_block = self.blocks[0]
        self.null_block.is_null = True
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks[1:])
        # hash -> the blocks cached under it, in caching order (the first is the lookup answer).
        self.cached_block_hash_to_block: dict[BlockHash, dict[int, KVCacheBlock]] = {}
        # block id -> the callback of its last unpin_blocks, fired when the block is handed out or the cache reset.
        self._reuse_watchers: dict[int, Callable[[KVCacheBlock], None]] = {}

    # ------------------------------------------------------------------ queries
    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """Fraction of the non-null blocks in use, in ``[0, 1]``."""
        usable = self.num_gpu_blocks - 1
        return 1.0 - self.get_num_free_blocks() / usable if usable else 0.0

    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        """The first block cached under ``block_hash``, or ``None`` on a miss."""
        blocks = self.cached_block_hash_to_block.get(block_hash)
        return next(iter(blocks.values())) if blocks else None

    def free_block_ids(self) -> list[int]:
        """The free queue's block ids, front (reused first) to tail (O(pool))."""
        return [block.block_id for block in self.free_block_queue.get_all_free_blocks()]

    def cached_block_ids(self) -> dict[BlockHash, list[int]]:
        """Hash -> ids of the blocks cached under it, lookup answer first (a copy)."""
        return {h: list(blocks) for h, blocks in self.cached_block_hash_to_block.items()}

    def ref_counts(self) -> list[int]:
        """``ref_cnt`` of every block by id; the null block's entry is always 0."""
        return [block.ref_cnt for block in self.blocks]

    # --------------------------------------------------------------- validation
    def _check_block(self, block: Any, position: int) -> KVCacheBlock:
        if not isinstance(block, KVCacheBlock):
            raise BadBatchError(self.pool_name, f"{block!r} is not a KVCacheBlock", position=position)
        block_id = block.block_id
        if not 0 <= block_id < self.num_gpu_blocks or self.blocks[block_id] is not block:
            raise ForeignIndexError(self.pool_name, [block_id], 0, self.num_gpu_blocks - 1, "block (not of this pool)")
        return block

    def _check_block_id(self, block_id: Any) -> int:
        if isinstance(block_id, bool) or not isinstance(block_id, int):
            raise BadBatchError(self.pool_name, f"block id {block_id!r} is not an int")
        if not 0 <= block_id < self.num_gpu_blocks:
            raise ForeignIndexError(self.pool_name, [block_id], 0, self.num_gpu_blocks - 1, "block id")
        return block_id

    # ---------------------------------------------------------------- mutation
    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take ``num_blocks`` blocks from the queue front, each with ``ref_cnt == 1``.

        A cached block taken here loses its hash.  Asking for more than
        ``get_num_free_blocks()`` raises :class:`InsufficientBlocksError`.
        """
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 0:
            raise BadSizeError(self.pool_name, "num_blocks", num_blocks, "must be an int >= 0")
        if num_blocks > self.get_num_free_blocks():
            raise InsufficientBlocksError(self.pool_name, num_blocks, self.get_num_free_blocks())
        blocks = self.free_block_queue.popleft_n(num_blocks)
        self._notify_reuse(blocks)
        for block in blocks:
            if block._block_hash is not None:
                self._drop_hash(block)
            assert block.ref_cnt == 0, f"free block {block.block_id} has ref_cnt {block.ref_cnt}"
            block.ref_cnt = 1
        return blocks

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Add one reference per occurrence; a cached free block leaves the queue.

        Touching a free block with no hash is refused: nothing could have found
        it, and taking it would bypass ``get_new_blocks``.
        """
        for position, block in enumerate(blocks):
            self._check_block(block, position)
            if block.ref_cnt == 0 and block._block_hash is None and not block.is_null:
                raise BlockStateError(self.pool_name, block.block_id, 0, "touched while free and not cached")
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference per occurrence, first block evicted first.

        A block named more times than it is referenced raises
        :class:`DoubleFreeError` and nothing is freed (vLLM #42571).
        """
        blocks = list(ordered_blocks)
        releases: dict[int, int] = {}
        for position, block in enumerate(blocks):
            self._check_block(block, position)
            if block.is_null:
                continue
            count = releases.get(block.block_id, 0) + 1
            if count > block.ref_cnt:
                raise DoubleFreeError(self.pool_name, [block.block_id], f"block (ref_cnt={block.ref_cnt}, released {count}x)")
            releases[block.block_id] = count
        reuse_first: list[KVCacheBlock] = []
        evict_last: list[KVCacheBlock] = []
        for block in blocks:
            if block.is_null:
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                (reuse_first if block._block_hash is None else evict_last).append(block)
        self.free_block_queue.prepend_n(reuse_first)
        self.free_block_queue.append_n(evict_last)

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int = 0,
        num_full_blocks: int | None = None,
    ) -> None:
        """Cache ``blocks[i]`` under ``block_hashes[i]`` for ``num_cached_blocks <= i < num_full_blocks``.

        ``blocks`` / ``block_hashes`` are a request's whole block table and hash
        list, as in vLLM; ``num_full_blocks`` defaults to ``len(blocks)``.  Null
        blocks in the range are skipped.  Each other block must be held
        (``ref_cnt >= 1``) and not cached yet.
        """
        end = len(blocks) if num_full_blocks is None else num_full_blocks
        for name, value in (("num_cached_blocks", num_cached_blocks), ("num_full_blocks", end)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= len(blocks):
                raise BadSizeError(self.pool_name, name, value, f"must be an int in [0, {len(blocks)}]")
        if num_cached_blocks >= end:
            return
        if len(block_hashes) < end:
            raise BadBatchError(self.pool_name, f"{len(block_hashes)} hashes for {end} full blocks")
        if not self.enable_caching:
            raise BlockStateError(self.pool_name, None, None, "cache_full_blocks with prefix caching disabled")
        seen: set[int] = set()
        for position in range(num_cached_blocks, end):
            block = self._check_block(blocks[position], position)
            block_hash = block_hashes[position]
            if isinstance(block_hash, bool) or not isinstance(block_hash, (int, bytes)):
                raise BadBatchError(self.pool_name, f"block hash {block_hash!r} is not an int or bytes", position=position)
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                raise BlockStateError(self.pool_name, block.block_id, 0, "cached while free")
            if block._block_hash is not None:
                raise BlockStateError(self.pool_name, block.block_id, block.ref_cnt, f"already cached under {block._block_hash!r}")
            if block.block_id in seen:
                raise BadBatchError(self.pool_name, f"block {block.block_id} appears twice", position=position)
            seen.add(block.block_id)
        for position in range(num_cached_blocks, end):
            block = blocks[position]
            if not block.is_null:
                block._block_hash = block_hashes[position]
                self.cached_block_hash_to_block.setdefault(block_hashes[position], {})[block.block_id] = block

    def _drop_hash(self, block: KVCacheBlock) -> None:
        block_hash = block._block_hash
        assert block_hash is not None
        cached = self.cached_block_hash_to_block[block_hash]
        del cached[block.block_id]
        if not cached:
            del self.cached_block_hash_to_block[block_hash]
        block._block_hash = None

    def unpin_blocks(self, blocks: Iterable[KVCacheBlock], on_reuse: Callable[[KVCacheBlock], None]) -> None:
        """Drop one reference per occurrence from blocks that stay readable until reused: every block
        reaching zero joins the queue's tail in call order, hashed or not, and ``on_reuse(block)`` fires
        when ``get_new_blocks`` hands it out (or a reset forgets it).  A block named more times than it
        is referenced, or the null block, raises with nothing changed."""
        blocks = list(blocks)
        releases: dict[int, int] = {}
        for position, block in enumerate(blocks):
            self._check_block(block, position)
            if block.is_null:
                raise BlockStateError(self.pool_name, 0, block.ref_cnt, "the null block is never pinned")
            count = releases.get(block.block_id, 0) + 1
            if count > block.ref_cnt:
                raise DoubleFreeError(self.pool_name, [block.block_id], f"block (ref_cnt={block.ref_cnt}, unpinned {count}x)")
            releases[block.block_id] = count
        released: list[KVCacheBlock] = []
        for block in blocks:
            block.ref_cnt -= 1
            self._reuse_watchers[block.block_id] = on_reuse
            if block.ref_cnt == 0:
                released.append(block)
        self.free_block_queue.append_n(released)

    def _notify_reuse(self, blocks: Iterable[KVCacheBlock]) -> None:
        for block in blocks:
            watcher = self._reuse_watchers.pop(block.block_id, None)
            if watcher is not None:
                watcher(block)

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        """Drop the hashes of the named blocks; ids without a hash are ignored.

        A held block stays held and a free block keeps its place in the queue, as in vLLM.
        """
        ids = [self._check_block_id(block_id) for block_id in block_ids]
        for block_id in ids:
            block = self.blocks[block_id]
            if block._block_hash is not None:
                self._drop_hash(block)

    def reset_prefix_cache(self) -> bool:
        """Forget every hash; refused (``False``, nothing changed) while any non-null block is used."""
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            return False
        for cached in self.cached_block_hash_to_block.values():
            for block in cached.values():
                block._block_hash = None
        self.cached_block_hash_to_block = {}
        self._notify_reuse([self.blocks[block_id] for block_id in list(self._reuse_watchers)])
        return True

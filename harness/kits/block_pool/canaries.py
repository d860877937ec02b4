"""Block-pool canaries: ``BlockPool`` with one ref-count, ordering or cache-map bug put back each.

Each class overrides only the method that carried the bug and keeps the
pool's validation, so misuse is still rejected and the bug shows on valid calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.pools.block_pool import BlockPool, KVCacheBlock
from poolfuzz.pools.errors import BlockStateError


class DuplicateFreeQueuedTwice(BlockPool):
    """A block named twice in one ``free_blocks`` call counts as freed twice (vLLM #42571).

    A sliding-window request can hold one physical block at two table
    positions (each holding a reference); upstream then queued every
    occurrence whose final ``ref_cnt`` was 0, so ``num_free_blocks`` rose by two
    for one block and the scheduler later allocated past the real free list.
    The over-count is kept here without corrupting the links.  Caught by
    ``conservation``: the free count disagrees with the blocks freed.
    """

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        blocks = list(ordered_blocks)
        super().free_blocks(blocks)
        named = Counter(block.block_id for block in blocks if not block.is_null)
        self.free_block_queue.num_free_blocks += sum(count - 1 for block_id, count in named.items() if self.blocks[block_id].ref_cnt == 0)


class HashedFreedToFront(BlockPool):
    """Every block reaching ref 0 goes to the queue front, hashed ones too.

    vLLM's ``free_blocks`` appends cached blocks to the tail so prefix-cache
    entries are evicted least recently used first; at the front they are the
    first reused, and every shared prefix is lost at the next allocation.
    Caught by ``free-queue-order``.
    """

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        blocks = list(ordered_blocks)
        named = Counter(blocks)
        newly_free = [b for b in named if not b.is_null and b.ref_cnt == named[b]]
        hashed = [b for b in newly_free if b.block_hash is not None]
        super().free_blocks(blocks)
        for block in hashed:
            self.free_block_queue.remove(block)
        self.free_block_queue.prepend_n(hashed)


class NullBlockLeftQueued(BlockPool):
    """The null block is counted out of the free blocks but never unlinked from the queue.

    vLLM takes block 0 off the free queue at construction: sliding-window
    tables point skipped positions at it and nothing may own it.  A pool that
    only subtracts it from the count (as a lazily taken null block would) still
    has it at the front, and ``get_new_blocks`` hands it out first.  Caught by
    ``reserved-never-handed-out``.
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool = True) -> None:
        super().__init__(num_gpu_blocks, enable_caching)
        self.free_block_queue.appendleft(self.null_block)
        self.free_block_queue.num_free_blocks -= 1


class TouchLeavesBlockQueued(BlockPool):
    """``touch`` adds the reference but leaves a cached free block in the free queue.

    vLLM's ``touch`` removes a block at ``ref_cnt == 0`` from the queue: a prefix
    hit on an evictable block makes it used again.  Left queued, the block is
    handed to the next allocation while the hitting request reads it.  Caught by
    ``ref-count`` (a block is free iff its count is 0).
    """

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        for position, block in enumerate(blocks):
            self._check_block(block, position)
            if block.ref_cnt == 0 and block.block_hash is None and not block.is_null:
                raise BlockStateError(self.pool_name, block.block_id, 0, "touched while free and not cached")
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1


class ReusedBlockKeepsHash(BlockPool):
    """``get_new_blocks`` reuses a cached free block without evicting its hash (vLLM #4761).

    The block gets new content while the map still names it under the old
    prefix, so a later prefix hit reads another request's KV.  vLLM's
    ``_maybe_evict_cached_block`` exists to prevent exactly this (block manager
    v2 once forgot it when popping from its evictor).  Caught by ``cache-map``.
    """

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        front = self.free_block_queue.get_all_free_blocks()[: max(num_blocks, 0)]
        kept = {block.block_id: block.block_hash for block in front if block.block_hash is not None}
        blocks = super().get_new_blocks(num_blocks)
        for block in blocks:
            block_hash = kept.get(block.block_id)
            if block_hash is not None:
                block._block_hash = block_hash
                self.cached_block_hash_to_block.setdefault(block_hash, {})[block.block_id] = block
        return blocks


_SPEC = __name__  # the module the specs below name

CANARIES: dict[str, Canary] = {
    "duplicate-free-queued-twice": Canary(
        "block_pool",
        f"{_SPEC}:DuplicateFreeQueuedTwice",
        "a block named twice in one free_blocks call is counted free twice",
        "vLLM #42571 (fix proposed in #42612/#42615)",
        "conservation",
    ),
    "hashed-block-freed-to-front": Canary(
        "block_pool",
        f"{_SPEC}:HashedFreedToFront",
        "free_blocks puts cached blocks at the front of the free queue instead of the tail",
        "vLLM v1 free_blocks eviction order (FreeKVCacheBlockQueue)",
        "free-queue-order",
    ),
    "null-block-handed-out": Canary(
        "block_pool",
        f"{_SPEC}:NullBlockLeftQueued",
        "the null block stays in the free queue and is handed out first",
        "vLLM v1 BlockPool null block (popped at construction)",
        "reserved-never-handed-out",
    ),
    "touch-leaves-block-queued": Canary(
        "block_pool",
        f"{_SPEC}:TouchLeavesBlockQueued",
        "touch raises ref_cnt but does not take a cached free block off the queue",
        "vLLM v1 BlockPool.touch (prefix hit on an evictable block)",
        "ref-count",
    ),
    "reused-block-keeps-hash": Canary(
        "block_pool",
        f"{_SPEC}:ReusedBlockKeepsHash",
        "get_new_blocks reuses a cached block without dropping it from the hash map",
        "vLLM #4761 (_maybe_evict_cached_block)",
        "cache-map",
    ),
}

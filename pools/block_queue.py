"""The blocks of a :class:`~poolfuzz.pools.block_pool.BlockPool` and its free queue, with vLLM v1 semantics.

As vLLM 0.33.0's ``v1/core/kv_cache_utils.py``: a :class:`KVCacheBlock` is one block's state
(its id, reference count, hash and free-queue links), and :class:`FreeKVCacheBlockQueue` the
doubly linked list of the free blocks in eviction order, between two sentinel blocks, so a
block leaves the middle of the queue (a prefix hit on a free cached block) in O(1).  A
non-null block is queued iff its ``ref_cnt`` is 0; the pool keeps that true.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from poolfuzz.pools.errors import InsufficientBlocksError

BlockHash = int | bytes
"""A block's content hash; the caller computes it (vLLM chains it over the prefix)."""


@dataclass(slots=True, eq=False)
class KVCacheBlock:
    """One block's metadata.  ``eq=False``: blocks compare and hash by identity.

    ``prev_free_block`` / ``next_free_block`` are owned by :class:`FreeKVCacheBlockQueue`;
    both are ``None`` exactly when the block is not in a queue.
    """

    block_id: int
    ref_cnt: int = 0
    _block_hash: BlockHash | None = field(default=None, repr=False)
    prev_free_block: KVCacheBlock | None = field(default=None, repr=False)
    next_free_block: KVCacheBlock | None = field(default=None, repr=False)
    is_null: bool = False

    @property
    def block_hash(self) -> BlockHash | None:
        """The hash the block is cached under, or ``None`` if it is not cached."""
        return self._block_hash


class FreeKVCacheBlockQueue:
    """Doubly linked list of free blocks between a fake head and a fake tail.

    :meth:`popleft`, :meth:`remove`, :meth:`append` and :meth:`appendleft`
    rewrite a constant number of links whatever the queue's length: removing
    from the middle is O(1), which a ``deque`` cannot do.  The ``_n`` forms cost
    O(n).  The front is reused (or evicted) first.
    """

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.fake_free_list_head = KVCacheBlock(-1)
        self.fake_free_list_tail = KVCacheBlock(-1)
        self.fake_free_list_head.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = self.fake_free_list_head
        self.num_free_blocks = 0
        self.append_n(blocks)

    def __len__(self) -> int:
        return self.num_free_blocks

    def popleft(self) -> KVCacheBlock:
        """Unlink and return the front block."""
        if self.num_free_blocks == 0:
            raise InsufficientBlocksError("FreeKVCacheBlockQueue", 1, 0)
        block = self.fake_free_list_head.next_free_block
        assert block is not None
        self.remove(block)
        return block

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Unlink and return the first ``n`` blocks, front first (O(n))."""
        if n > self.num_free_blocks:
            raise InsufficientBlocksError("FreeKVCacheBlockQueue", n, self.num_free_blocks)
        taken: list[KVCacheBlock] = []
        block = self.fake_free_list_head.next_free_block
        for _ in range(n):
            assert block is not None
            taken.append(block)
            following = block.next_free_block
            block.prev_free_block = block.next_free_block = None
            block = following
        assert block is not None
        self.fake_free_list_head.next_free_block = block
        block.prev_free_block = self.fake_free_list_head
        self.num_free_blocks -= n
        return taken

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from wherever it sits; it must be in this queue."""
        prev_block, next_block = block.prev_free_block, block.next_free_block
        assert prev_block is not None and next_block is not None, f"block {block.block_id} is not queued"
        prev_block.next_free_block = next_block
        next_block.prev_free_block = prev_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def _link_after(self, anchor: KVCacheBlock, block: KVCacheBlock) -> None:
        assert block.prev_free_block is None and block.next_free_block is None, f"block {block.block_id} is queued"
        after = anchor.next_free_block
        assert after is not None
        anchor.next_free_block = block
        block.prev_free_block = anchor
        block.next_free_block = after
        after.prev_free_block = block
        self.num_free_blocks += 1

    def append(self, block: KVCacheBlock) -> None:
        """Link ``block`` at the tail (evicted last)."""
        tail_block = self.fake_free_list_tail.prev_free_block
        assert tail_block is not None
        self._link_after(tail_block, block)

    def appendleft(self, block: KVCacheBlock) -> None:
        """Link ``block`` at the front (reused first)."""
        self._link_after(self.fake_free_list_head, block)

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Link ``blocks`` at the tail, keeping their order."""
        for block in blocks:
            self.append(block)

    def prepend_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Link ``blocks`` at the front, keeping their order (the first ends up in front)."""
        anchor = self.fake_free_list_head
        for block in blocks:
            self._link_after(anchor, block)
            anchor = block

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Every queued block, front to tail (O(queue); audits and tests only)."""
        blocks: list[KVCacheBlock] = []
        block = self.fake_free_list_head.next_free_block
        while block is not None and block is not self.fake_free_list_tail:
            blocks.append(block)
            block = block.next_free_block
        return blocks

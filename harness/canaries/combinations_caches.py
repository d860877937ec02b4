"""Combination canaries of the KV allocators, the prefix cache and the block pool.

Planted bugs that show only when two independent conditions meet in one call
or batch (repeated indices, mixed batches, page geometry, cached and uncached
blocks together); see :mod:`poolfuzz.harness.canaries.combinations` for why they exist.
Each class docstring names its two conditions and the invariant that must
catch it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.pools.block_pool import BlockPool, KVCacheBlock
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import PageKernel
from poolfuzz.pools.page_alloc.vectorized import alloc_decode_vectorized, alloc_extend_vectorized
from poolfuzz.pools.prefix_cache import kv_allocator_for
from poolfuzz.pools.radix_cache import RadixCache
from poolfuzz.pools.radix_tree import RadixTree, TreeNode, Walk


# ------------------------------------------------------------------ KV allocators
class StagedFreeSkipsDuplicates(TokenToKVPoolAllocator):
    """With ``need_sort`` the repeated-slot check is skipped: staged slots are deduplicated at merge, it assumes.

    Needs: a ``need_sort`` allocator, and one ``free`` naming a live slot
    twice.  The slot is staged twice and merged onto the free list twice.
    Caught by ``misuse-rejected``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refuses_repeats = not self.need_sort


class ConsumesExtendLengthPages(PagedTokenToKVPoolAllocator):
    """``alloc_extend`` counts pages right for the kernel but consumes ``ceil(extend_len / ps)`` per request.

    The two counts differ only when a request's prefix ends mid-page *and* its
    extend length leaves a remainder that still fits in the prefix's partial
    page (``0 < extend % ps <= ps - prefix % ps``): one page too many leaves
    the free list unused.  Needs those two, plus a spare page.  Caught by
    ``page-layout``: exactly ``get_num_new_pages`` pages are consumed.
    """

    def __init__(self, size: int, page_size: int, device: str | torch.device = "cpu", need_sort: bool = False,
                 kernel: str = "vectorized", check_layout: bool | None = None) -> None:
        super().__init__(size, page_size, device, need_sort, "vectorized", check_layout)
        self._extend_pages: int | None = None

    def _consume(self, num_pages: int) -> None:
        super()._consume(num_pages if self._extend_pages is None else self._extend_pages)

    def alloc_extend(self, prefix_lens: Tensor, prefix_lens_cpu: Tensor, seq_lens: Tensor, seq_lens_cpu: Tensor,
                     last_loc: Tensor, extend_num_tokens: int) -> Tensor | None:
        ps = self.page_size
        if isinstance(seq_lens_cpu, Tensor) and isinstance(prefix_lens_cpu, Tensor) \
                and seq_lens_cpu.shape == prefix_lens_cpu.shape:  # a malformed batch is the pool's to reject
            self._extend_pages = int(((seq_lens_cpu - prefix_lens_cpu + ps - 1) // ps).sum())
        try:
            return super().alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                                        extend_num_tokens)
        finally:
            self._extend_pages = None


def extend_cursor_by_extend_length(prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor,
                                   out_indices: Tensor, page_size: int) -> None:
    """A per-request extend whose page cursor advances by ``ceil(extend_len / ps)``, not the pages used.

    Right for every request alone; a later request in the batch starts one page
    too far when an earlier one's prefix ends mid-page with a short remainder,
    and reads past the pages it was given.
    """
    ps, slots, cursor = page_size, [], 0
    pages = free_pages.tolist()
    for pre, seq, last in zip(prefix_lens.tolist(), seq_lens.tolist(), last_loc.tolist()):
        first_new = -(-pre // ps)
        for pos in range(pre, seq):
            slots.append(last + 1 + pos - pre if pos < first_new * ps else pages[cursor + pos // ps - first_new] * ps + pos % ps)
        cursor += -(-(seq - pre) // ps)
    if slots:
        out_indices.copy_(torch.tensor(slots, dtype=torch.int64, device=out_indices.device))


def decode_rank_by_batch_position(seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor,
                                  page_size: int) -> None:
    """A decode kernel that gives the request at batch position ``i`` page ``free_pages[i]``.

    Right while every request needing a page comes before every request that
    does not; otherwise a position runs past the pages given and it crashes.
    """
    need = ((seq_lens - 1) % page_size == 0).nonzero().reshape(-1)
    out_indices.copy_(last_loc + 1)
    out_indices[need] = free_pages[need] * page_size


class _KernelSwap(PagedTokenToKVPoolAllocator):
    """A paged allocator whose page-index kernel is replaced by a rewrite; subclasses name the two functions."""

    extend_fn = staticmethod(alloc_extend_vectorized)
    decode_fn = staticmethod(alloc_decode_vectorized)

    def __init__(self, size: int, page_size: int, device: str | torch.device = "cpu", need_sort: bool = False,
                 kernel: str = "vectorized", check_layout: bool | None = None) -> None:
        super().__init__(size, page_size, device, need_sort, "vectorized", check_layout)
        self.kernel = PageKernel(type(self).__name__, self.extend_fn, self.decode_fn)


class ExtendCursorByExtendLength(_KernelSwap):
    """Needs: an extend request whose prefix ends mid-page with ``0 < extend % ps <= ps - prefix % ps``,
    followed in the same batch by a request that takes a new page.  Caught by ``valid-call-accepted``."""

    extend_fn = staticmethod(extend_cursor_by_extend_length)


class DecodeRankByBatchPosition(_KernelSwap):
    """Needs: a decode batch mixing requests at a page edge with requests mid-page, and a mid-page one
    placed before one at the edge.  Caught by ``valid-call-accepted``."""

    decode_fn = staticmethod(decode_rank_by_batch_position)


# ------------------------------------------------------------------ prefix cache
class _LockDroppingTree(RadixTree):
    """A radix tree whose split gives the new upper half no lock, and tells its cache to count it evictable."""

    cache: SplitDropsTheLock

    def split(self, walk: Walk) -> list[TreeNode]:
        path = super().split(walk)
        if walk.inside is not None and path[-1].lock_ref:
            upper = path[-1]
            self.cache._move_size(upper, to_protected=False)
            upper.lock_ref = 0
        return path


class SplitDropsTheLock(RadixCache):
    """Splitting a node makes the upper half a fresh, unlocked node (its lock count not copied).

    Needs: a match or insert ending inside a cached node's key (a split), and
    that node locked by a request.  The split-off prefix turns evictable while
    the request still reads it.  Caught by ``lock-balance``.
    """

    def __init__(self, allocator: Any, **kwargs: Any) -> None:
        super().__init__(allocator, **kwargs)
        tree = _LockDroppingTree(self.page_size, self.eviction_policy, self._empty)
        tree.cache = self
        self._tree = tree


def build_split_drops_the_lock(size: int, page_size: int, eviction_policy: str = "lru",
                               device: str | torch.device = "cpu") -> RadixCache:
    return SplitDropsTheLock(kv_allocator_for(size, page_size, device), eviction_policy=eviction_policy)


# ------------------------------------------------------------------ block pool
class FreeOrderByFirstBlock(BlockPool):
    """``free_blocks`` queues every block it frees where the first one freed goes (front if unhashed, tail if hashed).

    Needs: one call freeing to ``ref_cnt == 0`` both cached (hashed) and
    uncached blocks.  The cached ones go to the front and are reused first, or
    the uncached to the tail.  Caught by ``free-queue-order``.
    """

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        blocks = list(ordered_blocks)
        for position, block in enumerate(blocks):  # the pool's own validation first: the bug is in the order only
            self._check_block(block, position)
        left = {b.block_id: b.ref_cnt for b in blocks}
        freed: list[KVCacheBlock] = []
        for block in blocks:
            left[block.block_id] -= 1
            if not block.is_null and left[block.block_id] == 0:
                freed.append(block)
        super().free_blocks(blocks)
        if not freed:
            return
        to_tail = freed[0].block_hash is not None
        moved = [b for b in freed if (b.block_hash is None) == to_tail]
        for block in moved:
            self.free_block_queue.remove(block)
        (self.free_block_queue.append_n if to_tail else self.free_block_queue.prepend_n)(moved)


class TouchRemovesPerName(BlockPool):
    """``touch`` takes each free block it names off the queue once per name, counting before it adds references.

    Needs: a ``touch`` naming one block twice, and that block free and cached
    (a prefix hit on a block two table positions share).  The second removal
    finds it unlinked and the pool asserts.  Caught by ``valid-call-accepted``.
    """

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        names = list(blocks)
        for position, block in enumerate(names):  # the pool's own validation first: the bug is in the removal only
            self._check_block(block, position)
        free = [b for b in names if b.ref_cnt == 0 and not b.is_null and b.block_hash is not None]
        if len(free) == len(set(free)):
            super().touch(names)
            return
        for block in free:
            self.free_block_queue.remove(block)
        for block in names:
            block.ref_cnt += 0 if block.is_null else 1


_HERE = __name__  # the module the specs below name
CANARIES: dict[str, Canary] = {
    "staged-free-skips-duplicates": Canary(
        "token_kv", f"{_HERE}:StagedFreeSkipsDuplicates",
        "with need_sort, free skips the repeated-slot check: a slot named twice is staged twice",
        "combination: need_sort x repeated index (TokenToKVPoolAllocator.free)", "misuse-rejected",
    ),
    "consumes-extend-length-pages": Canary(
        "paged_kv", f"{_HERE}:ConsumesExtendLengthPages",
        "alloc_extend consumes ceil(extend/ps) pages: one too many for an unaligned prefix with a short remainder",
        "combination: unaligned prefix x extend remainder (get_num_new_pages)", "page-layout",
    ),
    "extend-cursor-by-extend-length": Canary(
        "paged_kv", f"{_HERE}:ExtendCursorByExtendLength",
        "extend kernel advances its page cursor by ceil(extend/ps): the next request in the batch reads too far",
        "combination: unaligned prefix x position in batch (alloc_extend kernels, seed 002)", "valid-call-accepted",
    ),
    "decode-rank-by-batch-position": Canary(
        "paged_kv", f"{_HERE}:DecodeRankByBatchPosition",
        "decode kernel ranks by batch position: a mid-page request before a page-edge one reads too far",
        "combination: mixed decode batch x order (alloc_decode kernels, seed 002)", "valid-call-accepted",
    ),
    "split-drops-the-lock": Canary(
        "prefix_cache", f"{_HERE}:build_split_drops_the_lock",
        "a split node's upper half is created unlocked: a locked prefix turns evictable",
        "combination: match ending inside a node x the node locked (RadixCache split, SGLang _split_node)",
        "lock-balance",
    ),
    "free-order-by-first-block": Canary(
        "block_pool", f"{_HERE}:FreeOrderByFirstBlock",
        "free_blocks queues every freed block where the first one goes: cached and uncached mixed in one call",
        "combination: hashed x unhashed blocks freed in one call (vLLM BlockPool.free_blocks)", "free-queue-order",
    ),
    "touch-removes-per-name": Canary(
        "block_pool", f"{_HERE}:TouchRemovesPerName",
        "touch removes a free cached block from the queue once per name: a block named twice is unlinked twice",
        "combination: repeated block in one touch x free cached block (vLLM BlockPool.touch)", "valid-call-accepted",
    ),
}

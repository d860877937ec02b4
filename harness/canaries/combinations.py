"""Combination canaries: planted bugs that show only when two independent conditions meet in one call.

The historical canaries each trip on one condition.  These were written apart
from the strategies, after the shapes of bug that took a single worker minutes
to find: a repeated index inside one call that frees or claims several, a batch
mixing requests of different kinds (holding a row or slot, or needing one), and
an extend or decode batch whose geometry meets several conditions at once
(prefix alignment, how many pages it needs, position in the batch).  Each class
docstring names its two conditions and the invariant that must catch it; each
bug fails one way only, so the invariant is the same whatever example finds it.

None of these is an upstream bug report: they are the shapes such bugs take
(the ``upstream`` field names the code they imitate).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from harness.canaries.catalogue import Canary
from pools.block_pool import BlockPool, KVCacheBlock
from pools.prefix_cache import kv_allocator_for
from pools.radix_cache import RadixCache
from pools.radix_tree import RadixTree, TreeNode, Walk
from pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pools.mamba import _FREE, _LIVE, HybridReqToTokenPool, MambaSlotAllocator, _slot_list
from pools.page_alloc import PageKernel
from pools.page_alloc.vectorized import alloc_decode_vectorized, alloc_extend_vectorized
from pools.req_to_token import DecodeReqToTokenPool, Req, ReqToTokenPool
from pools.errors import DoubleFreeError


# ------------------------------------------------------------------ request rows
class FreeRowsChecksASet(ReqToTokenPool):
    """``free_rows`` validates ``set(rows)`` but appends the list as given.

    Needs: a live row, and that row named twice in one ``free_rows`` call.  The
    row then sits on the free list twice and goes to two requests.  Caught by
    ``misuse-rejected``: a repeated row is a double free.
    """

    def free_rows(self, indices: Iterable[int]) -> None:
        rows = list(indices)
        self._check_releasable(sorted(set(rows)))
        for row in rows:
            self._is_free[row] = 1
        self.free_slots.extend(rows)


class CapacityCountsWholeBatch(ReqToTokenPool):
    """``alloc`` checks capacity against the batch length, not the requests needing a row.

    Needs: a batch with a request that already holds its row (chunked prefill
    continuing, SGLang #17850), and a pool with fewer free rows than the batch
    has requests but enough for the new ones.  The batch is refused although
    it fits.  Caught by ``empty-pool-guard``.
    """

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        need = self._validate_batch(reqs)
        if len(reqs) > len(self.free_slots):
            return None
        rows = self.alloc_rows(need)
        return None if rows is None else self._bind_rows(reqs, rows)


class RowsBoundByBatchPosition(DecodeReqToTokenPool):
    """New requests get ``rows[i]`` with ``i`` their position in the batch, not their rank among new ones.

    Needs: a batch mixing requests that hold a row with new ones, and a holder
    placed before a new request.  The index runs past the rows taken and the
    call crashes.  Caught by ``valid-call-accepted``.
    """

    def _bind_rows(self, reqs: Sequence[Req], rows: list[int]) -> list[int]:
        for position, req in enumerate(reqs):
            if req.req_pool_idx is None:
                req.req_pool_idx = rows[position]
        return [req.req_pool_idx for req in reqs]  # type: ignore[misc]


# ------------------------------------------------------------------ Mamba slots
class NeighbourDuplicateCheck(MambaSlotAllocator):
    """``free`` looks for repeated slots by comparing neighbours, without sorting.

    Needs: three or more slots in one ``free`` call, and a slot repeated with
    another between the two copies (``[a, b, a]``); ``[a, a]`` is still
    rejected.  The repeated slot lands on the free list twice.  Caught by
    ``misuse-rejected``.
    """

    def free(self, indices: Tensor) -> None:
        slots = _slot_list(self.pool_name, indices, self.size)
        for previous, slot in zip([None, *slots], slots):
            if slot == previous or self._state[slot] != _LIVE:
                raise DoubleFreeError(self.pool_name, [slot], "mamba slot")
        if not slots:
            return
        for slot in slots:
            self._state[slot] = _FREE
        self.free_slots = torch.cat((self.free_slots, indices.reshape(-1).to(self.device, torch.int64)))


class MultiSlotAllocFromWindow(MambaSlotAllocator):
    """``alloc(n)`` with ``n > 1`` pops the open window's reservation (room checked on the free list).

    Needs: a group window with at least ``n >= 2`` unconsumed reserved slots,
    and an ``alloc`` of ``n`` slots (only ``alloc(1)`` may take reserved slots).
    Caught by ``group-window``.
    """

    def alloc(self, need_size: int) -> Tensor | None:
        if need_size < 2 or self.reserved_size() < need_size or need_size > self.available_size():
            return super().alloc(need_size)
        slots = self._reserved[self._cursor : self._cursor + need_size]
        for slot in self._reserved_ids[self._cursor : self._cursor + need_size]:
            self._state[slot] = _LIVE
        self._cursor += need_size
        return slots


# ------------------------------------------------------------------ hybrid rows + slots
class _HybridBinding(HybridReqToTokenPool):
    """The tail of ``alloc`` once rows and slots are taken: bind them and fill the mapping."""

    def _bind(self, reqs: Sequence[Req], rows: list[int], slots: list[int]) -> list[int]:
        bound = self._bind_rows(reqs, rows)
        fresh = iter(slots)
        for req in reqs:
            if req.mamba_pool_idx is None:
                req.mamba_pool_idx, req.mamba_needs_clear = next(fresh, 0), True
        if reqs:
            index = torch.tensor(bound, dtype=torch.int64, device=self.device)
            values = torch.tensor([req.mamba_pool_idx for req in reqs], dtype=torch.int64, device=self.device)
            self.req_index_to_mamba_index_mapping[index] = values
        return bound

    def _take_slots(self, count: int) -> list[int]:
        taken = [self.mamba_allocator.alloc(1) for _ in range(count)]
        assert all(t is not None for t in taken), "mamba capacity was checked"
        return [int(t) for t in torch.cat(taken).tolist()] if taken else []  # type: ignore[arg-type]


class SlotsCountedFromNewRows(_HybridBinding):
    """Slots go to new requests, and to requests lacking only a slot only when the batch has no new request.

    Written for the two common batches, a fresh admission and a chunked
    request re-admitted after ``free_mamba_cache``.  Needs: one batch with a
    request that needs a row and a request holding its row but no slot.  The
    second gets padding slot 0.  Caught by ``reserved-never-handed-out``.
    """

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        need_rows, need_slots = self._validate_batch(reqs), self._validate_mamba_handles(reqs)
        allocator = self.mamba_allocator
        if need_rows > self.available_size() or need_slots > allocator.available_size() + allocator.reserved_size():
            return None
        lacking = [r for r in reqs if r.mamba_pool_idx is None and (r.req_pool_idx is None or not need_rows)]
        rows = self.alloc_rows(need_rows)
        assert rows is not None, "row capacity was checked"
        slots = self._take_slots(len(lacking))
        for req, slot in zip(lacking, slots):
            req.mamba_pool_idx, req.mamba_needs_clear = slot, True
        return self._bind(reqs, rows, [])


class AllOrNothingOnTheSum(_HybridBinding):
    """The all-or-nothing check compares rows plus slots needed with rows plus slots free.

    Needs: one side short (rows or Mamba slots) while the other has at least
    that much to spare, and a batch that needs the short side.  The check
    passes, the short side runs out mid-call and the pool asserts.  Caught by
    ``valid-call-accepted``: a short pool must refuse, not crash.
    """

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        need_rows, need_slots = self._validate_batch(reqs), self._validate_mamba_handles(reqs)
        allocator = self.mamba_allocator
        if need_rows + need_slots > self.available_size() + allocator.available_size() + allocator.reserved_size():
            return None
        rows = self.alloc_rows(need_rows)
        assert rows is not None, "row capacity was checked"
        return self._bind(reqs, rows, self._take_slots(need_slots))


# ------------------------------------------------------------------ KV allocators
class StagedFreeSkipsDuplicates(TokenToKVPoolAllocator):
    """With ``need_sort`` the repeated-slot check is skipped: staged slots are deduplicated at merge, it assumes.

    Needs: a ``need_sort`` allocator, and one ``free`` naming a live slot
    twice.  The slot is staged twice and merged onto the free list twice.
    Caught by ``misuse-rejected``.
    """

    def _dedup_pages(self, pages: Tensor) -> Tensor:
        return pages if self.need_sort else super()._dedup_pages(pages)


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
        if isinstance(seq_lens_cpu, Tensor) and isinstance(prefix_lens_cpu, Tensor):
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
        free = [b for b in names if b.ref_cnt == 0 and not b.is_null and b.block_hash is not None]
        if len(free) == len(set(free)):
            super().touch(names)
            return
        for block in free:
            self.free_block_queue.remove(block)
        for block in names:
            block.ref_cnt += 0 if block.is_null else 1


_HERE = "harness.canaries.combinations"
CANARIES: dict[str, Canary] = {
    "free-rows-checks-a-set": Canary(
        "req_to_token", f"{_HERE}:FreeRowsChecksASet",
        "free_rows validates set(rows) but appends the list: [r, r] of a live row puts r on the free list twice",
        "combination: live row x named twice in one call (ReqToTokenPool.free_rows)", "misuse-rejected",
    ),
    "capacity-counts-whole-batch": Canary(
        "req_to_token", f"{_HERE}:CapacityCountsWholeBatch",
        "alloc compares len(batch) with the free rows: a mixed batch that fits is refused when rows are few",
        "combination: mixed batch x near-full pool (ReqToTokenPool.alloc, SGLang #17850)", "empty-pool-guard",
    ),
    "rows-bound-by-batch-position": Canary(
        "decode_req_to_token", f"{_HERE}:RowsBoundByBatchPosition",
        "new requests take rows[position in batch]: a row holder before a new request runs past the rows taken",
        "combination: mixed batch x order (DecodeReqToTokenPool.alloc)", "valid-call-accepted",
    ),
    "neighbour-duplicate-check": Canary(
        "mamba_slots", f"{_HERE}:NeighbourDuplicateCheck",
        "free compares neighbours for repeats: [a, b, a] frees a twice",
        "combination: repeated index x call of three or more (MambaSlotAllocator.free)", "misuse-rejected",
    ),
    "multi-slot-alloc-from-window": Canary(
        "mamba_slots", f"{_HERE}:MultiSlotAllocFromWindow",
        "alloc(n >= 2) inside a group window pops the reservation, which only alloc(1) may take",
        "combination: open reservation x multi-slot alloc (MambaSlotAllocator.alloc, seed 001)", "group-window",
    ),
    "slots-counted-from-new-rows": Canary(
        "hybrid_req_to_token", f"{_HERE}:SlotsCountedFromNewRows",
        "slots taken per request needing a row: a row holder without a slot next to a new request gets slot 0",
        "combination: new request x row holder without a slot (HybridReqToTokenPool.alloc)",
        "reserved-never-handed-out",
    ),
    "all-or-nothing-on-the-sum": Canary(
        "hybrid_req_to_token", f"{_HERE}:AllOrNothingOnTheSum",
        "capacity checked on rows + slots together: one short side with the other spare crashes mid-call",
        "combination: asymmetric shortage x batch (HybridReqToTokenPool.alloc)", "valid-call-accepted",
    ),
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

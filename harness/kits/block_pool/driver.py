"""Driver for ``block_pool``: a vLLM-v1-style ref-counted block pool, driven as vLLM's KV-cache manager drives it.

Requests are integer handles handed out in order.  ``admit`` looks up a new
request's prefix and touches the hits, ``allocate`` appends fresh blocks to a
request's table, ``cache`` hashes its full blocks, ``free`` releases its table
in reverse (its last block is evicted first), ``slide`` drops blocks a sliding
window has passed (replacing them by the null block, as vLLM does), ``unpin``
releases one with ``unpin_blocks`` as vLLM's HiSparse coordinator does.  Blocks
are named by id in traces; the driver hands the pool its own block objects
(``pool.blocks[id]``), and reads back only ``block_id``, ``ref_cnt``,
``block_hash`` and the pool's read-only views.

``get_new_blocks(n)`` with ``n`` above the free count is a contract breach
(vLLM raises ``ValueError``: callers check ``get_num_free_blocks()`` first).  With
misuse checking off the driver plays the caller and makes no call.

Block pools hold no tensors: traces record ``device`` like every family's, but
the driver does not pass it on, so a target need not take it
(:func:`build_block_pool`, the default target, accepts and ignores it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, ConstructorKwargs, Driver, operation
from poolfuzz.harness.judge.invariants import check, check_unique
from poolfuzz.harness.kits.block_pool.config import BlockPoolConfig
from poolfuzz.harness.kits.block_pool.misuse import BlockPoolMisuse
from poolfuzz.harness.kits.block_pool.model import NULL_BLOCK, BlockPoolModel, Request, chain_hashes
from poolfuzz.harness.kits.block_pool.ops import BlockPoolOps
from poolfuzz.pools.block_pool import BlockPool
from poolfuzz.pools.errors import (
    BadBatchError,
    BadSizeError,
    BlockStateError,
    DoubleFreeError,
    ForeignIndexError,
    InsufficientBlocksError,
    PoolError,
)


def build_block_pool(num_gpu_blocks: int, enable_caching: bool = True, device: str = "cpu") -> BlockPool:
    """The family's default target: our ``BlockPool``.  It holds no tensors, so ``device`` (which every
    trace records, as for every family) is accepted and ignored."""
    return BlockPool(num_gpu_blocks, enable_caching)


class BlockPoolDriver(Driver, BlockPoolMisuse):
    family = "block_pool"
    ops = BlockPoolOps
    config: BlockPoolConfig

    def __init__(self, factory: Callable[..., Any], config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.model = BlockPoolModel(self.config.num_gpu_blocks, self.config.enable_caching)
        # How often allocation and the prefix cache met (cached blocks reused, evictable ones touched back):
        # what the machine's target() rewards.
        self.cache_pressure = 0
        # Block ids whose unpin_blocks watcher fired, in firing order (cleared before each call that may fire one).
        self.reuse_seen: list[int] = []

    # ------------------------------------------------------------ helpers
    def _on_reuse(self, block: Any) -> None:
        self.reuse_seen.append(int(block.block_id))

    def check_reuse(self, expected: list[int], what: str, *, ordered: bool = True) -> None:
        """The ``on_reuse`` watchers of ``unpin_blocks`` fired for exactly ``expected`` during the call."""
        seen = self.reuse_seen if ordered else sorted(self.reuse_seen)
        check(seen == (expected if ordered else sorted(expected)), "ref-count",
              f"{what} fired other reuse watchers than the unpinned blocks it handed out", fired=list(self.reuse_seen),
              expected=expected)

    def blocks(self, ids: Sequence[int]) -> list[Any]:
        return [self.pool.blocks[block] for block in ids]

    def live(self, handle: int) -> Request | None:
        request = self.model.requests.get(handle)
        return request if request is not None and request.live else None

    def new_request(self, hashes: list[int], table: list[int], num_cached: int) -> int:
        handle = len(self.model.requests)
        self.model.requests[handle] = Request(hashes, list(table), num_cached)
        return handle

    def misuse(self, call: Callable[[], Any], error: type[PoolError] | tuple[type[PoolError], ...], what: str) -> Any:
        """Expect the typed rejection, or make no call for a target that does not validate input."""
        if not self.check_misuse:
            return SKIPPED
        self.expect_rejected(call, error, what)
        return None

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """``num_gpu_blocks`` an int >= 1 (block 0 is the null block)."""
        count = config.get("num_gpu_blocks")
        return () if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else (BadSizeError,)

    def check_free_count(self, what: str, invariant: str = "conservation") -> None:
        """O(1): ``get_num_free_blocks()`` is the model's."""
        actual = self.pool.get_num_free_blocks()
        check(actual == self.model.num_free, invariant, f"after {what}, get_num_free_blocks() disagrees",
              actual=actual, expected=self.model.num_free)

    def check_ref_counts(self, ids: Sequence[int], what: str) -> None:
        """O(batch): the named blocks' ``ref_cnt`` is the model's (never negative)."""
        for block in dict.fromkeys(b for b in ids if b != NULL_BLOCK):
            actual = self.pool.blocks[block].ref_cnt
            check(actual == self.model.ref[block] and actual >= 0, "ref-count",
                  f"after {what}, block {block} has the wrong ref_cnt", actual=actual, expected=self.model.ref[block])

    def check_lookup(self, block_hash: int, what: str) -> None:
        found = self.expect_accepted(lambda: self.pool.get_cached_block(block_hash), f"get_cached_block({block_hash})")
        actual = None if found is None else found.block_id
        expected = self.model.lookup(block_hash)
        check(actual == expected, "cache-map", f"{what}: get_cached_block({block_hash}) must answer the first block "
              "cached under the hash", actual=actual, expected=expected, cached=self.model.cached.get(block_hash))

    def release(self, ids: list[int], what: str) -> list[int]:
        """A valid ``free_blocks`` in the order given; returns the blocks that became free."""
        self.expect_accepted(lambda: self.pool.free_blocks(self.blocks(ids)), what)
        became_free = self.model.free(ids)
        self.check_ref_counts(ids, what)
        self.check_free_count(what)
        if any(b in self.model.hash_of for b in became_free):
            self.event("hashed block freed to the tail")
        return became_free

    def touch_blocks(self, ids: list[int], what: str) -> None:
        """A valid ``touch``: counts rise, and a free block touched leaves the queue (free iff ref_cnt == 0)."""
        were_free = sum(1 for b in dict.fromkeys(ids) if self.model.is_free(b))
        self.expect_accepted(lambda: self.pool.touch(self.blocks(ids)), what)
        self.model.touch(ids)
        self.check_ref_counts(ids, what)
        if were_free:
            self.cache_pressure += were_free
            self.event("touched a cached free block")
            self.check_free_count(f"{what}: a touched free block must leave the free queue", "ref-count")

    # --------------------------------------------------------- operations
    @operation
    def admit(self, tokens: list[int]) -> int:
        """A new request: look up its prefix (until the first miss) and touch the hits, as vLLM admits one."""
        hashes = chain_hashes(tokens)
        hits = self.model.prefix_hits(hashes)
        if self.model.enable_caching:
            for block_hash in hashes[:len(hits) + 1]:
                self.check_lookup(block_hash, f"admit({tokens})")
        if hits:
            self.event("prefix hit")
            self.touch_blocks(hits, f"touch({hits}) of a prefix hit")
        return self.new_request(hashes, hits, len(hits))

    @operation
    def allocate(self, handle: int, num_blocks: int) -> Any:
        """``get_new_blocks(num_blocks)`` appended to the request's table: the queue's front, at ref 1, unhashed."""
        request = self.live(handle)
        if request is None:
            return SKIPPED
        what = f"get_new_blocks({num_blocks})"
        if num_blocks < 0:
            return self.misuse(lambda: self.pool.get_new_blocks(num_blocks), BadSizeError, what)
        if num_blocks > self.model.num_free:
            if self.check_misuse:
                self.expect_rejected(lambda: self.pool.get_new_blocks(num_blocks), InsufficientBlocksError,
                                     f"{what} with {self.model.num_free} free")
            else:
                self.event("allocation left to the caller's free-count check")
            return []
        expected = self.model.queue[:num_blocks]
        self.reuse_seen.clear()
        blocks = self.expect_accepted(lambda: self.pool.get_new_blocks(num_blocks), what)
        ids = [block.block_id for block in blocks]
        check(len(ids) == num_blocks, "empty-pool-guard", f"{what} returned {len(ids)} blocks", blocks=ids)
        check(NULL_BLOCK not in ids, "reserved-never-handed-out", f"{what} handed out the null block", blocks=ids)
        check_unique(ids, "no-double-allocation", f"blocks returned by {what}")
        held = [b for b in ids if not self.model.is_free(b)]
        check(not held, "no-double-allocation", f"{what} returned blocks that are held", held=held,
              ref_cnt=[self.model.ref[b] for b in held])
        check(ids == expected, "free-queue-order", f"{what} must take the free queue's front, in order",
              actual=ids, expected=expected, queue=self.model.queue)
        reused = {b: self.model.hash_of[b] for b in ids if b in self.model.hash_of}
        self.check_reuse(self.model.reused(ids), what)
        self.model.allocate(num_blocks)
        self.check_ref_counts(ids, what)
        stale = {b.block_id: b.block_hash for b in blocks if b.block_hash is not None}
        check(not stale, "cache-map", f"{what} handed out blocks that kept their hash", blocks=stale)
        for block_hash in dict.fromkeys(reused.values()):
            self.check_lookup(block_hash, what)
        self.check_free_count(what)
        request.table.extend(ids)
        if reused:
            self.cache_pressure += len(reused)
            self.event("reused a cached block (its hash dropped)")
        if num_blocks and not self.model.num_free:
            self.event("pool exactly full")
        return ids

    @operation
    def cache(self, handle: int, num_full: int) -> Any:
        """``cache_full_blocks`` for the request's blocks ``num_cached..min(num_full, table, hashes)``."""
        request = self.model.requests.get(handle)
        if request is None:
            return SKIPPED
        start = request.num_cached
        end = max(0, min(num_full, len(request.table), len(request.hashes)))
        table, hashes = list(request.table), list(request.hashes)
        what = f"cache_full_blocks(blocks {table}, {start}..{end})"

        def call() -> None:
            self.pool.cache_full_blocks(self.blocks(table), hashes, start, end)

        breach = self.model.cache_breach(table, start, end)
        if breach is not None:
            return self.misuse(call, (BlockStateError, BadBatchError), f"{what}: {breach}")
        if not request.live:
            return SKIPPED  # its blocks may belong to others now: not a call to make
        if NULL_BLOCK in table[start:end]:
            self.event("corner: caching a table a sliding window nulled")
        self.expect_accepted(call, what)
        for position in self.model.cache(table, hashes, start, end):
            block = self.pool.blocks[table[position]]
            check(block.block_hash == hashes[position], "cache-map", f"{what}: block {table[position]} holds the "
                  "wrong hash", actual=block.block_hash, expected=hashes[position])
            self.check_lookup(hashes[position], what)
            if len(self.model.cached[hashes[position]]) > 1:
                self.event("one hash names several blocks")
        request.num_cached = max(start, end)

    @operation
    def free(self, handle: int) -> Any:
        """Free the request's table in reverse, as vLLM does (its last block evicted first)."""
        request = self.model.requests[handle]
        ids = list(reversed(request.table))
        what = f"free_blocks({ids}) of request {handle}"
        if self.model.free_breach(ids) is not None:
            return self.misuse(lambda: self.pool.free_blocks(self.blocks(ids)), DoubleFreeError, what)
        if not request.live:
            return SKIPPED  # its blocks are held by others now: no pool can tell
        self.release(ids, what)
        request.live = False

    @operation
    def slide(self, handle: int, num_skipped: int) -> Any:
        """A sliding window passed the first ``num_skipped`` positions: their blocks are freed, last first,
        and replaced by the null block (vLLM's ``remove_skipped_blocks``)."""
        request = self.live(handle)
        if request is None:
            return SKIPPED
        removed: list[int] = []
        positions: list[int] = []
        for position in range(min(num_skipped, len(request.table)) - 1, -1, -1):
            if request.table[position] == NULL_BLOCK:
                break
            removed.append(request.table[position])
            positions.append(position)
        if not removed:
            return SKIPPED
        what = f"free_blocks({removed}) left behind by a sliding window"
        if self.model.free_breach(removed) is not None:
            return self.misuse(lambda: self.pool.free_blocks(self.blocks(removed)), DoubleFreeError, what)
        self.release(removed, what)
        for position in positions:  # the positions freed, not the first len(removed): those may be null already
            request.table[position] = NULL_BLOCK
        self.event("sliding window freed blocks")
        return removed

    @operation
    def unpin(self, handle: int, position: int) -> Any:
        """A request's block released with ``unpin_blocks([block], on_reuse)``, as vLLM's HiSparse coordinator
        releases a resident page once its host copy is durable (``v1/hisparse/coordinator.py:368``, ``:894``):
        one reference dropped, the block at the queue's tail when it reaches 0 (hashed or not), and the page
        leaves the request (the null block takes its place).  Only on a target that has ``unpin_blocks``."""
        request = self.live(handle)
        unpin = getattr(self.pool, "unpin_blocks", None)
        if request is None or unpin is None or not 0 <= position < len(request.table):
            return SKIPPED
        block = request.table[position]
        if block == NULL_BLOCK:
            return SKIPPED
        what = f"unpin_blocks([{block}]) of request {handle}"
        hashed = block in self.model.hash_of
        self.expect_accepted(lambda: unpin(self.blocks([block]), self._on_reuse), what)
        released = self.model.unpin([block])
        request.table[position] = NULL_BLOCK
        self.check_ref_counts([block], what)
        self.check_free_count(what)
        if released:
            self.event("unpinned block joined the tail hashed" if hashed else "unpinned block joined the tail unhashed")
        return None

    @operation
    def touch(self, block_ids: list[int]) -> Any:
        """A new request sharing blocks by id (held ones, cached free ones, the null block)."""
        if any(not 0 <= b < self.model.num_gpu_blocks for b in block_ids):
            return SKIPPED  # no block object to name
        what = f"touch({block_ids})"
        breach = self.model.touch_breach(block_ids)
        if breach is not None:
            return self.misuse(lambda: self.pool.touch(self.blocks(block_ids)), BlockStateError,
                               f"{what}: block {breach} is free and not cached")
        self.touch_blocks(block_ids, what)
        if len(set(block_ids)) < len(block_ids):
            self.event("one request holds a block twice")
        return self.new_request([], block_ids, 0)

    @operation
    def free_blocks(self, block_ids: list[int]) -> Any:
        """Misuse only: release blocks by id that are not held that often (double frees, vLLM #42571)."""
        if any(not 0 <= b < self.model.num_gpu_blocks for b in block_ids):
            return SKIPPED
        if self.model.free_breach(block_ids) is None:
            return SKIPPED  # a raw free of held blocks takes a reference a request owns
        return self.misuse(lambda: self.pool.free_blocks(self.blocks(block_ids)), DoubleFreeError,
                           f"free_blocks({block_ids})")

    @operation
    def evict(self, block_ids: list[int]) -> Any:
        """``evict_blocks`` of a set of ids: hashes dropped, held blocks stay held, free ones keep their place."""
        ids = sorted(set(block_ids))
        what = f"evict_blocks({ids})"
        if any(not 0 <= b < self.model.num_gpu_blocks for b in ids):
            return self.misuse(lambda: self.pool.evict_blocks(ids), (ForeignIndexError, BadBatchError), what)
        dropped = {b: self.model.hash_of[b] for b in ids if b in self.model.hash_of}
        self.expect_accepted(lambda: self.pool.evict_blocks(ids), what)
        moved = self.model.evict(ids)
        kept = {b: self.pool.blocks[b].block_hash for b in ids if self.pool.blocks[b].block_hash is not None}
        check(not kept, "cache-map", f"{what} left hashes on evicted blocks", blocks=kept)
        for block_hash in dict.fromkeys(dropped.values()):
            self.check_lookup(block_hash, what)
        self.check_free_count(what)
        if moved:
            self.event("evicted a cached free block")
        if len(moved) < len(dropped):
            self.event("evicted a cached held block")

    @operation
    def reset(self) -> bool:
        """``reset_prefix_cache()``: succeeds iff only the null block is in use, and then forgets every hash."""
        expected = self.model.num_free == self.model.usable
        self.reuse_seen.clear()
        result = self.expect_accepted(self.pool.reset_prefix_cache, "reset_prefix_cache()")
        check(bool(result) == expected, "cache-map", "reset_prefix_cache() must succeed iff no block is in use",
              result=result, free=self.model.num_free, usable=self.model.usable)
        self.check_reuse(self.model.reset_watchers() if expected else [], "reset_prefix_cache()", ordered=False)
        if expected:
            self.model.reset()
            cached = self.pool.cached_block_ids()
            check(not cached, "cache-map", "reset_prefix_cache() kept cached blocks", cached=cached)
            self.event("prefix cache reset")
        else:
            self.event("reset refused: blocks in use")
        return bool(result)

    # ------------------------------------------------------------- audits
    def observe(self) -> Hashable:
        pool = self.pool
        cached = tuple(sorted((h, tuple(ids)) for h, ids in pool.cached_block_ids().items()))
        return (tuple(pool.free_block_ids()), tuple(pool.ref_counts()), cached,
                tuple(block.block_hash for block in pool.blocks), pool.get_num_free_blocks())

    def audit(self) -> None:
        pool, model = self.pool, self.model
        queue = list(pool.free_block_ids())
        check(NULL_BLOCK not in queue, "reserved-never-handed-out", "the null block is in the free queue", queue=queue)
        check_unique(queue, "no-double-allocation", "the free queue")
        count = pool.get_num_free_blocks()
        check(count == len(queue) == model.num_free, "conservation", "free count, free queue and model disagree",
              counted=count, queued=len(queue), expected=model.num_free)
        check(set(queue) == set(model.queue), "conservation", "the free queue holds other blocks than the model",
              missing=sorted(set(model.queue) - set(queue)), extra=sorted(set(queue) - set(model.queue)))
        usage, expected_usage = pool.get_usage(), (1.0 - model.num_free / model.usable if model.usable else 0.0)
        check(abs(usage - expected_usage) < 1e-9, "conservation",
              "get_usage() is not the share of usable blocks in use", usage=usage, expected=expected_usage)
        refs = list(pool.ref_counts())
        wrong = {b: (refs[b], model.ref[b]) for b in range(1, model.num_gpu_blocks) if refs[b] != model.ref[b]}
        check(not wrong, "ref-count", "ref_cnt differs from the references handed out (actual, expected)", blocks=wrong)
        zero = {b for b in range(1, model.num_gpu_blocks) if refs[b] == 0}
        check(zero == set(queue), "ref-count", "a block is free iff its ref_cnt is 0",
              queued_but_held=sorted(set(queue) - zero), free_but_not_queued=sorted(zero - set(queue)))
        check(queue == model.queue, "free-queue-order", "the free queue is out of order", actual=queue,
              expected=model.queue)
        cached = pool.cached_block_ids()
        check(cached == model.cached, "cache-map", "the hash map differs from the blocks cached", actual=cached,
              expected=model.cached)
        own = {block.block_id: block.block_hash for block in pool.blocks if block.block_hash is not None}
        check(own == model.hash_of, "cache-map", "blocks' own hashes differ from the hash map", actual=own,
              expected=model.hash_of)

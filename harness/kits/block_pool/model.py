"""Shadow model of a ref-counted block pool with vLLM v1 semantics (the ``block_pool`` family).

Written from the contract (``pools/block_pool.py``'s module docstring, vLLM 0.33.0's
``v1/core/block_pool.py`` documentation), never from an implementation:

* blocks ``1..num_gpu_blocks-1`` are counted references; block 0 is the null
  block, never free, never handed out, skipped by touch, free and cache;
* the free queue holds exactly the blocks at reference 0, front reused first;
  ``get_new_blocks(n)`` takes the first ``n`` and drops their hashes;
* the queue's order is exactly what the calls below make of it, and nothing
  more (vLLM states no ordering between hashed and unhashed free blocks):
* ``free_blocks``: a block reaching 0 goes to the front if it has no hash (or
  caching is off) and to the tail if it has one, in the order the call names
  them (vLLM 0.33.0 ``block_pool.py:816-849``: ``prepend_n`` / ``append_n``; a
  request frees its table reversed, so its last block is evicted first);
* ``unpin_blocks``: a block reaching 0 goes to the tail, hashed or not
  (``block_pool.py:748-767``), and its ``on_reuse`` watcher fires when
  ``get_new_blocks`` hands it out or a reset succeeds (``:723``, ``:893``);
* touching a cached free block takes it off the queue;
* ``evict_blocks`` drops hashes and moves nothing: a free block it unhashes
  keeps its place (``block_pool.py:851-867`` -> ``_maybe_evict_cached_block``,
  ``:769``, which touches neither ``ref_cnt`` nor the queue);
* a hash may name several blocks; a lookup answers the one cached first;
* ``reset_prefix_cache`` succeeds iff only the null block is in use.

Requests are the caller's side of the contract, the way vLLM's KV-cache manager
uses the pool: a table of block ids (0 where a sliding window dropped a block),
the hashes of its full blocks, and how many of its blocks are cached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

NULL_BLOCK = 0
HASH_BASE = 16
"""Tokens are digits ``0..HASH_BASE-2`` of a block hash (``+1``, so a prefix never collides with a longer one)."""


def chain_hashes(tokens: Sequence[int]) -> list[int]:
    """Block hashes of a request whose ``i``-th full block holds token ``tokens[i]``.

    Each hash names the whole prefix up to its block, as vLLM's chained block
    hashes do: two requests share ``hashes[:k]`` iff they share ``tokens[:k]``.
    """
    hashes: list[int] = []
    value = 0
    for token in tokens:
        assert 0 <= token < HASH_BASE - 1, f"token {token} outside 0..{HASH_BASE - 2}"
        value = value * HASH_BASE + token + 1
        hashes.append(value)
    return hashes


@dataclass
class Request:
    """A request's view of the pool: what it holds and what it may cache."""

    hashes: list[int]
    table: list[int] = field(default_factory=list)
    num_cached: int = 0
    live: bool = True


@dataclass
class BlockPoolModel:
    num_gpu_blocks: int
    enable_caching: bool
    ref: list[int] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)
    """Free block ids, front (reused first) to tail."""
    hash_of: dict[int, int] = field(default_factory=dict)
    cached: dict[int, list[int]] = field(default_factory=dict)
    """Hash -> block ids cached under it, in caching order (the first answers lookups)."""
    requests: dict[int, Request] = field(default_factory=dict)
    watched: dict[int, None] = field(default_factory=dict)
    """Blocks an ``unpin_blocks`` registered a reuse watcher for, in registration order."""

    def __post_init__(self) -> None:
        self.ref = [0] * self.num_gpu_blocks
        self.queue = list(range(1, self.num_gpu_blocks))

    # ------------------------------------------------------------- queries
    @property
    def num_free(self) -> int:
        return len(self.queue)

    @property
    def usable(self) -> int:
        return self.num_gpu_blocks - 1

    def is_free(self, block: int) -> bool:
        return block != NULL_BLOCK and self.ref[block] == 0

    def lookup(self, block_hash: int) -> int | None:
        blocks = self.cached.get(block_hash)
        return blocks[0] if blocks else None

    def prefix_hits(self, hashes: Sequence[int]) -> list[int]:
        """The blocks a new request finds cached: the longest prefix of ``hashes`` that all hit."""
        hits: list[int] = []
        for block_hash in hashes if self.enable_caching else ():
            block = self.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def touchable(self) -> list[int]:
        """Blocks ``touch`` accepts: the null block, held blocks and cached free blocks."""
        return [b for b in range(self.num_gpu_blocks) if b == NULL_BLOCK or self.ref[b] > 0 or b in self.hash_of]

    # ----------------------------------------------------- contract breaches
    def touch_breach(self, blocks: Sequence[int]) -> int | None:
        """The first block ``touch`` must refuse: free and uncached (nothing could have found it)."""
        return next((b for b in blocks if self.is_free(b) and b not in self.hash_of), None)

    def free_breach(self, blocks: Sequence[int]) -> int | None:
        """The first block named more often than it is referenced (a double free, vLLM #42571)."""
        named: Counter[int] = Counter()
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            named[block] += 1
            if named[block] > self.ref[block]:
                return block
        return None

    def cache_breach(self, table: Sequence[int], start: int, end: int) -> str | None:
        """Why ``cache_full_blocks`` over ``table[start:end]`` is misuse, or ``None``."""
        if start >= end:
            return None
        if not self.enable_caching:
            return "prefix caching is disabled"
        seen: set[int] = set()
        for block in table[start:end]:
            if block == NULL_BLOCK:
                continue
            if self.ref[block] == 0:
                return f"block {block} is free"
            if block in self.hash_of:
                return f"block {block} is already cached"
            if block in seen:
                return f"block {block} appears twice"
            seen.add(block)
        return None

    # ------------------------------------------------------------- updates
    def allocate(self, count: int) -> list[int]:
        """Take the queue's front; :meth:`reused` names the watched blocks among them first."""
        taken, self.queue = self.queue[:count], self.queue[count:]
        for block in taken:
            self.drop_hash(block)
            self.ref[block] = 1
        return taken

    def touch(self, blocks: Sequence[int]) -> None:
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            if self.ref[block] == 0:
                self.queue.remove(block)
            self.ref[block] += 1

    def free(self, blocks: Sequence[int]) -> list[int]:
        """Release one reference per occurrence; returns the blocks that became free, in call order."""
        reuse_first: list[int] = []
        evict_last: list[int] = []
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            self.ref[block] -= 1
            if self.ref[block] == 0:
                (evict_last if block in self.hash_of else reuse_first).append(block)
        self.queue = reuse_first + self.queue + evict_last
        return reuse_first + evict_last

    def cache(self, table: Sequence[int], hashes: Sequence[int], start: int, end: int) -> list[int]:
        """Hash ``table[start:end]`` (null blocks skipped); returns the positions cached."""
        positions = [i for i in range(start, end) if table[i] != NULL_BLOCK]
        for i in positions:
            self.hash_of[table[i]] = hashes[i]
            self.cached.setdefault(hashes[i], []).append(table[i])
        return positions

    def drop_hash(self, block: int) -> int | None:
        block_hash = self.hash_of.pop(block, None)
        if block_hash is not None:
            self.cached[block_hash].remove(block)
            if not self.cached[block_hash]:
                del self.cached[block_hash]
        return block_hash

    def reused(self, blocks: Sequence[int]) -> list[int]:
        """The watched blocks among ``blocks`` (handed out now), in order; their watchers are spent."""
        fired = [b for b in blocks if b in self.watched]
        for block in fired:
            del self.watched[block]
        return fired

    def unpin(self, blocks: Sequence[int]) -> list[int]:
        """``unpin_blocks``: one reference released per occurrence, each block watched; those reaching 0
        join the tail in call order, hashed or not.  Returns them."""
        released: list[int] = []
        for block in blocks:
            self.ref[block] -= 1
            self.watched[block] = None
            if self.ref[block] == 0:
                released.append(block)
        self.queue = self.queue + released
        return released

    def evict(self, blocks: Sequence[int]) -> list[int]:
        """Drop the hashes of ``blocks``; the queue does not change.  Returns the free blocks unhashed."""
        return [b for b in blocks if self.drop_hash(b) is not None and self.is_free(b)]

    def reset(self) -> bool:
        if self.num_free != self.usable:
            return False
        self.hash_of.clear()
        self.cached.clear()
        return True

    def reset_watchers(self) -> list[int]:
        """A successful reset fires every watcher (vLLM ``block_pool.py:893-896``); returns them."""
        fired, self.watched = list(self.watched), {}
        return fired

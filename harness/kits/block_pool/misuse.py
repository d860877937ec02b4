"""Misuse of a block pool beyond double frees: malformed ``cache_full_blocks`` calls and arguments that are not blocks.

vLLM's ``BlockPool`` asserts (or corrupts) on these; ``poolfuzz.pools.block_pool`` raises a
typed error before changing anything.  Each kind is built from the model's state
(a held uncached block, a held cached one, a free one) and names the one error
the contract demands; a kind the state cannot offer is skipped.  The mixin needs
the driver's ``pool``, ``model``, ``misuse`` and ``event``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolfuzz.harness.judge.driver import SKIPPED, operation
from poolfuzz.harness.kits.block_pool.model import NULL_BLOCK, BlockPoolModel
from poolfuzz.pools.block_pool import BlockPool
from poolfuzz.pools.errors import BadBatchError, BadSizeError, BlockStateError, DoubleFreeError, ForeignIndexError, PoolError

CACHE_MISUSE: dict[str, type[PoolError]] = {
    "num_cached_blocks past the table": BadSizeError,
    "a float num_full_blocks": BadSizeError,
    "fewer hashes than full blocks": BadBatchError,
    "a hash that is not an int or bytes": BadBatchError,
    "a free block": BlockStateError,
    "a block already cached": BlockStateError,
    "a block named twice": BadBatchError,
    "caching disabled": BlockStateError,
}
"""``cache_full_blocks`` misuse and the error each must raise."""

FOREIGN_BLOCKS: dict[str, type[PoolError]] = {"an int instead of a block": BadBatchError, "a block of another pool": ForeignIndexError}
"""What ``touch`` / ``free_blocks`` / ``cache_full_blocks`` are handed instead of one of the pool's blocks."""


class BlockPoolMisuse:
    """``cache_misuse``, ``foreign_block``, ``unpin_misuse`` and ``evict_non_int`` for :class:`~poolfuzz.harness.kits.block_pool.driver.BlockPoolDriver`."""

    pool: Any
    model: BlockPoolModel
    misuse: Callable[..., Any]
    event: Callable[[str], None]

    def _held(self, *, cached: bool) -> list[int]:
        model = self.model
        return [b for b in range(1, model.num_gpu_blocks) if model.ref[b] > 0 and (b in model.hash_of) == cached]

    def _cache_call(self, kind: str) -> Callable[[], None] | None:
        """The malformed ``cache_full_blocks`` call of ``kind``, or ``None`` when the state offers none."""
        model, pool = self.model, self.pool
        plain, cached = self._held(cached=False), self._held(cached=True)
        free = [b for b in range(1, model.num_gpu_blocks) if model.is_free(b)]
        table, hashes, start, end = plain[:1], [10_001], 0, 1
        if kind == "caching disabled" and model.enable_caching or kind != "caching disabled" and not model.enable_caching:
            return None
        if kind == "num_cached_blocks past the table":
            start, end = 2, None  # type: ignore[assignment]
        elif kind == "a float num_full_blocks":
            end = 1.5  # type: ignore[assignment]
        elif kind == "fewer hashes than full blocks":
            hashes = []
        elif kind == "a hash that is not an int or bytes":
            hashes = ["h"]  # type: ignore[list-item]
        elif kind == "a free block":
            table = free[:1]
        elif kind == "a block already cached":
            table = cached[:1]
        elif kind == "a block named twice":
            table, hashes, end = plain[:1] * 2, [10_001, 10_002], 2
        if not table:
            return None
        return lambda: pool.cache_full_blocks([pool.blocks[b] for b in table], hashes, start, end)

    def cache_misuse_ready(self, kind: str) -> bool:
        """Whether the state offers what ``cache_misuse(kind)`` needs (the walk builds it first otherwise)."""
        return kind in CACHE_MISUSE and self._cache_call(kind) is not None

    @operation
    def cache_misuse(self, kind: str) -> Any:
        """A ``cache_full_blocks`` call of :data:`CACHE_MISUSE`: its error, nothing cached."""
        call = self._cache_call(kind) if kind in CACHE_MISUSE else None
        if call is None:
            return SKIPPED
        result = self.misuse(call, CACHE_MISUSE[kind], f"cache_full_blocks with {kind}")
        if result is not SKIPPED:
            self.event(f"misuse: cache_full_blocks with {kind}")
        return result

    @operation
    def foreign_block(self, call: str, kind: str) -> Any:
        """``touch``, ``free_blocks`` or ``cache_full_blocks`` handed :data:`FOREIGN_BLOCKS` ``kind``: its error."""
        if kind not in FOREIGN_BLOCKS or call not in ("touch", "free_blocks", "cache_full_blocks"):
            return SKIPPED
        stranger: Any = 1 if kind == "an int instead of a block" else BlockPool(self.model.num_gpu_blocks + 1).blocks[-1]
        method = getattr(self.pool, call)
        args: tuple[Any, ...] = ([stranger], [10_003]) if call == "cache_full_blocks" else ([stranger],)
        if call == "cache_full_blocks" and not self.model.enable_caching:
            return SKIPPED  # the disabled cache refuses first: that is ``cache_misuse``'s case
        result = self.misuse(lambda: method(*args), FOREIGN_BLOCKS[kind], f"{call} of {kind}")
        if result is not SKIPPED:
            self.event(f"misuse: {call} of {kind}")
        return result

    @operation
    def unpin_misuse(self, kind: str) -> Any:
        """``unpin_blocks`` of more references than a block holds, or of the null block: its error, nothing released.

        vLLM's ``unpin_blocks`` (block_pool.py:748-767) decrements without a check, so a second unpin
        drives ``ref_cnt`` negative and queues the block twice; ours refuses with the numbers.
        """
        unpin = getattr(self.pool, "unpin_blocks", None)
        if unpin is None:
            return SKIPPED
        error: type[PoolError]
        if kind == "more unpins than references":
            held = [b for b in range(1, self.model.num_gpu_blocks) if self.model.ref[b] > 0]
            if not held:
                return SKIPPED
            block = self.pool.blocks[held[0]]
            named, error = [block] * (self.model.ref[held[0]] + 1), DoubleFreeError
        elif kind == "the null block":
            named, error = [self.pool.blocks[NULL_BLOCK]], BlockStateError
        else:
            return SKIPPED
        result = self.misuse(lambda: unpin(named, lambda block: None), error, f"unpin_blocks of {kind}")
        if result is not SKIPPED:
            self.event(f"misuse: unpin_blocks of {kind}")
        return result

    @operation
    def evict_non_int(self, block_id: float | str) -> Any:
        """``evict_blocks`` of an id that is not an int: ``BadBatchError``."""
        result = self.misuse(lambda: self.pool.evict_blocks([NULL_BLOCK, block_id]), BadBatchError, f"evict_blocks of {block_id!r}")
        if result is not SKIPPED:
            self.event("misuse: evict_blocks of an id that is not an int")
        return result

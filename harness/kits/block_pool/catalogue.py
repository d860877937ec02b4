"""The ``block_pool`` family's catalogue: one move per kind of misuse ``BlockPool`` must reject beyond double
frees, and its corners (see :mod:`poolfuzz.harness.kits.kv.catalogue`).

Each corner has a setup that builds the state it needs (a request holding an uncached
block and a cached one, a window slid past a request's first block, one hash cached under
two blocks, a pool whose every block is free and cached).  The moves read
:class:`~poolfuzz.harness.kits.block_pool.views.BlockPoolView`, never the driver.
"""

from __future__ import annotations

from poolfuzz.harness.kits.block_pool.misuse import CACHE_MISUSE, FOREIGN_BLOCKS
from poolfuzz.harness.kits.block_pool.model import chain_hashes as model_hashes
from poolfuzz.harness.kits.block_pool.ops import BlockPoolOps
from poolfuzz.harness.kits.block_pool.views import BlockPoolView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import Draw, Move, Overrides, Step, fixed

BlockDraw = Draw[BlockPoolView]

UNSHARED = 7
"""A token outside :data:`poolfuzz.harness.kits.block_pool.moves.ALPHABET`: a prompt of it never hits the prefix cache."""


def _build_held_blocks(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Toward a request holding an uncached block and a cached one: admit it, allocate, cache its first block."""
    live = [h for h in view.live() if len(view.hashes(h)) == 2]
    if not live:
        return (BlockPoolOps.admit, {"tokens": [UNSHARED, UNSHARED]}) if view.num_free >= 2 else None
    handle = live[-1]
    table = view.table(handle)
    if len(table) < 2:
        return BlockPoolOps.allocate, {"handle": handle, "num_blocks": 2 - len(table)}
    if view.num_cached(handle) == 0 and view.enable_caching:
        return BlockPoolOps.cache, {"handle": handle, "num_full": 1}
    return None


def _cache_after_slide(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Cache a request whose first block a sliding window replaced by the null block (it is skipped)."""
    for handle in view.live():
        table, hashes = view.table(handle), view.hashes(handle)
        if table[:1] == [0] and view.num_cached(handle) == 0 and min(len(table), len(hashes)) > 1:
            return BlockPoolOps.cache, {"handle": handle, "num_full": len(hashes)}
    return None


def _toward_a_slide(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Admit a request of two unshared blocks, allocate them, slide its first out."""
    fresh = [h for h in view.live() if len(view.hashes(h)) == 2 and view.num_cached(h) == 0]
    if not fresh:
        return (BlockPoolOps.admit, {"tokens": [UNSHARED, UNSHARED + 1]}) if view.num_free >= 2 else None
    table = view.table(fresh[-1])
    if len(table) < 2:
        return BlockPoolOps.allocate, {"handle": fresh[-1], "num_blocks": 2 - len(table)}
    return BlockPoolOps.slide, {"handle": fresh[-1], "num_skipped": 1}


def _cache_misuse(kind: str) -> BlockDraw:
    return lambda view, choose: (BlockPoolOps.cache_misuse, {"kind": kind}) if view.cache_misuse_ready(kind) else None


def _evict_uncached(view: BlockPoolView, choose: Chooser) -> Step | None:
    plain = view.uncached_blocks()
    return (BlockPoolOps.evict, {"block_ids": plain[:2]}) if plain and view.has_cached() else None


def _shared_hash(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Evict one of two blocks cached under one hash (the other keeps it)."""
    shared = view.shared_hashes()
    return (BlockPoolOps.evict, {"block_ids": shared[0][:1]}) if shared else None


def _toward_a_shared_hash(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Two requests admitted with one unshared prompt before either caches it, allocated, then both cached."""
    if not view.enable_caching:
        return None
    key = model_hashes([UNSHARED + 2])
    twins = [h for h in view.live() if view.hashes(h) == key]
    if len(twins) < 2:
        return (BlockPoolOps.admit, {"tokens": [UNSHARED + 2]}) if view.num_free >= 2 - len(twins) else None
    empty = [h for h in twins if not view.table(h)]
    if empty:
        return BlockPoolOps.allocate, {"handle": empty[0], "num_blocks": 1}
    uncached = [h for h in twins if view.num_cached(h) == 0]
    return (BlockPoolOps.cache, {"handle": uncached[0], "num_full": 1}) if uncached else None


def _toward_reset(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Free every live request, caching one block first if nothing is cached."""
    if not view.has_cached():
        return _build_held_blocks(view, choose)
    live = view.live()
    return (BlockPoolOps.free, {"handle": live[0]}) if live else None


def _reset_cached(view: BlockPoolView, choose: Chooser) -> Step | None:
    return (BlockPoolOps.reset, {}) if view.has_cached() and view.num_free == view.usable else None


def _touch_free_uncached(view: BlockPoolView, choose: Chooser) -> Step | None:
    idle = [b for b in view.uncached_blocks() if view.is_free(b)]
    return (BlockPoolOps.touch, {"block_ids": idle[:1]}) if idle else None


def block_pool_catalogue() -> tuple[Move[BlockPoolView], ...]:
    """Every kind of misuse ``BlockPool`` must reject beyond double frees, and the null-block caching corner."""
    constructors: tuple[Overrides, ...] = ({"num_gpu_blocks": 0}, {"num_gpu_blocks": 2.5}, {"num_gpu_blocks": True})
    return (
        Move("cache after a slide", 0.2, _cache_after_slide, setup=_toward_a_slide),
        Move("evict blocks without a hash", 0.1, _evict_uncached, setup=_build_held_blocks),
        Move("evict one of two blocks under one hash", 0.1, _shared_hash, setup=_toward_a_shared_hash),
        Move("reset with cached free blocks", 0.1, _reset_cached, setup=_toward_reset),
        *(
            Move(f"cache_full_blocks with {kind}", 0.05, _cache_misuse(kind), misuse=True, setup=_build_held_blocks)
            for kind in CACHE_MISUSE
        ),
        *(
            Move(f"{call} of {kind}", 0.03, fixed(BlockPoolOps.foreign_block, call=call, kind=kind), misuse=True)
            for call in ("touch", "free_blocks", "cache_full_blocks")
            for kind in FOREIGN_BLOCKS
        ),
        Move("evict of a float id", 0.03, fixed(BlockPoolOps.evict_non_int, block_id=1.5), misuse=True),
        *(
            Move(f"unpin_blocks of {kind}", 0.03, fixed(BlockPoolOps.unpin_misuse, kind=kind), misuse=True, setup=_build_held_blocks)
            for kind in ("more unpins than references", "the null block")
        ),
        Move("touch of a free uncached block", 0.03, _touch_free_uncached, misuse=True),
        *(Move(f"malformed constructor {c}", 0.02, fixed(BlockPoolOps.construct, overrides=c), misuse=True) for c in constructors),
    )

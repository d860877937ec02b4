"""The ``block_pool`` family's move table: requests come and go the way vLLM's KV-cache manager moves them.

One table serves the hypothesis machine, the walk and the bench workload
(:mod:`poolfuzz.strategies.table`); the moves read the pool only through
:class:`~poolfuzz.harness.kits.block_pool.views.BlockPoolView`; the catalogue is
:mod:`poolfuzz.harness.kits.block_pool.catalogue`.

Pools are tiny (a null block plus 0..9 usable blocks): full pools and reused
blocks are where the ordering and ref-count bugs live.  Prompts are a few
"tokens" from a three-letter alphabet, one token per block, so two requests
share a prefix often and prefix hits happen within a handful of steps.  Block
ids are drawn among the blocks the state offers (cached ones, every block, raw
ids past the pool for misuse), so a draw never names a block the pool lacks
unless it means to.

``prefill`` is vLLM's path for a new request (prefix lookup and touch, the
caller's free-count check, allocation, caching), one step per setup: it first
completes the prefill of the request made last (allocate what its prompt lacks if
that fits, cache its full blocks), then admits the next; ``prefill a short
request`` admits, allocates and caches one and then frees it, leaving its blocks
cached and evictable; ``share a short request`` does the same for a request that
shares cached blocks by id.  The single-call moves (allocate, cache, free, slide,
share, evict, reset) interleave the same steps in any order.  The free-count check a scheduler makes before
allocating is answered by the view (the model, which every step has just compared
with the pool).  Whether a call is valid is the driver's decision; misuse moves
are issued only to targets that validate their input.
"""

from __future__ import annotations

from collections.abc import Iterator

from poolfuzz.harness.kits.block_pool.catalogue import block_pool_catalogue
from poolfuzz.harness.kits.block_pool.config import BlockPoolConfig
from poolfuzz.harness.kits.block_pool.ops import BlockPoolOps
from poolfuzz.harness.kits.block_pool.views import BlockPoolView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import Draw, Move, MoveTable, Step, fixed, one_of, viewed_table, with_repeat

ALPHABET = 3
"""Distinct block contents: small, so prompts collide on their prefixes."""
MAX_PROMPT_BLOCKS = 4
"""Full blocks of a request's prompt at most."""
MAX_BLOCKS = 10
"""``num_gpu_blocks`` at most (the null block included)."""
RAW_IDS = (-1, 12)
"""The range misuse draws raw block ids from: negative, the null block, held, free and past the end."""

BlockDraw = Draw[BlockPoolView]


def block_pool_config(choose: Chooser, *, max_blocks: int = MAX_BLOCKS) -> BlockPoolConfig:
    """``BlockPool(num_gpu_blocks, enable_caching)`` without ``device`` (the engine adds it; the driver drops it).

    ``num_gpu_blocks`` counts the null block, so 1 is a pool with nothing to hand
    out: 3 to 6 a third of the time, 2 a third, any size up to ``max_blocks`` the rest;
    caching is on three draws in four (off, nothing is ever hashed).
    """
    branch = choose.randrange(3)
    count = choose.randint(3, 6) if branch == 0 else 2 if branch == 1 else choose.randint(1, max_blocks)
    return BlockPoolConfig(num_gpu_blocks=count, enable_caching=choose.choice((True, True, False, True)))


def block_pool_corners(config: BlockPoolConfig) -> list[str]:
    """Event labels for the pools that start in a corner: nothing to hand out (only the null block), one block."""
    usable = config.num_gpu_blocks - 1
    return ["corner: an empty pool"] if usable <= 0 else ["corner: a pool of one"] if usable == 1 else []


def tokens(choose: Chooser) -> list[int]:
    """A request's full blocks as tokens ``0..ALPHABET-1`` (none to four); the driver chains them into block hashes."""
    return [choose.randrange(ALPHABET) for _ in range(choose.randint(0, MAX_PROMPT_BLOCKS))]


# ---------------------------------------------------------------- prefills
def _prefill_step(view: BlockPoolView, handle: int) -> Step | None:
    """The next step of a live request's prefill: allocate what its prompt lacks if that fits the free count,
    then cache its full blocks; ``None`` when it is done (or its allocation does not fit)."""
    table, full, cached = view.shape(handle)
    if full > table:
        return (BlockPoolOps.allocate, {"handle": handle, "num_blocks": full - table}) if full - table <= view.num_free else None
    if cached < full and view.enable_caching:
        return BlockPoolOps.cache, {"handle": handle, "num_full": full}
    return None


def _pending(view: BlockPoolView, choose: Chooser) -> Step | None:
    """The next prefill step of the request made last, if it is live and has one (an older request another
    step overtook is left to the single-call moves)."""
    newest = view.newest()
    return _prefill_step(view, newest) if newest is not None and view.is_live(newest) else None


def _admit(view: BlockPoolView, choose: Chooser) -> Step:
    return BlockPoolOps.admit, {"tokens": tokens(choose)}


def _prefill(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Admit a new request (its hits touched), once no prefill is pending (the setup completes those first)."""
    return _admit(view, choose) if _pending(view, choose) is None else None


def _toward_prefill(view: BlockPoolView, choose: Chooser) -> Step | None:
    """The pending prefill step: the allocation, then the caching, of the request made last."""
    return _pending(view, choose)


def _finish_short(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Free the request made last once its prefill is done: a short request, its blocks left cached and evictable."""
    newest = view.newest()
    if _pending(view, choose) is not None or newest is None or not view.is_live(newest):
        return None
    return BlockPoolOps.free, {"handle": newest}


def _toward_a_short_request(view: BlockPoolView, choose: Chooser) -> Step | None:
    """The pending prefill steps, else a new request to prefill."""
    return _pending(view, choose) or _admit(view, choose)


# ---------------------------------------------------------------- single calls
def _allocate(view: BlockPoolView, choose: Chooser) -> Step | None:
    """A few blocks (more than are free is the caller's to refuse: misuse), exactly the free count (a full pool,
    where the next ask is the caller's to refuse), or what the request's prompt lacks, capped at the free count
    (two at most when it lacks none)."""
    live = view.live()
    if not live:
        return None
    handle = choose.choice(live)
    branch = choose.randrange(3)
    if branch == 0:
        count = choose.randint(0, 4)
    elif branch == 1:
        count = view.num_free
    else:
        lacks = max(0, len(view.hashes(handle)) - len(view.table(handle)))
        count = min(lacks or choose.randint(0, 2), view.num_free)
    return BlockPoolOps.allocate, {"handle": handle, "num_blocks": count}


def _cache(view: BlockPoolView, choose: Chooser) -> Step | None:
    """``cache_full_blocks`` up to a drawn count of full blocks, or of the whole table."""
    live = view.live()
    if not live:
        return None
    handle = choose.choice(live)
    num_full = choose.randint(0, 5) if choose.randrange(2) == 0 else len(view.table(handle))
    return BlockPoolOps.cache, {"handle": handle, "num_full": num_full}


_free = one_of(BlockPoolOps.free, BlockPoolView.live)


def _slide(view: BlockPoolView, choose: Chooser) -> Step | None:
    """A sliding window passes a request's first blocks."""
    live = view.live()
    return (BlockPoolOps.slide, {"handle": choose.choice(live), "num_skipped": choose.randint(1, 4)}) if live else None


def _unpin(view: BlockPoolView, choose: Chooser) -> Step | None:
    """A request's block released with ``unpin_blocks`` (vLLM's HiSparse coordinator, one resident page at a time)."""
    live = [h for h in view.live() if any(view.table(h))]
    if not live:
        return None
    handle = choose.choice(live)
    return BlockPoolOps.unpin, {"handle": handle, "position": choose.choice([i for i, b in enumerate(view.table(handle)) if b])}


def _share(view: BlockPoolView, choose: Chooser) -> Step | None:
    """A new request touching two or three cached blocks by id, the evictable ones when there are any; half the
    time one of them is named twice (a block a sliding window revisits)."""
    cached = view.cached_blocks()
    if not cached:
        return None
    onto = [b for b in cached if view.is_free(b)] or cached
    if choose.randrange(2) == 0:
        return BlockPoolOps.touch, {"block_ids": with_repeat([choose.choice(onto) for _ in range(choose.randint(1, 2))], choose)}
    return BlockPoolOps.touch, {"block_ids": [choose.choice(onto) for _ in range(choose.randint(2, 3))]}


def _finish_shared(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Free the request made last if it is one that shared blocks by id (a short request)."""
    newest = view.newest()
    if newest is None or not view.is_live(newest) or view.hashes(newest) or not view.table(newest):
        return None
    return BlockPoolOps.free, {"handle": newest}


def _touch(view: BlockPoolView, choose: Chooser) -> Step:
    """One or two touchable blocks (the null block, held ones, cached free ones)."""
    touchable = view.touchable()
    return BlockPoolOps.touch, {"block_ids": [choose.choice(touchable) for _ in range(choose.randint(1, 2))]}


def _evict_cached(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Cached blocks, held (what vLLM's scheduler evicts after a failed KV load) or free."""
    cached = view.cached_blocks()
    return (BlockPoolOps.evict, {"block_ids": [choose.choice(cached) for _ in range(choose.randint(1, 3))]}) if cached else None


def _evict_a_table(view: BlockPoolView, choose: Chooser) -> Step | None:
    """A request's blocks from a drawn position on (the null block when none is left)."""
    live = view.live()
    if not live:
        return None
    return BlockPoolOps.evict, {"block_ids": view.table(choose.choice(live))[choose.randint(0, 2) :] or [0]}


def _reset_at_the_boundary(view: BlockPoolView, choose: Chooser) -> Step | None:
    """Near the boundary only: with every block free (it succeeds) or one in use (it must refuse)."""
    return (BlockPoolOps.reset, {}) if view.has_cached() and view.usable - view.num_free <= 1 else None


_free_again = one_of(BlockPoolOps.free, BlockPoolView.freed)


_allocate_negative = one_of(BlockPoolOps.allocate, BlockPoolView.live, num_blocks=-1)


def _by_id(call: str) -> BlockDraw:
    """Name blocks by id where the contract forbids it: touch free uncached blocks, release blocks nobody holds
    that often (calls that turn out valid run as such)."""

    def draw(view: BlockPoolView, choose: Chooser) -> Step:
        every = view.num_gpu_blocks
        return call, {"block_ids": [choose.randrange(every) for _ in range(choose.randint(1, 3))]}

    return draw


def _evict_raw(view: BlockPoolView, choose: Chooser) -> Step:
    """Evict ids outside the pool, negative ones included (ids that turn out valid run as such)."""
    return BlockPoolOps.evict, {"block_ids": [choose.randint(*RAW_IDS) for _ in range(choose.randint(1, 3))]}


def block_pool_moves() -> tuple[Move[BlockPoolView], ...]:
    """The random moves of a block pool, the commonest and the ones the canaries' states are built from first
    (hypothesis shrinks toward the first): prefills, short requests (cached blocks left free) and requests
    sharing them, then the rest.

    What the hand-written machine's rules did (prefills, short requests, allocations
    of a few blocks or of the free count, caching, frees, slides, sharing cached blocks,
    evictions, resets at the boundary; and the misuse: second frees, a negative count,
    blocks named by id) and what the bench walk drew (allocations of what a request
    lacks, caching of its whole table, touches of any touchable block, evictions of a
    request's blocks, resets in any state).
    """
    return (
        Move("prefill", 3, _prefill, setup=_toward_prefill),
        Move("share a short request", 0.5, _finish_shared, setup=_share),
        Move("prefill a short request", 1.5, _finish_short, setup=_toward_a_short_request),
        Move("free", 2, _free),
        Move("share", 1, _share),
        Move("allocate", 2, _allocate),
        Move("free again", 0.7, _free_again, misuse=True),
        Move("cache", 1.5, _cache),
        Move("evict cached", 0.8, _evict_cached),
        Move("slide", 0.7, _slide),
        Move("unpin", 0.5, _unpin),
        Move("touch", 0.4, _touch),
        Move("touch by id", 0.4, _by_id("touch"), misuse=True),
        Move("free_blocks by id", 0.4, _by_id("free_blocks"), misuse=True),
        Move("evict raw ids", 0.4, _evict_raw, misuse=True),
        Move("allocate negative", 0.2, _allocate_negative, misuse=True),
        Move("evict a request's blocks", 0.3, _evict_a_table),
        Move("reset", 0.1, fixed(BlockPoolOps.reset)),
        Move("reset at the boundary", 0.5, _reset_at_the_boundary),
    )


def block_pool_drain(view: BlockPoolView) -> Iterator[Step]:
    """Free every live request, then take the whole free queue in one ``get_new_blocks``, free it, and reset.

    The queue's order (which cached block is reused, so loses its hash, first) is state no step reads
    until that many blocks are asked for: one allocation of everything checks all of it
    (``free-queue-order``, ``cache-map``)."""
    for live in view.live():
        yield BlockPoolOps.free, {"handle": live}
    yield BlockPoolOps.admit, {"tokens": []}
    taker = view.newest()
    if taker is not None and view.num_free:
        yield BlockPoolOps.allocate, {"handle": taker, "num_blocks": view.num_free}
        yield BlockPoolOps.free, {"handle": taker}
    yield BlockPoolOps.reset, {}


def block_pool_table() -> MoveTable[BlockPoolView]:
    """The ``block_pool`` family's table."""
    return viewed_table(
        BlockPoolView,
        block_pool_config,
        block_pool_moves(),
        block_pool_catalogue(),
        corners=block_pool_corners,
        bench_moves=("prefill", "allocate", "cache", "free", "slide", "touch", "evict a request's blocks", "reset"),
        drain=block_pool_drain,
    )

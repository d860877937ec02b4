"""The SWA families' move tables: ``swa_kv`` (``SWATokenToKVPoolAllocator``) and ``pure_swa_kv``.

One table per family serves the hypothesis machine, the walk and the bench workload
(:mod:`poolfuzz.strategies.table`).  Here: each family's configurations, the corners they start in,
and the tables; the moves read the pool's state only through the views of
:mod:`poolfuzz.harness.kits.swa.views`.

``swa_kv``: both sides are drawn in pages, independently: the SWA side is usually the
smaller one in a real deployment, but the all-or-nothing checks only show on the side that
runs short first, so either may be.  Page size 1 (``alloc`` only) has a region of its own,
as in :mod:`poolfuzz.harness.kits.kv.configs`.  Its random moves are :mod:`poolfuzz.harness.kits.swa.random_moves`, its
catalogue :mod:`poolfuzz.harness.kits.swa.catalogue`.

``pure_swa_kv``: the token allocator's moves on the pure variant's one page-size-1 pool,
plus its SWA calls (:mod:`poolfuzz.harness.kits.swa.pure_moves`); its catalogue is
:func:`poolfuzz.harness.kits.swa.pure_moves.pure_swa_catalogue`.
"""

from __future__ import annotations

from collections.abc import Iterator

from poolfuzz.harness.kits.kv.configs import draw_page_count, draw_page_size
from poolfuzz.harness.kits.swa.catalogue import swa_catalogue
from poolfuzz.harness.kits.swa.config import PureSWAKVConfig, SWAKVConfig
from poolfuzz.harness.kits.swa.misuse import FREE_CALLS
from poolfuzz.harness.kits.swa.ops import SWAKVOps
from poolfuzz.harness.kits.swa.pure_moves import pure_swa_catalogue, pure_swa_moves
from poolfuzz.harness.kits.swa.random_moves import swa_moves
from poolfuzz.harness.kits.swa.views import PureSWAView, SWAView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import MoveTable, Step, config_corners, pool_corners, viewed_table

# ---------------------------------------------------------------- swa_kv configurations
CONFIG_REGIONS = ("small pages", "page size 1", "odd pages", "large pages", "tight SWA side", "roomy", "any")
"""Regions of the configuration space an example or walk episode keeps to (swarm testing over
configurations).  Small pages come first: the simplest example is paged, where every SWA call applies."""
REGION_PAGE_SIZES: dict[str, tuple[int, ...]] = {"page size 1": (1,), "small pages": (2, 4), "odd pages": (3, 5, 7),
                                                 "large pages": (16, 64)}
"""Page sizes a region draws from; the other regions draw :func:`~poolfuzz.harness.kits.kv.configs.draw_page_size`
(the KV allocators' :data:`~poolfuzz.harness.kits.kv.configs.PAGE_SIZES`, 1, or any size up to 64)."""


def swa_kv_config(choose: Chooser, *, max_pages: int = 8) -> SWAKVConfig:
    """``SWATokenToKVPoolAllocator(size, size_swa, page_size, device, need_sort, kernel)`` without ``device``.

    A :data:`CONFIG_REGIONS` region first, then the page size and the sides within it.  The
    full side is at least two pages half the time (``roomy``: one to three times
    ``max_pages``); the SWA side is drawn on its own (any size up to ``max_pages``, a tiny
    one, or up to the full side's), then capped below the full side half the time, as
    deployed (the SWA side runs short first); ``tight SWA side`` keeps it to a third of the
    full side.  ``kernel`` is ``vectorized`` or ``loop`` only: kernel agreement is
    ``paged_kv``'s business.
    """
    region = choose.choice(CONFIG_REGIONS)
    sizes = REGION_PAGE_SIZES.get(region)
    ps = choose.choice(sizes) if sizes else draw_page_size(choose)
    if region == "roomy":
        full = choose.randint(max_pages, 3 * max_pages)
    else:
        full = choose.randint(2, max_pages) if choose.random() < 0.5 else draw_page_count(choose, max_pages=max_pages)
    if region == "tight SWA side":
        swa = choose.randint(min(1, full), max(1, full // 3))
    else:
        kind = choose.randint(0, 2)
        swa = (choose.randint(1, max_pages) if kind == 0 else draw_page_count(choose, max_pages=max_pages) if kind == 1
               else choose.randint(0, full))
        if choose.random() < 0.5:
            swa = min(swa, max(1, full - 1))  # the SWA side runs short first
    need_sort = choose.choice((False, True))
    return SWAKVConfig(size=full * ps, size_swa=swa * ps, page_size=ps, need_sort=need_sort,
                       kernel=choose.choice(("vectorized", "loop")))


def swa_corners(config: SWAKVConfig) -> list[str]:
    """The corners a pool starts in (page size 1, large pages, a full side of no page or one), and an SWA
    side of no page or one."""
    labels = config_corners(config)
    swa_pages = config.size_swa // config.tokens_per_page
    if swa_pages <= 1:
        labels.append("corner: an SWA side of no page" if swa_pages == 0 else "corner: an SWA side of one page")
    return labels


SWA_BENCH_MOVES = ("admit", "grow", "decode", "swa tail", "SWA short at a page edge", "tail on recycled pages",
                   "window slides", "free", "free out of the window", "alloc", "free group", "clear",
                   "empty extend batch", *(f"{call} of no index" for call in FREE_CALLS))
"""The valid moves the bench workload takes: those of the walk the ``swa_kv`` bench walked before the table."""


def swa_kv_drain(view: SWAView) -> Iterator[Step]:
    """Close an open free group, free every request, admit one request as long as both sides can hold
    (which pages each side hands out next, and the SWA peers they map to), free it, then ``clear``."""
    if view.group_open():
        yield SWAKVOps.group_end, {}
    for handle in view.live():
        yield SWAKVOps.free, {"handle": handle}
    pages = min(view.full_free(), view.swa_free())
    if pages:
        yield SWAKVOps.extend, {"batch": [[None, pages * view.page_size]]}
        for handle in view.live():
            yield SWAKVOps.free, {"handle": handle}
    yield SWAKVOps.clear, {}


def pure_swa_kv_drain(view: PureSWAView) -> Iterator[Step]:
    """The token allocator's drain on the pure pool: free every holder, take every free slot in one ``alloc``
    (the free list's order), free it, then ``clear``."""
    if view.group_open:
        yield SWAKVOps.group_end, {}
    for handle in view.live():
        yield SWAKVOps.free, {"handle": handle}
    if view.free_pages():
        yield SWAKVOps.alloc, {"need_size": view.free_pages()}
        for handle in view.live():
            yield SWAKVOps.free, {"handle": handle}
    yield SWAKVOps.clear, {}


def swa_kv_table() -> MoveTable[SWAView]:
    """``swa_kv``: admissions and tails sized to page edges, decodes, the window sliding, frees on both sides."""
    return viewed_table(SWAView, swa_kv_config, swa_moves(), swa_catalogue(), bench_moves=SWA_BENCH_MOVES,
                        corners=swa_corners, drain=swa_kv_drain)


# ---------------------------------------------------------------- pure_swa_kv
ROOMY_PURE_SIZE = 64
"""A pure pool the size of the bench's, one draw in ten."""


def pure_swa_kv_config(choose: Chooser, *, max_size: int = 16) -> PureSWAKVConfig:
    """``PureSWATokenToKVPoolAllocator(size_swa, page_size=1, device, need_sort)`` without ``device``: a tiny
    or small pool, one draw in ten one of :data:`ROOMY_PURE_SIZE` slots."""
    size = draw_page_count(choose, max_pages=max_size) if choose.random() < 0.9 else ROOMY_PURE_SIZE
    return PureSWAKVConfig(size_swa=size, need_sort=choose.choice((False, True)))


def pure_swa_corners(config: PureSWAKVConfig) -> list[str]:
    """An empty pool or a pool of one slot (every pure pool has page size 1: not a corner here)."""
    return pool_corners(size=config.size_swa)


def pure_swa_kv_table() -> MoveTable[PureSWAView]:
    """``pure_swa_kv``: the token allocator's moves on the pure pool, its SWA frees, its catalogue."""
    return viewed_table(
        PureSWAView, pure_swa_kv_config, pure_swa_moves(), pure_swa_catalogue(), corners=pure_swa_corners,
        bench_moves=("alloc", "free", "free group", "free part", "clear", "free_swa", "free padded", "free_full"),
        drain=pure_swa_kv_drain)

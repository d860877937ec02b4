"""The KV allocators' configurations (``token_kv``, ``paged_kv``): page sizes, pool sizes, kernels, regions.

Sizes are tiny and sit near page boundaries, where off-by-one bugs live: pools of 0, 1
or 2 pages.  Page sizes include non-powers of two, which only the ``loop`` and
``vectorized`` kernels accept; ``triton`` is drawn rarely (its CPU interpreter
costs milliseconds a launch) and only for power-of-two page sizes where it
imports.
"""

from __future__ import annotations

from poolfuzz.harness.kits.kv.config import PagedKVConfig, TokenKVConfig
from poolfuzz.pools.page_alloc import triton_available
from poolfuzz.pools.page_alloc.counting import triton_page_size
from poolfuzz.strategies.choosers import Chooser

PAGE_SIZES = (2, 4, 3, 8, 16, 64, 5, 7)
"""Shrinks toward the small powers of two; 3, 5 and 7 exercise the non-power-of-two arithmetic."""
MANY_PAGES = 80
"""A pool large enough for one call to free more than 64 pages (the pools' table-based duplicate check)."""
KERNELS = ("vectorized", "vectorized", "loop", "loop", "vectorized")
"""``vectorized`` (the default) and ``loop``, drawn in these proportions; ``triton`` is drawn apart."""
TRITON_SHARE = 0.03
"""The chance of the ``triton`` kernel where the page size allows it (a power of two) and triton imports.

Its CPU interpreter costs about 8 ms a launch against a quarter of a millisecond for a
whole walk step, so the one share both engines draw keeps it rare: about one walk
episode in fifty, which costs the paged walk about a twelfth of its steps per second.
(The hand-written machine drew it one time in six, the walk never.)"""

CONFIG_REGIONS = ("small pages", "page size 1", "odd pages", "large pages", "roomy", "one page", "empty pool", "any", "many pages")
"""Regions of the paged configuration space; each example or walk episode keeps to one (swarm testing over
configurations), so page size 1, large pages, empty and full pools each get a steady share of the examples."""
REGION_PAGE_SIZES = {"page size 1": (1,), "small pages": (2, 4), "odd pages": (3, 5, 7), "large pages": (16, 64), "many pages": (1, 2)}
"""Page sizes a region draws from; the other regions draw :func:`draw_page_size`."""


def draw_page_size(choose: Chooser) -> int:
    """1 a third of the time: the degenerate size where upstream's decode count is zero; else 2..64."""
    kind = choose.randint(0, 2)
    if kind == 0:
        return 1
    return choose.choice(PAGE_SIZES) if kind == 1 else choose.randint(2, 64)


def draw_page_count(choose: Chooser, *, max_pages: int) -> int:
    """Pool sizes in pages: 0, 1 and 2 are where boundary bugs live, larger ones keep variety.

    The simplest value is 3, not 0: hypothesis's simplest draws (and its
    shrinker) gravitate to the first choice, and an empty pool can only refuse.
    """
    return choose.choice((3, 1, 2, 0)) if choose.random() < 0.5 else choose.randint(0, max_pages)


def region_pages(region: str, max_pages: int) -> tuple[int, int] | None:
    """Bounds of a region's pool size in pages; ``None``: :func:`draw_page_count`."""
    return {"empty pool": (0, 0), "one page": (1, 1), "roomy": (max_pages, 3 * max_pages), "many pages": (MANY_PAGES - 10, MANY_PAGES)}.get(
        region
    )


def kernel(choose: Chooser, *, page_size: int) -> str:
    """``vectorized`` and ``loop`` (:data:`KERNELS`); ``triton`` at :data:`TRITON_SHARE`, power-of-two sizes only.

    The Triton draw shrinks toward not taking it (a uniform draw at or past ``1 - share``).
    """
    name = choose.choice(KERNELS)
    if triton_page_size(page_size) and triton_available() and choose.random() >= 1.0 - TRITON_SHARE:
        return "triton"
    return name


def token_kv_config(choose: Chooser, *, max_size: int = 16) -> TokenKVConfig:
    """``TokenToKVPoolAllocator(size, device, need_sort)`` without ``device`` (the engine adds it); one draw
    in ten is a pool of :data:`MANY_PAGES`."""
    size = draw_page_count(choose, max_pages=max_size) if choose.random() < 0.9 else MANY_PAGES
    return TokenKVConfig(size=size, need_sort=choose.choice((False, True)))


def paged_kv_config(choose: Chooser, *, max_pages: int = 10, page_size: int | None = None) -> PagedKVConfig:
    """``PagedTokenToKVPoolAllocator(size, page_size, device, need_sort, kernel)`` without ``device``.

    A :data:`CONFIG_REGIONS` region is drawn first, then the page size and the
    pool size within it.  ``page_size`` replaces the page-size draw, e.g. 1 to
    fuzz one size only.  In the ``any`` region the pool may skip its ``last_loc``
    layout checks (``check_layout=False``, the CUDA default).
    """
    region = choose.choice(CONFIG_REGIONS)
    if page_size is not None:
        ps = page_size
    else:
        sizes = REGION_PAGE_SIZES.get(region)
        ps = choose.choice(sizes) if sizes else draw_page_size(choose)
    bounds = region_pages(region, max_pages)
    pages = draw_page_count(choose, max_pages=max_pages) if bounds is None else choose.randint(*bounds)
    need_sort = choose.choice((False, True))
    name = kernel(choose, page_size=ps)
    skip_layout = region == "any" and choose.choice((False, True))
    config = PagedKVConfig(size=pages * ps, page_size=ps, need_sort=need_sort, kernel=name)
    return config.replaced(check_layout=False) if skip_layout else config

"""Draws for the KV allocators: configs, allocation sizes, extend lengths, raw token indices.

Sizes are tiny and sit near page boundaries, where off-by-one bugs live: an
extend that ends one token before, on, or one after a page edge; pools of 0, 1
or 2 pages.  Page sizes include non-powers of two, which only the ``loop`` and
``vectorized`` kernels accept; ``triton`` is drawn rarely (its CPU interpreter
costs milliseconds a launch) and only for power-of-two page sizes where it
imports.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from pools.page_alloc import triton_available
from strategies.table import MoveTable, CORNER_EXACT, CORNER_MIXED, CORNER_REPEAT, Config, Move, Step, with_repeat
from strategies.kv_misuse import paged_catalogue, token_catalogue
from strategies.page_alloc import edge_extend_lengths

PAGE_SIZES = (2, 4, 3, 8, 16, 64, 5, 7)
"""Shrinks toward the small powers of two; 3, 5 and 7 exercise the non-power-of-two arithmetic."""


def page_sizes() -> SearchStrategy[int]:
    """1 a third of the time: the degenerate size where upstream's decode count is zero; else 2..64."""
    return st.one_of(st.just(1), st.sampled_from(PAGE_SIZES), st.integers(min_value=2, max_value=64))


def page_counts(*, max_pages: int) -> SearchStrategy[int]:
    """Pool sizes in pages: 0, 1 and 2 are where boundary bugs live, larger ones keep variety.

    The simplest value is 3, not 0: hypothesis's simplest draws (and its
    shrinker) gravitate to the first choice, and an empty pool can only refuse.
    """
    return st.one_of(st.sampled_from([3, 1, 2, 0]), st.integers(min_value=0, max_value=max_pages))


MANY_PAGES = 80
"""A pool large enough for one call to free more than 64 pages (the pools' table-based duplicate check)."""


def token_kv_configs(*, max_size: int = 16) -> SearchStrategy[Config]:
    """``TokenToKVPoolAllocator(size, device, need_sort)`` without ``device`` (the machine adds it); one draw
    in ten is a pool of :data:`MANY_PAGES`."""
    sizes = st.one_of(st.sampled_from([3, 1, 2, 0, MANY_PAGES]), st.integers(min_value=0, max_value=max_size))
    return st.fixed_dictionaries({"size": sizes, "need_sort": st.booleans()})


def kernels_for(*, page_size: int, allow_triton: bool = True) -> SearchStrategy[str]:
    """``vectorized`` (the default) and ``loop`` mostly; ``triton`` one draw in six, power-of-two sizes only."""
    names = ["vectorized", "vectorized", "loop", "loop", "vectorized"]
    if allow_triton and page_size & (page_size - 1) == 0 and triton_available():
        names.append("triton")
    return st.sampled_from(names)


CONFIG_REGIONS = ("small pages", "page size 1", "odd pages", "large pages", "roomy", "one page", "empty pool", "any",
                  "many pages")
"""Regions of the paged configuration space; each example or walk episode keeps to one (swarm testing over
configurations), so page size 1, large pages, empty and full pools each get a steady share of the examples."""
REGION_PAGE_SIZES = {"page size 1": (1,), "small pages": (2, 4), "odd pages": (3, 5, 7), "large pages": (16, 64),
                     "many pages": (1, 2)}
"""Page sizes a region draws from; the other regions draw :func:`page_sizes`."""


def region_pages(region: str, max_pages: int) -> tuple[int, int] | None:
    """Bounds of a region's pool size in pages; ``None``: :func:`page_counts`."""
    return {"empty pool": (0, 0), "one page": (1, 1), "roomy": (max_pages, 3 * max_pages),
            "many pages": (MANY_PAGES - 10, MANY_PAGES)}.get(region)


def paged_kv_configs(
    *, allow_triton: bool = True, max_pages: int = 10, sizes_of_pages: SearchStrategy[int] | None = None
) -> SearchStrategy[Config]:
    """``PagedTokenToKVPoolAllocator(size, page_size, device, need_sort, kernel)`` without ``device``.

    A :data:`CONFIG_REGIONS` region is drawn first, then the page size and the
    pool size within it.  ``sizes_of_pages`` replaces the page-size draw, e.g.
    ``st.just(1)`` to fuzz one size only.  In the ``any`` region the pool may
    skip its ``last_loc`` layout checks (``check_layout=False``, the CUDA default).
    """

    def build(page_size: int, region: str) -> SearchStrategy[Config]:
        bounds = region_pages(region, max_pages)
        pages = page_counts(max_pages=max_pages) if bounds is None else st.integers(*bounds)
        return st.fixed_dictionaries({
            "size": pages.map(lambda count: count * page_size),
            "page_size": st.just(page_size),
            "need_sort": st.booleans(),
            "kernel": kernels_for(page_size=page_size, allow_triton=allow_triton),
        }, optional={"check_layout": st.just(False)} if region == "any" else {})

    def in_region(region: str) -> SearchStrategy[Config]:
        if sizes_of_pages is not None:
            sizes = sizes_of_pages
        else:
            sizes = st.sampled_from(REGION_PAGE_SIZES[region]) if region in REGION_PAGE_SIZES else page_sizes()
        return sizes.flatmap(lambda page_size: build(page_size, region))

    return st.sampled_from(CONFIG_REGIONS).flatmap(in_region)


def alloc_sizes(*, page_size: int, misuse: bool) -> SearchStrategy[int]:
    """Whole pages (1..3 of them, or 0); with ``misuse`` also a negative and an unaligned size."""
    aligned = st.one_of(st.integers(min_value=1, max_value=3), st.just(0)).map(lambda pages: pages * page_size)
    if not misuse:
        return aligned
    bad = [-page_size, -1] + ([page_size + 1, page_size - 1] if page_size > 1 else [])
    return st.one_of(aligned, st.sampled_from(bad))


def extend_lengths(*, page_size: int) -> SearchStrategy[int]:
    """A few tokens, one or two pages give or take a token, or a long prefill of three to eight pages.

    The long ones are what a real prefill chunk is: SGLang #9271's kernel wrote
    only a compile-time number of whole-page tokens, and extends of a page or two
    never reach past such a bound.
    """
    def pages_give_or_take(low: int, high: int) -> SearchStrategy[int]:
        return st.builds(lambda pages, delta: max(0, pages * page_size + delta),
                         st.integers(min_value=low, max_value=high), st.integers(min_value=-1, max_value=1))

    return st.one_of(st.integers(min_value=0, max_value=3), pages_give_or_take(1, 2), pages_give_or_take(3, 8))


def token_indices(*, page_size: int, num_pages: int) -> SearchStrategy[list[int]]:
    """Raw token indices from page -1 to two pages past the end: foreign, reserved and ordinary ones."""
    index = st.builds(lambda page, offset: page * page_size + offset % page_size,
                      st.integers(min_value=-1, max_value=num_pages + 2), st.integers(min_value=0, max_value=63))
    return st.lists(index, min_size=1, max_size=3)


# ---------------------------------------------------------------- plain-random twins
def sample_page_count(rng: random.Random, *, max_pages: int) -> int:
    """Twin of :func:`page_counts`."""
    return rng.choice((3, 1, 2, 0)) if rng.random() < 0.5 else rng.randint(0, max_pages)


def sample_token_kv_config(rng: random.Random, *, max_size: int = 16) -> Config:
    """Twin of :func:`token_kv_configs`."""
    size = MANY_PAGES if rng.random() < 0.1 else sample_page_count(rng, max_pages=max_size)
    return {"size": size, "need_sort": rng.random() < 0.5}


def sample_paged_kv_config(rng: random.Random, *, max_pages: int = 10, triton_share: float = 0.0) -> Config:
    """Twin of :func:`paged_kv_configs`, one :data:`CONFIG_REGIONS` region per draw.

    ``triton_share`` is the chance of the Triton kernel where the page size
    allows it: its CPU interpreter costs milliseconds a launch, so walks keep
    it rare and leave it mostly to the hypothesis rounds.
    """
    region = rng.choice(CONFIG_REGIONS)
    sizes = REGION_PAGE_SIZES.get(region)
    ps = rng.choice(sizes) if sizes else rng.choice((1, rng.choice(PAGE_SIZES), rng.randint(2, 64)))
    bounds = region_pages(region, max_pages)
    pages = sample_page_count(rng, max_pages=max_pages) if bounds is None else rng.randint(*bounds)
    kernel = rng.choice(("vectorized", "vectorized", "loop", "loop", "vectorized"))
    if ps & (ps - 1) == 0 and rng.random() < triton_share and triton_available():
        kernel = "triton"
    config: Config = {"size": pages * ps, "page_size": ps, "need_sort": rng.random() < 0.5, "kernel": kernel}
    if region == "any" and rng.random() < 0.5:
        config["check_layout"] = False
    return config


def _live(driver: Any) -> list[int]:
    model = driver.model
    return sorted(h for h in model.slots if model.slots[h])


def _plain_allocs(driver: Any) -> list[int]:
    return [h for h in _live(driver) if h not in driver.model.requests]


def _kv_alloc(driver: Any, rng: random.Random) -> Step:
    ps, free = driver.page_size, driver.model.available_pages()
    roll = rng.random()
    if roll < 0.6:
        need = rng.choice((1, 2, 3, 0)) * ps
    elif roll < 0.85:
        need = max(0, free + rng.choice((0, 1, -1))) * ps  # exactly what is free, one page more or less
    else:
        need = rng.choice((-ps, -1, ps + 1, ps - 1)) if driver.check_misuse and ps > 1 else ps
    return "alloc", {"need_size": need}


def _kv_free(driver: Any, rng: random.Random) -> Step | None:
    live = _live(driver)
    return ("free", {"handle": rng.choice(live)}) if live else None


def _kv_free_part(driver: Any, rng: random.Random) -> Step | None:
    plain = _plain_allocs(driver)
    if not plain:
        return None
    return "free_part", {"handle": rng.choice(plain), "count": rng.randint(1, 3), "sparse": rng.random() < 0.5}


def _kv_free_again(driver: Any, rng: random.Random) -> Step | None:
    gone = [h for h, slots in driver.model.released.items() if slots]
    return ("free_again", {"handle": rng.choice(gone)}) if gone else None


def _take_two_pages(driver: Any, rng: random.Random) -> Step:
    return "alloc", {"need_size": 2 * driver.page_size}


def _kv_free_repeat(driver: Any, rng: random.Random) -> Step | None:
    """A live slot named twice in one ``free`` (misuse for the token allocator; the paged one dedups pages)."""
    live = _live(driver)
    if not live:
        return None
    slots = driver.model.slots[rng.choice(live)]
    return "free_indices", {"indices": with_repeat(rng.sample(slots, min(len(slots), rng.randint(1, 2))), rng)}


def _kv_free_raw(driver: Any, rng: random.Random) -> Step | None:
    model = driver.model
    if not model.owner:
        return None
    ps = model.page_size
    return "free_indices", {"indices": [rng.randint(-1, model.num_pages + 2) * ps + rng.randint(0, 63) % ps
                                        for _ in range(rng.randint(1, 3))]}


def _kv_group(driver: Any, rng: random.Random) -> Step | None:
    model = driver.model
    if model.group_open:
        return "group_end", {}
    return ("group_begin", {}) if model.owner else None


def _kv_group_misuse(driver: Any, rng: random.Random) -> Step:
    return ("group_begin", {}) if driver.model.group_open else ("group_end", {})


def _kv_merge(driver: Any, rng: random.Random) -> Step | None:
    return ("merge", {}) if driver.model.has_staged else None


def _kv_clear(driver: Any, rng: random.Random) -> Step | None:
    return ("clear", {}) if driver.model.owner else None


_TOKEN_MOVES = (
    Move("alloc", 4, _kv_alloc),
    Move("free", 3, _kv_free),
    Move("free part", 1, _kv_free_part),
    Move("free group", 1.5, _kv_group),
    Move("free again", 0.5, _kv_free_again, misuse=True),
    Move("free repeating", 1, _kv_free_repeat, CORNER_REPEAT, misuse=True, setup=_take_two_pages),
    Move("free raw indices", 0.5, _kv_free_raw, misuse=True),
    Move("group misuse", 0.2, _kv_group_misuse, misuse=True),
    Move("merge", 0.5, _kv_merge),
    Move("clear", 0.3, _kv_clear),
)


def token_kv_walk() -> MoveTable:
    """``token_kv``: allocations sized to what is free, repeated slots in one free, staged frees, malformed calls."""
    return MoveTable(sample_token_kv_config, (*_TOKEN_MOVES, *token_catalogue()))


def _requests(driver: Any) -> list[int]:
    return sorted(driver.model.requests)


def _pages_needed(prefix: int, extend: int, ps: int) -> int:
    return -(-(prefix + extend) // ps) - -(-prefix // ps)


def _fit(driver: Any, batch: list[list[int | None]]) -> list[list[int | None]]:
    """The entries of ``batch``, in order, that the free pages can serve together."""
    ps, slots, room, fitting = driver.page_size, driver.model.slots, driver.model.available_pages(), []
    for handle, extend in batch:
        need = _pages_needed(len(slots[handle]) if handle is not None else 0, int(extend), ps)  # type: ignore[arg-type]
        if need <= room:
            fitting.append([handle, extend])
            room -= need
    return fitting


def _extend_batch(driver: Any, rng: random.Random, existing: list[int], new: int) -> Step:
    """Existing requests grown to, next to or pages past a page edge, new ones of a few pages; shuffled.

    Four batches in five are cut to what the free pages can serve (a refused
    batch exercises only the guard); the rest may be short.
    """
    ps, slots = driver.page_size, driver.model.slots
    batch: list[list[int | None]] = [[h, rng.choice(edge_extend_lengths(len(slots[h]), ps))] for h in existing]
    batch += [[None, rng.choice(edge_extend_lengths(0, ps) + [rng.randint(0, 3)])] for _ in range(new)]
    rng.shuffle(batch)
    return "extend", {"batch": _fit(driver, batch) if rng.random() < 0.8 else batch}


def _paged_unaligned(driver: Any, rng: random.Random) -> Step | None:
    """A request whose prefix ends mid-page, grown within its page or by whole pages, maybe beside one taking pages."""
    ps, slots = driver.page_size, driver.model.slots
    mid = [h for h in _requests(driver) if len(slots[h]) % ps]
    if not mid:
        return None
    handle = rng.choice(mid)
    to_edge = -len(slots[handle]) % ps
    grow = rng.choice((1, rng.randint(1, to_edge), to_edge, to_edge + 1, to_edge + ps, to_edge + 2 * ps))
    batch: list[list[int | None]] = [[handle, grow]]
    if rng.random() < 0.7:
        batch.insert(rng.randint(0, 1), [None, rng.choice((1, ps, ps + 1, 2 * ps))])
    return "extend", {"batch": _fit(driver, batch)}


def _admit_mid_page(driver: Any, rng: random.Random) -> Step | None:
    """Admit a request ending mid-page, if a page is free (none exists at page size 1)."""
    ps, room = driver.page_size, driver.model.available_pages()
    if ps == 1 or not room:
        return None
    return "extend", {"batch": [[None, rng.randint(1, ps - 1) + ps * rng.randint(0, min(1, room - 1))]]}


def _paged_admit(driver: Any, rng: random.Random) -> Step:
    return _extend_batch(driver, rng, [], rng.choice((1, 1, 2, 3, 0)))


def _paged_extend(driver: Any, rng: random.Random) -> Step | None:
    reqs = _requests(driver)
    if not reqs:
        return None
    return _extend_batch(driver, rng, rng.sample(reqs, rng.randint(1, min(3, len(reqs)))), rng.choice((0, 1, 1, 2)))


def _paged_fill(driver: Any, rng: random.Random) -> Step:
    """One new request taking exactly the free pages (ending anywhere on the last), or one page more."""
    ps, free = driver.page_size, driver.model.available_pages()
    pages = free + rng.choice((0, 0, 1))
    return "extend", {"batch": [[None, max(0, pages * ps - rng.randint(0, ps - 1))]]}


def _paged_decode(driver: Any, rng: random.Random) -> Step | None:
    """A few live requests, some at a page edge and some not, in any order."""
    reqs = _requests(driver)
    return ("decode", {"handles": rng.sample(reqs, rng.randint(1, min(4, len(reqs))))}) if reqs else None


def _paged_to_edge(driver: Any, rng: random.Random) -> Step | None:
    """Grow one request to a page edge, so its next decode opens a page."""
    reqs = _requests(driver)
    if not reqs:
        return None
    handle = rng.choice(reqs)
    return "extend", {"batch": [[handle, -len(driver.model.slots[handle]) % driver.page_size]]}


def _edges_and_mids(driver: Any) -> tuple[list[int], list[int]]:
    ps, slots = driver.page_size, driver.model.slots
    reqs = _requests(driver)
    return [h for h in reqs if len(slots[h]) % ps == 0], [h for h in reqs if len(slots[h]) % ps]


def _paged_decode_mixed(driver: Any, rng: random.Random) -> Step | None:
    """A decode batch with requests that open a page (as many as pages are free) and requests that do not, shuffled."""
    edge, mid = _edges_and_mids(driver)
    room = driver.model.available_pages()
    if not edge or not mid or not room:
        return None
    handles = [*rng.sample(edge, rng.randint(1, min(2, len(edge), room))), *rng.sample(mid, rng.randint(1, min(2, len(mid))))]
    rng.shuffle(handles)
    return "decode", {"handles": handles}


def _admit_edge_and_mid(driver: Any, rng: random.Random) -> Step | None:
    """Admit what a mixed decode lacks: a request ending mid-page, or one ending on a page edge."""
    edge, mid = _edges_and_mids(driver)
    if not mid:
        return _admit_mid_page(driver, rng)
    if edge:
        return None
    return "extend", {"batch": [[None, driver.page_size * rng.randint(0, min(1, driver.model.available_pages()))]]}


def paged_kv_walk(*, triton_share: float = 0.0) -> MoveTable:
    """``paged_kv``: the token moves plus extend batches at page-edge geometries, fills and mixed decodes."""
    return MoveTable(lambda rng: sample_paged_kv_config(rng, triton_share=triton_share), (
        *_TOKEN_MOVES,
        Move("admit", 0.5, _paged_admit),
        Move("extend at page edges", 1, _paged_extend, "corner: extend batch at page-edge geometry"),
        Move("unaligned prefix", 1.5, _paged_unaligned, "corner: an unaligned prefix grown by a remainder or whole pages",
             setup=_admit_mid_page),
        Move("fill", 0.5, _paged_fill, CORNER_EXACT),
        Move("decode", 1, _paged_decode),
        Move("decode mixed", 1.5, _paged_decode_mixed, CORNER_MIXED, setup=_admit_edge_and_mid),
        Move("grow to a page edge", 0.5, _paged_to_edge),
        *paged_catalogue(),
    ))

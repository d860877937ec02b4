"""Draws for the KV allocators: configs, allocation sizes, extend lengths, raw token indices.

Sizes are tiny and sit near page boundaries, where off-by-one bugs live: an
extend that ends one token before, on, or one after a page edge; pools of 0, 1
or 2 pages.  Page sizes include non-powers of two, which only the ``loop`` and
``vectorized`` kernels accept; ``triton`` is drawn rarely (its CPU interpreter
costs milliseconds a launch) and only for power-of-two page sizes where it
imports.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from pools.page_alloc import triton_available
from strategies.configs import Config

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


def token_kv_configs(*, max_size: int = 16) -> SearchStrategy[Config]:
    """``TokenToKVPoolAllocator(size, device, need_sort)`` without ``device`` (the machine adds it)."""
    return st.fixed_dictionaries({"size": page_counts(max_pages=max_size), "need_sort": st.booleans()})


def kernels_for(*, page_size: int, allow_triton: bool = True) -> SearchStrategy[str]:
    """``vectorized`` (the default) and ``loop`` mostly; ``triton`` one draw in six, power-of-two sizes only."""
    names = ["vectorized", "vectorized", "loop", "loop", "vectorized"]
    if allow_triton and page_size & (page_size - 1) == 0 and triton_available():
        names.append("triton")
    return st.sampled_from(names)


def paged_kv_configs(
    *, allow_triton: bool = True, max_pages: int = 10, sizes_of_pages: SearchStrategy[int] | None = None
) -> SearchStrategy[Config]:
    """``PagedTokenToKVPoolAllocator(size, page_size, device, need_sort, kernel)`` without ``device``.

    ``sizes_of_pages`` replaces the page-size draw, e.g. ``st.just(1)`` to fuzz one size only.
    """

    def build(page_size: int) -> SearchStrategy[Config]:
        return st.fixed_dictionaries({
            "size": page_counts(max_pages=max_pages).map(lambda pages: pages * page_size),
            "page_size": st.just(page_size),
            "need_sort": st.booleans(),
            "kernel": kernels_for(page_size=page_size, allow_triton=allow_triton),
        })

    return (page_sizes() if sizes_of_pages is None else sizes_of_pages).flatmap(build)


def alloc_sizes(*, page_size: int, misuse: bool) -> SearchStrategy[int]:
    """Whole pages (1..3 of them, or 0); with ``misuse`` also a negative and an unaligned size."""
    aligned = st.one_of(st.integers(min_value=1, max_value=3), st.just(0)).map(lambda pages: pages * page_size)
    if not misuse:
        return aligned
    bad = [-page_size, -1] + ([page_size + 1, page_size - 1] if page_size > 1 else [])
    return st.one_of(aligned, st.sampled_from(bad))


def extend_lengths(*, page_size: int) -> SearchStrategy[int]:
    """A few tokens, or one or two pages give or take a token."""
    near_edge = st.builds(lambda pages, delta: max(0, pages * page_size + delta),
                          st.integers(min_value=1, max_value=2), st.integers(min_value=-1, max_value=1))
    return st.one_of(st.integers(min_value=0, max_value=3), near_edge)


def token_indices(*, page_size: int, num_pages: int) -> SearchStrategy[list[int]]:
    """Raw token indices from page -1 to two pages past the end: foreign, reserved and ordinary ones."""
    index = st.builds(lambda page, offset: page * page_size + offset % page_size,
                      st.integers(min_value=-1, max_value=num_pages + 2), st.integers(min_value=0, max_value=63))
    return st.lists(index, min_size=1, max_size=3)

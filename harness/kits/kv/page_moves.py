"""Consistent page-allocation inputs: batches a real paged allocator could be asked to serve.

Every batch is built from an *owned layout*: each request's prefix holds its own
pages (taken from one shuffled or sorted id space), ``last_loc`` is the true
slot of token ``prefix - 1`` (so ``(last_loc + 1) % ps == prefix % ps``, and
``-1`` for an empty prefix), and the free list is made of pages nobody owns.
Drawing the lengths and a layout seed -- never tensors, never torch's RNG --
keeps every example reproducible and shrinkable; :meth:`PageBatch.tensors`
builds the tensors deterministically from those ints.  :class:`PageBatch` itself is
plain data the judge reads, so it lives in :mod:`poolfuzz.harness.judge.page_batch`.

The edges that bit SGLang are drawn on purpose: empty ``free_pages`` (seed
002), page-aligned prefixes (no phase 1), zero-length extends, page size 1
(upstream decode counted no page, sglang-pools.md 3.5), extends of several
thousand tokens (the constexpr truncation of #9271, kept rare so tests stay
fast), free lists exactly as long as needed and one page short (the
capacity-after-kernel read of #34399).
"""

from __future__ import annotations

import random
from typing import Literal

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from poolfuzz.harness.judge.page_batch import FreeKind, PageBatch, PageTensors

__all__ = [
    "HUGE_EXTEND",
    "ODD_PAGE_SIZES",
    "POWERS_OF_TWO",
    "FreeKind",
    "Order",
    "PageBatch",
    "PageTensors",
    "batch_sizes",
    "build_page_batch",
    "decode_batches",
    "edge_extend_lengths",
    "extend_batches",
    "page_batches",
    "page_sizes",
]
Order = Literal["sorted", "shuffled", "reversed"]

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64, 128)
ODD_PAGE_SIZES = (3, 5, 6, 7, 12, 24, 100, 127)
HUGE_EXTEND = (1_000, 6_000)
"""Bounds of the rare long extend: past one Triton phase-2 block (1024) and #9271's caps."""


def _ceil_div(x: int, d: int) -> int:
    return -(-x // d)


def build_page_batch(
    page_size: int,
    prefix_lens: list[int],
    seq_lens: list[int],
    *,
    seed: int = 0,
    order: Order = "shuffled",
    free_kind: FreeKind = "exact",
    spare: int = 0,
    decode: bool = False,
) -> PageBatch:
    """Lay ``prefix_lens`` out on real pages and attach a free list; deterministic in its arguments.

    Page ids ``1..num_pages`` are shuffled with ``random.Random(seed)``; prefixes
    take pages first, in request order, then the free list takes the next ids.
    ``order`` rearranges the free list (sorted ascending, as shuffled, or
    descending).  ``free_kind`` makes it exactly as long as needed, one page
    short (when anything is needed at all) or ``spare`` pages longer; ``spare``
    extra pages are always allocated to requests outside the batch too.
    """
    ps = page_size
    assert ps >= 1 and len(prefix_lens) == len(seq_lens)
    assert all(0 <= p <= s for p, s in zip(prefix_lens, seq_lens))
    if decode:
        assert all(s == p + 1 for p, s in zip(prefix_lens, seq_lens)), "decode batches have prefix = seq - 1"
    needed = sum(_ceil_div(s, ps) - _ceil_div(p, ps) for p, s in zip(prefix_lens, seq_lens))
    owned = sum(_ceil_div(p, ps) for p in prefix_lens)
    num_free = {"exact": needed, "short": max(needed - 1, 0), "ample": needed + spare}[free_kind]
    num_pages = owned + max(num_free, needed) + spare
    ids = list(range(1, num_pages + 1))
    if order == "shuffled":
        random.Random(seed).shuffle(ids)
    cursor = iter(ids)
    prefix_pages, last_loc = [], []
    for pre in prefix_lens:
        pages = tuple(next(cursor) for _ in range(_ceil_div(pre, ps)))
        prefix_pages.append(pages)
        last_loc.append(pages[-1] * ps + (pre - 1) % ps if pre else -1)
    free = [next(cursor) for _ in range(num_free)]
    if order != "shuffled":
        free.sort(reverse=order == "reversed")
    return PageBatch(
        page_size=ps,
        prefix_lens=tuple(prefix_lens),
        seq_lens=tuple(seq_lens),
        last_loc=tuple(last_loc),
        prefix_pages=tuple(prefix_pages),
        free_list=tuple(free),
        num_pages=num_pages,
        decode=decode,
        free_kind=free_kind if needed else "exact",
    )


# ------------------------------------------------------------------ strategies


def page_sizes(*, triton: bool = False, max_size: int = 128) -> SearchStrategy[int]:
    """Page sizes ``1..max_size``: small powers of two most often, odd sizes too unless ``triton``."""
    powers = [p for p in POWERS_OF_TWO if p <= max_size]
    if triton:
        return st.sampled_from(powers)
    odd = [p for p in ODD_PAGE_SIZES if p <= max_size]
    return st.one_of(st.sampled_from(powers), st.sampled_from(odd), st.integers(min_value=1, max_value=max_size))


def batch_sizes(*, max_size: int = 256) -> SearchStrategy[int]:
    """Mostly small batches; sometimes up to ``max_size`` (256 covers a full scheduler batch)."""
    small = st.integers(min_value=1, max_value=min(4, max_size))
    if max_size <= 4:
        return small
    medium = st.integers(min_value=1, max_value=min(32, max_size))
    return st.one_of(small, small, medium, st.integers(min_value=1, max_value=max_size))


@st.composite
def _lengths(draw: st.DrawFn, page_size: int, decode: bool, budget: int) -> tuple[int, int]:
    """One request's ``(prefix, seq)``: empty, page-aligned or mid-page prefixes; zero to a few pages of extend."""
    ps = page_size
    kind = draw(st.sampled_from(["empty", "aligned", "mid-page"] if ps > 1 else ["empty", "aligned"]))
    pages = draw(st.integers(min_value=0 if kind == "mid-page" else 1, max_value=3))
    prefix = 0 if kind == "empty" else pages * ps + (draw(st.integers(1, ps - 1)) if kind == "mid-page" else 0)
    if decode:
        return prefix, prefix + 1
    cap = max(0, min(4 * ps, budget))
    extend = draw(st.one_of(st.just(0), st.integers(min_value=0, max_value=min(ps, cap)), st.integers(0, cap)))
    return prefix, prefix + extend


@st.composite
def page_batches(
    draw: st.DrawFn,
    *,
    page_size: SearchStrategy[int] | None = None,
    triton: bool = False,
    max_batch: int = 256,
    max_tokens: int = 4_096,
    huge: bool = True,
    decode: bool = False,
    free_kinds: tuple[FreeKind, ...] = ("exact",),
) -> PageBatch:
    """A batch over an owned layout (see :func:`build_page_batch`).

    ``max_tokens`` bounds the ordinary extend tokens of the whole batch; with
    ``huge`` one request in about twelve batches extends by 1,000..6,000 tokens
    on top.  ``free_kinds`` picks the free list's length (kernels need
    ``"exact"``; allocator tests add ``"short"`` and ``"ample"``).
    """
    ps = draw(page_size if page_size is not None else page_sizes(triton=triton))
    bs = draw(batch_sizes(max_size=max_batch))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    # Up to eight drawn request shapes; a bigger batch repeats them in a seeded
    # order, which keeps a 256-request batch as cheap to draw (and shrink) as a small one.
    shapes = [draw(_lengths(ps, decode, max(2, max_tokens // bs))) for _ in range(draw(st.integers(1, min(bs, 8))))]
    pick = random.Random(seed)
    lengths = shapes + [pick.choice(shapes) for _ in range(bs - len(shapes))]
    prefix_lens, seq_lens = [pre for pre, _ in lengths], [seq for _, seq in lengths]
    if huge and not decode and draw(st.sampled_from([False] * 11 + [True])):
        victim = draw(st.integers(min_value=0, max_value=bs - 1))
        seq_lens[victim] += draw(st.integers(*HUGE_EXTEND))
    return build_page_batch(
        ps,
        prefix_lens,
        seq_lens,
        seed=seed,
        order=draw(st.sampled_from(["shuffled", "sorted", "reversed"])),
        free_kind=draw(st.sampled_from(free_kinds)),
        spare=draw(st.integers(min_value=0, max_value=3)),
        decode=decode,
    )


def extend_batches(
    *,
    page_size: SearchStrategy[int] | None = None,
    triton: bool = False,
    max_batch: int = 256,
    max_tokens: int = 4_096,
    huge: bool = True,
    free_kinds: tuple[FreeKind, ...] = ("exact",),
) -> SearchStrategy[PageBatch]:
    """Extend batches (see :func:`page_batches`)."""
    return page_batches(page_size=page_size, triton=triton, max_batch=max_batch, max_tokens=max_tokens, huge=huge, free_kinds=free_kinds)


def decode_batches(
    *,
    page_size: SearchStrategy[int] | None = None,
    triton: bool = False,
    max_batch: int = 256,
    free_kinds: tuple[FreeKind, ...] = ("exact",),
) -> SearchStrategy[PageBatch]:
    """Decode batches, ``seq = prefix + 1`` (see :func:`page_batches`)."""
    return page_batches(page_size=page_size, triton=triton, max_batch=max_batch, huge=False, decode=True, free_kinds=free_kinds)


def edge_extend_lengths(prefix: int, page_size: int) -> list[int]:
    """Extend lengths that put the end of a request of ``prefix`` tokens on, next to or pages past a page edge.

    With ``to_edge`` the tokens left in the prefix's partial page: 0, 1,
    ``to_edge`` and one either side, and ``to_edge`` plus one or two whole
    pages (give or take a token).  An unaligned prefix with an extend that
    spills whole pages meets three conditions at once (prefix alignment, pages
    needed, remainder), which a uniform draw rarely does.
    """
    ps = page_size
    to_edge = (ps - prefix % ps) % ps
    lengths = {0, 1, to_edge, to_edge + 1, max(0, to_edge - 1), to_edge + ps, to_edge + ps - 1, to_edge + ps + 1, to_edge + 2 * ps, ps}
    return sorted(lengths)

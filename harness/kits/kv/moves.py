"""The KV allocators' move tables (``token_kv``, ``paged_kv``): random moves and tables.

One table per family serves the hypothesis machine, the walk and the bench workload
(:mod:`poolfuzz.strategies.table`).  The configurations are drawn by :mod:`poolfuzz.harness.kits.kv.configs`;
the moves read the pool's state only through the family's view (:class:`~poolfuzz.harness.kits.kv.views.KVView`,
:class:`~poolfuzz.harness.kits.kv.views.PagedKVView`); the catalogues (:mod:`poolfuzz.harness.kits.kv.catalogue`)
issue every kind of misuse and corner the allocators must serve.

Extends end one token before, on, or one after a page edge.  Driver events name the
rare states (pool exactly full, refused for want of pages, frees deferred by a group,
allocations while pages are staged); the corner moves aim at a live slot named twice in
one free, an unaligned prefix grown beside a request taking pages, a request filling
exactly the free pages (or one more), and decode batches mixing requests that open a
page with requests that do not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from poolfuzz.harness.kits.kv.catalogue import admit_mid_page, paged_catalogue, token_catalogue
from poolfuzz.harness.kits.kv.configs import paged_kv_config, token_kv_config
from poolfuzz.harness.kits.kv.misuse import SEGMENT_MISUSE
from poolfuzz.harness.kits.kv.ops import PagedKVOps, TokenKVOps
from poolfuzz.harness.kits.kv.page_moves import edge_extend_lengths
from poolfuzz.harness.kits.kv.views import KVView, PagedKVView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import (
    CORNER_EXACT,
    CORNER_MIXED,
    CORNER_REPEAT,
    Move,
    MoveTable,
    Step,
    one_of,
    picking,
    repeated_within,
    some_of,
    viewed_table,
)


# ---------------------------------------------------------------- token moves
# The public draws (free_live, free_part, free_group, free_deferred, open_group, free_repeat, group_misuse) serve
# the pure SWA pool too (:mod:`poolfuzz.harness.kits.swa.pure_moves`): it is a token allocator at page size 1,
# read through a KVView.
def _alloc(view: KVView, choose: Chooser) -> Step:
    """Whole pages: 1..3 of them (or 0), or exactly what is free, one page more or one fewer."""
    if choose.random() < 0.7:
        pages = choose.choice((1, 2, 3, 0))
    else:
        pages = max(0, view.free_pages() + choose.choice((0, 1, -1)))
    return TokenKVOps.alloc, {"need_size": pages * view.page_size}


def _alloc_misaligned(view: KVView, choose: Chooser) -> Step:
    """A negative size, or one a token off a page (misuse)."""
    ps = view.page_size
    return TokenKVOps.alloc, {"need_size": choose.choice((-ps, -1, ps + 1, ps - 1) if ps > 1 else (-1,))}


free_live = one_of(TokenKVOps.free, KVView.live)
"""Free everything a live handle holds (a plain allocation or a request)."""


def free_part(holders: Callable[[Any], Sequence[int]]) -> Callable[[Any, Chooser], Step | None]:
    """``free_part`` of the first 1..3 pages of one of ``holders(view)``, ``sparse`` or not (one token a page):
    the token allocator's, and the pure SWA pool's (:mod:`poolfuzz.harness.kits.swa.pure_moves`, its pages one slot)."""

    def draw(view: Any, choose: Chooser) -> Step | None:
        among = holders(view)
        if not among:
            return None
        return TokenKVOps.free_part, {"handle": choose.choice(among), "count": choose.randint(1, 3), "sparse": choose.choice((False, True))}

    return draw


_free_part = free_part(KVView.plain)
"""Free the first 1..3 pages of a plain allocation; ``sparse`` names one token a page."""


def _free_segment(view: KVView, choose: Chooser) -> Step | None:
    """Free a row segment (``free_segment``): a plain allocation's from a page boundary on, ending anywhere in
    its last page, or a request's whole row."""
    live = view.live()
    if not live:
        return None
    return TokenKVOps.free_segment, {"handle": choose.choice(live), "start_page": choose.randint(0, 2), "trim": choose.randint(0, 3)}


def _free_segment_malformed(view: KVView, choose: Chooser) -> Step | None:
    """A ``free_segment`` starting off the page grid, naming a page in two runs, a free, reserved or foreign
    page after the row, or a row of the wrong shape or dtype (misuse)."""
    live = view.live()
    if not live:
        return None
    return TokenKVOps.free_segment_malformed, {"handle": choose.choice(live), "kind": choose.choice(SEGMENT_MISUSE)}


def free_group(view: KVView, choose: Chooser) -> Step | None:
    """Close the open free group, or open one while pages are live."""
    if view.group_open:
        return TokenKVOps.group_end, {}
    return (TokenKVOps.group_begin, {}) if view.holds_pages() else None


def free_deferred(view: KVView, choose: Chooser) -> Step | None:
    """A free inside an open free group (the scheduler's batch release): the pages wait for its end."""
    live = view.live()
    return (TokenKVOps.free, {"handle": choose.choice(live)}) if view.group_open and live else None


def open_group(view: KVView, choose: Chooser) -> Step | None:
    """Open a free group while pages are live (the setup of :func:`free_deferred`)."""
    return (TokenKVOps.group_begin, {}) if not view.group_open and view.holds_pages() else None


def _merge(view: KVView, choose: Chooser) -> Step | None:
    return (TokenKVOps.merge, {}) if view.has_staged else None


def _clear(view: KVView, choose: Chooser) -> Step | None:
    return (TokenKVOps.clear, {}) if view.holds_pages() else None


_free_again = one_of(TokenKVOps.free_again, KVView.released)
"""Free again the slots a handle already gave back: a double free (misuse)."""


def _take_two_pages(view: KVView, choose: Chooser) -> Step:
    return TokenKVOps.alloc, {"need_size": 2 * view.page_size}


free_repeat = repeated_within(TokenKVOps.free_indices, "indices", KVView.live, KVView.slots_of)
"""A live slot named twice in one ``free`` (misuse for the token allocator; the paged one dedups pages)."""


def _free_raw(view: KVView, choose: Chooser) -> Step | None:
    """Raw token indices from page -1 to two pages past the end: foreign, reserved and ordinary ones (misuse)."""
    if not view.holds_pages():
        return None
    ps, pages = view.page_size, view.num_pages
    return TokenKVOps.free_indices, {
        "indices": [choose.randint(-1, pages + 2) * ps + choose.randint(0, 63) % ps for _ in range(choose.randint(1, 3))]
    }


def group_misuse(view: KVView, choose: Chooser) -> Step:
    """Begin inside an open group (nesting), or end with none open (misuse)."""
    return (TokenKVOps.group_begin, {}) if view.group_open else (TokenKVOps.group_end, {})


def token_moves() -> tuple[Move[KVView], ...]:
    """The random moves of a KV allocator, cheapest and commonest first (hypothesis shrinks toward the first),
    the misuse ones last."""
    return (
        Move("alloc", 4, _alloc),
        Move("free", 3, free_live),
        Move("free part", 1, _free_part),
        Move("free a row segment", 1, _free_segment),
        Move("free group", 1.5, free_group),
        Move("free inside a group", 1, free_deferred, setup=open_group),
        Move("merge", 0.5, _merge),
        Move("clear", 0.3, _clear),
        Move("alloc misaligned", 0.6, _alloc_misaligned, misuse=True),
        Move("free again", 0.5, _free_again, misuse=True),
        Move("free repeating", 1, free_repeat, CORNER_REPEAT, misuse=True, setup=_take_two_pages),
        Move("free raw indices", 0.5, _free_raw, misuse=True),
        Move("free a malformed row segment", 1, _free_segment_malformed, misuse=True),
        Move("group misuse", 0.2, group_misuse, misuse=True),
    )


def kv_drain(view: KVView) -> Iterator[Step]:
    """Close an open free group, free every holder, take every free page in one ``alloc`` (the free list's
    order, staged pages included), free it, sort the free list, take it all again, then ``clear``.

    Which page comes next is state no step shows until that many pages are asked for; two allocations
    of everything check the whole order, before and after ``merge_and_sort_free`` (``page-layout``)."""
    if view.group_open:
        yield TokenKVOps.group_end, {}
    for handle in view.live():
        yield TokenKVOps.free, {"handle": handle}
    for _ in range(2):
        if view.free_pages():
            yield TokenKVOps.alloc, {"need_size": view.free_pages() * view.page_size}
            for handle in view.live():
                yield TokenKVOps.free, {"handle": handle}
        yield TokenKVOps.merge, {}
    yield TokenKVOps.clear, {}


def token_kv_table() -> MoveTable[KVView]:
    """``token_kv``: allocations sized to what is free, repeated slots in one free, staged frees, malformed calls."""
    return viewed_table(
        KVView,
        token_kv_config,
        token_moves(),
        token_catalogue(),
        bench_moves=("alloc", "free", "free group", "free part", "merge", "clear"),
        drain=kv_drain,
    )


# ---------------------------------------------------------------- paged moves
def _extend_length(view: PagedKVView, choose: Chooser, prefix: int) -> int:
    """Tokens to add to a request of ``prefix`` tokens.

    Mostly lengths that end on, next to or pages past a page edge
    (:func:`~poolfuzz.harness.kits.kv.page_moves.edge_extend_lengths`); else a few tokens, one or
    two pages give or take a token, or a long prefill of three to eight pages: what
    a real prefill chunk is.  SGLang #9271's kernel wrote only a compile-time number
    of whole-page tokens, and extends of a page or two never reach past such a bound.
    """
    ps = view.page_size
    roll = choose.random()
    if roll < 0.7:
        return choose.choice(edge_extend_lengths(prefix, ps))
    if roll < 0.85:
        return choose.randint(0, 3)
    pages = choose.randint(1, 2) if choose.random() < 0.5 else choose.randint(3, 8)
    return max(0, pages * ps + choose.randint(-1, 1))


def _extend_batch(view: PagedKVView, choose: Chooser, existing: list[int], new: int) -> Step:
    """Existing requests grown to, next to or pages past a page edge, new ones of a few pages; shuffled.

    Four batches in five are cut to what the free pages can serve (a refused
    batch exercises only the guard); the rest may be short.
    """
    batch: list[list[int | None]] = [[h, _extend_length(view, choose, view.length(h))] for h in existing]
    batch += [[None, _extend_length(view, choose, 0)] for _ in range(new)]
    choose.shuffle(batch)
    return PagedKVOps.extend, {"batch": view.fit(batch) if choose.random() < 0.8 else batch}


def _admit(view: PagedKVView, choose: Chooser) -> Step:
    """An extend batch of new requests only (prefix 0, ``last_loc`` -1); 0 requests is an empty batch."""
    return _extend_batch(view, choose, [], choose.choice((1, 1, 2, 3, 0)))


def _extend(view: PagedKVView, choose: Chooser) -> Step | None:
    """Chunked prefill: live requests grow from their current length, new ones may join the batch."""
    reqs = view.requests()
    if not reqs:
        return None
    existing = some_of(reqs, choose)
    return _extend_batch(view, choose, existing, choose.choice((0, 1, 1, 2)))


def _unaligned(view: PagedKVView, choose: Chooser) -> Step | None:
    """A request whose prefix ends mid-page, grown within its page or by whole pages, maybe beside one taking pages."""
    ps = view.page_size
    mid = view.edges_and_mids()[1]
    if not mid:
        return None
    handle = choose.choice(mid)
    to_edge = -view.length(handle) % ps
    grow = choose.choice((1, choose.randint(1, to_edge), to_edge, to_edge + 1, to_edge + ps, to_edge + 2 * ps))
    batch: list[list[int | None]] = [[handle, grow]]
    if choose.random() < 0.7:  # behind the grown request first: where a kernel's page cursor runs ahead
        batch.insert(choose.choice((1, 0)), [None, choose.choice((1, ps, ps + 1, 2 * ps))])
    return PagedKVOps.extend, {"batch": view.fit(batch)}


def _admit_mid_page(view: PagedKVView, choose: Chooser) -> Step | None:
    """Admit a request ending mid-page, if a page is free (none exists at page size 1)."""
    return None if view.page_size == 1 else admit_mid_page(view, choose)


def _fill(view: PagedKVView, choose: Chooser) -> Step:
    """One new request taking exactly the free pages (ending anywhere on the last), or one page more."""
    ps = view.page_size
    pages = view.free_pages() + choose.choice((0, 0, 1))
    return PagedKVOps.extend, {"batch": [[None, max(0, pages * ps - choose.randint(0, ps - 1))]]}


_decode = picking(PagedKVOps.decode, PagedKVView.requests, "handles", partial(some_of, most=4))
"""One decode step for a few live requests, some at a page edge and some not, in any order."""


def _to_edge(view: PagedKVView, choose: Chooser) -> Step | None:
    """Grow one request to a page edge, so its next decode opens a page."""
    reqs = view.requests()
    if not reqs:
        return None
    handle = choose.choice(reqs)
    return PagedKVOps.extend, {"batch": [[handle, -view.length(handle) % view.page_size]]}


def _decode_mixed(view: PagedKVView, choose: Chooser) -> Step | None:
    """A decode batch with requests that open a page (as many as pages are free) and requests that do not, shuffled.

    Unshuffled (where hypothesis starts and shrinks) the mid-page requests come first: a kernel that ranks
    the page-opening requests by batch position reads past its pages only then.
    """
    edge, mid = view.edges_and_mids()
    room = view.free_pages()
    if not edge or not mid or not room:
        return None
    handles = [*some_of(mid, choose, most=2), *choose.sample(edge, choose.randint(1, min(2, len(edge), room)))]
    choose.shuffle(handles)
    return PagedKVOps.decode, {"handles": handles}


def _admit_edge_and_mid(view: PagedKVView, choose: Chooser) -> Step | None:
    """Build what a mixed decode lacks: a request ending mid-page, one ending on a page edge, and a free page
    for it to open (freeing an allocation that is neither of the two)."""
    if view.page_size == 1:
        return None  # every request ends on a page edge
    edge, mid = view.edges_and_mids()
    room = view.free_pages()
    if not mid and room:
        return _admit_mid_page(view, choose)
    if mid and not edge:
        return PagedKVOps.extend, {"batch": [[None, view.page_size * choose.randint(0, min(1, room))]]}
    if room:
        return None
    keep = (edge[0] if edge else None, mid[0] if mid else None)
    spare = [h for h in view.live() if h not in keep]
    return (TokenKVOps.free, {"handle": choose.choice(spare)}) if spare else None


def _with_others(view: PagedKVView, choose: Chooser, first: int) -> Step:
    """A decode of ``first`` and up to three other live requests after it."""
    others = [h for h in view.requests() if h != first]
    return PagedKVOps.decode, {"handles": [first, *choose.sample(others, choose.randint(0, min(3, len(others))))]}


def _decode_at_edge(view: PagedKVView, choose: Chooser) -> Step | None:
    """A decode whose first request's next token opens a page, with a few other live requests."""
    edge = view.edges_and_mids()[0]
    return _with_others(view, choose, choose.choice(edge)) if edge else None


def _decode_toward_edge(view: PagedKVView, choose: Chooser) -> Step | None:
    """A decode step of the request nearest its page edge (and a few others): decodes until one opens a page."""
    reqs = view.requests()
    if not reqs:
        return None
    ps = view.page_size
    return _with_others(view, choose, min(reqs, key=lambda h: -view.length(h) % ps))


def paged_moves() -> tuple[Move[PagedKVView], ...]:
    """The token moves plus extend batches at page-edge geometries, fills and mixed decodes, commonest first.

    Each extend and decode corner has a setup that admits the requests it needs.
    """
    token = {m.name: m for m in token_moves()}
    return (
        Move("extend at page edges", 1, _extend, "corner: extend batch at page-edge geometry", setup=_admit),
        Move("decode", 1, _decode),
        Move("admit", 0.5, _admit),
        *(
            token[name]
            for name in ("alloc", "free", "free part", "free a row segment", "free group", "free inside a group", "merge", "clear")
        ),
        Move("unaligned prefix", 1.5, _unaligned, "corner: an unaligned prefix grown by a remainder or whole pages", setup=_admit_mid_page),
        Move("fill", 0.5, _fill, CORNER_EXACT),
        Move("decode mixed", 1.5, _decode_mixed, CORNER_MIXED, setup=_admit_edge_and_mid),
        Move("grow to a page edge", 0.5, _to_edge),
        Move("decode to a page edge", 0.5, _decode_at_edge, setup=_decode_toward_edge),
        *(move for move in token.values() if move.misuse),
    )


def paged_kv_table(*, page_size: int | None = None) -> MoveTable[PagedKVView]:
    """``paged_kv``: the token moves plus extend batches at page-edge geometries, fills and mixed decodes.

    ``page_size`` fixes the page size of every configuration (the table of one page size).
    """
    return viewed_table(  # PagedKVView's occupancy is KVView's: pages in use
        PagedKVView,
        lambda choose: paged_kv_config(choose, page_size=page_size),
        paged_moves(),
        paged_catalogue(),
        bench_moves=("admit", "extend at page edges", "decode", "alloc", "free", "free group", "free part", "merge", "clear"),
        drain=kv_drain,
    )

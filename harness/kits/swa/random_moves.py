"""The ``swa_kv`` family's random moves (``SWATokenToKVPoolAllocator``), read through
:class:`~poolfuzz.harness.kits.swa.views.SWAView`.

A request's life has more states than consumed or not: tokens leave the window page by
page, a request wholly out of the window is freed with ``free_full``.  The moves: extends
and tails sized to page edges (a tail starts on a page boundary; the impossible ones only
as misuse), decodes (to a page edge, where the next token opens a page), the window sliding
a request's oldest pages out, frees on either side (in a free group or not), two corners
few random interleavings line up (a decode only the SWA side is too short for, an SWA tail
over recycled full pages), and the misuse probes.  Whether a call is valid is the driver's
decision.  The table is :func:`poolfuzz.harness.kits.swa.moves.swa_kv_table`; the catalogue,
:mod:`poolfuzz.harness.kits.swa.catalogue`.
"""

from __future__ import annotations

from functools import partial

from poolfuzz.harness.kits.kv.page_moves import edge_extend_lengths
from poolfuzz.harness.kits.swa.misuse import FREE_CALLS
from poolfuzz.harness.kits.swa.ops import SWAKVOps
from poolfuzz.harness.kits.swa.views import SWAView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import Draw, Move, Step, one_of, picking, some_of


def _new_length(view: SWAView, choose: Chooser) -> int:
    """A new request's length: on, next to or a page past a page edge, or a few tokens."""
    lengths = edge_extend_lengths(0, view.page_size)
    pick = choose.randint(0, len(lengths))
    return lengths[pick] if pick < len(lengths) else choose.randint(0, 3)


def _admit(view: SWAView, choose: Chooser) -> Step:
    """An extend batch of new requests, lengths at page edges (page size 1: one ``alloc``)."""
    return SWAKVOps.extend, {"batch": [[None, _new_length(view, choose)] for _ in range(choose.randint(1, 3))]}


def _grow(view: SWAView, choose: Chooser) -> Step | None:
    """Chunked prefill: requests whose last token is in the window grow to page edges, a new one may join."""
    live = view.handles(continuable=True)
    if not live:
        return None
    ps = view.page_size
    batch: list[list[int | None]] = [[h, choose.choice(edge_extend_lengths(view.length(h), ps))] for h in some_of(live, choose)]
    batch += [[None, _new_length(view, choose)] for _ in range(choose.randint(0, 1))]
    choose.shuffle(batch)
    return SWAKVOps.extend, {"batch": batch}


_decode: Draw[SWAView] = picking(SWAKVOps.decode, lambda view: view.handles(continuable=True), "handles", partial(some_of, most=4))
"""A decode step for a few requests whose last token is in the window."""


def _decode_at_edge(view: SWAView, choose: Chooser) -> Step | None:
    """A decode batch whose first request's next token opens a page (its length a whole number of pages)."""
    ps = view.page_size
    live = view.handles(continuable=True)
    edge = [h for h in live if view.length(h) % ps == 0]
    if not edge:
        return None
    first = choose.choice(edge)
    others = [h for h in live if h != first]
    return SWAKVOps.decode, {"handles": [first, *choose.sample(others, choose.randint(0, min(3, len(others))))]}


def _decode_toward_edge(view: SWAView, choose: Chooser) -> Step | None:
    """A decode step of the request in the window nearest its page edge (each setup step brings it nearer)."""
    ps = view.page_size
    mid = [h for h in view.handles(continuable=True) if view.length(h) % ps]
    if not mid:
        return None
    return SWAKVOps.decode, {"handles": [min(mid, key=lambda h: (-view.length(h) % ps, h))]}


def _tail(view: SWAView, choose: Chooser, *, valid: bool = True) -> Step | None:
    """PD decode pre-allocation: full KV for the extend, SWA KV for its tail only; ``valid=False``: a tail
    longer than the extend, negative, or not starting on a page boundary."""
    ps = view.page_size
    if ps == 1 and valid:
        return None
    live = view.live()
    handle = choose.choice(live) if live and choose.random() < 0.4 else None
    pre = view.length(handle) if handle is not None else 0
    extend_len = choose.choice(edge_extend_lengths(pre, ps))
    tails = list(range((pre + extend_len) % ps, extend_len + 1, ps))
    bad = [extend_len + 1, -1] + [t + 1 for t in tails[-1:] if ps > 1 and t < extend_len]
    if valid and not tails:
        return None
    headed = [t for t in tails if t < extend_len]  # a head outside the tail must map to 0 (SGLang #25805)
    if valid:
        tail = choose.choice(headed if headed and choose.random() < 0.7 else tails)
    else:
        tail = choose.choice(bad)
    return SWAKVOps.tail, {"handle": handle, "extend_len": extend_len, "swa_tail_len": tail}


def _impossible_tail(view: SWAView, choose: Chooser) -> Step | None:
    return _tail(view, choose, valid=False)


def slide(view: SWAView, choose: Chooser) -> Step | None:
    """The window slides: ``free_swa`` of a request's oldest pages with SWA peers, keeping its last 0-2."""
    windowed = view.handles(windowed=True)
    if not windowed:
        return None
    handle = choose.choice(windowed)
    behind = view.windowed_pages(handle) - choose.choice((0, 1, 1, 2))
    return SWAKVOps.free_swa, {"handle": handle, "pages": max(1, behind), "sparse": choose.random() < 0.3}


def _free(view: SWAView, choose: Chooser) -> Step | None:
    """Free a whole request (sometimes naming one token a page), its tokens out of the window included."""
    live = view.live()
    return (SWAKVOps.free, {"handle": choose.choice(live), "sparse": choose.random() < 0.4}) if live else None


def _free_in_group(view: SWAView, choose: Chooser) -> Step | None:
    """Free a whole request inside an open free group (the scheduler's batch release)."""
    return _free(view, choose) if view.group_open() else None


def _open_group(view: SWAView, choose: Chooser) -> Step | None:
    return (SWAKVOps.group_begin, {}) if view.any_live() and not view.group_open() else None


_free_full: Draw[SWAView] = one_of(SWAKVOps.free_full, lambda view: view.handles(windowed=False))
"""Free a request none of whose tokens is in the window any more."""


def _alloc(view: SWAView, choose: Chooser) -> Step | None:
    """Page size 1: a new request of a few tokens, or of exactly what both sides have free (or one more)."""
    if view.page_size != 1:
        return None
    fits = min(view.full_free(), view.swa_free())
    return SWAKVOps.alloc, {"need_size": choose.choice((0, 1, 2, 3, fits, fits + 1))}


def _group(view: SWAView, choose: Chooser) -> Step | None:
    """Close the open free group, or open one while requests are live."""
    if view.group_open():
        return SWAKVOps.group_end, {}
    return (SWAKVOps.group_begin, {}) if view.any_live() else None


def _clear(view: SWAView, choose: Chooser) -> Step | None:
    return (SWAKVOps.clear, {}) if view.any_live() else None


def _stale_continue(view: SWAView, choose: Chooser) -> Step | None:
    """A decode of a request whose last token left the window (only an SWA tail may continue it)."""
    stale = [h for h in view.handles(continuable=False) if view.length(h)]
    return (SWAKVOps.decode, {"handles": [choose.choice(stale)]}) if stale else None


def _free_again(view: SWAView, choose: Chooser) -> Step | None:
    """Free, ``free_swa`` or ``free_full`` again every slot a request released: a double free."""
    gone = view.released()
    return (SWAKVOps.free_again, {"handle": choose.choice(gone), "call": choose.choice(FREE_CALLS)}) if gone else None


def _free_raw(view: SWAView, choose: Chooser) -> Step | None:
    """Raw full indices from page -1 to two pages past the end through one of the free calls."""
    if not view.any_live():
        return None
    ps = view.page_size
    indices = [choose.randint(-1, view.full_pages + 2) * ps + choose.randint(0, 63) % ps for _ in range(choose.randint(1, 3))]
    return SWAKVOps.free_indices, {"indices": indices, "call": choose.choice(FREE_CALLS)}


def free_swa_gone(view: SWAView, choose: Chooser) -> Step | None:
    """``free_swa`` of a live request's pages that have no SWA peer."""
    gone = [h for h in view.live() if view.out_of_window(h)]
    return (SWAKVOps.free_swa_again, {"handle": choose.choice(gone)}) if gone else None


_free_full_mapped: Draw[SWAView] = one_of(SWAKVOps.free_full, lambda view: view.handles(windowed=True))
"""``free_full`` of a request still in the window (``free`` is the call)."""


def wrong_regime(view: SWAView, choose: Chooser) -> Step:
    """The other page regime's call: a tail at page size 1, an ``alloc`` above it."""
    if view.page_size == 1:
        return SWAKVOps.tail, {"handle": None, "extend_len": 1, "swa_tail_len": 1}
    return SWAKVOps.alloc, {"need_size": choose.choice((view.page_size, -1))}


def _group_misuse(view: SWAView, choose: Chooser) -> Step:
    """Begin inside an open free group (nesting), or end with none open."""
    return (SWAKVOps.group_begin, {}) if view.group_open() else (SWAKVOps.group_end, {})


CORNER_SWA_SHORT_DECODE = "corner: a decode opening a page when only the SWA side is out of pages"
CORNER_RECYCLED_TAIL = "corner: an SWA tail whose head lands on recycled full pages"


def _edge_requests(view: SWAView) -> list[int]:
    """Requests in the window, holding tokens, whose next token opens a page."""
    ps = view.page_size
    return [h for h in view.handles(continuable=True) if view.length(h) and view.length(h) % ps == 0]


def _swa_short_decode(view: SWAView, choose: Chooser) -> Step | None:
    """A decode that needs a page the SWA side lacks while the full side has one."""
    if view.page_size == 1 or view.swa_free() or not view.full_free():
        return None
    edge = _edge_requests(view)
    return (SWAKVOps.decode, {"handles": [choose.choice(edge)]}) if edge else None


def _toward_swa_short(view: SWAView, choose: Chooser) -> Step | None:
    """Toward :func:`_swa_short_decode`: the request that takes the SWA side's last pages, else a decode
    step toward a page edge."""
    if view.page_size == 1 or not view.swa_free() and not view.full_free():
        return None
    if view.swa_free() and view.full_free() > view.swa_free():
        return SWAKVOps.extend, {"batch": [[None, view.swa_free() * view.page_size]]}
    live = view.handles(continuable=True)
    return (SWAKVOps.decode, {"handles": [choose.choice(live)]}) if live else None


def _recycled_tail(view: SWAView, choose: Chooser) -> Step | None:
    """An SWA tail with a head on full pages a freed request mapped (the tail starts on a page boundary)."""
    ps = view.page_size
    if ps == 1 or view.group_open() or not view.swa_free() or not view.recycled_free():
        return None
    extend_len = min(choose.choice((1, 2)) * ps + choose.choice((0, 1)), view.full_free() * ps)  # fits, full pool too
    if view.need_sort or choose.random() < 0.3:
        extend_len = view.full_free() * ps  # staged pages are taken only when the free list runs short
    heads = list(range(extend_len % ps, min(extend_len, view.swa_free() * ps + 1), ps))
    return SWAKVOps.tail, {"handle": None, "extend_len": extend_len, "swa_tail_len": choose.choice(heads[-2:])}


def _toward_recycled_tail(view: SWAView, choose: Chooser) -> Step | None:
    """Toward :func:`_recycled_tail`: the group's end, the free of a request with SWA peers, or the request to free."""
    ps = view.page_size
    if ps == 1:
        return None
    if view.group_open():
        return SWAKVOps.group_end, {}
    live = view.handles(windowed=True)
    if live:
        return SWAKVOps.free, {"handle": choose.choice(live), "sparse": False}
    return SWAKVOps.extend, {"batch": [[None, choose.choice((1, 2)) * ps]]}


def swa_moves() -> tuple[Move[SWAView], ...]:
    """The random moves of an SWA pool, cheapest and commonest first (hypothesis shrinks toward the first)."""
    return (
        Move("admit", 3, _admit),
        Move("decode", 3, _decode),
        Move("grow", 2, _grow),
        Move("free", 2, _free),
        Move("window slides", 2.5, slide),
        Move("swa tail", 1.5, _tail),
        Move("alloc", 1, _alloc),
        Move("free group", 1.5, _group),
        Move("free in a free group", 1, _free_in_group, setup=_open_group),
        Move("free out of the window", 1, _free_full),
        Move("decode to a page edge", 1, _decode_at_edge, setup=_decode_toward_edge),
        Move("SWA short at a page edge", 0.5, _swa_short_decode, CORNER_SWA_SHORT_DECODE, setup=_toward_swa_short),
        Move("tail on recycled pages", 0.5, _recycled_tail, CORNER_RECYCLED_TAIL, setup=_toward_recycled_tail),
        Move("clear", 0.2, _clear),
        Move("continue out of the window", 0.3, _stale_continue, misuse=True),
        Move("impossible swa tail", 0.3, _impossible_tail, misuse=True),
        Move("free again", 0.4, _free_again, misuse=True),
        Move("free raw indices", 0.4, _free_raw, misuse=True),
        Move("free_swa out of the window", 0.3, free_swa_gone, misuse=True),
        Move("free_full in the window", 0.3, _free_full_mapped, misuse=True),
        Move("wrong page regime", 0.2, wrong_regime, misuse=True),
        Move("group misuse", 0.2, _group_misuse, misuse=True),
    )

"""How the ``swa_kv`` driver judges one call on both sides of an ``SWATokenToKVPoolAllocator``.

Pure checks over what the driver read from the pool (returned full slots, their
``full_to_swa_index_mapping`` entries, each side's free pages and available size)
and the model (:class:`~poolfuzz.harness.kits.swa.model.SWAModel`); none calls the pool.

* :func:`check_handed_out` and :func:`judge_grant`: every slot of an allocation is
  off page 0, in bounds and unique; each request's full slots and SWA peers continue
  its ``last_loc`` page by page, the tokens outside an SWA tail map to 0 and the rest
  to a peer, and each fresh full page pairs with one fresh SWA page at the same
  offsets (``page-layout``, ``swa-mapping``, ``no-double-allocation``).
* :func:`check_side_change`: per side, exactly the counted pages left (or joined)
  the free pages and the available size moved by them (``conservation``, or
  ``group-window`` when a free group ends).
* :func:`audit_sides`: the audit's per-side conservation, and the pool's ``available_size()``
  and ``size`` (the smaller side's).
* :func:`audit_mapping`: the whole mapping table against the model, and its
  trailing ``-1`` (``swa-mapping``).
"""

from __future__ import annotations

from dataclasses import dataclass

from poolfuzz.harness.judge.invariants import InvariantViolation, check, check_slot_layout, check_unique
from poolfuzz.harness.kits.swa.model import Side, SWAModel

SideState = tuple[tuple[int, ...], int, tuple[int, ...], int]
"""``(full free pages, full_available_size(), SWA free pages, swa_available_size())``."""


@dataclass(frozen=True)
class Grant:
    """One request's share of an allocating call: positions ``pre..seq``, SWA peers from ``window_from``."""

    handle: int | None
    pre: int
    seq: int
    last_loc: int
    swa_last_loc: int
    window_from: int


def check_handed_out(slots: list[int], end: int, side: str, what: str, twice: str, page_size: int) -> None:
    """Off page 0, in bounds, unique (``twice`` names what a repeat breaks: a full slot handed out
    twice, or an SWA slot mapped twice)."""
    for slot in slots:
        check(not 0 <= slot < page_size, "reserved-never-handed-out", f"{what} handed out {side} slot {slot} of page 0")
        check(0 <= slot < end, "in-bounds", f"{what} handed out {side} slot {slot}", slots_end=end)
    check_unique(slots, twice, f"{side} slots of {what}")


def judge_grant(model: SWAModel, g: Grant, mine: list[int], peers: list[int], what: str) -> tuple[list[int], dict[int, int], list[int]]:
    """Check one request's slots and their SWA peers; returns its fresh full pages, their SWA pages, its mapped slots."""
    ps = model.page_size
    check_slot_layout(mine, prefix=g.pre, last_loc=g.last_loc, page_size=ps, what=what, side="full")
    first_new = -(-g.pre // ps) * ps
    for pos, slot, peer in zip(range(g.pre, g.seq), mine, peers):
        if pos < g.window_from:
            check(
                peer == 0,
                "swa-mapping",
                f"{what}: full slot {slot} (position {pos}) is outside the SWA tail but maps to SWA slot {peer}",
                window_from=g.window_from,
            )
        else:
            check(peer > 0, "swa-mapping", f"{what}: full slot {slot} (position {pos}) has no SWA peer", peer=peer)
    windowed = [(pos, slot, peer) for pos, slot, peer in zip(range(g.pre, g.seq), mine, peers) if pos >= g.window_from]
    check_slot_layout(
        [peer for _, _, peer in windowed], prefix=max(g.pre, g.window_from), last_loc=g.swa_last_loc, page_size=ps, what=what, side="SWA"
    )
    pages: dict[int, int] = {}
    pairs: dict[int, int] = {}
    for pos, slot, peer in zip(range(g.pre, g.seq), mine, peers):
        if pos < first_new:
            continue
        page = pages.setdefault(pos // ps, slot // ps)
        check(slot // ps == page, "page-layout", f"{what}: position {pos} left its full page {page}", slot=slot)
        if pos >= g.window_from:
            swa_page = pairs.setdefault(page, peer // ps)
            check(
                peer // ps == swa_page,
                "swa-mapping",
                f"{what}: full page {page} maps into two SWA pages",
                pages=sorted({swa_page, peer // ps}),
            )
    check_free_on(model.full, list(pages.values()), "full", what)
    check_free_on(model.swa, list(pairs.values()), "SWA", what)
    return list(pages.values()), pairs, [slot for _, slot, _ in windowed]


def check_free_on(side: Side, pages: list[int], name: str, what: str) -> None:
    """The fresh ``pages`` an allocation took on ``side`` are distinct and were free there."""
    check_unique(pages, "no-double-allocation", f"fresh {name} pages of {what}")
    for page in pages:
        check(page in side.free, "no-double-allocation", f"{what} took {name} page {page}, which is {side.state(page)}")


def check_side_change(
    before: SideState, after: SideState, sign: int, full_pages: list[int], swa_pages: list[int], invariant: str, what: str, page_size: int
) -> None:
    """Per side: exactly ``full_pages`` / ``swa_pages`` left (``sign`` -1) or joined (+1) the free
    pages, and the available size moved by them."""
    for name, pages, old, old_avail, new, new_avail in (
        ("full", full_pages, before[0], before[1], after[0], after[1]),
        ("SWA", swa_pages, before[2], before[3], after[2], after[3]),
    ):
        expected = set(old) | set(pages) if sign > 0 else set(old) - set(pages)
        check_unique(list(new), "no-double-allocation", f"{name} free pages after {what}")
        check(
            set(new) == expected,
            invariant,
            f"{what} left the {name} side's free pages wrong",
            side=name,
            missing=sorted(expected - set(new)),
            extra=sorted(set(new) - expected),
        )
        check(
            new_avail == old_avail + sign * len(pages) * page_size,
            invariant,
            f"{what} changed the {name} side's available size by the wrong amount",
            side=name,
            before=old_avail,
            after=new_avail,
            pages=sorted(pages),
        )


def audit_sides(model: SWAModel, sides: SideState, *, available: int, size: int) -> None:
    """Each side's free pages (unique, off page 0, existing, the model's) and available size; the pool's
    ``available_size()`` and ``size``, the smaller side's (``conservation``)."""
    full, full_avail, swa, swa_avail = sides
    ps = model.page_size
    for name, pages, avail, side in (("full", full, full_avail, model.full), ("SWA", swa, swa_avail, model.swa)):
        check_unique(list(pages), "no-double-allocation", f"the {name} side's free pages")
        check(0 not in pages, "reserved-never-handed-out", f"page 0 is among the {name} side's free pages")
        outside = [p for p in pages if not 1 <= p <= side.num_pages]
        check(not outside, "in-bounds", f"{name} free pages that do not exist", pages=outside)
        check(
            set(pages) == side.free,
            "conservation",
            f"the {name} side's free pages differ from the model",
            side=name,
            missing=sorted(side.free - set(pages)),
            extra=sorted(set(pages) - side.free),
        )
        check(
            avail == len(side.free) * ps,
            "conservation",
            f"the {name} side's available size disagrees",
            side=name,
            available=avail,
            expected=len(side.free) * ps,
        )
    check(
        available == min(full_avail, swa_avail),
        "conservation",
        "available_size() is not the smaller side's",
        available=available,
        full=full_avail,
        swa=swa_avail,
    )
    check(size == min(model.full_pages, model.swa_pages) * ps, "conservation", "size is not the smaller side's", size=size)


def audit_mapping(model: SWAModel, table: list[int]) -> None:
    """The whole table against the model: one entry per full slot of pages 0..n, and the trailing -1."""
    check(
        len(table) == model.full_slots_end + 1,
        "swa-mapping",
        "the mapping must have size + page_size + 1 entries",
        entries=len(table),
        expected=model.full_slots_end + 1,
    )
    check(table[-1] == -1, "swa-mapping", "the trailing entry is no longer -1", trailing=table[-1])
    check_unique([v for v in table[:-1] if v], "swa-mapping", "the SWA slots the mapping names")
    wrong = {f: (v, model.swa_slot(f)) for f, v in enumerate(table[:-1]) if v != model.swa_slot(f)}
    if not wrong:
        return
    slot, (actual, expected) = next(iter(wrong.items()))
    state = model.full.state(slot // model.page_size)
    why = (
        f"{state} full slot {slot} maps to SWA slot {actual}"
        if state != "live"
        else f"full slot {slot} has no SWA peer (out of the window) but maps to {actual}"
        if not expected
        else f"full slot {slot} maps to SWA slot {actual}, its peer is {expected}"
    )
    raise InvariantViolation("swa-mapping", why, entries=dict(list(wrong.items())[:8]))

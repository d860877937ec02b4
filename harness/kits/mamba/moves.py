"""The Mamba families' move tables (``mamba_slots``, ``hybrid_req_to_token``).

One table per family serves the hypothesis machine, the walk and the bench workload
(:mod:`poolfuzz.strategies.table`).  The moves read the pool's state only through the
family's view (:mod:`poolfuzz.harness.kits.mamba.views`): :class:`~poolfuzz.harness.kits.mamba.views.MambaSlotView`
(slot handles, the free list's size, the open window and its reservation) and
:class:`~poolfuzz.harness.kits.mamba.views.HybridView` (the same slot window, plus which requests hold a
row, a slot or both, and a :class:`~poolfuzz.harness.kits.rows.moves.RowView` of the rows for the
request-row catalogue).  The catalogues are in :mod:`poolfuzz.harness.kits.mamba.catalogue`.

Pools are tiny (0, 1 and 2 slots are where boundary bugs live).  For the hybrid
pool ``mamba_size`` is drawn around ``size``: smaller, equal and larger, because a
mapping sized by ``mamba_size`` only goes out of bounds when the request rows
outnumber the slots (SGLang #24244), and the all-or-nothing check only matters on
the side that runs short first.

Group windows interleave with everything else, and a few moves steer toward the
rare states: ``alloc in a window`` drains an open reservation (opening one first),
``group begin`` reserves around what is free, ``finish`` makes a request's two-call
release in either order, ``readmit without a slot`` puts a request holding its row
but not its slot in one batch with new ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from poolfuzz.harness.kits.mamba.catalogue import donate_a_slot, hybrid_catalogue, mamba_slot_catalogue, readmit_beside_new
from poolfuzz.harness.kits.mamba.config import HybridRowConfig, MambaSlotConfig
from poolfuzz.harness.kits.mamba.ops import ALLOC, CLEAR, FREE, FREE_SLOTS, GROUP_BEGIN, GROUP_END, HybridOps, SlotOps, WindowOps
from poolfuzz.harness.kits.mamba.views import HybridView, MambaSlotView, SlotView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import (
    CORNER_MIXED,
    CORNER_REPEAT,
    Move,
    MoveTable,
    Step,
    fixed,
    one_of,
    picking,
    pool_size,
    some_of,
    some_repeated,
    viewed_table,
)

MANY_SLOTS = 70
"""A pool large enough for one ``free`` of more than 64 slots (the allocator's counting path)."""
MAX_RAW_SLOT = 13
"""The highest raw slot number a misuse ``free_slots`` names in a small pool (past the end of every one)."""
CORNER_WINDOW = "corner: alloc while a reservation is open"


# ---------------------------------------------------------------- configurations
def mamba_slot_config(choose: Chooser, *, max_size: int = 10) -> MambaSlotConfig:
    """``MambaSlotAllocator(size, device)`` without ``device`` (the engine adds it): mostly room for a
    reservation of a few slots, often the tiny and boundary sizes.

    The large pool rides on its own draw, 3 of 0..3: a fourth of the pools, and shrinking (toward 0) makes
    it small.  As the fourth branch of a ``one_of`` the ci profile's 40 examples never drew it; the walk
    draws it as often as hypothesis does (it drew one pool in ten before the two were one function).
    """
    if choose.randint(0, 3) == 3:
        return MambaSlotConfig(size=MANY_SLOTS)
    return MambaSlotConfig(size=choose.randint(2, 6) if choose.random() < 0.5 else pool_size(choose, max_size=max_size))


HYBRID_OFFSETS = (-1, 1, 0, -2, 2, -3, 3)
"""``mamba_size - size`` of a hybrid pool: both sides short first, and equal."""


def hybrid_config(choose: Chooser, *, max_size: int = 8) -> HybridRowConfig:
    """``HybridReqToTokenPool(size, max_context_len, mamba_size)`` with ``mamba_size`` within 3 of ``size``."""
    size = pool_size(choose, max_size=max_size)
    context = choose.choice((4, 8))
    return HybridRowConfig(size=size, max_context_len=context, mamba_size=max(0, size + choose.choice(HYBRID_OFFSETS)))


# ---------------------------------------------------------------- the slot window (both families)
def _group_end(view: SlotView, choose: Chooser) -> Step | None:
    return (WindowOps.group_end, {}) if view.group_open else None


def _group_misuse(view: SlotView, choose: Chooser) -> Step:
    """A window opened inside an open one (0..2 reserved), or closed when none is open."""
    return (WindowOps.group_begin, {"num_reqs": choose.randint(0, 2)}) if view.group_open else (WindowOps.group_end, {})


def _group_begin_negative(view: SlotView, choose: Chooser) -> Step | None:
    """``alloc_group_begin(-1)`` with no window open (in an open one it is a nested window)."""
    return None if view.group_open else (WindowOps.group_begin, {"num_reqs": -1})


def _clear(view: SlotView, choose: Chooser) -> Step | None:
    return (WindowOps.clear, {}) if view.in_use() else None


# ---------------------------------------------------------------- mamba_slots moves
def _slot_alloc(view: MambaSlotView, choose: Chooser) -> Step:
    """``alloc`` sizes: mostly 1, often 0..4, and exactly what is free (or one more)."""
    roll = choose.random()
    if roll < 0.5:
        need = 1
    elif roll < 0.8:
        need = choose.randint(0, 4)
    else:
        need = view.free_count() + choose.choice((0, 1))
    return ALLOC({"need_size": need})


def _slot_group_begin(view: MambaSlotView, choose: Chooser) -> Step | None:
    """A window reserving 1..3 (a reservation to hand out in order), 0..6 (none, or more than the pool),
    or exactly what is free (or one more)."""
    if view.group_open:
        return None
    free = view.free_count()
    return GROUP_BEGIN({"num_reqs": choose.choice((1, 2, 3, choose.randint(0, 6), free, free + 1))})


def _slot_alloc_in_window(view: MambaSlotView, choose: Chooser) -> Step | None:
    """``alloc`` of 1, 2, all or one more than the reservation left in the open window."""
    left = len(view.unconsumed())
    return ALLOC({"need_size": choose.choice((1, 2, 2, left, left + 1))}) if left else None


def _open_a_reservation(view: MambaSlotView, choose: Chooser) -> Step:
    """Open a window reserving two or more slots (closing a spent one first)."""
    if view.group_open:
        return GROUP_END({})
    return GROUP_BEGIN({"num_reqs": choose.choice((2, 3, max(2, view.free_count() // 2)))})


_slot_free = picking(SlotOps.free, MambaSlotView.live, "handles", some_of)
"""One to three live slots freed in one call."""
_slot_free_repeating = picking(SlotOps.free, MambaSlotView.live, "handles", partial(some_repeated, most=3))
"""Live slots freed in one call with one named twice, next to itself or with others between."""


def _slot_free_again(view: MambaSlotView, choose: Chooser) -> Step | None:
    """A handle whose slot was already freed, freed again."""
    gone = view.gone()
    return FREE({"handles": [choose.choice(gone)]}) if gone else None


def _slot_free_raw(view: MambaSlotView, choose: Chooser) -> Step:
    """Raw slot numbers: a reserved slot not yet handed out, or arbitrary ones (-1, padding 0, live, free,
    reserved and past the end)."""
    unconsumed = view.unconsumed()
    if unconsumed and choose.random() < 0.5:
        return FREE_SLOTS({"slots": [choose.choice(unconsumed)]})
    top = max(MAX_RAW_SLOT, view.size + 2)
    return FREE_SLOTS({"slots": [choose.randint(-1, top) for _ in range(choose.randint(1, 3))]})


def mamba_slot_moves() -> tuple[Move[MambaSlotView], ...]:
    """The random moves of a Mamba slot allocator, commonest and cheapest first (hypothesis shrinks toward
    the first)."""
    return (
        Move("alloc", 4, _slot_alloc),
        Move("group begin", 1.5, _slot_group_begin),
        Move("group end", 1.5, _group_end),
        Move("alloc in a window", 2, _slot_alloc_in_window, CORNER_WINDOW, setup=_open_a_reservation),
        Move("free", 3, _slot_free),
        Move("clear", 0.3, _clear),
        Move("alloc negative", 0.2, fixed(SlotOps.alloc, need_size=-1), misuse=True),
        Move("group begin negative", 0.1, _group_begin_negative, misuse=True, setup=_group_end),
        Move("group misuse", 0.3, _group_misuse, misuse=True),
        Move("free repeating", 1, _slot_free_repeating, CORNER_REPEAT, misuse=True,
             setup=fixed(SlotOps.alloc, need_size=2)),
        Move("free again", 0.5, _slot_free_again, misuse=True),
        Move("free raw slots", 0.5, _slot_free_raw, misuse=True),
    )


def mamba_slot_drain(view: MambaSlotView) -> Iterator[Step]:
    """Hand out an open window's whole reservation one ``alloc(1)`` at a time (the order it must come in),
    close it, free every slot, take the whole free list in one ``alloc``, free it, then ``clear``."""
    for _ in range(len(view.unconsumed())):
        yield ALLOC({"need_size": 1})
    if view.group_open:
        yield GROUP_END({})
    for _ in range(2):
        if view.live():
            yield FREE({"handles": view.live()})
        if view.free_count():
            yield ALLOC({"need_size": view.free_count()})
    yield CLEAR({})


def mamba_slot_table() -> MoveTable[MambaSlotView]:
    """``mamba_slots``: windows opened with reservations around what is free, repeats inside one free."""
    return viewed_table(MambaSlotView, mamba_slot_config, mamba_slot_moves(), mamba_slot_catalogue(),
                        bench_moves=("alloc", "group begin", "group end", "free", "clear"), drain=mamba_slot_drain)


# ---------------------------------------------------------------- hybrid_req_to_token moves
def _hybrid_alloc(view: HybridView, choose: Chooser) -> Step:
    """New requests and known ones (live ones reuse, released ones re-enter); now and then as many new
    ones as the shorter side has room for, or one more."""
    known = view.known()
    reuse = choose.sample(known, min(len(known), choose.randint(0, 3)))
    free_rows, capacity = view.free_rows(), view.capacity()
    room = min(free_rows, capacity)
    new = choose.choice((choose.randint(0, 3), room, room + 1, max(free_rows, capacity)))
    batch: list[int | None] = [*([None] * min(new, 8)), *reuse]
    choose.shuffle(batch)
    return HybridOps.alloc, {"batch": batch}


def _hybrid_group_begin(view: HybridView, choose: Chooser) -> Step | None:
    """The scheduler's admission window: mostly 1..3 reserved, also 0 and more than the pool."""
    return None if view.group_open else (HybridOps.group_begin, {"num_reqs": choose.choice((1, 2, 3, choose.randint(0, 6)))})


_hybrid_free = one_of(HybridOps.free, HybridView.row_holders)
"""Row only: the slot stays live (donated to a cache) until ``free_mamba_cache``."""


_hybrid_free_cache = one_of(HybridOps.free_mamba_cache, HybridView.slot_holders)


def _finish(view: HybridView, choose: Chooser) -> Step | None:
    """The second call of a finished request's release: the row of one whose slot went back, or the slot
    of one whose row went back."""
    one = view.holding_one()
    if not one:
        return None
    handle = choose.choice(one)
    return ("free" if view.holds_row(handle) else "free_mamba_cache"), {"handle": handle}


def _start_finishing(view: HybridView, choose: Chooser) -> Step | None:
    """The first call of a finished request's two-call release, in either order."""
    both = view.holding_both()
    return (choose.choice((HybridOps.free_mamba_cache, "free")), {"handle": choose.choice(both)}) if both else None


def _hybrid_write(view: HybridView, choose: Chooser) -> Step | None:
    rows = view.row_holders()
    if not rows:
        return None
    return HybridOps.write, {"handle": choose.choice(rows), "start": choose.randint(0, 8), "length": choose.randint(0, 8)}


def _hybrid_alloc_repeating(view: HybridView, choose: Chooser) -> Step | None:
    """A batch naming one known request twice (beside a new one, now and then)."""
    known = view.known()
    if not known:
        return None
    batch: list[int | None] = [*some_repeated(known, choose), *([None] * choose.randint(0, 1))]
    choose.shuffle(batch)
    return HybridOps.alloc, {"batch": batch}


def _hybrid_free_again(view: HybridView, choose: Chooser) -> Step | None:
    """``free`` or ``free_mamba_cache`` of any known request: live, released or already without a slot."""
    known = view.known()
    return (choose.choice((HybridOps.free, "free_mamba_cache")), {"handle": choose.choice(known)}) if known else None


def hybrid_moves() -> tuple[Move[HybridView], ...]:
    """The random moves of a hybrid pool, commonest and cheapest first (hypothesis shrinks toward the first)."""
    return (
        Move("alloc", 4, _hybrid_alloc),
        Move("group begin", 1, _hybrid_group_begin),
        Move("group end", 1, _group_end),
        Move("free row", 2, _hybrid_free),
        Move("free cache", 2, _hybrid_free_cache),
        Move("finish", 1, _finish, setup=_start_finishing),
        Move("readmit without a slot", 1.5, readmit_beside_new, CORNER_MIXED, setup=donate_a_slot),
        Move("write", 1, _hybrid_write),
        Move("clear", 0.3, _clear),
        Move("group begin negative", 0.05, _group_begin_negative, misuse=True, setup=_group_end),
        Move("group misuse", 0.2, _group_misuse, misuse=True),
        Move("alloc naming a request twice", 0.2, _hybrid_alloc_repeating, CORNER_REPEAT, misuse=True),
        Move("free again", 0.5, _hybrid_free_again, misuse=True),
    )


def hybrid_drain(view: HybridView) -> Iterator[Step]:
    """Admit new requests into an open window's reservation (handed out in order), close it, release every
    row and slot, admit as many new requests as both sides have room for and release them, then ``clear``.

    The reservation's order and the two free lists' next entries are read by no check until they are
    handed out: a window closed early, or a slot freed to the wrong list, stays hidden until then."""
    if view.group_open and view.unconsumed() and view.free_rows():
        yield HybridOps.alloc, {"batch": [None] * min(len(view.unconsumed()), view.free_rows())}
    if view.group_open:
        yield HybridOps.group_end, {}
    for _ in range(2):
        for handle in view.row_holders():
            yield HybridOps.free, {"handle": handle}
        for handle in view.slot_holders():
            yield HybridOps.free_mamba_cache, {"handle": handle}
        room = min(view.free_rows(), view.capacity())
        if room:
            yield HybridOps.alloc, {"batch": [None] * room}
    yield HybridOps.clear, {}


def hybrid_table() -> MoveTable[HybridView]:
    """``hybrid_req_to_token``: batches sized to the shorter side, row-only requests readmitted beside new ones."""
    return viewed_table(
        HybridView, hybrid_config, hybrid_moves(), hybrid_catalogue(),
        bench_moves=("alloc", "group begin", "group end", "free row", "free cache", "write", "clear"), drain=hybrid_drain)

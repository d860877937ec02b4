"""The Mamba families' catalogues: one move per kind of misuse and per corner (see :mod:`poolfuzz.harness.kits.kv.catalogue`).

Both families: the group window's corners, a window closed with its reservation
unconsumed and a ``clear`` while a reservation is open (sglang-pools.md section 8,
hazard 3; seed 001).  ``mamba_slots``: sizes that are not ints, frees of a list or a
float tensor, an empty free, more than 64 slots freed at once, a multi-slot ``alloc``
inside an open reservation, malformed constructors.  ``hybrid_req_to_token``: the
request-row catalogue (:func:`poolfuzz.harness.kits.rows.moves.row_catalogue`, over the view's rows),
a request holding its row but not its slot in one batch with new ones, a batch the
shorter side cannot serve, forged requests claiming Mamba slots, beam rows taken and
given back, and the Mamba state calls (``clear_slots``, ``copy_from``) valid and malformed.

The moves read the families' views (:class:`~poolfuzz.harness.kits.mamba.views.MambaSlotView`,
:class:`~poolfuzz.harness.kits.mamba.views.HybridView`), never the driver.
"""

from __future__ import annotations

from collections.abc import Callable

from poolfuzz.harness.kits.mamba.hybrid import FORGED_SLOT_FORMS, SLOT_CLAIMS
from poolfuzz.harness.kits.mamba.ops import ALLOC, FREE_SLOTS, GROUP_BEGIN, GROUP_END, HybridOps, SlotOps, WindowOps
from poolfuzz.harness.kits.mamba.state import STATE_MISUSE
from poolfuzz.harness.kits.mamba.views import HybridView, MambaSlotView, SlotView
from poolfuzz.harness.kits.rows.moves import RowView, row_catalogue
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import CORNER_MIXED, Draw, Move, Overrides, Step, fixed, one_of, through

COUNTING_PATH = 64
"""A ``free`` of more than this many slots takes the allocator's counting path."""
CORNER_END_UNCONSUMED = "corner: a window closed with its reservation unconsumed"
CORNER_CLEAR_OPEN = "corner: clear while a reservation is open"
CORNER_MULTI_IN_WINDOW = "corner: a multi-slot alloc while a reservation is open"
CORNER_SHORT_SIDE = "corner: a batch the shorter side cannot serve and the other can, with room to spare"


# ---------------------------------------------------------------- the group window (both families)
def _toward_a_reservation(view: SlotView, choose: Chooser) -> Step | None:
    """Open a window reserving one or more of the free slots (closing a spent one first)."""
    if view.group_open:
        return (WindowOps.group_end, {}) if not view.unconsumed() else None
    free = view.free_count()
    return (WindowOps.group_begin, {"num_reqs": choose.randint(1, free)}) if free else None


def _end_unconsumed(view: SlotView, choose: Chooser) -> Step | None:
    """``alloc_group_end`` of a window whose reservation is not all handed out: the rest must come back."""
    return (WindowOps.group_end, {}) if view.group_open and view.unconsumed() else None


def _clear_open(view: SlotView, choose: Chooser) -> Step | None:
    """``clear`` with a reservation open: every window must close, no reserved slot issued again."""
    return (WindowOps.clear, {}) if view.group_open and view.unconsumed() else None


def window_catalogue() -> tuple[Move[SlotView], ...]:
    """The group window's corners, for both Mamba families."""
    return (
        Move("a window closed with its reservation unconsumed", 0.1, _end_unconsumed, CORNER_END_UNCONSUMED, setup=_toward_a_reservation),
        Move("clear while a reservation is open", 0.05, _clear_open, CORNER_CLEAR_OPEN, setup=_toward_a_reservation),
    )


# ---------------------------------------------------------------- mamba_slots
def _int32_free(view: MambaSlotView, choose: Chooser) -> Step | None:
    live = view.live_slots()
    return FREE_SLOTS({"slots": live[:2], "int32": True}) if live else None


def _free_many(view: MambaSlotView, choose: Chooser) -> Step | None:
    """More than 64 live slots freed at once, one left live (so what the call ends is not every live slot)."""
    live = view.live_slots()
    return FREE_SLOTS({"slots": live[1:]}) if len(live) > COUNTING_PATH + 1 else None


def _free_many_repeating(view: MambaSlotView, choose: Chooser) -> Step | None:
    """More than 64 live slots freed at once, the middle one named twice."""
    live = view.live_slots()
    return FREE_SLOTS({"slots": [*live, live[len(live) // 2]]}) if len(live) > COUNTING_PATH else None


def _take_many(view: MambaSlotView, choose: Chooser) -> Step | None:
    """Every free slot of a large pool in one ``alloc``."""
    free = view.free_count()
    return ALLOC({"need_size": free}) if free > COUNTING_PATH else None


def _multi_in_window(view: MambaSlotView, choose: Chooser) -> Step | None:
    """``alloc`` of two or more slots, all of which the free list has, while at least as many are reserved:
    only ``alloc(1)`` may take the reservation."""
    most = min(len(view.unconsumed()), view.free_count()) if view.group_open else 0
    return ALLOC({"need_size": choose.randint(2, most)}) if most >= 2 else None


def _toward_reserved_and_free(view: MambaSlotView, choose: Chooser) -> Step | None:
    """Open a window reserving two or more slots with as many left on the free list (closing another first)."""
    if view.group_open:
        return GROUP_END({})
    free = view.free_count()
    return GROUP_BEGIN({"num_reqs": choose.randint(2, free - 2)}) if free >= 4 else None


def mamba_slot_catalogue() -> tuple[Move[MambaSlotView], ...]:
    """Every kind of misuse a Mamba slot allocator must reject, and its corners, one move each."""
    constructors: tuple[Overrides, ...] = ({"size": -1}, {"size": 1.5})
    return (
        *window_catalogue(),
        Move("a multi-slot alloc in an open reservation", 0.1, _multi_in_window, CORNER_MULTI_IN_WINDOW, setup=_toward_reserved_and_free),
        Move("free of more than 64 slots at once", 0.05, _free_many, setup=_take_many),
        Move("free of more than 64 slots, one named twice", 0.03, _free_many_repeating, misuse=True, setup=_take_many),
        Move("free of an empty tensor", 0.1, fixed(SlotOps.free_slots, slots=[])),
        Move("free of an int32 tensor", 0.1, _int32_free, setup=fixed(SlotOps.alloc, need_size=1)),
        Move("alloc of a float", 0.05, fixed(SlotOps.alloc, need_size=1.5), misuse=True),
        Move("alloc of a bool", 0.05, fixed(SlotOps.alloc, need_size=True), misuse=True),
        Move("group begin of a float", 0.05, fixed(SlotOps.group_begin, num_reqs=2.0), misuse=True),
        Move("free of a list", 0.05, fixed(SlotOps.free_malformed, form="list"), misuse=True),
        Move("free of a float tensor", 0.05, fixed(SlotOps.free_malformed, form="float tensor"), misuse=True),
        Move("free of a 2-D tensor", 0.05, fixed(SlotOps.free_malformed, form="2-D tensor"), misuse=True),
        Move("free of a 0-d tensor", 0.05, fixed(SlotOps.free_malformed, form="0-d tensor"), misuse=True),
        *(Move(f"malformed constructor {c}", 0.03, fixed(SlotOps.construct, overrides=c), misuse=True) for c in constructors),
    )


# ---------------------------------------------------------------- hybrid_req_to_token
HybridDraw = Draw[HybridView]


def _rows_of(view: HybridView) -> RowView:
    """The hybrid view's rows: what the request-row catalogue reads."""
    return view.rows


def readmit_beside_new(view: HybridView, choose: Chooser) -> Step | None:
    """A request holding its row but not its slot readmitted beside new ones, shuffled."""
    row_only = view.row_without_slot()
    if not row_only:
        return None
    batch: list[int | None] = [choose.choice(row_only), *([None] * choose.randint(1, 2))]
    choose.shuffle(batch)
    return HybridOps.alloc, {"batch": batch}


def donate_a_slot(view: HybridView, choose: Chooser) -> Step:
    """Free the slot of a request holding both (its cache donated), or admit one."""
    both = view.holding_both()
    return (HybridOps.free_mamba_cache, {"handle": choose.choice(both)}) if both else (HybridOps.alloc, {"batch": [None]})


def _short_side_batch(view: HybridView, choose: Chooser) -> Step | None:
    """New requests past what the shorter side (rows or Mamba slots) has, while the longer side has two or
    more to spare: the pool must refuse the batch and take nothing from either side, whatever the sum of
    the two sides' room says."""
    short, long = sorted((view.free_rows(), view.capacity()))
    return (HybridOps.alloc, {"batch": [None] * choose.randint(short + 1, long)}) if long - short >= 2 else None


def _toward_one_side_short(view: HybridView, choose: Chooser) -> Step | None:
    """Give back one side of a request only, the side that already has more room (its row, or its slot)."""
    free_rows, capacity = view.free_rows(), view.capacity()
    if free_rows > capacity or (free_rows == capacity and choose.random() < 0.5):
        rows = view.row_holders()
        return (HybridOps.free, {"handle": choose.choice(rows)}) if rows else None
    slots = view.slot_holders()
    return (HybridOps.free_mamba_cache, {"handle": choose.choice(slots)}) if slots else None


def _admit_two(view: HybridView, choose: Chooser) -> Step | None:
    """Admit two requests, if both sides have room for them (a refused admission builds nothing)."""
    return (HybridOps.alloc, {"batch": [None, None]}) if view.free_rows() >= 2 and view.capacity() >= 2 else None


def _with_holders(count: int, make: Callable[[list[int], Chooser], Step]) -> HybridDraw:
    """A step over ``count`` distinct requests holding a Mamba slot, or ``None`` (then the setup admits two)."""

    def draw(view: HybridView, choose: Chooser) -> Step | None:
        holders = view.slot_holders()
        return make(choose.sample(holders, count), choose) if len(holders) >= count else None

    return draw


def _write_state(held: list[int], choose: Chooser) -> Step:
    return HybridOps.write_state, {"handle": held[0]}


def _fork_state(held: list[int], choose: Chooser) -> Step:
    return HybridOps.copy_state, {"sources": held[:1], "targets": held[1:]}


def _clear_state(held: list[int], choose: Chooser) -> Step:
    return HybridOps.clear_state, {"handles": held}


def _state_misuse(kind: str) -> HybridDraw:
    return _with_holders(1, lambda held, choose: (HybridOps.state_misuse, {"handles": held, "kind": kind}))


def _claiming(claim: str) -> HybridDraw:
    return one_of(HybridOps.alloc_claiming, HybridView.holding_both, claim=claim)


def _beam_rows(view: HybridView, choose: Chooser) -> Step | None:
    """Rows taken with ``alloc_rows`` (no request holds them) given back with ``free_rows``."""
    beam = view.rows.raw_rows()
    return (HybridOps.free_rows, {"rows": beam[:2]}) if beam else None


def _forged_free(form: str) -> HybridDraw:
    return _with_holders(1, lambda held, choose: (HybridOps.free_mamba_cache_forged, {"handle": held[0], "form": form}))


def hybrid_catalogue() -> tuple[Move[HybridView], ...]:
    """Every kind of misuse a hybrid pool must reject, and its corners, one move each: the request rows'
    (read through the view's rows), then the Mamba side's."""
    constructors: tuple[Overrides, ...] = (
        {"mamba_size": -1},
        {"num_layers": 0},
        {"conv_shape": [-1]},
        {"temporal_shape": [-1]},
        {"conv_shape": [1.5]},
        {"temporal_shape": [2, 0.5]},
    )
    return (
        *through(_rows_of, row_catalogue()),
        *window_catalogue(),
        Move("readmit without a slot beside new requests", 0.1, readmit_beside_new, CORNER_MIXED, setup=donate_a_slot),
        Move("a batch the shorter side cannot serve", 0.1, _short_side_batch, CORNER_SHORT_SIDE, setup=_toward_one_side_short),
        Move("beam rows given back", 0.2, _beam_rows, setup=fixed(HybridOps.alloc_rows, need_size=2)),
        Move("write Mamba state", 0.3, _with_holders(1, _write_state), setup=_admit_two),
        Move("fork Mamba state", 0.3, _with_holders(2, _fork_state), setup=_admit_two),
        Move("clear Mamba state", 0.2, _with_holders(1, _clear_state), setup=_admit_two),
        Move("clear no Mamba state", 0.03, fixed(HybridOps.clear_state, handles=[])),
        Move("copy no Mamba state", 0.03, fixed(HybridOps.copy_state, sources=[], targets=[])),
        *(Move(f"Mamba state: {kind}", 0.03, _state_misuse(kind), misuse=True, setup=_admit_two) for kind in STATE_MISUSE),
        *(
            Move(f"alloc with a forged request claiming {claim}", 0.03, _claiming(claim), misuse=True, setup=_admit_two)
            for claim in SLOT_CLAIMS
        ),
        *(
            Move(f"free_mamba_cache of a request holding {form}", 0.03, _forged_free(form), misuse=True, setup=_admit_two)
            for form in FORGED_SLOT_FORMS
        ),
        *(Move(f"malformed hybrid constructor {c}", 0.03, fixed(HybridOps.construct, overrides=c), misuse=True) for c in constructors),
    )

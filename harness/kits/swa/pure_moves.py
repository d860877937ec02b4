"""The ``pure_swa_kv`` family's random moves (``PureSWATokenToKVPoolAllocator``), read through
:class:`~poolfuzz.harness.kits.swa.views.PureSWAView`.

The token allocator's moves on the pure variant's one page-size-1 pool (the token draws themselves,
from :mod:`poolfuzz.harness.kits.kv.moves`, where they are the same), plus its SWA calls (``free_swa``, a
free padded with 0 and -1, the no-op ``free_full``).  The table is
:func:`poolfuzz.harness.kits.swa.moves.pure_swa_kv_table`.
"""

from __future__ import annotations

from poolfuzz.harness.kits.kv.catalogue import NON_INTEGER_SIZES, non_integer_alloc
from poolfuzz.harness.kits.kv.misuse import MALFORMED_FREES
from poolfuzz.harness.kits.kv.moves import free_deferred, free_group, free_live, free_part, free_repeat, group_misuse, open_group
from poolfuzz.harness.kits.swa.ops import PureSWAKVOps
from poolfuzz.harness.kits.swa.pure import PAGED_CALLS
from poolfuzz.harness.kits.swa.views import PureSWAView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import CORNER_EXACT, CORNER_REPEAT, Draw, Move, Overrides, Step, fixed, move_kinds, one_of

PureDraw = Draw[PureSWAView]


def _pure_alloc(view: PureSWAView, choose: Chooser) -> Step:
    """An allocation of a few slots (0 allocates nothing)."""
    return PureSWAKVOps.alloc, {"need_size": choose.choice((1, 2, 3, 0))}


def _pure_fill(view: PureSWAView, choose: Chooser) -> Step:
    """An allocation of exactly the free slots, or one more (refused) or one fewer."""
    return PureSWAKVOps.alloc, {"need_size": max(0, view.free_pages() + choose.choice((0, 0, 1, -1)))}


_pure_free_part = free_part(PureSWAView.live)
"""The first 1-3 slots of an allocation (``sparse``: the same here, a page is one slot)."""


def _pure_free_through(op: str) -> PureDraw:
    """``op`` of a live allocation: ``free_swa`` (the same release as ``free``), ``free_padded`` (0 and -1
    around it, dropped), ``free_full`` (releases nothing: there is no full-attention pool)."""
    return one_of(op, PureSWAView.live)


_pure_free_again = one_of(PureSWAKVOps.free_again, PureSWAView.released)


def _pure_free_raw(view: PureSWAView, choose: Chooser) -> Step | None:
    """Raw slots from -1 to two past the end: padding, foreign, free and live ones."""
    if not view.holds_pages():
        return None
    return PureSWAKVOps.free_indices, {"indices": [choose.randint(-1, view.num_pages + 2) for _ in range(choose.randint(1, 3))]}


def pure_swa_moves() -> tuple[Move[PureSWAView], ...]:
    """The random moves of a pure SWA pool, commonest first (hypothesis shrinks toward the first).

    No ``merge``: the pure pool merges its staging area inside ``alloc`` only.
    """
    return (
        Move("alloc", 4, _pure_alloc),
        Move("free", 3, free_live),
        Move("clear", 0.3, fixed(PureSWAKVOps.clear)),
        Move("free group", 1.5, free_group),
        Move("free in a free group", 1, free_deferred, setup=open_group),
        Move("free part", 1, _pure_free_part),
        Move("free_swa", 1, _pure_free_through(PureSWAKVOps.free_swa)),
        Move("free padded", 1, _pure_free_through(PureSWAKVOps.free_padded)),
        Move("free_full", 0.5, _pure_free_through(PureSWAKVOps.free_full)),
        Move("alloc what is free", 0.5, _pure_fill, CORNER_EXACT),
        Move("alloc negative", 0.2, fixed(PureSWAKVOps.alloc, need_size=-1), misuse=True),
        Move("free again", 0.5, _pure_free_again, misuse=True),
        Move("free repeating", 1, free_repeat, CORNER_REPEAT, misuse=True, setup=fixed(PureSWAKVOps.alloc, need_size=2)),
        Move("free raw indices", 0.5, _pure_free_raw, misuse=True),
        Move("group misuse", 0.2, group_misuse, misuse=True),
    )


PURE_SWA_MALFORMED: tuple[Overrides, ...] = ({"page_size": 2}, {"size_swa": -1}, {"size_swa": 2.5})
"""Constructor overrides ``PureSWATokenToKVPoolAllocator`` must refuse (``BadSizeError``)."""


def pure_swa_catalogue() -> tuple[Move[PureSWAView], ...]:
    """The token catalogue on a pure SWA pool (its constructor, its free forms) plus the paged calls it refuses."""
    frees = {form: fixed(PureSWAKVOps.free_malformed, form=form) for form in MALFORMED_FREES if form != "2-D tensor"}
    return (
        *move_kinds("free of a malformed tensor", frees, 0.2),
        *move_kinds("alloc of a non-integer size", {str(size): non_integer_alloc(size) for size in NON_INTEGER_SIZES}, 0.1),
        *move_kinds("malformed constructor", {str(c): fixed(PureSWAKVOps.construct, overrides=c) for c in PURE_SWA_MALFORMED}, 0.1),
        *move_kinds("paged call", {call: fixed(PureSWAKVOps.paged_call, call=call) for call in PAGED_CALLS}, 0.1),
    )

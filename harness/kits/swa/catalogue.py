"""The ``swa_kv`` family's catalogue: one move per kind of misuse ``SWATokenToKVPoolAllocator`` must reject,
and its empty-call corners (see :mod:`poolfuzz.harness.kits.kv.catalogue`).

The moves read :class:`~poolfuzz.harness.kits.swa.views.SWAView`; two reuse random moves of
:mod:`poolfuzz.harness.kits.swa.random_moves` (the window sliding, as a setup; a ``free_swa`` out of the
window and a call of the other page regime, as misuse).  The ``pure_swa_kv`` catalogue
shares the token allocator's helpers and is :func:`poolfuzz.harness.kits.swa.pure_moves.pure_swa_catalogue`.
"""

from __future__ import annotations

from poolfuzz.harness.kits.kv.batches import DECODE_DEFECTS, EXTEND_DEFECTS
from poolfuzz.harness.kits.swa.misuse import FREE_CALLS
from poolfuzz.harness.kits.swa.ops import SWAKVOps
from poolfuzz.harness.kits.swa.random_moves import free_swa_gone, slide, wrong_regime
from poolfuzz.harness.kits.swa.views import SWAView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import Draw, Move, Overrides, Step, fixed

SWADraw = Draw[SWAView]


def _malformed(op: str, defect: str) -> SWADraw:
    """A batch of one or two requests still in the window (extend: maybe a new one too) with ``defect``."""

    def draw(view: SWAView, choose: Chooser) -> Step | None:
        live = [h for h in view.handles(continuable=True) if view.length(h)]
        if view.page_size == 1 or not live:
            return None
        handles: list[int | None] = list(choose.sample(live, min(len(live), choose.randint(1, 2))))
        if op == SWAKVOps.extend_malformed and choose.random() < 0.5:
            handles.insert(choose.randint(0, len(handles)), None)
        return op, {"handles": handles, "defect": defect}

    return draw


def _admit_mid_page(view: SWAView, choose: Chooser) -> Step | None:
    """Admit a request of a page and a token (it ends mid-page), if both sides have two pages free."""
    ps = view.page_size
    return (SWAKVOps.extend, {"batch": [[None, ps + 1]]}) if ps > 1 and not view.pages_short(2, 2) else None


def _nested_begin(view: SWAView, choose: Chooser) -> Step | None:
    return (SWAKVOps.group_begin, {}) if view.group_open() else None


def _end_without_begin(view: SWAView, choose: Chooser) -> Step | None:
    return None if view.group_open() else (SWAKVOps.group_end, {})


def _toward_a_slid_window(view: SWAView, choose: Chooser) -> Step | None:
    """Admit a request of two pages, then slide the window past its first."""
    if not view.any_live():
        return None if view.pages_short(2, 2) else (SWAKVOps.extend, {"batch": [[None, 2 * view.page_size]]})
    return slide(view, choose)


def _tail_misuse(kind: str) -> SWADraw:
    def draw(view: SWAView, choose: Chooser) -> Step | None:
        ps = view.page_size
        if ps == 1:
            return None
        tail = ps + 1 if kind == "longer than the extend" else 1
        return SWAKVOps.tail, {"handle": None, "extend_len": ps if tail > ps else 2 * ps, "swa_tail_len": tail}

    return draw


def swa_catalogue() -> tuple[Move[SWAView], ...]:
    """Every kind of misuse ``SWATokenToKVPoolAllocator`` must reject, one move each, and its empty-call corners."""
    constructors: tuple[Overrides, ...] = ({"page_size": 0}, {"size": -4}, {"size_swa": 2.5}, {"kernel": "gpu"})
    return (
        Move("empty extend batch", 0.05, fixed(SWAKVOps.extend, batch=[])),
        *(Move(f"{call} of no index", 0.03, fixed(SWAKVOps.free_indices, indices=[], call=call)) for call in FREE_CALLS),
        *(
            Move(f"malformed extend ({d})", 0.03, _malformed(SWAKVOps.extend_malformed, d), misuse=True, setup=_admit_mid_page)
            for d in EXTEND_DEFECTS
        ),
        *(
            Move(f"malformed decode ({d})", 0.03, _malformed(SWAKVOps.decode_malformed, d), misuse=True, setup=_admit_mid_page)
            for d in DECODE_DEFECTS
        ),
        Move("a tail of two requests", 0.05, fixed(SWAKVOps.tail_of_two), misuse=True),
        *(
            Move(f"a tail {kind}", 0.03, _tail_misuse(kind), misuse=True)
            for kind in ("longer than the extend", "not starting on a page boundary")
        ),
        Move("free_swa of pages out of the window", 0.05, free_swa_gone, misuse=True, setup=_toward_a_slid_window),
        Move("alloc of a float", 0.03, fixed(SWAKVOps.alloc_non_int, need_size=1.5), misuse=True),
        Move("a call of the other page regime", 0.05, wrong_regime, misuse=True),
        Move("nested free group", 0.03, _nested_begin, misuse=True, setup=fixed(SWAKVOps.group_begin)),
        Move("free group end without a begin", 0.03, _end_without_begin, misuse=True, setup=fixed(SWAKVOps.group_end)),
        *(Move(f"malformed constructor {c}", 0.02, fixed(SWAKVOps.construct, overrides=c), misuse=True) for c in constructors),
    )

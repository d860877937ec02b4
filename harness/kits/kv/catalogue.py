"""The KV allocators' catalogues: one move per misuse kind and per corner the families must serve.

A catalogue move draws one step through a :class:`~poolfuzz.strategies.choosers.Chooser` from
the family's view of the pool (:class:`poolfuzz.harness.kits.kv.views.KVView`, :class:`poolfuzz.harness.kits.kv.views.PagedKVView`):
the walk engine takes them at a small weight each, and a machine's ``run_catalogue``
rule (:class:`poolfuzz.harness.machines.base.PoolMachine`) runs every one of them in turn,
so each kind is issued on purpose in every run, whatever the search favours.
Which defects and kernel cases exist, and which error each must raise, is the
judge's (:mod:`poolfuzz.harness.kits.kv.batches`, :mod:`poolfuzz.harness.kits.kv.page_kernel`);
the moves only shape the steps.  Every step is labelled by the driver with an
event naming its kind (``misuse: ...`` or ``corner: ...``).

:func:`non_integer_alloc` and :data:`NON_INTEGER_SIZES` serve the pure SWA catalogue too
(:func:`poolfuzz.harness.kits.swa.pure_moves.pure_swa_catalogue`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolfuzz.harness.kits.kv.batches import DECODE_DEFECTS, EXTEND_DEFECTS
from poolfuzz.harness.kits.kv.misuse import MALFORMED_FREES
from poolfuzz.harness.kits.kv.ops import PagedKVOps, TokenKVOps
from poolfuzz.harness.kits.kv.page_kernel import CASES
from poolfuzz.harness.kits.kv.views import KVView, PagedKVView
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import Move, Overrides, Step, fixed, move_kinds, some_of

TOKEN_KV_MALFORMED: tuple[Overrides, ...] = ({"size": -1}, {"size": 2.5})
"""Constructor overrides ``TokenToKVPoolAllocator`` must refuse (``BadSizeError``)."""
PAGED_KV_MALFORMED: tuple[Overrides, ...] = (
    {"page_size": 0},
    {"page_size": 4, "size": 6},
    {"page_size": 4, "size": -4},
    {"kernel": "gpu"},
    {"kernel": "triton", "page_size": 3, "size": 9},
)
"""Constructor overrides ``PagedTokenToKVPoolAllocator`` must refuse: a page size below 1, a size that is not a
non-negative multiple of it, an unknown kernel, Triton at a page size that is not a power of two."""
NON_INTEGER_SIZES = (1.5, True, "page")
"""``alloc`` sizes that are not ints: a float, a bool, and a float of exactly one page (``"page"``)."""
MANY = 64
"""Pages (or slots) one free must pass to take the pools' table-based duplicate check."""

Draw = Callable[[Any, Chooser], Step | None]


def _malformed_extend(defect: str) -> Callable[[PagedKVView, Chooser], Step | None]:
    def draw(view: PagedKVView, choose: Chooser) -> Step | None:
        reqs = view.holding_requests()
        if not reqs:
            return None
        handles: list[int | None] = [*some_of(reqs, choose, most=2), *[None] * choose.randint(0, 1)]
        choose.shuffle(handles)
        return PagedKVOps.extend_malformed, {"handles": handles, "defect": defect}

    return draw


def _malformed_decode(defect: str) -> Callable[[PagedKVView, Chooser], Step | None]:
    def draw(view: PagedKVView, choose: Chooser) -> Step | None:
        reqs = view.holding_requests()
        if not reqs:
            return None
        return PagedKVOps.decode_malformed, {"handles": some_of(reqs, choose), "defect": defect}

    return draw


def admit_mid_page(view: KVView, choose: Chooser) -> Step | None:
    """Admit a request ending mid-page (a page and a token at page size 1) if a page is free."""
    ps, room = view.page_size, view.free_pages()
    if not room:
        return None
    length = ps + 1 if ps == 1 else choose.randint(1, ps - 1) + ps * choose.randint(0, min(1, room - 1))
    return PagedKVOps.extend, {"batch": [[None, length]]}


_step = fixed
"""A move drawing nothing: always the same step (:func:`poolfuzz.strategies.table.fixed`)."""


def non_integer_alloc(size: Any) -> Draw:
    """``alloc`` of a size that is not an int; ``"page"`` is a float of exactly one page (read as ``page_size``)."""
    return lambda state, choose: (TokenKVOps.alloc, {"need_size": float(state.page_size) if size == "page" else size})


def _free_many(view: KVView, choose: Chooser) -> Step | None:
    """Free an allocation of more than 64 pages in one call (the pools' table-based duplicate check)."""
    big = [h for h in view.plain() if view.pages_held(h) > MANY]
    return (TokenKVOps.free, {"handle": big[0]}) if big else None


def _free_many_repeating(view: KVView, choose: Chooser) -> Step | None:
    """Live slots of more than 64 pages in one free, one of them named twice (a double free for the token pool)."""
    big = [view.slots_of(h) for h in view.plain() if len(view.slots_of(h)) > MANY]
    return (TokenKVOps.free_indices, {"indices": [*big[0], big[0][len(big[0]) // 2]]}) if big else None


def _take_many(view: KVView, choose: Chooser) -> Step | None:
    """Take every free page, when more than 64 are free."""
    free = view.free_pages()
    return (TokenKVOps.alloc, {"need_size": free * view.page_size}) if free > MANY else None


def token_catalogue(constructors: tuple[Overrides, ...] = TOKEN_KV_MALFORMED) -> tuple[Move[KVView], ...]:
    """Misuse every KV allocator must reject: malformed frees, sizes that are not ints, malformed constructors;
    and a free of more than 64 pages at once where the pool has them."""
    return (
        Move("free of more than 64 pages at once", 0.05, _free_many, setup=_take_many),
        Move("free of more than 64 slots, one named twice", 0.03, _free_many_repeating, misuse=True, setup=_take_many),
        *move_kinds("free of a malformed tensor", {form: _step("free_malformed", form=form) for form in MALFORMED_FREES}, 0.2),
        *move_kinds("alloc of a non-integer size", {str(size): non_integer_alloc(size) for size in NON_INTEGER_SIZES}, 0.1),
        *move_kinds("malformed constructor", {str(c): _step("construct", overrides=c) for c in constructors}, 0.1),
    )


def paged_catalogue() -> tuple[Move[PagedKVView], ...]:
    """The token catalogue (paged constructors), malformed extend and decode batches, and the page kernel's cases."""
    kernel_misuse = {case: _step("kernel_call", case=case) for case, (_, error) in CASES.items() if error is not None}
    kernel_corners = {case: _step("kernel_call", case=case) for case, (_, error) in CASES.items() if error is None}
    return (
        *token_catalogue(PAGED_KV_MALFORMED),
        *move_kinds("malformed extend", {d: _malformed_extend(d) for d in EXTEND_DEFECTS}, 0.6, setup=admit_mid_page),
        Move(
            "malformed extend (an empty batch counting a token)",
            0.02,
            _step("extend_malformed", handles=[], defect="extend_num_tokens off by one"),
            misuse=True,
        ),
        *move_kinds("malformed decode", {d: _malformed_decode(d) for d in DECODE_DEFECTS}, 0.4, setup=admit_mid_page),
        *move_kinds("page kernel", kernel_misuse, 0.3),
        *move_kinds("page kernel", kernel_corners, 0.1, misuse=False),
        Move("empty decode batch", 0.05, _step("decode", handles=[])),
    )

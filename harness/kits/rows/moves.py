"""The request-row families' move table (``req_to_token``, ``decode_req_to_token``).

One table serves the hypothesis machine, the walk and the bench workload
(:mod:`poolfuzz.strategies.table`).  The moves read the pool's state only through
:class:`RowView`; the catalogue issues every kind of misuse a row pool must reject
(a float size, row 0 in a tensor write, a forged request claiming a row it does not
hold, a malformed constructor) and its corners (every free row at once, more than 16
rows rebound at once, a write through each kind of row selector).
"""

from __future__ import annotations

from collections.abc import Iterator

from poolfuzz.harness.kits.rows.config import DecodeRowConfig, RowConfig
from poolfuzz.harness.kits.rows.driver import CLAIMS, WRITE_SELECTORS
from poolfuzz.harness.kits.rows.ops import RowOps
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import (
    CORNER_MIXED,
    CORNER_REPEAT,
    Draw,
    DriverView,
    Move,
    MoveTable,
    Overrides,
    Step,
    fixed,
    mixed_batch,
    one_of,
    picking,
    some_of,
    some_repeated,
    viewed_table,
)

LARGE_ROW_POOL = 20
"""A pool large enough for ``alloc_rows`` of more than 16 rows at once (the pools' vectorised path)."""
FAST_PATH_ROWS = 16
"""``alloc_rows`` above this many rows takes the pools' vectorised path."""


class RowView(DriverView):
    """What the row moves may read: request handles, free and raw rows, generations (through the driver's model).

    A hybrid pool's driver is a row driver too, so the hybrid table reads its rows
    through this same view.
    """

    __slots__ = ()

    @property
    def num_rows(self) -> int:
        return int(self._driver.model.num_rows)

    def live(self) -> list[int]:
        """Handles of requests holding a live row, in order."""
        return list(self._driver.live_handles())

    def gone(self) -> list[int]:
        """Handles of requests whose row was freed (they may be admitted again, or freed again as misuse)."""
        reqs = self._driver.reqs
        return [h for h in reqs if reqs[h].req_pool_idx is None]

    def free_count(self) -> int:
        return len(self._driver.model.free)

    def free_rows(self) -> list[int]:
        return sorted(self._driver.model.free)

    def raw_rows(self) -> list[int]:
        """Live rows no request holds (taken with ``alloc_rows``), in order."""
        return sorted(row for row, owner in self._driver.model.owner.items() if owner is None)

    def live_rows(self) -> list[int]:
        return sorted(self._driver.model.owner)

    def bound_before(self, row: int) -> bool:
        return bool(self._driver.model.generation[row])

    def occupancy(self) -> float:
        rows = self.num_rows
        return 0.0 if rows == 0 else 1.0 - self.free_count() / rows


RowDraw = Draw[RowView]


def row_pool_config(choose: Chooser, *, decode: bool = False) -> RowConfig:
    """Tiny pools (0-3 rows) and a large one half the time, any size up to 12 otherwise; a short context."""
    size = choose.choice((0, 1, 2, 3, LARGE_ROW_POOL)) if choose.random() < 0.5 else choose.randint(1, 12)
    context = choose.choice((4, 8, 16))
    if decode:
        return DecodeRowConfig(size=size, max_context_len=context, pre_alloc_size=choose.randint(0, 4))
    return RowConfig(size=size, max_context_len=context)


# ---------------------------------------------------------------- random moves
def _alloc(view: RowView, choose: Chooser) -> Step:
    live = view.live()
    reuse = choose.sample(live, min(len(live), choose.randint(0, 2)))
    batch: list[int | None] = [*([None] * choose.randint(0, 3)), *reuse]
    choose.shuffle(batch)
    return RowOps.alloc, {"batch": batch}


def _alloc_mixed(view: RowView, choose: Chooser) -> Step | None:
    live = view.live()
    return (RowOps.alloc, {"batch": mixed_batch(live, view.free_count(), choose)}) if live else None


def _readmit(view: RowView, choose: Chooser) -> Step | None:
    gone = view.gone()
    return (RowOps.alloc, {"batch": [choose.choice(gone), *([None] * choose.randint(0, 2))]}) if gone else None


_free = one_of(RowOps.free, RowView.live)


_free_again = one_of(RowOps.free, RowView.gone)


def _alloc_rows(view: RowView, choose: Chooser) -> Step:
    free = view.free_count()
    return RowOps.alloc_rows, {"need_size": choose.choice((0, 1, 2, free, free + 1, max(0, free - 1)))}


_free_rows = picking(RowOps.free_rows, RowView.raw_rows, "rows", some_of)
_free_rows_repeating = picking(RowOps.free_rows, RowView.live_rows, "rows", some_repeated)
"""Live rows freed in one call with one of them named twice."""


def _free_rows_arbitrary(view: RowView, choose: Chooser) -> Step:
    return RowOps.free_rows, {"rows": [choose.randint(-1, view.num_rows + 2) for _ in range(choose.randint(1, 3))]}


def _write(view: RowView, choose: Chooser) -> Step | None:
    live = view.live()
    if not live:
        return None
    return RowOps.write, {"handle": choose.choice(live), "start": choose.randint(0, 16), "length": choose.randint(0, 8)}


def row_moves() -> tuple[Move[RowView], ...]:
    """The random moves of a request-row pool, cheapest and commonest first (hypothesis shrinks toward the first)."""
    return (
        Move("clear", 0.3, fixed(RowOps.clear)),
        Move("alloc", 4, _alloc),
        Move("alloc mixed", 2, _alloc_mixed, CORNER_MIXED),
        Move("readmit", 1, _readmit),
        Move("free", 3, _free),
        Move("free again", 0.5, _free_again, misuse=True),
        Move("alloc_rows", 1.5, _alloc_rows),
        Move("alloc_rows negative", 0.2, fixed(RowOps.alloc_rows, need_size=-1), misuse=True),
        Move("free_rows", 1, _free_rows),
        Move("free_rows repeating", 1, _free_rows_repeating, CORNER_REPEAT, misuse=True, setup=fixed(RowOps.alloc_rows, need_size=2)),
        Move("free_rows arbitrary", 0.5, _free_rows_arbitrary, misuse=True),
        Move("write", 1, _write),
    )


# ---------------------------------------------------------------- the catalogue
def _one_live(view: RowView, choose: Chooser) -> Step | None:
    """Admit one request, if a row is free (a refused admission builds nothing)."""
    return (RowOps.alloc, {"batch": [None]}) if view.free_count() else None


def _every_free_row(view: RowView, choose: Chooser) -> Step:
    return RowOps.alloc_rows, {"need_size": view.free_count()}


def _rebind_many(view: RowView, choose: Chooser) -> Step | None:
    """``alloc_rows`` of more than 16 free rows that were all bound before (their generations rise again)."""
    free = view.free_rows()
    if len(free) > FAST_PATH_ROWS and all(view.bound_before(row) for row in free):
        return RowOps.alloc_rows, {"need_size": len(free)}
    return None


def _toward_rebinding(view: RowView, choose: Chooser) -> Step | None:
    """Take every free row of a large pool with ``alloc_rows``, then give them back with ``free_rows``."""
    raw = view.raw_rows()
    if len(raw) > FAST_PATH_ROWS:
        return RowOps.free_rows, {"rows": raw}
    return (RowOps.alloc_rows, {"need_size": view.free_count()}) if view.free_count() > FAST_PATH_ROWS else None


def _claiming(claim: str) -> RowDraw:
    return one_of(RowOps.alloc_claiming, RowView.live, claim=claim)


def _write_rows(padding: bool) -> RowDraw:
    def draw(view: RowView, choose: Chooser) -> Step | None:
        live = view.live()
        return (RowOps.write_rows, {"handles": choose.sample(live, min(len(live), 2)), "padding": padding}) if live else None

    return draw


def _write_selecting(selector: str, *, whole_rows: bool = False) -> RowDraw:
    def draw(view: RowView, choose: Chooser) -> Step | None:
        live = view.live()
        if not live:
            return None
        return RowOps.write_selecting, {"handle": choose.choice(live), "selector": selector, "whole_rows": whole_rows}

    return draw


WRITE_SELECTORS_VALID = tuple(name for name, (_, errors) in WRITE_SELECTORS.items() if not errors)
WRITE_SELECTORS_MISUSE = tuple(name for name, (_, errors) in WRITE_SELECTORS.items() if errors)
"""How ``write_selecting`` names rows (the driver's :data:`WRITE_SELECTORS`): valid selectors, then misuse."""


def row_catalogue(*, decode: bool = False) -> tuple[Move[RowView], ...]:
    """Every kind of misuse a request-row pool must reject, and its corners, one move each."""
    constructors: list[Overrides] = [{"size": -1}, {"max_context_len": 0}, {"size": 2.0}, {"max_context_len": 4.5}]
    constructors += [{"pre_alloc_size": -1}, {"pre_alloc_size": 1.0}] if decode else []
    return (
        Move("alloc_rows of every free row", 0.3, _every_free_row),
        Move("more than 16 rows bound a second time at once", 0.05, _rebind_many, setup=_toward_rebinding),
        Move("write through a tensor of rows", 0.2, _write_rows(False), setup=_one_live),
        Move("write through an empty tensor of rows", 0.05, fixed(RowOps.write_rows, handles=[], padding=False)),
        Move("free_rows of no row", 0.05, fixed(RowOps.free_rows, rows=[])),
        Move("alloc_rows of a float", 0.05, fixed(RowOps.alloc_rows_non_int, need_size=1.5), misuse=True),
        Move("alloc_rows of a bool", 0.05, fixed(RowOps.alloc_rows_non_int, need_size=True), misuse=True),
        Move("free_rows of a non-integer row", 0.1, fixed(RowOps.free_rows, rows=[1.0]), misuse=True),
        Move("tensor write naming row 0", 0.1, _write_rows(True), misuse=True, setup=_one_live),
        *(Move(f"alloc with a forged request claiming {claim}", 0.05, _claiming(claim), misuse=True, setup=_one_live) for claim in CLAIMS),
        *(Move(f"write through {selector}", 0.03, _write_selecting(selector), setup=_one_live) for selector in WRITE_SELECTORS_VALID),
        *(
            Move(f"write through {selector}", 0.02, _write_selecting(selector), misuse=True, setup=_one_live)
            for selector in WRITE_SELECTORS_MISUSE
        ),
        Move("write whole rows through an int", 0.03, _write_selecting("an int row", whole_rows=True), setup=_one_live),
        Move(
            "write whole rows through a list naming row 0",
            0.02,
            _write_selecting("a list naming row 0", whole_rows=True),
            misuse=True,
            setup=_one_live,
        ),
        *(Move(f"malformed constructor {c}", 0.03, fixed(RowOps.construct, overrides=c), misuse=True) for c in constructors),
    )


def row_drain(view: RowView) -> Iterator[Step]:
    """Free every request's row and every raw row, take the whole free list in one ``alloc_rows`` and free it
    (twice: the second pass reads the order the first one's frees left), then ``clear``.

    Which rows the free list hands out next is state no check reads until that many are asked for; a
    tail pop or a stale entry (``sglang-pools.md`` section 6) shows here as a row handed out twice or not
    at all (``no-double-allocation``, ``conservation``)."""
    for handle in view.live():
        yield RowOps.free, {"handle": handle}
    for _ in range(2):
        if view.raw_rows():
            yield RowOps.free_rows, {"rows": view.raw_rows()}
        if view.free_count():
            yield RowOps.alloc_rows, {"need_size": view.free_count()}
    if view.raw_rows():
        yield RowOps.free_rows, {"rows": view.raw_rows()}
    yield RowOps.clear, {}


def row_table(*, decode: bool = False) -> MoveTable[RowView]:
    """The request-row families' table: mixed batches, readmissions and repeats at a steady rate."""
    return viewed_table(
        RowView,
        lambda choose: row_pool_config(choose, decode=decode),
        row_moves(),
        row_catalogue(decode=decode),
        bench_moves=("alloc", "free", "alloc_rows", "free_rows", "write", "clear"),
        drain=row_drain,
    )


def decode_row_table() -> MoveTable[RowView]:
    """The decode pool's table: the row table over configurations with pre-allocated rows."""
    return row_table(decode=True)

"""Move tables: a family's inputs, declared once, drawn by every engine.

A :class:`MoveTable` holds a family's pool configurations and every kind of step it
can take, each a :class:`Move` whose arguments are drawn through a
:class:`~poolfuzz.strategies.choosers.Chooser`.  From that one table come

- the hypothesis machine (:func:`poolfuzz.harness.machines.table.table_machine`): each move a
  weighted pick, each argument a ``data.draw`` the shrinker understands;
- the walk (:mod:`poolfuzz.harness.fuzz.walk`): the same moves with a plain ``random.Random``;
- the bench workload (:func:`workload`): the valid moves over the bench configuration.

Before tables, each family wrote its inputs three times (machine rules, walk moves,
bench workload) and they drifted: the bench and walk engines silently dropped
arguments their drivers no longer took.  A move reads the pool's state only through
the table's *view* (:attr:`MoveTable.view`), an object that names what the draws may
see, so a driver's internals can change without its moves following them.

The catalogue (:attr:`MoveTable.catalogue`) is the family's misuse kinds and corners
(a malformed constructor, an exact fit, a batch past a fast path's size), issued on
purpose: every few steps by the machines' ``run_catalogue`` rule and at their weights
by the walk.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.judge.view import DriverView as DriverView  # re-exported: every kit's move view subclasses it
from poolfuzz.strategies.choosers import Chooser

V = TypeVar("V")
"""A table's view type: what every draw of its moves receives."""
W = TypeVar("W")
V_contra = TypeVar("V_contra", contravariant=True)
"""A move's view type: a move written for a view serves any table whose view is one (a move drawing nothing
serves every table)."""

Overrides = dict[str, Any]
"""Constructor keywords a catalogue move merges into a pool's config to build a malformed one (``construct``):
deliberately outside the family's :class:`~poolfuzz.harness.judge.config.PoolConfig`, so a plain mapping."""
Step = tuple[str, Args]
Draw = Callable[[V, Chooser], Step | None]
"""A move's ``draw`` (or ``setup``) over view type ``V`` (``Draw[RowView]``): ``(op, args)`` from the view and a
chooser, or ``None``."""


@dataclass(frozen=True)
class Move(Generic[V_contra]):
    """One kind of step: ``draw(view, choose)`` gives ``(op, args)``, or ``None`` when the state offers none.

    ``corner`` names the rare state it aims at (counted as an event); ``setup(view,
    choose)``, when the state lacks what the corner needs, gives a step that builds it;
    ``misuse`` moves are issued only to targets that validate their input.  ``Move[RowView]`` draws from a
    :class:`RowView`, and mypy checks each draw against it.
    """

    name: str
    weight: float
    draw: Callable[[V_contra, Chooser], Step | None]
    corner: str = ""
    misuse: bool = False
    setup: Callable[[V_contra, Chooser], Step | None] | None = None


def _the_driver(driver: Any) -> Any:
    return driver


@dataclass(frozen=True)
class MoveTable(Generic[V]):
    """A family's inputs: its configurations, random moves, catalogue, and the view the moves read.

    Generic in its view type ``V`` (``MoveTable[RowView]``): every move, the occupancy and the drain plan take
    the view the table builds, so mypy checks each draw against the kit's view class.

    ``configs(choose)`` draws the family's typed configuration (:class:`~poolfuzz.harness.judge.config.PoolConfig`;
    the engine sets ``device``).
    ``view(driver)`` builds, once per pool, the object every draw receives; a table that
    declares none gets the driver itself (the tables written before views existed).
    ``occupancy(view)`` is the fraction of the pool in use, which hypothesis's
    ``target()`` maximises so examples reach full pools.
    """

    configs: Callable[[Chooser], PoolConfig]
    moves: tuple[Move[V], ...]
    catalogue: tuple[Move[V], ...] = ()
    view: Callable[[Any], V] = _the_driver
    occupancy: Callable[[V], float] | None = None
    bench_moves: tuple[str, ...] = field(default=())
    """Names of the moves the bench workload takes; empty: every valid (non-misuse) random move."""
    corners: Callable[[Any], list[str]] = field(default=lambda config: config_corners(config))
    """Event labels for the corners a configuration starts in (default :func:`config_corners`: ``size`` in
    tokens or rows, ``page_size``)."""
    drain: Callable[[V], Iterator[Step]] | None = None
    """The family's drain plan over a view: steps that empty the pool in policy order (release every holder,
    evict or allocate until refused, free everything), yielded one at a time so each reads the state the last
    left.  Drain audits (:meth:`~poolfuzz.harness.judge.driver.Driver.drain_audit`) run it on a copy of the pool."""

    def drain_plan(self) -> Callable[[Any], Iterator[Step]] | None:
        """The drain plan as the driver base takes it (over the driver, the view built here), or ``None``."""
        drain, view = self.drain, self.view
        if drain is None:
            return None
        return lambda driver: drain(view(driver))

    @property
    def walk_moves(self) -> tuple[Move[V], ...]:
        """What the walk draws from: the catalogue at its weights, then the random moves."""
        return (*self.catalogue, *self.moves)

    def move(self, name: str) -> Move[V]:
        for candidate in self.walk_moves:
            if candidate.name == name:
                return candidate
        raise KeyError(f"no move {name!r}; known: {', '.join(m.name for m in self.walk_moves)}")

    def workload(self) -> Callable[[Any, random.Random], Step]:
        """The bench workload: a weighted valid move each call, over a view of the driver it is given."""
        moves = tuple(self.move(n) for n in self.bench_moves) or tuple(m for m in self.moves if not m.misuse)
        assert moves, "a move table needs at least one valid move"
        cumulative = list(itertools.accumulate(m.weight for m in moves))
        held: list[Any] = [None, None]  # the driver of the last call and its view: a bench run drives one at a time

        def step(driver: Any, rng: random.Random) -> Step:
            if held[0] is not driver:
                held[:] = [driver, self.view(driver)]
            return pick_step(moves, cumulative, held[1], rng, fallback=moves)[1]

        return step


def through(view: Callable[[V], W], moves: tuple[Move[W], ...]) -> tuple[Move[V], ...]:
    """``moves`` written for ``view``, taken by a table whose own view is another: each draw builds ``view``
    from the state it is given.  How one family's table reuses another's (a hybrid pool's rows)."""

    def lift(draw: Draw[W]) -> Draw[V]:
        return lambda state, choose: draw(view(state), choose)

    return tuple(Move(m.name, m.weight, lift(m.draw), m.corner, m.misuse, None if m.setup is None else lift(m.setup)) for m in moves)


def load_table(made: Any) -> MoveTable[Any]:
    """A registry ``moves`` entry, resolved: the table itself, or the function that returns it."""
    table = made if isinstance(made, MoveTable) else made()
    if not isinstance(table, MoveTable):
        raise TypeError(f"{made!r} is not a MoveTable, nor a function returning one")
    return table


def pick_step(
    enabled: tuple[Move[V], ...] | list[Move[V]],
    cumulative: list[float],
    view: V,
    choose: Chooser,
    *,
    fallback: tuple[Move[V], ...],
    tries: int = 4,
) -> tuple[str, Step]:
    """A step of a weighted pick among ``enabled`` (or of its setup), with the corner label it reaches.

    Up to ``tries`` picks; then every move of ``fallback`` in a drawn order, so a state
    that offers none of the enabled moves still takes a step.  A table must have a move
    that always applies (a query, a clear): otherwise this is an assertion.
    """
    for _ in range(tries):
        found = step_of(enabled[bisect.bisect(cumulative, choose.random() * cumulative[-1])], view, choose)
        if found is not None:
            return found
    order = list(fallback)
    choose.shuffle(order)
    for move in order:
        found = step_of(move, view, choose)
        if found is not None:
            return found
    raise AssertionError("no move of the table applies; every table needs one that always does")


def step_of(move: Move[V], view: V, choose: Chooser) -> tuple[str, Step] | None:
    """``move``'s step with its corner label, else its setup step (no label), else ``None``."""
    step = move.draw(view, choose)
    if step is not None:
        return move.corner, step
    step = move.setup(view, choose) if move.setup is not None else None
    return None if step is None else ("", step)


def corner_steps(move: Move[V], view: V, choose: Chooser, on_corner: Callable[[str], None], *, setups: int = 3) -> Iterator[Step]:
    """Up to ``setups`` setup steps, then ``move``'s own step, its corner label passed to ``on_corner``.

    A generator: the caller runs each step before the next is drawn from the state it
    left, so one rule reaches a corner that would otherwise need several to line up.
    """
    for _ in range(setups + 1):
        step = move.draw(view, choose)
        if step is not None:
            if move.corner:
                on_corner(move.corner)
            yield step
            return
        step = move.setup(view, choose) if move.setup is not None else None
        if step is None:
            return
        yield step


def config_corners(config: PoolConfig) -> list[str]:
    """:func:`pool_corners` of a config's ``size`` in tokens or rows and its ``page_size`` (0: a family without)."""
    return pool_corners(size=getattr(config, "size", None), page_size=getattr(config, "page_size", 0))


def pool_corners(*, size: int | None, page_size: int = 0) -> list[str]:
    """Event labels for the corners a pool starts in: page size 1, large pages, an empty pool, a pool of one."""
    labels = []
    if page_size == 1:
        labels.append("corner: page size 1")
    elif page_size >= 16:
        labels.append("corner: large pages")
    if size is not None:
        units = size // max(1, page_size)
        if units <= 1:
            labels.append("corner: an empty pool" if units == 0 else "corner: a pool of one")
    return labels


CORNER_REPEAT = "corner: an index repeated inside one call"
CORNER_MIXED = "corner: a batch mixing requests that hold and that need"
CORNER_EXACT = "corner: a request that exactly fits what is free"
CORNER_SHORT = "corner: a request one short of what is free"


def pool_size(choose: Chooser, *, max_size: int = 12) -> int:
    """Tiny pools (0, 1, 2, 3) half the time, where boundary bugs live; any size up to ``max_size`` otherwise."""
    return choose.choice((0, 1, 2, 3)) if choose.random() < 0.5 else choose.randint(1, max_size)


def mixed_batch(holders: list[int], free: int, choose: Chooser) -> list[int | None]:
    """A batch of some ``holders`` and new requests (``None``) sized around ``free``, in a shuffled order.

    The new requests exactly fit the free rows, or are one more (the pool must
    refuse) or one fewer; the holders make the batch longer than what is free.
    """
    new = max(0, free + choose.choice((0, 0, 1, -1)))
    batch: list[int | None] = [*choose.sample(holders, choose.randint(1, min(3, len(holders)))), *([None] * min(new, 6))]
    choose.shuffle(batch)
    return batch


def with_repeat(values: list[int], choose: Chooser) -> list[int]:
    """``values`` with one of them named again, next to itself or with others between."""
    repeated = choose.choice(values)
    out = list(values)
    out.insert(choose.randint(0, len(out)), repeated)
    return out


def fixed(op: str, **args: Any) -> Callable[[object, Chooser], Step]:
    """A move drawing nothing: always ``(op, args)``."""
    return lambda view, choose: (op, dict(args))


def move_kinds(
    prefix: str, kinds: Mapping[str, Draw[V]], weight: float, *, misuse: bool = True, setup: Draw[V] | None = None
) -> tuple[Move[V], ...]:
    """One move per kind of a catalogue entry (``"prefix (kind)"``), sharing ``weight`` in the walk."""
    share = weight / max(1, len(kinds))
    return tuple(Move(f"{prefix} ({kind})", share, draw, misuse=misuse, setup=setup) for kind, draw in kinds.items())


class Occupied(Protocol):
    """A view class :func:`viewed_table` takes: one that says the fraction of its pool in use."""

    def occupancy(self) -> float: ...


OV = TypeVar("OV", bound=Occupied)


def viewed_table(
    view: type[OV],
    configs: Callable[[Chooser], PoolConfig],
    moves: tuple[Move[OV], ...],
    catalogue: tuple[Move[OV], ...] = (),
    *,
    bench_moves: tuple[str, ...] = (),
    corners: Callable[[Any], list[str]] | None = None,
    drain: Callable[[OV], Iterator[Step]] | None = None,
) -> MoveTable[OV]:
    """A :class:`MoveTable` over ``view``, a view class whose ``occupancy`` method is the table's occupancy:
    how most families declare theirs.  ``corners`` left out keeps the table's default."""
    optional: dict[str, Any] = {} if corners is None else {"corners": corners}
    return MoveTable(
        configs=configs,
        moves=moves,
        catalogue=catalogue,
        view=view,
        occupancy=view.occupancy,
        bench_moves=bench_moves,
        drain=drain,
        **optional,
    )


def picking(
    op: str, offered: Callable[[V], Sequence[Any]], key: str, pick: Callable[[Sequence[Any], Chooser], Any], **fixed_args: Any
) -> Draw[V]:
    """A draw naming ``pick(values, choose)`` of what ``offered(view)`` gives as ``op``'s ``key``, ``fixed_args``
    after it; ``None`` when it gives nothing.  Its draws are ``pick``'s, and only those: the shape of most
    moves that name live handles, released ones or rows (:func:`one_of`, :func:`some_of`, :func:`some_repeated`)."""

    def draw(view: V, choose: Chooser) -> Step | None:
        values = offered(view)
        return (op, {key: pick(values, choose), **fixed_args}) if values else None

    return draw


def _one(values: Sequence[Any], choose: Chooser) -> Any:
    return choose.choice(values)


def one_of(op: str, offered: Callable[[V], Sequence[Any]], *, key: str = "handle", **fixed_args: Any) -> Draw[V]:
    """:func:`picking` one of what ``offered(view)`` gives (one ``choose.choice``), as ``op``'s ``key``
    (``handle`` unless told)."""
    return picking(op, offered, key, _one, **fixed_args)


def some_of(values: Sequence[Any], choose: Chooser, *, most: int = 3) -> list[Any]:
    """One to ``most`` distinct picks of ``values`` (fewer when it has fewer; it must not be empty): a
    ``choose.randint`` of how many, then a ``choose.sample`` of them."""
    return choose.sample(values, choose.randint(1, min(most, len(values))))


def some_repeated(values: Sequence[int], choose: Chooser, *, most: int = 2) -> list[int]:
    """:func:`with_repeat` of up to ``most`` distinct picks of ``values`` (a ``choose.randint(1, most)`` cut to
    how many it has, then a ``choose.sample``): one index named twice in one call."""
    return with_repeat(choose.sample(values, min(len(values), choose.randint(1, most))), choose)


def repeated_within(op: str, key: str, holders: Callable[[V], Sequence[int]], parts: Callable[[V, int], Sequence[int]]) -> Draw[V]:
    """A draw naming one holder's parts (its slots) in one call, one of them twice: a ``choose.choice`` of
    ``holders(view)``, then :func:`some_repeated` of ``parts(view, holder)``; ``None`` when there is no holder."""

    def draw(view: V, choose: Chooser) -> Step | None:
        live = holders(view)
        if not live:
            return None
        return op, {key: some_repeated(parts(view, choose.choice(live)), choose)}

    return draw

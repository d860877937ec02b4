"""Pool configurations: sizes including tiny and near-boundary ones."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from harness.judge.drivers.rows import CLAIMS, WRITE_SELECTORS

Config = dict[str, Any]


def pool_sizes(*, max_size: int = 12) -> SearchStrategy[int]:
    """Tiny pools (0, 1, 2) are where boundary bugs live; a few larger ones keep variety."""
    return st.one_of(st.sampled_from([0, 1, 2, 3]), st.integers(min_value=1, max_value=max_size))


LARGE_ROW_POOL = 20
"""A pool large enough for ``alloc_rows`` of more than 16 rows at once (the pools' vectorised path)."""


def row_pool_configs(*, decode: bool = False) -> SearchStrategy[Config]:
    """Configs for the request-row pools; the machine adds ``device``.  One draw in ten is a large pool."""
    sizes = st.one_of(st.sampled_from([0, 1, 2, 3, LARGE_ROW_POOL]), st.integers(min_value=1, max_value=12))
    base = st.fixed_dictionaries({"size": sizes, "max_context_len": st.sampled_from([4, 8, 16])})
    if not decode:
        return base
    return st.builds(lambda c, pre: {**c, "pre_alloc_size": pre}, base, st.integers(min_value=0, max_value=4))


# ---------------------------------------------------------------- plain-random twins
# The walk engine (``harness.fuzz.walk``) draws from the same tables without
# hypothesis: one plain ``random.Random`` draw per value, so a driver step costs
# microseconds, not the hundreds a hypothesis rule does.

Step = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Move:
    """One kind of step a walk can take: ``draw(driver, rng)`` gives ``(op, args)``, or ``None`` when the
    driver's state offers no such step.  ``corner`` names the rare state it aims at (counted as an event);
    ``setup(driver, rng)``, when the state lacks what the corner needs, gives a step that builds it."""

    name: str
    weight: float
    draw: Callable[[Any, random.Random], Step | None]
    corner: str = ""
    misuse: bool = False
    setup: Callable[[Any, random.Random], Step | None] | None = None


@dataclass(frozen=True)
class Walk:
    """A family's seeded random walk: pool configurations and the moves over them."""

    configs: Callable[[random.Random], Config]
    moves: tuple[Move, ...]

    def move(self, name: str) -> Move:
        return next(m for m in self.moves if m.name == name)


MOVE_SEEDS = st.integers(min_value=0, max_value=255)
"""What a machine rule draws to take a walk move: the seed of the move's own ``random.Random``."""


def draw_move(move: Move, driver: Any, seed: int) -> Step | None:
    """One draw of a walk move for a hypothesis rule (no setup), its corner label an event when it applies."""
    step = move.draw(driver, random.Random(seed))
    if step is not None and move.corner:
        driver.event(move.corner)
    return step


def corner_steps(move: Move, driver: Any, seed: int, *, setups: int = 3) -> Iterator[Step]:
    """A walk move for a hypothesis rule: up to ``setups`` setup steps, then the corner step (labelled as an event).

    A generator: the caller runs each step before the next is drawn from the
    state it left.  One rule thus reaches a corner that would otherwise need
    several rules to line up, at the same rate in both engines.
    """
    rng = random.Random(seed)
    for _ in range(setups + 1):
        step = move.draw(driver, rng)
        if step is not None:
            if move.corner:
                driver.event(move.corner)
            yield step
            return
        step = move.setup(driver, rng) if move.setup is not None else None
        if step is None:
            return
        yield step


def config_corners(config: Config) -> list[str]:
    """Event labels for the corners a pool starts in: page size 1, large pages, an empty pool, a pool of one."""
    labels = []
    page_size = int(config.get("page_size", 0))
    if page_size == 1:
        labels.append("corner: page size 1")
    elif page_size >= 16:
        labels.append("corner: large pages")
    if "size" in config:
        units = int(config["size"]) // max(1, page_size)
        if units <= 1:
            labels.append("corner: an empty pool" if units == 0 else "corner: a pool of one")
    return labels


CORNER_REPEAT = "corner: an index repeated inside one call"
CORNER_MIXED = "corner: a batch mixing requests that hold and that need"
CORNER_EXACT = "corner: a request that exactly fits what is free"
CORNER_SHORT = "corner: a request one short of what is free"


def sample_pool_size(rng: random.Random, *, max_size: int = 12) -> int:
    """Twin of :func:`pool_sizes`."""
    return rng.choice((0, 1, 2, 3)) if rng.random() < 0.5 else rng.randint(1, max_size)


def sample_row_pool_config(rng: random.Random, *, decode: bool = False) -> Config:
    """Twin of :func:`row_pool_configs`."""
    size = rng.choice((0, 1, 2, 3, LARGE_ROW_POOL)) if rng.random() < 0.5 else rng.randint(1, 12)
    config: Config = {"size": size, "max_context_len": rng.choice((4, 8, 16))}
    if decode:
        config["pre_alloc_size"] = rng.randint(0, 4)
    return config


def mixed_batch(holders: list[int], free: int, rng: random.Random) -> list[int | None]:
    """A batch of some ``holders`` and new requests (``None``) sized around ``free``, in a shuffled order.

    The new requests exactly fit the free rows, or are one more (the pool must
    refuse) or one fewer; the holders make the batch longer than what is free.
    """
    new = max(0, free + rng.choice((0, 0, 1, -1)))
    batch: list[int | None] = [*rng.sample(holders, rng.randint(1, min(3, len(holders)))), *([None] * min(new, 6))]
    rng.shuffle(batch)
    return batch


def with_repeat(values: list[int], rng: random.Random) -> list[int]:
    """``values`` with one of them named again, next to itself or with others between."""
    repeated = rng.choice(values)
    out = list(values)
    out.insert(rng.randint(0, len(out)), repeated)
    return out


def _row_alloc(driver: Any, rng: random.Random) -> Step:
    live = driver.live_handles()
    reuse = rng.sample(live, min(len(live), rng.randint(0, 2)))
    batch: list[int | None] = [*([None] * rng.randint(0, 3)), *reuse]
    rng.shuffle(batch)
    return "alloc", {"batch": batch}


def _row_alloc_mixed(driver: Any, rng: random.Random) -> Step | None:
    live = driver.live_handles()
    return ("alloc", {"batch": mixed_batch(live, len(driver.model.free), rng)}) if live else None


def _row_readmit(driver: Any, rng: random.Random) -> Step | None:
    gone = [h for h in driver.reqs if driver.reqs[h].req_pool_idx is None]
    return ("alloc", {"batch": [rng.choice(gone), *([None] * rng.randint(0, 2))]}) if gone else None


def _row_free(driver: Any, rng: random.Random) -> Step | None:
    live = driver.live_handles()
    return ("free", {"handle": rng.choice(live)}) if live else None


def _row_free_again(driver: Any, rng: random.Random) -> Step | None:
    gone = [h for h in driver.reqs if driver.reqs[h].req_pool_idx is None]
    return ("free", {"handle": rng.choice(gone)}) if gone else None


def _beam_rows(driver: Any) -> list[int]:
    return sorted(row for row, owner in driver.model.owner.items() if owner is None)


def _row_alloc_rows(driver: Any, rng: random.Random) -> Step:
    free = len(driver.model.free)
    return "alloc_rows", {"need_size": rng.choice((0, 1, 2, free, free + 1, max(0, free - 1)))}


def _row_free_rows(driver: Any, rng: random.Random) -> Step | None:
    beam = _beam_rows(driver)
    return ("free_rows", {"rows": rng.sample(beam, rng.randint(1, min(3, len(beam))))}) if beam else None


def _row_free_rows_repeat(driver: Any, rng: random.Random) -> Step | None:
    """Live rows freed with one named twice."""
    live = sorted(driver.model.owner)
    return ("free_rows", {"rows": with_repeat(rng.sample(live, min(len(live), rng.randint(1, 2))), rng)}) if live else None


def _take_two_rows(driver: Any, rng: random.Random) -> Step:
    return "alloc_rows", {"need_size": 2}


def _row_free_rows_arbitrary(driver: Any, rng: random.Random) -> Step:
    return "free_rows", {"rows": [rng.randint(-1, driver.model.num_rows + 2) for _ in range(rng.randint(1, 3))]}


def _row_write(driver: Any, rng: random.Random) -> Step | None:
    live = driver.live_handles()
    if not live:
        return None
    return "write", {"handle": rng.choice(live), "start": rng.randint(0, 16), "length": rng.randint(0, 8)}


def _row_clear(driver: Any, rng: random.Random) -> Step:
    return "clear", {}


def _one_live(driver: Any, rng: random.Random) -> Step | None:
    """Admit one request, if a row is free (a refused admission builds nothing)."""
    return ("alloc", {"batch": [None]}) if driver.model.free else None


def _claiming(claim: str) -> Callable[[Any, random.Random], Step | None]:
    def draw(driver: Any, rng: random.Random) -> Step | None:
        live = driver.live_handles()
        return ("alloc_claiming", {"handle": rng.choice(live), "claim": claim}) if live else None
    return draw


def _write_rows(padding: bool) -> Callable[[Any, random.Random], Step | None]:
    def draw(driver: Any, rng: random.Random) -> Step | None:
        live = driver.live_handles()
        return ("write_rows", {"handles": rng.sample(live, min(len(live), 2)), "padding": padding}) if live else None
    return draw


def _fixed(op: str, **args: Any) -> Callable[[Any, random.Random], Step]:
    return lambda driver, rng: (op, dict(args))


def _rebind_many(driver: Any, rng: random.Random) -> Step | None:
    """``alloc_rows`` of more than 16 free rows that were all bound before (their generations rise again)."""
    model = driver.model
    free = sorted(model.free)
    if len(free) > 16 and all(model.generation[row] for row in free):
        return "alloc_rows", {"need_size": len(free)}
    return None


def _toward_rebinding(driver: Any, rng: random.Random) -> Step | None:
    """Take every free row of a large pool with ``alloc_rows``, then give them back with ``free_rows``."""
    model = driver.model
    beam = _beam_rows(driver)
    if len(beam) > 16:
        return "free_rows", {"rows": beam}
    return ("alloc_rows", {"need_size": len(model.free)}) if len(model.free) > 16 else None


ROW_CLAIMS = CLAIMS
"""What a forged request claims in ``alloc_claiming`` (the driver's :data:`CLAIMS`)."""


WRITE_SELECTORS_VALID = tuple(name for name, (_, errors) in WRITE_SELECTORS.items() if not errors)
WRITE_SELECTORS_MISUSE = tuple(name for name, (_, errors) in WRITE_SELECTORS.items() if errors)
"""How ``write_selecting`` names rows (the driver's :data:`WRITE_SELECTORS`): valid selectors, then misuse."""


def _write_selecting(selector: str, *, whole_rows: bool = False) -> Callable[[Any, random.Random], Step | None]:
    def draw(driver: Any, rng: random.Random) -> Step | None:
        live = driver.live_handles()
        if not live:
            return None
        return "write_selecting", {"handle": rng.choice(live), "selector": selector, "whole_rows": whole_rows}
    return draw


def row_catalogue(*, decode: bool = False) -> tuple[Move, ...]:
    """Every kind of misuse a request-row pool must reject, and its corners, one move each."""
    constructors: list[Config] = [{"size": -1}, {"max_context_len": 0}, {"size": 2.0}, {"max_context_len": 4.5}]
    constructors += [{"pre_alloc_size": -1}, {"pre_alloc_size": 1.0}] if decode else []
    return (
        Move("alloc_rows of every free row", 0.3, lambda driver, rng: ("alloc_rows", {"need_size": len(driver.model.free)})),
        Move("more than 16 rows bound a second time at once", 0.05, _rebind_many, setup=_toward_rebinding),
        Move("write through a tensor of rows", 0.2, _write_rows(False), setup=_one_live),
        Move("write through an empty tensor of rows", 0.05, _fixed("write_rows", handles=[], padding=False)),
        Move("free_rows of no row", 0.05, _fixed("free_rows", rows=[])),
        Move("alloc_rows of a float", 0.05, _fixed("alloc_rows_non_int", need_size=1.5), misuse=True),
        Move("alloc_rows of a bool", 0.05, _fixed("alloc_rows_non_int", need_size=True), misuse=True),
        Move("free_rows of a non-integer row", 0.1, _fixed("free_rows", rows=[1.0]), misuse=True),
        Move("tensor write naming row 0", 0.1, _write_rows(True), misuse=True, setup=_one_live),
        *(Move(f"alloc with a forged request claiming {claim}", 0.05, _claiming(claim), misuse=True, setup=_one_live)
          for claim in ROW_CLAIMS),
        *(Move(f"write through {selector}", 0.03, _write_selecting(selector), setup=_one_live)
          for selector in WRITE_SELECTORS_VALID),
        *(Move(f"write through {selector}", 0.02, _write_selecting(selector), misuse=True, setup=_one_live)
          for selector in WRITE_SELECTORS_MISUSE),
        Move("write whole rows through an int", 0.03, _write_selecting("an int row", whole_rows=True), setup=_one_live),
        Move("write whole rows through a list naming row 0", 0.02, _write_selecting("a list naming row 0", whole_rows=True),
             misuse=True, setup=_one_live),
        *(Move(f"malformed constructor {c}", 0.03, _fixed("construct", overrides=c), misuse=True) for c in constructors),
    )


def row_walk(*, decode: bool = False) -> Walk:
    """The request-row families' walk: the machine's rules, plus mixed batches and repeats at a steady rate."""
    return Walk(lambda rng: sample_row_pool_config(rng, decode=decode), (
        *row_catalogue(decode=decode),
        Move("alloc", 4, _row_alloc),
        Move("alloc mixed", 2, _row_alloc_mixed, CORNER_MIXED),
        Move("readmit", 1, _row_readmit),
        Move("free", 3, _row_free),
        Move("free again", 0.5, _row_free_again, misuse=True),
        Move("alloc_rows", 1.5, _row_alloc_rows),
        Move("free_rows", 1, _row_free_rows),
        Move("free_rows repeating", 1, _row_free_rows_repeat, CORNER_REPEAT, misuse=True, setup=_take_two_rows),
        Move("free_rows arbitrary", 0.5, _row_free_rows_arbitrary, misuse=True),
        Move("write", 1, _row_write),
        Move("clear", 0.3, _row_clear),
    ))

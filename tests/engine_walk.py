"""A seeded random walk of the engine kit's move table, stepped on one driver (tests only)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from poolfuzz.harness.judge.invariants import InvariantViolation


def walk(driver: Any, seed: int, steps: int, moves: Sequence[Any] | None = None) -> None:
    """``steps`` moves drawn by weight from ``moves`` (default: every move of the engine table) with
    ``random.Random(seed)``, each drawn step run on ``driver`` (a move that draws nothing is passed over)."""
    from poolfuzz.harness.kits.engine.moves import EngineView, engine_table

    moves = engine_table().moves if moves is None else moves
    view, rng = EngineView(driver), random.Random(seed)
    for _ in range(steps):
        step = rng.choices(moves, weights=[m.weight for m in moves])[0].draw(view, rng)
        if step is not None:
            driver.step(step[0], **step[1])


def run_engine(
    factory: Any, shape: Mapping[str, Any], stream: Iterable[tuple[str, dict[str, Any]]], walk_seed: int | None = None, moves: int = 60
) -> tuple[Any, InvariantViolation | None]:
    """An engine driver over ``factory``'s loop in ``shape``, stepped through ``stream`` (or a ``moves``-move walk from
    ``walk_seed``) and torn down (the drain and the at-rest checks): the driver, and the first violation or ``None``."""
    from poolfuzz.harness.kits.engine.driver import EngineDriver

    driver = EngineDriver(factory, shape)
    try:
        if walk_seed is None:
            for op, args in stream:
                driver.step(op, **args)
        else:
            walk(driver, walk_seed, moves)
        driver.teardown()
    except InvariantViolation as violation:
        return driver, violation
    return driver, None

"""A seeded random walk of the engine kit's move table, stepped on one driver (tests only)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any


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

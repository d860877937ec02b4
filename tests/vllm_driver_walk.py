"""A seeded walk of the vLLM engine driver's operations, audited after every step (tests only)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any


def iterate(driver: Any, rng: random.Random) -> None:
    """One engine step in which a fifth of the time one of the first four requests samples EOS."""
    driver.iterate([rng.randrange(4)] if rng.random() < 0.2 else [], [])


def driver_walk(
    driver: Any,
    rng: random.Random,
    steps: int,
    *,
    otherwise: Callable[[Any, random.Random], None] = iterate,
    abort_below: float = 0.33,
    reset_below: float | None = None,
    run_below: float = 0.4,
    longest_output: int = 24,
    longest_run: int = 12,
) -> None:
    """``steps`` steps, each drawn by ``rng.random()``: below 0.3 an arrival (up to ``longest_output`` tokens out),
    then an abort below ``abort_below``, a prefix-cache reset below ``reset_below`` (none where it is None), a run of
    4 to ``longest_run`` steps below ``run_below``, and else ``otherwise(driver, rng)``; the driver audits after each
    step and is torn down at the end."""
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.3:
            driver.arrive(rng.randrange(3), rng.randint(1, 24), rng.randint(0, 8), rng.randint(1, longest_output))
        elif roll < abort_below:
            driver.abort(rng.randrange(8))
        elif reset_below is not None and roll < reset_below:
            driver.reset_cache()
        elif roll < run_below:
            driver.run(rng.randint(4, longest_run))
        else:
            otherwise(driver, rng)
        driver.audit_now()
    driver.teardown()

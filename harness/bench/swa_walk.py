"""Bench walks of the SWA families: one seeded step at a time ``(driver, rng) -> (op, args)``.

``swa_kv`` steps are drawn from the moves of :func:`strategies.swa.swa_kv_walk` (its
plain-random twin), weighted as there; ``pure_swa_kv`` is the token walk with the pure
pool's own frees mixed in.  Misuse moves are kept: the driver skips them when misuse is
off, and the bare replay sees the pool reject them.
"""

from __future__ import annotations

import random
from typing import Any

from harness.bench.workloads import Step, token_kv_workload
from strategies.swa import swa_kv_walk

_SWA_WALK = swa_kv_walk()
_WEIGHTS = [m.weight for m in _SWA_WALK.moves]
_DRAW_TRIES = 8


def swa_kv_workload(driver: Any, rng: random.Random) -> Step:
    """A weighted move that applies to the driver's state; admission (which always does) otherwise."""
    for _ in range(_DRAW_TRIES):
        step = rng.choices(_SWA_WALK.moves, _WEIGHTS)[0].draw(driver, rng)
        if step is not None:
            return step
    admit = _SWA_WALK.moves[0].draw(driver, rng)
    assert admit is not None, "admission applies in every state"
    return admit


def pure_swa_kv_workload(driver: Any, rng: random.Random) -> Step:
    """The token walk, with ``free_swa``, padded frees and the no-op ``free_full`` one step in six."""
    live = sorted(h for h, slots in driver.model.slots.items() if slots)
    if live and rng.random() < 1 / 6:
        return rng.choice(("free_swa", "free_padded", "free_full")), {"handle": rng.choice(live)}
    return token_kv_workload(driver, rng)

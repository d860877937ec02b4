"""Adaptive time sharing across fuzz targets: more of the budget where new behaviour still turns up.

A target's *behaviours* are what a run has seen it do so far: the distinct
driver event labels and, under ``--coverage``, the distinct branch arcs of
``pools/`` it executed.  Early in a run every target finds new ones every
second; later most settle, and a target still finding them is the one worth
the next minute.  Equal shares ignore that; this policy follows it:

* each target's *discovery rate* is estimated as ``1 / (gap + settle)``, where
  ``gap`` is the target's own fuzzing time since its last new behaviour and
  ``settle`` a few seconds of benefit of the doubt, so a target never fuzzed yet
  (or one that just found something) rates highest, and a target starved of
  time does not look stale merely because others ran;
* shares are proportional to the rates, mixed with a uniform floor: every
  active target keeps at least ``floor / n`` of the time, so a target that looks
  settled is still revisited (its next behaviour may be its bug);
* retired targets (found a failure) get nothing.

The policy is pure: :class:`ShareBook` takes totals as the coordinator sees
them and returns shares; workers draw their next target from the shares
(:func:`pick`), so no worker waits on another.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

FLOOR = 0.3
"""Share of the time split evenly over the active targets whatever their rates."""
SETTLE_SECONDS = 5.0
"""Benefit of the doubt, in a target's own fuzzing seconds, added to the time since its last discovery."""


@dataclass
class Discovery:
    """What the book knows about one target: its behaviours and when (in its own fuzzing time) the last was new."""

    behaviours: int = 0
    seconds: float = 0.0
    last_new_at: float = 0.0
    retired: bool = False

    def rate(self, settle: float) -> float:
        return 1.0 / (self.seconds - self.last_new_at + settle)


class ShareBook:
    """Per-target discovery records and the shares they imply (see the module docstring)."""

    def __init__(self, keys: Sequence[str], *, floor: float = FLOOR, settle: float = SETTLE_SECONDS) -> None:
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"floor must be within [0, 1], got {floor}")
        self.floor, self.settle = floor, settle
        self.targets = {key: Discovery() for key in keys}

    def observe(self, key: str, *, behaviours: int, seconds: float) -> bool:
        """Record ``key``'s totals so far; True when it showed a new behaviour since the last observation."""
        target = self.targets[key]
        new = behaviours > target.behaviours
        target.seconds = max(target.seconds, seconds)
        if new:
            target.behaviours, target.last_new_at = behaviours, target.seconds
        return new

    def retire(self, key: str) -> None:
        self.targets[key].retired = True

    def shares(self) -> dict[str, float]:
        """Each target's share of the fuzzing time; they sum to 1 over the active targets (all 0 if none)."""
        active = {k: t.rate(self.settle) for k, t in self.targets.items() if not t.retired}
        out = dict.fromkeys(self.targets, 0.0)
        if not active:
            return out
        total = sum(active.values())
        for key, rate in active.items():
            out[key] = self.floor / len(active) + (1.0 - self.floor) * rate / total
        return out


def pick(active: Sequence[int], shares: Sequence[float], rng: random.Random) -> int:
    """One of the ``active`` target indices, drawn in proportion to ``shares[index]``; uniform while none is set."""
    weights = [max(0.0, shares[i]) for i in active]
    if sum(weights) <= 0:
        return rng.choice(list(active))
    return rng.choices(list(active), weights)[0]

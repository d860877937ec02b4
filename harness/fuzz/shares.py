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


ENGINES = ("hypothesis", "walk")
"""A worker's two engines, in the order a target first meets them (hypothesis replays the database first)."""
WALK_SHARE_BOUNDS = (0.1, 0.9)
"""However lopsided the measured rates, each engine keeps at least a tenth of a target's time:
a bug one engine reaches alone is still reached."""


class EngineBook:
    """Per target, how a worker splits its time between the walk and hypothesis, from what each finds.

    Each (target, engine) pair is a :class:`Discovery` record over that engine's own seconds on the
    target: its behaviours are the distinct event labels that engine showed *first* on the target.
    The walk's share of a target is the prior ``walk_share`` tilted by the two discovery rates, so an
    engine still turning up new behaviour gets more of the target's time and a settled one less
    (on main before this, the walk took 0.75 of every target's time, including ``swa_kv`` where it
    ran fewer checked steps a second than hypothesis).  ``fixed`` turns the measurement off and
    keeps the prior (``FuzzOptions.walk_share``: 0 is hypothesis only).
    """

    def __init__(self, prior: float, *, fixed: bool = False, settle: float = SETTLE_SECONDS) -> None:
        self.prior, self.fixed, self.settle = prior, fixed, settle
        self.records: dict[tuple[str, str], Discovery] = {}
        self.labels: dict[str, set[str]] = {}
        self.met: dict[str, set[str]] = {}
        """Per target, the engines a round has started it under."""

    def meet(self, key: str, engine: str) -> None:
        self.met.setdefault(key, set()).add(engine)

    def observe(self, key: str, engine: str, *, seconds: float, labels: set[str]) -> None:
        """A round of ``engine`` on ``key`` took ``seconds`` and showed ``labels``."""
        seen = self.labels.setdefault(key, set())
        new = labels - seen
        seen |= new
        record = self.records.setdefault((key, engine), Discovery())
        record.seconds += seconds
        if new:
            record.behaviours += len(new)
            record.last_new_at = record.seconds

    def _record(self, key: str, engine: str) -> Discovery:
        return self.records.get((key, engine)) or Discovery()

    def walk_share(self, key: str) -> float:
        """The walk's share of ``key``'s time: the prior, tilted by the engines' discovery rates."""
        if self.fixed or self.prior <= 0.0 or self.prior >= 1.0:
            return self.prior
        walk = self.prior * self._record(key, "walk").rate(self.settle)
        hypothesis = (1.0 - self.prior) * self._record(key, "hypothesis").rate(self.settle)
        low, high = WALK_SHARE_BOUNDS
        return min(high, max(low, walk / (walk + hypothesis)))

    def worker_engine(self) -> str:
        """The engine behind the prior share over all of the worker's rounds (hypothesis first)."""
        walk = sum(r.seconds for (_, engine), r in self.records.items() if engine == "walk")
        hypothesis = sum(r.seconds for (_, engine), r in self.records.items() if engine == "hypothesis")
        return _behind(walk, hypothesis, self.prior)

    def next_engine(self, key: str) -> str:
        """An engine ``key`` has not met yet (hypothesis first), else the one behind its share."""
        share = self.walk_share(key)
        for engine in ENGINES:
            if engine not in self.met.get(key, ()) and (engine == "hypothesis" or share > 0.0):
                return engine
        return _behind(self._record(key, "walk").seconds, self._record(key, "hypothesis").seconds, share)


def _behind(walk: float, hypothesis: float, share: float) -> str:
    """``walk`` while the walk has had less than ``share`` of the seconds, else ``hypothesis`` (first on a tie)."""
    return "walk" if share > 0 and walk * (1 - share) < hypothesis * share else "hypothesis"

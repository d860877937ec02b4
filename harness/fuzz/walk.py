"""The walk engine: a seeded random walk that drives a family's driver directly, without hypothesis.

Under hypothesis a worker spends most of each step in the engine (choice
sequences, bundles, rule selection): about 3,000 steps/s, while the drivers
alone check 5,000-70,000.  A walk draws each step from the family's
:class:`~poolfuzz.strategies.table.MoveTable` -- the very moves its hypothesis machine draws, here through
a plain ``random.Random``, with the catalogue's corners (repeats inside one call, mixed batches,
page-edge geometry, exact fits) at their weights -- and calls :meth:`Driver.step` itself, so every
per-call check and the audit schedule are exactly the machine's.

Swarm testing: each episode (one fresh pool, as one hypothesis example)
draws its configuration, enables a random half of the moves and a length, so
some episodes hammer two or three kinds of step into the corners they share.

A failure ends the walk: its trace goes to the same shrinker and corpus as
hypothesis's (:func:`~poolfuzz.harness.traces.shrink.shrink_trace`,
:func:`~poolfuzz.harness.traces.corpus.save_trace`).
"""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.driver import Driver
from poolfuzz.harness.judge.families import family, implementation_for, load_factory, resolve, validates_input
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace, fill_provenance
from poolfuzz.harness.traces.keep import keep_trace
from poolfuzz.harness.traces.realistic import lift_config, lift_step
from poolfuzz.harness.traces.shrink import shrink_trace
from poolfuzz.strategies.table import MoveTable, load_table, pick_step

WALK_SHARE = 0.75
"""The share of a worker's time (and of a ``selfcheck`` chase) the walk gets; hypothesis has the rest."""
EPISODE_LENGTHS = (8, 20, 50, 100, 200)
"""Steps per episode, drawn per episode: short ones try many configurations, long ones reach deep states."""
POLL_EVERY = 32
"""Steps between checks of the clock and the stop callback."""
DRAW_TRIES = 4


def walk_for(name: str) -> MoveTable[Any]:
    """The table the walk draws from: the family's move table, as its machine does."""
    return load_table(resolve(family(name).moves))


@dataclass
class Finding:
    """What ended a walk: a violation (with its shrunk trace) or another exception."""

    error: BaseException
    trace: Trace
    found_steps: int
    """Steps of the trace when found, before shrinking."""
    trace_path: Path | None = None
    trace_problem: str = ""
    """Why the trace is not in the corpus asked for (:func:`~poolfuzz.harness.traces.keep.keep_trace`), if it is not."""

    @property
    def violation(self) -> InvariantViolation | None:
        return self.error if isinstance(self.error, InvariantViolation) else None


@dataclass
class WalkRun:
    """One family's walk, resumable: each :meth:`run` call continues the same seeded sequence.

    ``steps``, ``episodes`` and ``events`` accumulate over calls (the caller
    may reset ``events`` after reading it).
    """

    family: str
    seed: int
    spec: str = ""
    driver: str = ""
    """A driver variant (``module:attr``), as a canary of the harness's own calls names; default the family's."""
    device: str = "cpu"
    check_misuse: bool | None = None
    audit_period: int = 0
    """Steps between full audits; 0: the family's (:attr:`~poolfuzz.harness.judge.kit.Family.audit_period`)."""
    corpus: Path | None = None
    shrink: bool = True
    on_found: Callable[[InvariantViolation, Trace], None] | None = None
    """Called with a violation and its unshrunk trace the moment it is found, before shrinking starts."""
    known_again: Callable[[InvariantViolation], bool] | None = None
    """Whether a violation is a known finding already reported in this run: its episode ends and the walk goes on."""
    realistic: bool = False
    """Walk only what a server builds and sends: every config and step lifted to the family's realistic floors
    (:mod:`poolfuzz.harness.traces.realistic`), as the search for a finding's realistic trace walks."""
    steps: int = 0
    episodes: int = 0
    drains: int = 0
    """Drain audits passed (:meth:`~poolfuzz.harness.judge.driver.Driver.drain_audit`), over every episode."""
    events: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.spec = self.spec or implementation_for(self.family)
        self.factory = load_factory(self.spec)
        self.driver_class: type[Driver] = resolve(self.driver or family(self.family).driver)
        if self.check_misuse is None:
            self.check_misuse = validates_input(self.factory)
        fam = self.family_kit = family(self.family)
        self.audit_period = self.audit_period or fam.audit_period
        self.walk = walk_for(self.family)
        self.drain_plan = self.walk.drain_plan()
        self.drain_period = fam.drain_period
        self.moves = tuple(m for m in self.walk.walk_moves if self.check_misuse or not m.misuse)
        self.rng = random.Random(self.seed)

    def run(self, *, seconds: float | None = None, max_steps: int | None = None, stop: Callable[[], bool] | None = None) -> Finding | None:
        """MoveTable episodes until a failure (returned), ``seconds`` pass, ``max_steps`` more steps run, or ``stop()``."""
        deadline = None if seconds is None else time.monotonic() + seconds
        limit = None if max_steps is None else self.steps + max_steps

        def done() -> bool:
            return (
                (deadline is not None and time.monotonic() >= deadline)
                or (limit is not None and self.steps >= limit)
                or (stop is not None and stop())
            )

        while not done():
            finding = self._episode(done, limit)
            if finding is not None:
                return finding
        return None

    # ------------------------------------------------------------ one episode
    def _episode(self, done: Callable[[], bool], limit: int | None) -> Finding | None:
        rng = self.rng
        config = self.family_kit.configured(self.walk.configs(rng)).on_device(self.device)
        if self.realistic:
            config = self.family_kit.configured(lift_config(self.family, config.to_json()))
        floors = config.to_json(everything=True) if self.realistic else {}
        enabled = [m for m in self.moves if rng.random() < 0.5] or [rng.choice(self.moves)]
        cumulative = list(itertools.accumulate(m.weight for m in enabled))
        length = rng.choice(EPISODE_LENGTHS)
        self.episodes += 1
        driver: Driver | None = None
        try:
            driver = self.driver_class(
                self.factory, config, implementation=self.spec, check_misuse=bool(self.check_misuse), audit_period=self.audit_period
            )
            self.events.update(self.walk.corners(driver.config))  # the shape that runs: a target may ask for other pools
            view = self.walk.view(driver)
            if self.drain_plan is not None:
                driver.enable_drains(self.drain_plan, self.drain_period)
            for taken in range(length):
                if (taken % POLL_EVERY == POLL_EVERY - 1 and done()) or (limit is not None and self.steps >= limit):
                    break
                corner, (op, args) = pick_step(enabled, cumulative, view, rng, fallback=self.moves, tries=DRAW_TRIES)
                if self.realistic:
                    args = lift_step(self.family, op, args, floors)
                self.steps += 1
                refused = driver.refused_by_contract
                driver.step(op, **args)
                if corner and driver.refused_by_contract == refused:  # a step the contract refused reached nothing
                    driver.events.append(corner)
                if driver.events:
                    self.events.update(driver.events)
                    driver.events.clear()
            driver.teardown()
        except Exception as exc:  # noqa: BLE001 - every exception is a finding, as under hypothesis
            if isinstance(exc, InvariantViolation) and self.known_again is not None and self.known_again(exc):
                return None
            return self._found(exc, driver, config)
        finally:
            self.drains += driver.drains if driver is not None else 0
        return None

    def _found(self, exc: BaseException, driver: Driver | None, config: PoolConfig) -> Finding:
        attached = getattr(exc, "trace", None)  # a drain audit's violation carries the drained driver's longer trace
        trace = (
            attached
            if isinstance(attached, Trace)
            else (driver.trace if driver is not None else Trace(self.family, self.spec, config.to_json()))
        )
        found = len(trace.steps)
        violation = exc if isinstance(exc, InvariantViolation) else None
        if violation is not None and self.on_found is not None:
            self.on_found(violation, trace)
        if violation is not None and self.shrink:
            trace = shrink_trace(
                trace, invariant_id=violation.invariant_id, target=self.spec, factory=self.factory, check_misuse=self.check_misuse
            )
            trace.expect_violation(violation.invariant_id)
        fill_provenance(trace, seed=self.seed, note=f"found by the {self.family} walk (seed {self.seed}, episode {self.episodes})")
        if self.corpus is None or violation is None:
            return Finding(exc, trace, found)
        kept = keep_trace(trace, self.corpus)
        return Finding(exc, trace, found, kept.path, kept.problem)

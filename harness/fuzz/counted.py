"""The hypothesis side of a fuzz worker's round: a machine subclass that counts and can be stopped.

:class:`Counted` is mixed over a family machine for one worker.  It counts
steps, examples and driver events (the labels drivers pass to
``hypothesis.event``) into the worker, and every few steps lets the worker
decide whether the round must end (:meth:`RoundOwner.poll` raises
:class:`~poolfuzz.harness.fuzz.protocol.StopRound`, which hypothesis lets through
without shrinking).  A violation is reported to the worker before it
propagates, so the smallest failing trace seen so far survives a round cut
short while shrinking.  A violation of an invariant that a known finding of the target already broke in this
run (:meth:`RoundOwner.known_again`) ends the example's checking instead: fuzzing goes on past a known finding.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar, Protocol

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.machines import PoolMachine


class RoundOwner(Protocol):
    """What :class:`Counted` needs of the worker running the round."""

    steps: int
    examples: int
    events: Counter[str]
    seed: int
    abandoning: bool
    terminate: dict[str, bool]
    error_trace: Trace | None

    def poll(self) -> None: ...

    def saw(self, violation: InvariantViolation) -> None: ...

    def known_again(self, violation: InvariantViolation) -> bool: ...


class EventLog(list[str]):
    """A driver's ``events`` list that also counts every label into the worker's tally."""

    def __init__(self, counts: Counter[str]) -> None:
        super().__init__()
        self.counts = counts

    def append(self, label: str) -> None:
        self.counts[label] += 1
        super().append(label)


class Counted(PoolMachine):
    """Mixin over a family machine: counts into :attr:`worker` and lets it end the round."""

    worker: ClassVar[RoundOwner]

    def start(self, config: PoolConfig) -> None:
        super().start(config)
        assert self.driver is not None
        self.driver.events = EventLog(self.worker.events)
        self.driver.trace.provenance["seed"] = self.worker.seed

    known_hit = False
    """This example broke an invariant a known finding of the target already broke in this run: its remaining
    steps and teardown are skipped, so it passes, is not shrunk, and hypothesis drops it from the database."""

    def do(self, op: str, **args: Any) -> Any:
        worker = self.worker
        worker.steps += 1
        if worker.steps % 16 == 0:
            worker.poll()
        if self.known_hit:
            return None
        try:
            return super().do(op, **args)
        except InvariantViolation as violation:
            if worker.known_again(violation):
                self.known_hit = True
                return None
            worker.saw(violation)
            raise
        except Exception:
            worker.error_trace = self.driver.trace if self.driver is not None else None
            raise

    def teardown(self) -> None:
        worker = self.worker
        worker.examples += 1
        if worker.abandoning or worker.terminate["now"] or self.known_hit:
            return
        try:
            super().teardown()
        except InvariantViolation as violation:
            if worker.known_again(violation):
                return
            worker.saw(violation)
            raise
        worker.poll()

"""Running a machine under hypothesis, and keeping what it finds.

:func:`run_machine` is the one door the pytest suite, the nightly runner and
``selfcheck`` all use.  When hypothesis reports a failure, the exception it
re-raises comes from the final replay of the *shrunk* example, so the trace the
driver attached to it is the minimal one: that trace is shrunk further by replay
(:func:`~poolfuzz.harness.traces.shrink.shrink_trace`), printed as readable steps and,
given a corpus directory, saved there.

Hypothesis's own shrinking gets :data:`HYPOTHESIS_SHRINK_SECONDS` of wall time after
the first failing step, and ends sooner once the shortest failing trace has not got shorter
for :data:`HYPOTHESIS_STALL_SECONDS`; then the smallest failing trace it has reached goes to
the replay shrinker instead.  Measured over the 80 canaries (``ci`` profile, 400 examples of
20 steps, one seed, 2026-12-06): with the 2-s budget alone a canary's run (find and both
shrinkers) took a median 2.3 s, 189 s in all, and the shrunk traces held 190 steps; with the
stall rule, 0.9 s, 101 s and 189 steps (3 traces shorter, 1 longer); with no hypothesis
shrinking at all, 53 s and 184 steps, each trace differing by a step or three either way.
The replay shrinker does the work now; what hypothesis adds is a few seconds' chance at a
different minimum, which the stall rule keeps while it is paying.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import settings as Settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace, fill_provenance
from poolfuzz.harness.machines.base import PoolMachine
from poolfuzz.harness.traces.keep import keep_trace
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.shrink import shrink_trace

_Found = TypeVar("_Found")


def _first_inside(exc: BaseException, pick: Callable[[BaseException], _Found | None]) -> _Found | None:
    """What ``pick`` finds in ``exc`` or, depth first, in the exceptions of the groups it holds."""
    found = pick(exc)
    if found is not None:
        return found
    for inner in getattr(exc, "exceptions", ()):
        found = _first_inside(inner, pick)
        if found is not None:
            return found
    return None


def _trace_of(exc: BaseException) -> Trace | None:
    trace = getattr(exc, "trace", None)
    return trace if isinstance(trace, Trace) else None


def failure_trace(exc: BaseException) -> Trace | None:
    """The trace attached to a violation (also inside exception groups)."""
    return _first_inside(exc, _trace_of)


def violation_of(exc: BaseException) -> InvariantViolation | None:
    return _first_inside(exc, lambda e: e if isinstance(e, InvariantViolation) else None)


HYPOTHESIS_SHRINK_SECONDS = 2.0
"""Wall time hypothesis may spend shrinking after the first failing step (see the module docstring)."""

HYPOTHESIS_STALL_SECONDS = 0.5
"""Wall time hypothesis may go on shrinking without the shortest failing trace getting shorter."""


class ShrinkBudgetSpent(KeyboardInterrupt):
    """Hypothesis has shrunk for its budget.  A ``KeyboardInterrupt``, as hypothesis lets that class
    through without treating it as a failure of its own."""


@dataclass
class ShortestFailure:
    """The first violation of a run (and when it came) and the shortest failing trace of the same
    invariant seen since: what hypothesis's shrinking has reached so far, kept for when shrinking is
    cut short (by :data:`HYPOTHESIS_SHRINK_SECONDS` here, by the clock or a signal in a fuzz worker)."""

    first_at: float | None = None
    violation: InvariantViolation | None = None
    shorter_at: float | None = None
    cut: bool = False
    """Whether a run was cut for the budget: hypothesis may then answer with ``Flaky`` (see :func:`run_machine`)."""

    def offer(self, violation: InvariantViolation) -> bool:
        """Keep ``violation`` if it is the first or no longer than the shortest; True for the first."""
        trace = violation.trace
        if trace is None:
            return False
        if self.violation is None:
            self.first_at = self.shorter_at = time.monotonic()
            self.violation = violation
            return True
        best = self.violation.trace
        same = violation.invariant_id == self.violation.invariant_id
        if same and best is not None and len(trace.steps) <= len(best.steps):
            if len(trace.steps) < len(best.steps):
                self.shorter_at = time.monotonic()
            self.violation = violation
        return False

    def shrinking_for(self) -> float:
        """Seconds since the first violation (0 before one)."""
        return 0.0 if self.first_at is None else time.monotonic() - self.first_at

    def stalled_for(self) -> float:
        """Seconds since the shortest failing trace last got shorter (0 before a violation)."""
        return 0.0 if self.shorter_at is None else time.monotonic() - self.shorter_at


def _budgeted(machine: type[PoolMachine], shortest: ShortestFailure, budget: float, stall: float) -> type[PoolMachine]:
    """``machine`` with every violation offered to ``shortest``, and shrinking ended ``budget`` seconds
    after the first or ``stall`` seconds after the shortest last got shorter (same name: hypothesis keys
    its database by the class name)."""

    class Budgeted(machine):  # type: ignore[valid-type,misc]
        def do(self, op: str, **args: Any) -> Any:
            if shortest.shrinking_for() > budget or shortest.stalled_for() > stall:
                shortest.cut = True
                raise ShrinkBudgetSpent()
            try:
                return super().do(op, **args)
            except InvariantViolation as violation:
                shortest.offer(violation)
                raise

        def teardown(self) -> None:
            try:
                super().teardown()
            except InvariantViolation as violation:
                shortest.offer(violation)
                raise

    Budgeted.__name__, Budgeted.__qualname__ = machine.__name__, machine.__qualname__
    Budgeted.__module__ = machine.__module__
    return Budgeted


def run_machine(
    machine: type[PoolMachine],
    *,
    settings: Settings | None = None,
    corpus: Path | str | None = None,
    note: str = "",
    shrink_seconds: float = HYPOTHESIS_SHRINK_SECONDS,
    shrink: bool = True,
    stall_seconds: float = HYPOTHESIS_STALL_SECONDS,
) -> None:
    """Fuzz ``machine``; on a violation print the shrunk steps, save the trace, re-raise.

    Hypothesis shrinks for ``shrink_seconds`` after the first failing step (less once the
    shortest trace has stalled for ``stall_seconds``), the replay shrinker goes on from the
    shortest failing trace seen by then.  ``shrink=False`` reports
    the failing example hypothesis reported as it is: with ``Phase.shrink`` left out of
    ``settings``, the first one found (what a check of *which* invariant a bug trips needs,
    at a fraction of the time: ``tests/test_canaries.py``).  The trace is kept even
    when ``corpus`` cannot be written (:func:`~poolfuzz.harness.traces.keep.keep_trace` falls back
    to a temporary folder and the message says where).
    """
    shortest = ShortestFailure()
    try:
        run_state_machine_as_test(_budgeted(machine, shortest, shrink_seconds, stall_seconds), settings=settings)
    except BaseException as exc:
        # A cut on an example whose choices hypothesis has run before (its replay of the failing example before it
        # reports it, or a shrink down a known prefix) ends earlier than that run did: its data tree then raises
        # Flaky in place of our interrupt.  Either way the violation seen stands (the vLLM engine canary on a loaded
        # box, whose replay outlasted the stall; tests/test_found_traces.py).
        cut = isinstance(exc, ShrinkBudgetSpent) or (shortest.cut and isinstance(exc, Flaky))
        replaced = cut and shortest.violation is not None
        if replaced:
            assert shortest.violation is not None
            exc = shortest.violation
        trace = failure_trace(exc)
        violation = violation_of(exc)
        if trace is None or violation is None:
            raise
        found = len(trace.steps)
        target, factory = machine.implementation or None, getattr(machine, "factory", None)  # what a replay builds
        if shrink:
            trace = shrink_trace(
                trace, invariant_id=violation.invariant_id, target=target, factory=factory, check_misuse=machine.check_misuse
            )
        trace.expect_violation(violation.invariant_id)
        fill_provenance(
            trace, seed=getattr(machine, "_hypothesis_internal_use_seed", None), note=note or f"found by fuzzing {machine.__name__}"
        )
        violation.trace = trace
        saved = ""
        if corpus is not None:
            kept = keep_trace(trace, Path(corpus))
            violation.trace_path = kept.path
            saved = f"\n  saved to {kept.path}" if kept.path is not None else ""
            saved += f"\n  ({kept.problem})" if kept.problem else ""
        if shrink:
            described = describe_shrunk(
                violation,
                found=found,
                trace=trace,
                found_by="hypothesis reported",
                target=target,
                factory=factory,
                check_misuse=machine.check_misuse,
            )
        else:
            described = f"{violation.args[0]}\n  the {found}-step trace hypothesis reported, unshrunk:\n{trace.steps_text()}"
        violation.args = (described + saved,)
        if replaced:
            raise violation from None
        raise


def describe_shrunk(
    violation: InvariantViolation,
    *,
    found: int,
    trace: Trace,
    found_by: str,
    target: str | None = None,
    factory: Callable[..., Any] | None = None,
    check_misuse: bool | None = None,
) -> str:
    """The violation's message with its shrunk steps, each count and number saying which run it comes from.

    The violation was raised by the run as found (hypothesis's or the walk's), so its numbers are that
    run's: printed over the shrunk listing they read as a contradiction ("row 20 ... available = 19"
    above a 2-step trace of a 1-row pool).  The shrunk trace is replayed once (``target``, ``factory``
    and ``check_misuse`` as the shrinker replayed it) and, when it breaks the same invariant, the
    message is the shrunk run's: its message, its numbers, its step.  Should it not (a trace the
    shrinker could not replay), the found run's message is kept and the line says whose numbers they are.
    """
    shrunk = len(trace.steps)
    listing = f"shrunk by replay to {shrunk} step{'' if shrunk == 1 else 's'}:\n{trace.steps_text()}"
    found_where = "at teardown" if violation.step is None else f"at step {violation.step}"
    replayed = replay_trace(trace, target=target, factory=factory, check_misuse=check_misuse)
    if replayed.outcome == "violation" and replayed.invariant == violation.invariant_id:
        shown = "".join(f"\n    {k} = {v!r}" for k, v in replayed.numbers.items())
        where = "at teardown" if replayed.step is None else f"at step {replayed.step}"
        return (
            f"[{violation.invariant_id}] {replayed.message}{shown}\n"
            f"  {where} of the shrunk trace (the numbers are its run's); {found_by} {found_where} of a "
            f"{found}-step trace, {listing}"
        )
    head, sep, last = violation.args[0].rpartition("\n")
    if not (sep and last.startswith(("  at step ", "  at teardown "))):
        head = violation.args[0]
    return f"{head}\n  {found_where} of the {found}-step trace {found_by} (the numbers are its run's); {listing}"

"""Running a machine under hypothesis, and keeping what it finds.

:func:`run_machine` is the one door the pytest suite, the nightly runner and
``selfcheck`` all use.  When hypothesis reports a failure, the exception it
re-raises comes from the final replay of the *shrunk* example, so the trace the
driver attached to it is the minimal one: that trace is printed as readable
steps and, given a corpus directory, saved there.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import settings as Settings
from hypothesis.stateful import run_state_machine_as_test

from harness.traces.keep import keep_trace
from harness.judge.invariants import InvariantViolation
from harness.machines.base import PoolMachine
from harness.traces.shrink import shrink_trace
from harness.judge.trace import Trace, fill_provenance


def failure_trace(exc: BaseException) -> Trace | None:
    """The trace attached to a violation (also inside exception groups)."""
    trace = getattr(exc, "trace", None)
    if isinstance(trace, Trace):
        return trace
    for inner in getattr(exc, "exceptions", ()):
        found = failure_trace(inner)
        if found is not None:
            return found
    return None


def violation_of(exc: BaseException) -> InvariantViolation | None:
    if isinstance(exc, InvariantViolation):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = violation_of(inner)
        if found is not None:
            return found
    return None


def run_machine(
    machine: type[PoolMachine],
    *,
    settings: Settings | None = None,
    corpus: Path | str | None = None,
    note: str = "",
) -> None:
    """Fuzz ``machine``; on a violation print the shrunk steps, save the trace, re-raise.

    The trace is kept even when ``corpus`` cannot be written (:func:`~harness.traces.keep.keep_trace`
    falls back to a temporary folder and the message says where).
    """
    try:
        run_state_machine_as_test(machine, settings=settings)
    except BaseException as exc:
        trace = failure_trace(exc)
        violation = violation_of(exc)
        if trace is None or violation is None:
            raise
        found = len(trace.steps)
        trace = shrink_trace(trace, invariant_id=violation.invariant_id, target=machine.implementation or None,
                             factory=getattr(machine, "factory", None), check_misuse=machine.check_misuse)
        trace.expect = {"outcome": "violation", "invariant": violation.invariant_id,
                        "implementation": trace.implementation}
        fill_provenance(trace, seed=getattr(machine, "_hypothesis_internal_use_seed", None),
                        note=note or f"found by fuzzing {machine.__name__}")
        violation.trace = trace
        saved = ""
        if corpus is not None:
            kept = keep_trace(trace, Path(corpus))
            violation.trace_path = kept.path
            saved = f"\n  saved to {kept.path}" if kept.path is not None else ""
            saved += f"\n  ({kept.problem})" if kept.problem else ""
        violation.args = (describe_shrunk(violation, found=found, trace=trace, found_by="hypothesis reported") + saved,)
        raise



def describe_shrunk(violation: InvariantViolation, *, found: int, trace: Trace, found_by: str) -> str:
    """The violation's message with its shrunk steps, each count saying which trace it counts.

    The driver's ``at step N of <trace> (M steps)`` line describes the trace as found; printed
    beside a shorter shrunk listing it read as a contradiction ("at step 7 (7 steps)" above five
    steps), so it is replaced by one line naming both traces.
    """
    head, sep, last = violation.args[0].rpartition("\n")
    if not (sep and last.startswith(("  at step ", "  at teardown "))):
        head = violation.args[0]
    where = "at teardown" if violation.step is None else f"at step {violation.step}"
    shrunk = len(trace.steps)
    return (f"{head}\n  {where} of the {found}-step trace {found_by}; shrunk by replay to "
            f"{shrunk} step{'' if shrunk == 1 else 's'}:\n{trace.steps_text()}")

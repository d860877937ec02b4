"""What a fuzz worker reports of a failure: its first sighting, its shrunk trace, or what was left at the end.

A counterexample must never depend on shrinking finishing: :meth:`WorkerReports.first_sighting`
writes the unshrunk trace (under :data:`UNSHRUNK_FOLDER`) and tells the parent the moment a
failing step is seen; :meth:`~WorkerReports.found` then reports the shrunk one, and
:meth:`~WorkerReports.save_partial` what shrinking had reached when the run was stopped.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from poolfuzz.harness.fuzz.failure_text import error_text, poisons_cuda
from poolfuzz.harness.fuzz.protocol import FailureFound, FailureSeen, Message, TargetRef, WorkerPlan
from poolfuzz.harness.fuzz.realistic import REALISTIC_SECONDS, realistic_note
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace, fill_provenance
from poolfuzz.harness.machines import failure_trace, violation_of
from poolfuzz.harness.machines.run import ShortestFailure
from poolfuzz.harness.traces.keep import keep_trace

UNSHRUNK_FOLDER = "unshrunk"
"""Under ``--corpus``: the unshrunk trace of each failing step a worker announced, ``unshrunk/<family>/...``.

Kept apart from the shrunk traces (``<family>/...``), so the corpus's one-file-per-bug stays true of those while
the trace the first report named, and the report's ``found_at`` still names, replays after shrinking as before it."""


class WorkerReports:
    """The reporting half of :class:`~poolfuzz.harness.fuzz.worker.Worker` (which sets every attribute named here)."""

    plan: WorkerPlan
    target: TargetRef | None
    retired: Any
    stop: Any
    as_found: dict[str, Trace]
    seed: int
    round_no: int
    poisoned: bool
    error_trace: Trace | None
    shortest: ShortestFailure
    known_seen: dict[str, dict[str, dict[str, Any]]]
    events: Any

    def send(self, message: Message) -> None:
        raise NotImplementedError

    def first_sighting(self, violation: InvariantViolation, trace: Trace) -> None:
        """Write the unshrunk failing trace now and tell the parent, before any shrinking.

        Shrinking may take longer than the run has left, and the process may be killed during it;
        the finding must not depend on it finishing.  The file goes under :data:`UNSHRUNK_FOLDER` and
        stays there: the shrunk trace :meth:`found` reports replaces it as the failure's trace, not on disk.
        """
        target = self.target
        if target is None:
            return
        unshrunk = copy.deepcopy(trace)
        unshrunk.expect_violation(violation.invariant_id)
        self.as_found[target.key] = unshrunk
        fill_provenance(
            unshrunk,
            seed=self.seed,
            note=(
                f"found by poolfuzz fuzz --seed {self.plan.seed} (worker {self.plan.name}, round {self.round_no}); "
                "unshrunk: saved the moment it was found"
            ),
        )
        kept = keep_trace(unshrunk, Path(self.plan.corpus) / UNSHRUNK_FOLDER)
        self.send(
            FailureSeen(
                target=target.key,
                family=target.family,
                implementation=target.spec,
                invariant=violation.invariant_id,
                trace=str(kept.path) if kept.path is not None else None,
                steps=len(unshrunk.steps),
                message=str(violation),
                round=self.round_no,
                seed=self.seed,
                problem=kept.problem,
            )
        )

    def report_failure(self, target: TargetRef, exc: BaseException, where: dict[str, int]) -> None:
        violation = violation_of(exc)
        message = str(violation) if violation is not None else error_text(exc, self.error_trace, "the last example that raised")
        self.poisoned = poisons_cuda(message)  # the process ends; the parent starts another
        trace = failure_trace(exc)
        path = violation.trace_path if violation is not None else None
        self.found(
            target, violation.invariant_id if violation is not None else None, message, path=path, trace=trace, shrunk=True, where=where
        )

    def save_partial(self, target: TargetRef, where: dict[str, int]) -> None:
        """Stopped while shrinking: save the smallest failing trace seen so far."""
        violation = self.shortest.violation
        assert violation is not None and violation.trace is not None
        trace = violation.trace
        trace.expect_violation(violation.invariant_id)
        fill_provenance(
            trace,
            seed=where["seed"],
            note=(
                f"found by poolfuzz fuzz --seed {self.plan.seed} (worker {self.plan.name}); partially shrunk: the run ended while shrinking"
            ),
        )
        kept = keep_trace(trace, Path(self.plan.corpus))
        message = str(violation) + (f"\n  ({kept.problem})" if kept.problem else "")
        self.found(target, violation.invariant_id, message, path=kept.path, trace=trace, shrunk=False, where=where)

    def found(
        self,
        target: TargetRef,
        invariant: str | None,
        message: str,
        *,
        path: Path | None,
        trace: Trace | None,
        shrunk: bool,
        where: dict[str, int],
    ) -> dict[str, Any] | None:
        """Retire ``target`` for every worker and tell the parent what was found (``path``: the shrunk trace,
        which takes the place of the first sighting's unshrunk one in the report).

        A violation that is a known finding (``corpus/known.toml``, :mod:`poolfuzz.harness.upstream.known`) is reported
        as such, with no realistic trace, and, unless ``--strict``, the target is put back: fuzzing goes on
        past it, and later violations of the same invariant on it in this run count as that finding again
        (:meth:`known_again`).  Returns the known finding's record, or ``None`` for a new one."""
        known = self.known_of(target, invariant, path)
        going_on = known is not None and not self.plan.strict
        self.retired[target.index] = 1
        realistic = None
        if known is not None:
            self.as_found.pop(target.key, None)
            message += f"\n  KNOWN finding {known['number']} ({known['key']}, {known['document']}): " + (
                "fuzzing this target goes on past it" if going_on else "--strict: it fails the run"
            )
        elif shrunk and invariant is not None and trace is not None:
            left = min(REALISTIC_SECONDS, self.plan.deadline - time.time() - 1.0)  # the report must not wait on it
            note, realistic = realistic_note(
                target.family,
                target.spec,
                invariant_id=invariant,
                trace=self.as_found.pop(target.key, trace),
                seed=where["seed"],
                corpus=Path(self.plan.corpus),
                device=self.plan.device,
                seconds=left,
                stop=self.stop.is_set,
                shrunk=(path, trace),
            )
            message += note
        self.send(
            FailureFound(
                target=target.key,
                family=target.family,
                implementation=target.spec,
                kind="violation" if invariant is not None else "error",
                invariant=invariant,
                trace=str(path) if path is not None else None,
                steps=len(trace.steps) if trace is not None else None,
                message=message,
                shrunk=shrunk,
                round=where["round"],
                seed=where["seed"],
                realistic=realistic,
                known=known,
            )
        )
        if going_on and invariant is not None and known is not None:
            self.known_seen.setdefault(target.key, {})[invariant] = known
            self.retired[target.index] = 0
        return known

    def known_of(self, target: TargetRef, invariant: str | None, path: Path | None) -> dict[str, Any] | None:
        """The known finding a violation with its saved trace at ``path`` is, as the report records it, or ``None``."""
        if invariant is None or path is None:
            return None
        from poolfuzz.harness.upstream.known import known_finding_of, load_known

        known = load_known(Path(self.plan.known_file) if self.plan.known_file else None)  # checked before workers start
        found = known_finding_of(target.family, target.spec, invariant, path, known=known)
        return dict(found.to_json()) if found is not None else None

    def known_again(self, violation: InvariantViolation) -> bool:
        """Whether ``violation`` breaks an invariant that a known finding of the current target broke earlier in
        this run (counted as the event ``known finding again: KEY``): the example or episode ends unchecked.

        This is hypothesis's own rule for one bug seen twice (one interesting origin, reported once),
        keyed by the target and the invariant: past a known finding, a new bug that breaks the same invariant
        on the same target is not told apart in that run (``--strict`` stops at the known one instead)."""
        target = self.target
        known = self.known_seen.get(target.key, {}).get(violation.invariant_id) if target is not None else None
        if known is None:
            return False
        self.events[f"known finding again: {known['key']}"] += 1
        return True

"""What a fuzz run found, as the coordinator hears of it: a failure's first sighting, then its shrunk report.

A worker announces a target's first failing step before it shrinks anything
(:class:`~poolfuzz.harness.fuzz.protocol.FailureSeen`: the unshrunk trace is already on disk), and
reports the shrunk failure when shrinking ends (:class:`~poolfuzz.harness.fuzz.protocol.FailureFound`).
:class:`Findings` turns the sighting into the target's
:class:`~poolfuzz.harness.fuzz.report.FailureRecord` at once (with its :class:`~poolfuzz.harness.fuzz.report.FoundAt`
and a shrink still running), so the report written at that moment and every live page hold the
failure from its first failing step on, not only once shrinking ends, which can take a
minute and more.  The shrunk report then updates that record in place: the shrunk trace
becomes the failure's ``trace``, the shrink is ``done`` (or ``partial``, when the run cut it
off) and its time is recorded.  A sighting whose worker ended before any shrunk report stays
the report's record with a ``partial`` shrink, so the run still exits 1 and names a trace
that reproduces it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from poolfuzz.harness.fuzz.protocol import FailureFound, FailureSeen
from poolfuzz.harness.fuzz.report import (
    SHRINK_DONE,
    SHRINK_PARTIAL,
    SHRINK_RUNNING,
    FailureRecord,
    FoundAt,
    ShrinkOutcome,
    TargetStats,
    replay_command,
)

NEVER_REPORTED = "the worker ended before it reported a shrunk trace"
"""Why a shrink is partial when its worker never sent a :class:`~poolfuzz.harness.fuzz.protocol.FailureFound`."""


@dataclass
class Findings:
    """The failures of one run, per target; ``note`` prints an announcement that stays on screen."""

    stats: dict[str, TargetStats]
    note: Callable[[str], None]
    known: Sequence[Any] = field(default_factory=tuple)
    """The reviewed known findings (:class:`poolfuzz.harness.upstream.known.KnownFinding`): a sighting that may be one says so."""
    strict: bool = False

    def sighted(self, message: FailureSeen, *, worker: str, after_s: float, since_start_s: float) -> bool:
        """A first failing step: record it as the target's failure now and print it, with the unshrunk trace
        and its replay command.  False when the target already has a failure (a second worker's sighting)."""
        stats = self.stats[message.target]
        if any(f.known is None or self.strict for f in stats.failures):
            return False
        found_at = FoundAt(
            after_s=round(after_s, 2),
            since_start_s=round(since_start_s, 2),
            invariant=message.invariant,
            message=message.message,
            trace=message.trace,
            steps=message.steps,
            worker=worker,
        )
        as_found = FailureFound(
            target=message.target,
            family=message.family,
            implementation=message.implementation,
            kind="violation",
            invariant=message.invariant,
            trace=message.trace,
            steps=message.steps,
            message=message.message,
            shrunk=False,
            round=message.round,
            seed=message.seed,
            realistic=None,
        )
        stats.failures.append(
            FailureRecord.of(as_found, worker=worker, found_after_s=None, found_at=found_at, shrink=ShrinkOutcome(SHRINK_RUNNING))
        )
        lines = [
            f"FAILURE FOUND {message.target} [{message.invariant}] after {after_s:.1f} s of fuzzing "
            f"({since_start_s:.1f} s since start): {message.first_line}"
        ]
        if message.trace:
            lines += [f"  unshrunk trace ({message.steps} steps): {message.trace}", f"  replay: {replay_command(message.trace)}"]
        if message.problem:
            lines.append(f"  ({message.problem})")
        maybe = [f for f in self.known if f.could_be(message.family, message.implementation, message.invariant)]
        if maybe and not self.strict:
            named = ", ".join(f"{f.number} ({f.key})" for f in maybe)
            lines.append(f"  shrinking it now, to tell it from known finding {named}; fuzzing this target goes on past a known one")
        else:
            lines.append("  shrinking it now; no more fuzzing of this target in this run")
        self.note("\n".join(lines))
        return True

    def found(self, message: FailureFound, *, worker: str, after_s: float, cut_off: str | None = None) -> bool:
        """A shrunk (or partially shrunk) failure: it completes its sighting's record, or is a record of its own
        (errors, traces replayed from the database); printed.  ``cut_off`` says what ended the run, for a
        partial shrink.  False for a report the target already has."""
        stats = self.stats[message.target]
        if any((f.invariant, f.trace) == (message.invariant, message.trace) and not shrinking(f) for f in stats.failures):
            return False
        key = message.known["key"] if message.known else None
        index = next((i for i, f in enumerate(stats.failures) if shrinking(f) and f.invariant == message.invariant), None)
        if key is not None and any(f.known and f.known["key"] == key and not shrinking(f) for f in stats.failures):
            # The same known finding again, from another worker or round: recorded once.  The sighting it shrank
            # from was that finding, so it is no failure of its own (left, the run's end would report it partial).
            if index is not None:
                del stats.failures[index]
            return False
        where = ""
        if message.trace:
            shrunk = "shrunk" if message.shrunk else "partially shrunk"
            where = f"\n  {shrunk} trace ({message.steps} steps): {message.trace}\n  replay: {replay_command(message.trace)}"
        if index is None:
            stats.failures.append(FailureRecord.of(message, worker=worker, found_after_s=after_s))
            if message.known is not None:
                self.note(f"{known_line(message.target, message.invariant, message.known, self.strict)}: {message.first_line}{where}")
            else:
                # No sighting came first (the walk reports a finding already shrunk; the example database replays
                # one at the start): the one line a finding is announced with, as the docs show it.
                what = f"[{message.invariant}]" if message.invariant is not None else f"({message.kind})"
                self.note(
                    f"FAILURE FOUND {message.target} {what} after {after_s:.1f} s of fuzzing: {message.first_line}{where}"
                    "\n  no more fuzzing of this target in this run"
                )
            return True
        record = stats.failures[index]
        assert record.found_at is not None
        took = round(max(0.0, after_s - record.found_at.after_s), 2)
        note = None if message.shrunk else f"cut off ({cut_off or 'the worker was stopped'}): the smallest failing trace seen was saved"
        shrink = ShrinkOutcome(SHRINK_DONE if message.shrunk else SHRINK_PARTIAL, after_s=round(after_s, 2), seconds=took, note=note)
        stats.failures[index] = FailureRecord.of(message, worker=worker, found_after_s=after_s, found_at=record.found_at, shrink=shrink)
        if message.known is not None:
            self.note(f"{known_line(message.target, message.invariant, message.known, self.strict)} (shrinking took {took:.1f} s){where}")
            return True
        state = "SHRUNK" if message.shrunk else "SHRINK PARTIAL"
        self.note(
            f"FAILURE {state} {message.target} [{message.invariant}] after {after_s:.1f} s of fuzzing "
            f"(shrinking took {took:.1f} s): {message.first_line}{where}"
        )
        return True

    def unreported(self, cut_off: str | None = None) -> None:
        """Failures seen but never reported shrunk (the worker was killed while shrinking): their
        unshrunk traces are the report's record of them, with a partial shrink saying why."""
        why = f"{NEVER_REPORTED}" + (f" ({cut_off})" if cut_off else "") + "; the unshrunk trace is the failure's trace"
        for stats in self.stats.values():
            for i, f in enumerate(stats.failures):
                if shrinking(f):
                    stats.failures[i] = dataclasses.replace(
                        f,
                        message=f.message + "\n  (unshrunk: the worker ended before shrinking finished)",
                        shrink=ShrinkOutcome(SHRINK_PARTIAL, note=why),
                    )


def known_line(target: str, invariant: str | None, known: dict[str, Any], strict: bool) -> str:
    """The announcement of a known finding (``corpus/known.toml``)."""
    what = f"KNOWN {target} [{invariant}]: finding {known['number']} {known['key']} ({known['document']}; {known['upstream']})"
    return what + ("; --strict: it fails the run" if strict else "; recorded, fuzzing this target goes on")


def cut_off_by(stop_reason: str | None, grace: float) -> str | None:
    """What is ending the run (the coordinator's ``stop_reason``), as a partial shrink's note words it;
    ``None`` while the run goes on."""
    if stop_reason == "time is up":
        return f"the time budget was spent and its --grace of {grace:g} s ran out"
    return "the run was interrupted" if stop_reason == "interrupted" else stop_reason


def shrinking(failure: FailureRecord) -> bool:
    """Whether ``failure`` is a sighting whose shrunk report has not come yet."""
    return failure.shrink is not None and failure.shrink.state == SHRINK_RUNNING

"""What a fuzz run found, as the coordinator hears of it: a failure's first sighting, then its shrunk report.

A worker announces a target's first failing step before it shrinks anything
(:class:`~harness.fuzz.protocol.FailureSeen`: the unshrunk trace is already on disk), and
reports the shrunk failure when shrinking ends (:class:`~harness.fuzz.protocol.FailureFound`).
:class:`Findings` prints both at once, records both times in the target's
:class:`~harness.fuzz.report.FailureRecord`, and, for a failure whose worker was killed
before its shrunk report, makes the unshrunk trace the report's record, so the run still
exits 1 and names a trace that reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.fuzz.protocol import FailureFound, FailureSeen
from harness.fuzz.report import FailureRecord, TargetStats, replay_command


@dataclass
class Sighting:
    """A target's first failing step: the message, the worker that saw it, seconds into fuzzing."""

    message: FailureSeen
    worker: str
    after_s: float


@dataclass
class Findings:
    """The failures of one run, per target; ``note`` prints an announcement that stays on screen."""

    stats: dict[str, TargetStats]
    note: Callable[[str], None]
    seen: dict[str, Sighting] = field(default_factory=dict)

    def sighted(self, message: FailureSeen, *, worker: str, after_s: float) -> None:
        """A first failing step: print it at once, with the unshrunk trace and its replay command."""
        if message.target in self.seen:
            return
        self.seen[message.target] = Sighting(message, worker, after_s)
        lines = [f"FAILURE {message.target} after {after_s:.1f} s: {message.first_line}"]
        if message.trace:
            lines += [f"  unshrunk trace ({message.steps} steps): {message.trace}",
                      f"  replay: {replay_command(message.trace)}"]
        if message.problem:
            lines.append(f"  ({message.problem})")
        lines.append("  shrinking it now; no more fuzzing of this target in this run")
        self.note("\n".join(lines))

    def found(self, message: FailureFound, *, worker: str, after_s: float) -> None:
        """A shrunk (or partially shrunk) failure: recorded with its first sighting's time, and printed."""
        stats = self.stats[message.target]
        if any((f.invariant, f.trace) == (message.invariant, message.trace) for f in stats.failures):
            return
        seen = self.seen.get(message.target)
        same = seen is not None and seen.message.invariant == message.invariant
        stats.failures.append(FailureRecord.of(
            message, worker=worker, found_after_s=after_s,
            first_seen_after_s=seen.after_s if same and seen is not None else None,
            unshrunk_steps=seen.message.steps if same and seen is not None else None))
        where = ""
        if message.trace:
            shrunk = "shrunk" if message.shrunk else "partially shrunk"
            where = f"\n  {shrunk} trace ({message.steps} steps): {message.trace}\n  replay: {replay_command(message.trace)}"
        self.note(f"FAILURE {message.target}: {message.first_line}{where}"
                  + ("" if seen is not None else "\n  no more fuzzing of this target in this run"))

    def unreported(self) -> None:
        """Failures seen but never reported shrunk (the worker was killed while shrinking): their
        unshrunk traces are the report's record of them."""
        for target, seen in self.seen.items():
            stats = self.stats[target]
            if any(f.invariant == seen.message.invariant for f in stats.failures):
                continue
            m = seen.message
            found = FailureFound(
                target=m.target, family=m.family, implementation=m.implementation, kind="violation",
                invariant=m.invariant, trace=m.trace, steps=m.steps,
                message=m.message + "\n  (unshrunk: the worker ended before shrinking finished)", shrunk=False,
                round=m.round, seed=m.seed)
            stats.failures.append(FailureRecord.of(found, worker=seen.worker, found_after_s=seen.after_s,
                                                   first_seen_after_s=seen.after_s, unshrunk_steps=m.steps))

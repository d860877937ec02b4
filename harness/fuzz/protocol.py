"""What the parent and its fuzz workers say to each other: plans, messages and stop signals.

Standard library only, on purpose: a worker process unpickles its
:class:`WorkerPlan` before coverage starts, and the parent unpickles every
message, so nothing here may import the code under measurement.

Each worker talks to the parent over its **own** pipe, never a shared queue: a
worker killed while holding a shared queue's write lock (a segfault, a CUDA
abort, the OOM killer) would block every other worker's reports forever.  Each
message is one frozen dataclass below; the parent handles each type with a
method of its own (:class:`poolfuzz.harness.fuzz.session.FuzzRun`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: How often a worker sends its counters, in seconds (the display refreshes on its own clock).
FLUSH_SECONDS = 0.5
#: Exit status of a worker asking to be replaced: a CUDA error left its context unusable.
EXIT_RESTART = 75


def worker_name(worker: int, generation: int) -> str:
    """``w3`` for worker position 3's first process, ``w3.2`` for its third (each replaces a crashed one)."""
    return f"w{worker}" if generation == 0 else f"w{worker}.{generation}"


@dataclass(frozen=True)
class TargetRef:
    """One fuzz target: a family bound to an implementation, and its slot in the shared tables."""

    index: int
    family: str
    spec: str
    key: str
    upstream: dict[str, str] | None = None
    """Whose code the target runs (:func:`~poolfuzz.harness.upstream.known.upstream_code`, ``None``: not upstream's),
    found where the target was checked: finding it imports the implementation, which the coordinator does not."""


@dataclass(frozen=True)
class WorkerPlan:
    """Everything a worker needs; plain data, so it pickles to a fresh process."""

    worker: int
    generation: int
    targets: tuple[TargetRef, ...]
    seed: int
    deadline: float
    steps: int
    misuse: bool
    device: str
    corpus: str
    database: str
    log_path: str
    round_seconds: float = 2.0
    coverage_dir: str | None = None
    walk_share: float | None = None
    """Share of the worker's time given to walk rounds (:mod:`poolfuzz.harness.fuzz.walk`); ``None``: the engine's default."""
    strict: bool = False
    """``--strict``: a known finding retires its target as a new one does (else the worker fuzzes on past it)."""
    known_file: str | None = None
    """The reviewed list of known findings (``--known``); ``None``: the checkout's ``corpus/known.toml``."""

    @property
    def name(self) -> str:
        return worker_name(self.worker, self.generation)


@dataclass(frozen=True)
class Shared:
    """The multiprocessing objects every worker shares with the parent.

    ``go`` is set once every first-generation worker is ready, so all start
    together and the budget measures fuzzing, not interpreter start-up;
    ``stop`` at the deadline or on Ctrl-C; ``retired`` holds one byte per
    target, set once that target failed (by the worker that saw it first);
    ``shares`` one float per target, the share of fuzzing time the parent wants
    it to get (:mod:`poolfuzz.harness.fuzz.shares`), from which workers draw their next target.
    """

    go: Any
    stop: Any
    retired: Any
    shares: Any = None


class Terminated(KeyboardInterrupt):
    """The parent asked this worker to stop now (SIGTERM): save what can be saved, then exit."""


class StopRound(KeyboardInterrupt):
    """Abandon the current hypothesis run: time is up, a stop was requested or the target was retired.

    A ``KeyboardInterrupt`` because hypothesis lets exactly that class through
    without treating it as a failure to shrink.
    """


# ------------------------------------------------------------------ messages
@dataclass(frozen=True)
class Hello:
    """The worker imported everything and waits for the go signal."""

    pid: int
    device_name: str = ""


@dataclass(frozen=True)
class RoundStarted:
    """A round of ``examples`` hypothesis examples on ``target`` began, with this seed."""

    target: str
    round: int
    seed: int
    examples: int
    engine: str = "hypothesis"


@dataclass(frozen=True)
class ProgressReport:
    """Counters since the previous report (steps, examples, seconds and event labels)."""

    target: str
    steps: int
    examples: int
    seconds: float
    events: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CoverageSample:
    """The branch arcs of ``pools/`` this worker has executed under ``target`` so far."""

    target: str
    arcs: frozenset[tuple[str, int, int]]


@dataclass(frozen=True)
class FailureSeen:
    """The first failing step on ``target``, sent before shrinking starts: its unshrunk trace is on disk.

    Shrinking can take a minute, and a run can be killed during it; the parent prints this at
    once (invariant, message, trace, replay command), and it is the report's record of the failure
    if no :class:`FailureFound` follows.
    """

    target: str
    family: str
    implementation: str
    invariant: str
    trace: str | None
    steps: int
    message: str
    round: int
    seed: int
    problem: str = ""
    """Why the trace is not under ``--corpus`` (it went to a temporary folder), if it is not."""

    @property
    def first_line(self) -> str:
        text = self.message.strip()
        return text.splitlines()[0] if text else self.invariant


@dataclass(frozen=True)
class RealisticTrace:
    """A finding's realistic trace, saved beside its minimal one: where, how long, and the invariant it shows
    (the finding's own, or the next symptom a pool with room gives)."""

    trace: str | None
    steps: int
    invariant: str


@dataclass(frozen=True)
class FailureFound:
    """A failure on ``target``: an invariant violation (with its saved trace) or any other error."""

    target: str
    family: str
    implementation: str
    kind: str
    invariant: str | None
    trace: str | None
    steps: int | None
    message: str
    shrunk: bool
    round: int
    seed: int
    realistic: RealisticTrace | None
    """For an upstream target's violation, the smallest failing trace within what a server builds
    (:mod:`poolfuzz.harness.fuzz.realistic`), or ``None``."""
    known: dict[str, Any] | None = field(default=None, kw_only=True)
    """The known finding this violation is (``corpus/known.toml``: key, number, title, distribution, versions,
    document; :mod:`poolfuzz.harness.upstream.known`), or ``None``: a new finding."""

    @property
    def first_line(self) -> str:
        text = self.message.strip()
        return text.splitlines()[0] if text else self.kind


@dataclass(frozen=True)
class Bye:
    """The worker's last message: everything worth keeping has been sent."""


Message = Hello | RoundStarted | ProgressReport | CoverageSample | FailureSeen | FailureFound | Bye

"""The records of ``poolfuzz ci``, declared once: the plan :func:`~poolfuzz.harness.ci.command.prepare` makes, and the
JSON the report (``report.json``, schema ``poolfuzz-ci/1``) is made of.

A walk record crosses a process boundary (:func:`~poolfuzz.harness.ci.walks.walk_target` runs in a process of its own)
and every record below :class:`Report` is written as it is: plain data, keys in the order written.  A key
marked ``NotRequired`` is one some records leave out (a skipped target was never walked; a worker that died
left no episodes) or one set later (``artifact`` once a trace is copied under ``new/``, ``replay`` once the
command that replays it is known).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NotRequired, TypedDict

from poolfuzz.harness.ci.plan import CiTarget, Copy
from poolfuzz.harness.upstream.known import KnownFinding, KnownRecord

ReplayStatus = Literal["passed", "failed", "skipped", "possibly_fixed"]
"""A committed trace's status in the replay phase (:mod:`poolfuzz.harness.ci.replays`)."""
WalkProperty = Literal["seed", "steps_budget", "steps", "episodes", "cut_off", "known_again"]
"""The keys of a walk record written as JUnit properties."""


class Plan(TypedDict):
    """What :func:`~poolfuzz.harness.ci.command.prepare` checked and :func:`~poolfuzz.harness.ci.command.run` runs."""

    copies: list[Copy]
    known: tuple[KnownFinding, ...]
    known_file: Path
    targets: list[CiTarget]
    refused: dict[str, str | None]
    """Each target's key: why the copy cannot run it, or ``None``."""
    traces: list[Path]


class ReplayRecord(TypedDict):
    """One committed trace replayed."""

    trace: str
    status: ReplayStatus
    line: str
    """``poolfuzz replay``'s own line."""
    known: bool
    steps_text: str
    seconds: float
    artifact: NotRequired[str]
    """A failing trace's copy under ``new/replayed``."""


class Finding(TypedDict):
    """A violation or an error a walk found."""

    kind: Literal["violation", "error"]
    invariant: str | None
    message: str
    trace: str | None
    trace_problem: NotRequired[str | None]
    steps: int
    found_steps: NotRequired[int]
    found_at_step: NotRequired[int | None]
    steps_text: str
    known: KnownRecord | None
    """The known finding it is, or ``None``: a new one."""
    artifact: NotRequired[str]
    """A new finding's trace copied under ``new/FAMILY``."""
    replay: NotRequired[str | None]
    """The command that replays its trace against the copy."""


class WalkRecord(TypedDict):
    """One upstream target of the fuzz phase: walked, skipped or its worker dead."""

    target: str
    family: str
    spec: str
    distribution: str
    seed: int
    steps_budget: int
    steps: int
    episodes: NotRequired[int]
    seconds: NotRequired[float]
    cut_off: NotRequired[bool]
    known_again: NotRequired[int]
    skipped: NotRequired[bool]
    reason: NotRequired[str]
    """Why a skipped target cannot run on this copy."""
    findings: list[Finding]


class CopyRecord(TypedDict):
    """A distribution under test (:class:`~poolfuzz.harness.ci.plan.Copy`)."""

    name: str
    version: str
    site: str
    origin: str


class Totals(TypedDict):
    replayed: int
    replay_failed: int
    possibly_fixed: int
    targets: int
    targets_skipped: int
    steps: int
    known: int
    new: int


class Report(TypedDict):
    """``report.json``."""

    schema: str
    started: str
    command: list[str]
    seed: int
    scale: float
    workers: int
    copies: list[CopyRecord]
    known_file: str
    replay: list[ReplayRecord]
    targets: list[WalkRecord]
    new_traces: list[str]
    totals: Totals
    seconds: float
    exit_status: int

"""What one ``fuzz`` run is asked to do: its options and the targets ``--target`` names."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from poolfuzz.harness.child_processes import worker_context
from poolfuzz.harness.fuzz.protocol import TargetRef
from poolfuzz.harness.judge.families import FAMILIES, UnknownTargetError, check_target, family, implementation_for, parse_target
from poolfuzz.harness.machines.table import machine_class


@dataclass
class FuzzOptions:
    targets: list[TargetRef]
    seconds: float
    workers: int
    seed: int
    device: str = "cpu"
    corpus: Path = Path("corpus/found")
    database: str = ".hypothesis/poolfuzz"
    steps: int = 200
    misuse: bool = True
    coverage: bool = False
    grace: float = 60.0
    round_seconds: float = 2.0
    walk_share: float | None = None
    """Share of each worker's time in walk rounds (:mod:`poolfuzz.harness.fuzz.walk`); ``None``: the engine's default,
    0: hypothesis only."""
    progress_every: float = 5.0
    series_every: float | None = None
    """Seconds between time-series samples; ``None``: about 100 samples over the budget, at least 1 s apart."""
    live: bool = False
    logs: Path | None = None
    report: Path | None = None
    """The JSON report's path: the run writes it at each finding (first failing step, shrunk report) as well
    as the caller at the end; ``None``: only the caller writes it."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    strict: bool = False
    """``--strict``: a known finding (``corpus/known.toml``) fails the run as a new one does."""
    known_file: Path | None = None
    """``--known``: the reviewed list of known findings; ``None``: the checkout's ``corpus/known.toml``."""


def select_targets(items: list[str], *, overrides: dict[str, str] | None = None) -> tuple[list[TargetRef], list[dict[str, str]]]:
    """``--target`` values to targets, plus the families skipped (only when none was named).

    ``FAMILY`` fuzzes the family's implementation in use (its default, or a
    ``POOLFUZZ_TARGETS`` override); ``FAMILY=module:attr`` fuzzes that
    implementation instead.  Naming a family whose machine or implementation
    does not import is an :class:`UnknownTargetError`, and so is a
    ``POOLFUZZ_TARGETS`` substitution that does not import; with no names,
    every registered family is tried and defaults that do not import are skipped.  A substitute
    that does not fit its family (:func:`~poolfuzz.harness.judge.families.check_target`: another family's
    constructor, missing protocol methods) is an :class:`UnknownTargetError` too, not a finding.
    """
    from poolfuzz.harness.upstream.known import upstream_code

    explicit = bool(items)
    wanted: list[tuple[str, str]] = []
    for item in items or list(FAMILIES):
        name, spec = parse_target(item)
        wanted.append((name, spec or implementation_for(name, overrides)))
    targets: list[TargetRef] = []
    skipped: list[dict[str, str]] = []
    for name, spec in dict.fromkeys(wanted):
        try:
            machine_class(name)
            check_target(name, spec)
        except Exception as exc:  # noqa: BLE001 - a half-written module is as unusable as a missing one
            if explicit or spec != family(name).default:  # a substitution someone asked for, here or in the env
                message = str(exc) if isinstance(exc, UnknownTargetError) else f"target {name}={spec}: {exc}"
                raise UnknownTargetError(message) from None
            skipped.append({"family": name, "reason": f"{type(exc).__name__}: {exc}"})
            continue
        key = name if spec == family(name).default else f"{name}={spec}"
        targets.append(TargetRef(index=len(targets), family=name, spec=spec, key=key, upstream=upstream_code(name, spec)))
    return targets, skipped


def select_targets_apart(items: list[str]) -> tuple[list[TargetRef], list[dict[str, str]]]:
    """:func:`select_targets` run in a worker process, its answer or its :class:`UnknownTargetError` brought back.

    Checking a target imports its implementation, and with it torch (about two seconds) or upstream's files.  The
    ``fuzz`` command's parent only coordinates its workers, so it asks a process from the workers' fork server
    (:mod:`poolfuzz.harness.child_processes`), which has torch imported already, and stays free of torch itself.
    """
    with ProcessPoolExecutor(1, mp_context=worker_context()) as pool:
        try:
            return pool.submit(select_targets, items).result()
        except BrokenProcessPool:  # a target whose import kills the interpreter (a native crash): refused, in one line
            raise UnknownTargetError(
                f"importing the targets ({', '.join(items) or 'every family'}) ended the process that tried it"
            ) from None

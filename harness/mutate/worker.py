"""One worker process: trace targets for the baseline, then run mutants one at a time.

:class:`MutantLab` is the in-process part (also used directly by the tests):
it holds the parsed modules, their mutants by id, the live functions to swap
and one machine class per target.  :func:`serve` wraps it in a loop over a
pipe for :mod:`poolfuzz.harness.mutate.runner`; the parent's watchdog, not the worker,
enforces the time limit.

Messages in: ``("trace", target)``, ``("mutant", id, [targets])``, ``None`` (stop).
Messages out: ``("ready",)`` once, ``("fatal", text)`` when the worker cannot
start, and one reply per message in: ``("traced", target, seconds, hits, error)``
or ``("result", Outcome)``.
"""

from __future__ import annotations

import resource
import signal
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poolfuzz.harness.mutate.mutants import ModuleSource, Mutant, generate
from poolfuzz.harness.mutate.swap import LiveModule, NotSwappable, check_swappable, mutated_code, swapped
from poolfuzz.harness.mutate.targets import LineHits, build_machine, mutation_settings, run_target, trace_target

if TYPE_CHECKING:
    from poolfuzz.harness.machines.base import PoolMachine

MEMORY_LIMIT = 4 << 30
"""Address-space limit of a worker: a mutant that sizes a tensor wildly fails to allocate instead of swapping."""
_DETAIL = 160


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to rebuild the parent's plan: the files (with their hashes) and the example budget."""

    root: str
    modules: tuple[tuple[str, str], ...]
    """``(path relative to root, digest)`` of every mutated module."""
    examples: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What happened to one mutant.

    ``status``: ``killed`` (a machine failed), ``timeout`` (the watchdog stopped it),
    ``crashed`` (the worker process died), ``survived`` (every target that reaches it
    ran clean), ``not-reached`` (no target executes its lines) or ``not-run``
    (its code cannot be swapped in).
    """

    mutant: str
    status: str
    killer: str = ""
    detail: str = ""
    seconds: float = 0.0
    targets_run: tuple[str, ...] = field(default=())


def describe_failure(exc: BaseException) -> str:
    """``invariant <id>`` for a violation, else ``<Type>: <first line>``, cut to one short line."""
    from poolfuzz.harness.machines.run import violation_of

    violation = violation_of(exc)
    if violation is not None:
        return f"invariant {violation.invariant_id}"
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= _DETAIL else text[: _DETAIL - 1] + "…"


class MutantLab:
    """The modules under mutation, loaded once, and the means to run a mutant against targets."""

    def __init__(self, root: Path, paths: Sequence[str], examples: int | None = None, digests: dict[str, str] | None = None) -> None:
        self.root = root
        self.sources = [ModuleSource.load(root / path, root) for path in paths]
        for source in self.sources:
            expected = (digests or {}).get(source.path)
            if expected is not None and expected != source.digest:
                raise RuntimeError(f"{source.path} changed on disk after the run was planned; start it again")
        self.by_name = {source.name: source for source in self.sources}
        self.mutants: dict[str, Mutant] = {m.id: m for source in self.sources for m in generate(source)}
        self.settings = mutation_settings(examples)  # imports every module first (reproducible draws)
        self.live = LiveModule.load_all(self.sources)
        self.machines: dict[str, type[PoolMachine]] = {}

    def machine(self, target: str) -> type[PoolMachine]:
        if target not in self.machines:
            self.machines[target] = build_machine(target)
        return self.machines[target]

    def trace(self, target: str) -> tuple[float, LineHits]:
        files = {source.file: source.path for source in self.sources}
        return trace_target(target, self.machine(target), self.settings, files)

    def run(self, mutant_id: str, targets: Sequence[str]) -> Outcome:
        """Swap the mutant in, run ``targets`` in order until one fails, swap it out."""
        started = time.perf_counter()
        mutant = self.mutants[mutant_id]
        live = self.live[mutant.module]
        try:
            code = mutated_code(self.by_name[mutant.module], mutant)
            functions = live.targets(mutant)
            check_swappable(functions, code)
        except NotSwappable as exc:
            return Outcome(mutant_id, "not-run", detail=str(exc))
        ran: list[str] = []
        for target in targets:
            machine = self.machine(target)
            ran.append(target)
            with swapped(live, functions, code):
                try:
                    run_target(target, machine, self.settings)
                except BaseException as exc:  # noqa: BLE001 - any failure with the mutant in is a kill
                    return Outcome(mutant_id, "killed", target, describe_failure(exc), time.perf_counter() - started, tuple(ran))
        return Outcome(mutant_id, "survived", seconds=time.perf_counter() - started, targets_run=tuple(ran))


def serve(conn: Connection, setup: WorkerSetup) -> None:
    """The worker process's main loop (the target of :func:`~poolfuzz.harness.child_processes.worker_context`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the workers
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ValueError, OSError):
        pass
    try:
        lab = MutantLab(Path(setup.root), [path for path, _ in setup.modules], setup.examples, dict(setup.modules))
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the run
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready",))
    while True:
        message: Any = conn.recv()
        if message is None:
            return
        if message[0] == "trace":
            target = message[1]
            try:
                seconds, hits = lab.trace(target)
            except BaseException as exc:  # noqa: BLE001 - a failing baseline aborts the run in the parent
                conn.send(("traced", target, 0.0, {}, f"{describe_failure(exc)}\n{traceback.format_exc()}"))
                continue
            conn.send(("traced", target, seconds, hits, None))
        else:
            _, mutant_id, targets = message
            conn.send(("result", lab.run(mutant_id, targets)))

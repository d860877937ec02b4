"""The killers: the state machines the machine tests run, by name; how one run is made and traced.

One *target* per family machine (``tests/test_machines.py`` runs each with misuse
rules on, and the KV families once more on the device path of the pools' checks),
a run without each of its kit's ``optional_imports`` (``paged_kv[no-triton]``: the fallback a host
without triton takes), and for a family with pinned ``variants`` in its kit (the scheduler) one per variant,
as ``tests/test_scheduler_machine.py`` runs them on CPU: each CPU kernel, page size 1,
hybrid rows, the prefix cache and the sliding window (interpreted Triton is left out:
it is the slow CPU stand-in for a GPU kernel, and :mod:`poolfuzz.pools.page_alloc.triton` is
not mutated by default).  Both lists are read from the registry (``variants``,
``device_path``), so a family declares them in its kit and nothing here names it.
The misuse-off runs of the machine tests are left out: they issue a subset of
the same calls.  Each family also has a *walk* target (``prefix_cache[walk]``):
:data:`WALK_STEPS` steps of the nightly runner's other engine (:mod:`poolfuzz.harness.fuzz.walk`)
from seed 0, with its drain audits, since ``fuzz`` kills a bug with either engine.

Every run uses the machine tests' pinned settings (the derandomised ``ci``
profile, no example database) without the shrink phase: shrinking only starts
after a failure, so leaving it out changes nothing about *whether* a mutant is
killed, only how long a kill takes.  The same settings record which lines each
target executes (:func:`trace_target`); since the runs are derandomised, a
mutant on a line the unmutated run never executes cannot change that run.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from poolfuzz.harness.judge.families import FAMILIES, resolve
from poolfuzz.strategies.table import load_table

if TYPE_CHECKING:
    from hypothesis import settings as Settings

    from poolfuzz.harness.machines.base import PoolMachine

WALK = "[walk]"
WALK_STEPS = 10_000
"""Steps of a family's walk target: a fixed count from seed 0 (never a time budget), so the run is reproducible."""
DEVICE_PATH = "[device-path]"
DEVICE_PATH_FAMILIES = tuple(f.name for f in FAMILIES.values() if f.device_path)
"""Families (their registry entries' ``device_path``) ``tests/test_machines.py`` also runs with the device path of the pools' checks forced on the CPU
(:data:`poolfuzz.pools.page_states.DEVICE_PATH_ON_CPU`): the torch-op checks a CUDA pool runs instead of the NumPy ones."""
_DEVICE_PATH_ENV = "POOLFUZZ_DEVICE_PATH_ON_CPU"
WITHOUT = "[no-{}]"
"""The suffix of a family's run with one of its kit's ``optional_imports`` blocked: ``paged_kv[no-triton]``."""

LineHits = dict[str, dict[int, int]]
"""``path -> line -> times executed`` for the mutated files."""


def family_of(target: str) -> str:
    return target.split("[", 1)[0]


def blocked_import(target: str) -> str | None:
    """The optional import ``target`` runs without (``paged_kv[no-triton]``: ``triton``), if it is such a run."""
    kit = FAMILIES.get(family_of(target))
    return next((name for name in kit.optional_imports if target.endswith(WITHOUT.format(name))), None) if kit else None


@contextmanager
def environment(target: str) -> Iterator[None]:
    """The process environment ``target`` runs in: the device-path variants set the variable, others clear it;
    a ``[no-...]`` run has that import blocked."""
    from poolfuzz.harness.machines.without import without_modules

    previous = os.environ.pop(_DEVICE_PATH_ENV, None)
    if target.endswith(DEVICE_PATH):
        os.environ[_DEVICE_PATH_ENV] = "1"
    blocked = blocked_import(target)
    try:
        with without_modules([blocked] if blocked else []):
            yield
    finally:
        os.environ.pop(_DEVICE_PATH_ENV, None)
        if previous is not None:
            os.environ[_DEVICE_PATH_ENV] = previous


def target_names(families: Sequence[str] = ()) -> list[str]:
    """Every target, or those of ``families``, in registry order.

    A family whose default is upstream code (``engine``) is left out unless named: its machine runs SGLang's
    scheduler, not a ``pools/`` module, and tracing upstream's files line by line makes its baseline crawl.
    """
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    names: list[str] = []
    for family, kit in FAMILIES.items():
        if families and family not in families:
            continue
        if not families and kit.default in kit.upstream:
            continue
        names.extend([f"{family}[{label}]" for label, _ in kit.variants] if kit.variants else [family])
        names.append(f"{family}{WALK}")
    names.extend(f"{family}{DEVICE_PATH}" for family in DEVICE_PATH_FAMILIES if not families or family in families)
    names.extend(
        f"{family}{WITHOUT.format(name)}"
        for family, kit in FAMILIES.items()
        for name in kit.optional_imports
        if not families or family in families
    )
    return names


def variant_pins(target: str) -> dict[str, Any] | None:
    """The pins of ``target`` when it names one of its family's ``variants`` (``scheduler[loop]``), else ``None``."""
    family, _, rest = target.partition("[")
    kit = FAMILIES.get(family)
    label = rest.removesuffix("]")
    return next((dict(pins) for name, pins in kit.variants if name == label), None) if kit and rest else None


def build_machine(target: str) -> type[PoolMachine]:
    """The machine class ``target`` runs: the family's, or its machine over the table its variant's pins make."""
    from poolfuzz.harness.machines import make_machine

    family = family_of(target)
    base = make_machine(family)
    pins = variant_pins(target)
    if pins is None:
        return base
    table = load_table(resolve(FAMILIES[family].moves)(**pins))
    attrs: dict[str, Any] = {"table": table, "catalogue": table.catalogue, "__module__": base.__module__}
    return type(f"{base.__name__}[{target}]", (base,), attrs)


def mutation_settings(examples: int | None = None) -> Settings:
    """The machine tests' pinned ``ci`` settings without shrinking; ``examples`` raises the example budget."""
    from hypothesis import Phase

    from poolfuzz.harness.machines.settings import pinned_settings

    overrides: dict[str, Any] = {"database": None, "phases": [Phase.explicit, Phase.generate, Phase.target]}
    if examples is not None:
        overrides["max_examples"] = examples
    return pinned_settings(**overrides)


def run_target(target: str, machine: type[PoolMachine], settings: Settings) -> None:
    """One derandomised run of ``machine`` (built for ``target``), or for a walk target :data:`WALK_STEPS` steps
    of the family's walk from seed 0 (drain audits on, as ``fuzz`` walks); raises whatever the run finds."""
    from hypothesis.stateful import run_state_machine_as_test

    from poolfuzz.harness.fuzz.walk import WalkRun

    with environment(target):
        if target.endswith(WALK):
            finding = WalkRun(family_of(target), 0, shrink=False).run(max_steps=WALK_STEPS)
            if finding is not None:
                raise finding.error
            return
        run_state_machine_as_test(machine, settings=settings)


def trace_target(target: str, machine: type[PoolMachine], settings: Settings, files: dict[str, str]) -> tuple[float, LineHits]:
    """Run ``machine`` (built for ``target``) once under a line tracer over ``files`` (absolute file -> path).

    Returns the traced run's seconds (two to three times an untraced run's) and
    the hit count of every executed line of those files.
    """
    hits: LineHits = {path: {} for path in files.values()}

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            lines = hits[files[frame.f_code.co_filename]]
            lines[frame.f_lineno] = lines.get(frame.f_lineno, 0) + 1
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code.co_filename in files else None

    started = time.perf_counter()
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        run_target(target, machine, settings)
    finally:
        sys.settrace(previous)
    return time.perf_counter() - started, hits

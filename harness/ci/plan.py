"""What ``poolfuzz ci`` runs: the distributions named, their upstream targets, each one's seed and step budget,
and the committed traces to replay.

The budget is counted in walk steps, never in seconds: a walk (:class:`~poolfuzz.harness.fuzz.walk.WalkRun`) draws
every step from a ``random.Random`` seeded by :func:`target_seed`, so a target walked for the same number
of steps on the same code takes the same steps, finds the same first violation and shrinks it the same way,
on any machine and at any load.  The steps are weighted per target (:data:`STEPS`): the engine targets run
a whole scheduler iteration a step, a hundred times slower than an allocator call.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from poolfuzz.harness.upstream.distributions import DISTRIBUTIONS
from poolfuzz.harness.upstream.known import REPOSITORY

DEFAULT_CORPUS = REPOSITORY / "corpus"
"""The committed corpus of this checkout of poolfuzz (``corpus/known.toml`` and the traces it names)."""
LEFT_OUT = ("found", "unshrunk")
"""Corpus folders that are not committed traces: what local runs found."""

DEFAULT_STEPS = 20_000
"""Walk steps per target at ``--scale 1``: an allocator or cache target walks 2,000-14,000 steps a second."""
STEPS: dict[str, int] = {
    "poolfuzz.harness.upstream:PagedKV": 10_000,
    "poolfuzz.harness.upstream:SWAKV": 10_000,
    "poolfuzz.harness.upstream:Engine": 1_500,
    "poolfuzz.harness.upstream:VllmEngine": 600,
}
"""Targets whose steps cost more (paged checks, a scheduler iteration a step): fewer steps, about the same time."""
MAX_SECONDS = 300.0
"""A guard, not the budget: a target still walking after this long stops and is reported ``cut_off`` (the one
way the same commit can give another result, on a machine far slower than a CI runner)."""


class CiInputError(ValueError):
    """Input ``poolfuzz ci`` cannot run with (exit status 2): one line naming what is wrong."""


@dataclass(frozen=True)
class Copy:
    """One distribution under test: its name and the copy of its files the loaders use."""

    name: str
    version: str
    site: str
    origin: str


@dataclass(frozen=True)
class CiTarget:
    """One upstream target to walk: ``family=spec``, the distribution whose code it runs, its seed and steps."""

    family: str
    spec: str
    distribution: str
    seed: int
    steps: int

    @property
    def key(self) -> str:
        return f"{self.family}={self.spec}"


def named_distributions(asked: Iterable[str]) -> list[str]:
    """``--distribution`` values, else every distribution whose source variable is set (``--sglang-src`` ...)."""
    names = list(dict.fromkeys(asked))
    for name in names:
        if name not in DISTRIBUTIONS:
            raise CiInputError(f"unknown distribution {name!r} (known: {', '.join(DISTRIBUTIONS)})")
    if not names:
        names = [name for name, declared in DISTRIBUTIONS.items() if os.environ.get(declared.env)]
    if not names:
        raise CiInputError("name the checkout: --sglang-src PATH or --vllm-src PATH (or --distribution NAME for the installed one)")
    return names


def locate(name: str) -> Copy:
    """The copy of ``name`` in use, or :class:`CiInputError` with the loader's one-line reason."""
    from poolfuzz.harness.upstream.sources import UpstreamUnavailableError

    try:
        source = DISTRIBUTIONS[name].locate()
    except UpstreamUnavailableError as exc:
        raise CiInputError(str(exc)) from None
    return Copy(name, source.version, str(source.site), source.origin)


def target_seed(seed: int, spec: str) -> int:
    """The walk seed of one target: fixed by ``--seed`` and the target, independent of the order targets run in."""
    digest = hashlib.sha256(f"poolfuzz-ci:{seed}:{spec}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def steps_for(spec: str, scale: float) -> int:
    """The walk steps of ``spec`` at ``scale`` (at least one)."""
    return max(1, round(STEPS.get(spec, DEFAULT_STEPS) * scale))


def upstream_targets(distributions: Iterable[str], *, seed: int, scale: float) -> list[CiTarget]:
    """Every ``poolfuzz.harness.upstream`` target whose code is one of ``distributions``, in the registry's order."""
    from poolfuzz.harness.upstream import TARGETS, distribution_of

    wanted = set(distributions)
    found: list[CiTarget] = []
    for family, specs in TARGETS.items():
        for spec in specs:
            declared = distribution_of(spec.partition(":")[2])
            if declared is not None and declared.name in wanted:
                found.append(CiTarget(family, spec, declared.name, target_seed(seed, spec), steps_for(spec, scale)))
    return found


def refusal(spec: str) -> str | None:
    """Why the copy in use cannot run ``poolfuzz.harness.upstream:NAME`` (its one-line reason), else ``None``."""
    from poolfuzz.harness.upstream import require_target
    from poolfuzz.harness.upstream.sources import UpstreamUnavailableError

    try:
        require_target(spec.partition(":")[2])
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


def committed_traces(folders: Iterable[Path], distributions: Iterable[str]) -> list[Path]:
    """The trace files under ``folders`` (``found/`` and ``unshrunk/`` left out) of an upstream target of
    ``distributions``, sorted; files that are not traces are left to replay to call ``BAD``."""
    from poolfuzz.harness.upstream import distribution_of

    wanted = set(distributions)
    chosen: list[Path] = []
    for folder in folders:
        files = [folder] if folder.is_file() else sorted(folder.rglob("*.json"))
        for path in files:
            if any(part in LEFT_OUT for part in path.relative_to(folder).parts[:-1]) if path != folder else False:
                continue
            try:
                implementation = str(json.loads(path.read_text()).get("implementation") or "")
            except (OSError, ValueError, AttributeError):
                chosen.append(path)  # not a trace: replay says so
                continue
            module, _, name = implementation.partition(":")
            declared = distribution_of(name) if module == "poolfuzz.harness.upstream" else None
            if declared is not None and declared.name in wanted:
                chosen.append(path)
    return chosen

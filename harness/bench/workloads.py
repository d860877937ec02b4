"""Deterministic driver workloads and the checked-versus-bare comparison behind ``bench``'s harness table.

A workload picks the next driver operation from a seeded ``random.Random``
and the driver's model (no hypothesis), so a family's step sequence is the
same on every run.  :func:`checked_and_bare` runs it once to record two
things: the driver steps (the trace) and, through :class:`CallRecorder`, every
call the driver made to the pool's public methods.  It then times replaying
the steps through a fresh driver (checked) against replaying only the pool
calls on a fresh pool (bare, unchecked).
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from collections.abc import Callable
from time import perf_counter
from typing import Any

import torch

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.driver import Driver
from poolfuzz.harness.judge.families import FAMILIES, UnknownTargetError, family, load_factory, resolve
from poolfuzz.pools.errors import PoolError
from poolfuzz.pools.req_to_token import Req
from poolfuzz.strategies.table import load_table

Step = tuple[str, dict[str, Any]]
Workload = Callable[[Any, random.Random], Step]

QUERIES = frozenset(
    {"available_size", "reserved_size", "is_free", "is_live", "get_all_free_pages", "pending_free_pages", "mamba_available_size"}
)
"""Pool methods the drivers call only to look: left out of the bare replay."""


@dataclasses.dataclass(frozen=True)
class _ReqRef:
    index: int


class CallRecorder:
    """Wraps a pool's public methods (and those of pool-owned sub-objects) to log outermost calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], str, Any, Any]] = []
        self.reqs: list[Req] = []  # first-sight snapshots, replayed as fresh copies
        self._seen: dict[int, tuple[int, Req]] = {}
        self._depth = 0

    def attach(self, obj: Any, path: tuple[str, ...] = ()) -> None:
        for name, _ in inspect.getmembers(type(obj), inspect.isfunction):
            if not name.startswith("_"):
                try:
                    setattr(obj, name, self._wrap(path, name, getattr(obj, name)))
                except (AttributeError, TypeError):
                    return  # frozen or slotted: not ours to wrap
        for name, value in getattr(obj, "__dict__", {}).items():  # slotted objects (tree nodes) have none
            if type(value).__module__.startswith("pools.") and not isinstance(value, Req):
                self.attach(value, (*path, name))

    def _wrap(self, path: tuple[str, ...], name: str, bound: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._depth == 0 and name not in QUERIES:
                self.calls.append((path, name, self._snap(args), self._snap(kwargs)))
            self._depth += 1
            try:
                return bound(*args, **kwargs)
            finally:
                self._depth -= 1

        return call

    def _snap(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, Req):
            if id(value) not in self._seen:
                self._seen[id(value)] = (len(self.reqs), value)
                self.reqs.append(dataclasses.replace(value))
            return _ReqRef(self._seen[id(value)][0])
        if isinstance(value, dict):
            return {k: self._snap(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._snap(v) for v in value)
        return value

    def bound_calls(self, pool: Any) -> list[tuple[Callable[..., Any], Any, Any]]:
        """The recorded calls bound to ``pool`` with fresh request objects, ready to time."""
        reqs = [dataclasses.replace(r) for r in self.reqs]

        def live(value: Any) -> Any:
            if isinstance(value, _ReqRef):
                return reqs[value.index]
            if isinstance(value, dict):
                return {k: live(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(live(v) for v in value)
            return value

        bound = []
        for path, name, args, kwargs in self.calls:
            target = pool
            for part in path:
                target = getattr(target, part)
            bound.append((getattr(target, name), live(args), live(kwargs)))
        return bound


def _run_bare(calls: list[tuple[Callable[..., Any], Any, Any]]) -> float:
    start = perf_counter()
    for fn, args, kwargs in calls:
        try:
            fn(*args, **kwargs)
        except PoolError:
            pass  # the misuse steps: the bare pool rejects them as well
    return perf_counter() - start


def _run_checked(driver: Driver, steps: list[dict[str, Any]]) -> float:
    start = perf_counter()
    for step in steps:
        driver.step(step["op"], **step["args"])
    driver.teardown()
    return perf_counter() - start


def checked_and_bare(
    name: str, workload: Workload, *, runs: int, steps: int, rounds: int, audit_period: int = 8
) -> tuple[int, float, float, int] | str:
    """``(steps, best checked seconds, best bare seconds, pool calls)`` over ``runs`` seeded runs, or why skipped.

    Runs are as long as a fuzz example (``steps``), each on a fresh pool, so the
    drivers' per-run bookkeeping grows as it does under hypothesis.
    """
    fam = family(name)
    try:
        driver_cls = resolve(fam.driver)
        factory = load_factory(fam.default)
    except UnknownTargetError as exc:
        return f"skipped: driver not available ({exc})"
    config = fam.bench_configuration
    recorded: list[tuple[list[dict[str, Any]], CallRecorder]] = []
    for seed in range(runs):
        recorder = CallRecorder()

        def recording_factory(**kwargs: Any) -> Any:
            pool = factory(**kwargs)
            recorder.attach(pool)  # noqa: B023 - used before the loop moves on
            return pool

        driver = driver_cls(recording_factory, config, implementation=fam.default)
        rng = random.Random(seed)
        for _ in range(steps):
            op, args = workload(driver, rng)
            driver.step(op, **args)
        driver.teardown()
        recorded.append((driver.trace.steps, recorder))
    checked = bare = float("inf")
    for _ in range(rounds):
        checked = min(
            checked,
            sum(
                _run_checked(driver_cls(factory, config, implementation=fam.default, audit_period=audit_period), trace)
                for trace, _ in recorded
            ),
        )
        bare = min(bare, sum(_run_bare(recorder.bound_calls(factory(**config.kwargs()))) for _, recorder in recorded))
    return sum(len(t) for t, _ in recorded), checked, bare, sum(len(r.calls) for _, r in recorded)


# ---------------------------------------------------------------- workloads
def workload_for(name: str) -> Workload:
    """The family's bench workload, generated from its move table."""
    return load_table(resolve(family(name).moves)).workload()


def workloads() -> dict[str, tuple[Workload, PoolConfig]]:
    """Every family with a bench workload, and the pool configuration it runs on (from the registry)."""
    return {fam.name: (workload_for(fam.name), fam.bench_configuration) for fam in FAMILIES.values()}

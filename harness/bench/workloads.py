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

from harness.judge.drivers.base import Driver
from harness.judge.families import FAMILIES, UnknownTargetError, family, load_factory, resolve
from pools.errors import PoolError
from pools.req_to_token import Req
from strategies.table import load_table

Step = tuple[str, dict[str, Any]]
Workload = Callable[[Any, random.Random], Step]

QUERIES = frozenset({"available_size", "reserved_size", "is_free", "is_live", "get_all_free_pages",
                     "pending_free_pages", "mamba_available_size"})
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


def _fit(driver: Driver, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` without the keywords this driver's operation does not take (drivers evolve; workloads lag)."""
    accepted = inspect.signature(getattr(driver, op)).parameters
    return {k: v for k, v in args.items() if k in accepted}


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


def checked_and_bare(name: str, workload: Workload, *, runs: int, steps: int, rounds: int,
                     audit_period: int = 8) -> tuple[int, float, float, int] | str:
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
    config = fam.bench_kwargs
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
            driver.step(op, **_fit(driver, op, args))
        driver.teardown()
        recorded.append((driver.trace.steps, recorder))
    checked = bare = float("inf")
    for _ in range(rounds):
        checked = min(checked, sum(
            _run_checked(driver_cls(factory, config, implementation=fam.default, audit_period=audit_period), trace)
            for trace, _ in recorded))
        bare = min(bare, sum(_run_bare(recorder.bound_calls(factory(**config))) for _, recorder in recorded))
    return sum(len(t) for t, _ in recorded), checked, bare, sum(len(r.calls) for _, r in recorded)


# ---------------------------------------------------------------- workloads
def token_kv_workload(driver: Any, rng: random.Random) -> Step:
    model = driver.model
    live = sorted(h for h in model.slots if model.is_live(h) and model.slots[h])
    ps = driver.page_size
    roll = rng.random()
    if roll < 0.4 or not live:
        return "alloc", {"need_size": ps * rng.randint(1, 3)}
    if roll < 0.7:
        return "free", {"handle": rng.choice(live), "scribble": rng.random() < 0.2}
    if roll < 0.8:
        return ("group_end", {}) if model.group_open else ("group_begin", {})
    if roll < 0.9 and hasattr(driver, "free_part"):
        return "free_part", {"handle": rng.choice(live), "count": rng.randint(1, 2), "sparse": rng.random() < 0.5}
    if roll < 0.98:
        return "merge", {}
    return "clear", {}


def paged_kv_workload(driver: Any, rng: random.Random) -> Step:
    model = driver.model
    requests = sorted(h for h in model.requests if model.is_live(h) and model.slots.get(h))
    roll = rng.random()
    if roll < 0.3 or not requests:
        batch = [[None, rng.randint(1, 40)] for _ in range(rng.randint(1, 3))]
        batch += [[h, rng.randint(0, 20)] for h in rng.sample(requests, min(len(requests), rng.randint(0, 2)))]
        return "extend", {"batch": batch}
    if roll < 0.6:
        return "decode", {"handles": rng.sample(requests, min(len(requests), rng.randint(1, 4)))}
    return token_kv_workload(driver, rng)


def mamba_workload(driver: Any, rng: random.Random) -> Step:
    model = driver.model
    live = sorted(h for h, slot in driver.handles.items() if model.live.get(slot, -1) == h)
    roll = rng.random()
    if roll < 0.15:
        return ("group_end", {}) if model.group_open else ("group_begin", {"num_reqs": rng.randint(0, 4)})
    if roll < 0.6 or not live:
        return "alloc", {"need_size": 1 if rng.random() < 0.8 else rng.randint(0, 3)}
    if roll < 0.97:
        return "free", {"handles": rng.sample(live, min(len(live), rng.randint(1, 2)))}
    return "clear", {}


def hybrid_workload(driver: Any, rng: random.Random) -> Step:
    hm = driver.hybrid
    rows = sorted(h for h in hm.claims if hm.holds_row(h))
    slots = sorted(h for h in hm.claims if hm.holds_slot(h))
    roll = rng.random()
    if roll < 0.1:
        return ("group_end", {}) if hm.slots.group_open else ("group_begin", {"num_reqs": rng.randint(0, 3)})
    if roll < 0.45 or not rows:
        reuse = rng.sample(rows, min(len(rows), rng.randint(0, 1)))
        return "alloc", {"batch": [None] * rng.randint(1, 2) + reuse}
    if roll < 0.65 and slots:
        return "free_mamba_cache", {"handle": rng.choice(slots)}
    if roll < 0.85:
        return "free", {"handle": rng.choice(rows)}
    if roll < 0.98:
        return "write", {"handle": rng.choice(rows), "start": rng.randint(0, 8), "length": rng.randint(0, 8)}
    return "clear", {}


def scheduler_workload(driver: Any, rng: random.Random) -> Step:
    model = driver.model
    live = model.handles()
    prefilling = model.handles(prefilling=True)
    running = model.handles(prefilling=False, max_length=driver.max_len)
    roll = rng.random()
    if roll < 0.25 or not live:
        return "admit", {"requests": [[rng.randint(1, 40), rng.randint(1, 24)] for _ in range(rng.randint(1, 3))],
                         "reserve_extra": rng.randint(0, 2)}
    if roll < 0.4 and prefilling:
        return "prefill", {"handles": rng.sample(prefilling, min(len(prefilling), 2)), "chunk": rng.randint(1, 16)}
    if roll < 0.75 and running:
        return "decode", {"handles": rng.sample(running, min(len(running), rng.randint(1, 3)))}
    if roll < 0.87:
        return "finish", {"handles": rng.sample(live, 1)}
    if roll < 0.93:
        return "retract", {"handle": rng.choice(live), "keep": rng.randint(0, 20)}
    if roll < 0.98:
        return "abort", {"handle": rng.choice(live)}
    return "clear", {}


def workload_for(name: str) -> Workload:
    """The family's bench workload: generated from its move table, else its hand-written one."""
    fam = family(name)
    return load_table(resolve(fam.moves)).workload() if fam.moves else resolve(fam.bench)


def workloads() -> dict[str, tuple[Workload, dict[str, Any]]]:
    """Every family with a bench workload, and the pool configuration it runs on (from the registry)."""
    return {fam.name: (workload_for(fam.name), fam.bench_kwargs) for fam in FAMILIES.values() if fam.moves or fam.bench}

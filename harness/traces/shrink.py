"""Delta debugging over trace steps: the smallest trace that still breaks the same invariant.

Hypothesis shrinks the choice sequence, not the trace, and sometimes leaves long
runs of steps that have nothing to do with the failure (an ``alloc`` whose rows
are never touched again, a ``clear`` of an empty pool).  :func:`shrink_trace`
finishes the job on the trace itself, by replay alone (no hypothesis):

1. drop chunks of steps, halving the chunk size down to single steps;
2. drop single steps while renumbering the request handles later steps name;
3. simplify arguments: integers toward 0, lists shorter, then their items;
4. simplify the pool config's integers (a smaller pool shows the same bug more plainly);

repeating until nothing more goes, or the replay budget is spent.  A candidate
is kept only if replaying it still raises the same invariant id; steps after
the violating one, and steps the driver skips as not applicable, are cut.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.replay import replay_trace

Steps = list[dict[str, Any]]


def shrink_trace(
    trace: Trace,
    *,
    invariant_id: str,
    target: str | None = None,
    device: str | None = None,
    factory: Callable[..., Any] | None = None,
    check_misuse: bool | None = None,
    max_replays: int = 2000,
    max_seconds: float = 60.0,
    admissible: Callable[[dict[str, Any], Steps], bool] | None = None,
) -> Trace:
    """A smaller copy of ``trace`` whose replay still violates ``invariant_id``.

    If ``trace`` itself does not reproduce ``invariant_id`` on replay it is
    returned unchanged (copied): shrinking must never turn a real finding into a
    different one.  ``admissible`` (config, steps) refuses candidates before they
    are replayed: the realistic mode's floors (:mod:`poolfuzz.harness.traces.realistic`).
    """
    shrinker = _Shrinker(
        trace,
        invariant_id,
        max_replays,
        max_seconds,
        dict(target=target, device=device, factory=factory, check_misuse=check_misuse),
        admissible,
    )
    return shrinker.run()


def _weight(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return abs(value)
    if isinstance(value, list):
        return 1 + sum(_weight(v) for v in value)
    if isinstance(value, dict):
        return sum(_weight(v) for v in value.values())
    return 0


def _smaller_ints(value: int) -> Iterator[int]:
    """Candidates strictly closer to 0 than ``value``, most aggressive first."""
    sign = 1 if value > 0 else -1
    seen = set()
    for candidate in (0, sign, value // 2 if value > 0 else -((-value) // 2), value - sign):
        if abs(candidate) < abs(value) and candidate not in seen:
            seen.add(candidate)
            yield candidate


def _ints(value: Any) -> Iterator[int]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, (list, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _ints(item)


HANDLE_ARGS = frozenset({"handle", "handles"})
"""Argument names the drivers use for request handles: renumbered first when a step is dropped."""


def _renumbered(value: Any, threshold: int, only: frozenset[str] | None = None, shift: int = 1) -> Any:
    """``value`` with every integer ``>= threshold`` lowered by ``shift`` (handles issued after a removed step).

    With ``only``, a dict renumbers just the entries of those names.
    """
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value - shift if value >= threshold else value
    if isinstance(value, list):
        return [_renumbered(v, threshold, only, shift) for v in value]
    if isinstance(value, dict):
        return {k: _renumbered(v, threshold, None, shift) if only is None or k in only else v for k, v in value.items()}
    return value


def _handles_made(step: dict[str, Any]) -> list[int]:
    """How many handles removing ``step`` may free, to try as shifts: one, or one per item of a batch argument
    (a scheduler admission of three requests issues three handles)."""
    batches = {len(v) for v in step["args"].values() if isinstance(v, list) and v and not isinstance(v[0], int)}
    return sorted({1} | batches)


def _simpler_values(value: Any) -> Iterator[Any]:
    """Simpler variants of one argument value."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        yield from _smaller_ints(value)
    elif isinstance(value, list):
        for index in reversed(range(len(value))):
            yield value[:index] + value[index + 1 :]
        for index, item in enumerate(value):
            for simpler in _simpler_values(item):
                yield value[:index] + [simpler] + value[index + 1 :]


class _Shrinker:
    def __init__(
        self,
        trace: Trace,
        invariant_id: str,
        max_replays: int,
        max_seconds: float,
        replay_kwargs: dict[str, Any],
        admissible: Callable[[dict[str, Any], Steps], bool] | None,
    ) -> None:
        self.trace = trace
        self.admissible = admissible
        self.invariant_id = invariant_id
        self.replays_left = max_replays
        self.deadline = time.monotonic() + max_seconds
        self.replay_kwargs = replay_kwargs
        self.config = copy.deepcopy(trace.config)
        self.steps: Steps = copy.deepcopy(trace.steps)
        self.tried: set[str] = set()

    @property
    def exhausted(self) -> bool:
        return self.replays_left <= 0 or time.monotonic() > self.deadline

    def key(self, config: dict[str, Any], steps: Steps) -> tuple[int, int]:
        return len(steps), _weight(config) + sum(_weight(s["args"]) for s in steps)

    def replay(self, steps: Steps, config: dict[str, Any]) -> Steps | None:
        """The canonical steps of a candidate that still violates the invariant, else ``None``."""
        fingerprint = json.dumps([config, steps], sort_keys=True)
        if fingerprint in self.tried or self.exhausted:
            return None
        self.tried.add(fingerprint)
        self.replays_left -= 1
        result = replay_trace(replace(self.trace, config=config, steps=steps), **self.replay_kwargs)
        if result.outcome != "violation" or result.invariant != self.invariant_id:
            return None
        return [copy.deepcopy(s) for s in result.recorded]

    def attempt(self, steps: Steps, config: dict[str, Any] | None = None) -> bool:
        """Keep a candidate (canonicalised) if it still fails the same way and is smaller."""
        config = self.config if config is None else config
        if self.admissible is not None and not self.admissible(config, steps):
            return False
        canonical = self.replay(steps, config)
        if canonical is None or self.key(config, canonical) >= self.key(self.config, self.steps):
            return False
        self.config, self.steps = config, canonical
        return True

    def run(self) -> Trace:
        canonical = self.replay(self.steps, self.config)
        if canonical is None:
            return copy.deepcopy(self.trace)
        self.steps = canonical
        changed = True
        while changed and not self.exhausted:
            changed = self.remove_chunks()
            changed = self.remove_renumbering() or changed
            changed = self.simplify_args() or changed
            changed = self.simplify_config() or changed
        return replace(copy.deepcopy(self.trace), config=copy.deepcopy(self.config), steps=copy.deepcopy(self.steps))

    def remove_chunks(self) -> bool:
        changed = False
        size = max(1, len(self.steps) // 2)
        while size >= 1 and not self.exhausted:
            index = 0
            while index < len(self.steps) and not self.exhausted:
                if self.attempt(self.steps[:index] + self.steps[index + size :]):
                    changed = True
                else:
                    index += size
            size //= 2
        return changed

    def remove_renumbering(self, max_thresholds: int = 8) -> bool:
        """Drop one step and renumber what later steps refer to.

        Drivers name requests by handles issued in order, so removing a step
        that made a request shifts every later handle down by one (by the batch's
        length, for a step that admits a batch: :func:`_handles_made`); plain
        removal then points ``free(handle=3)`` at a request that no longer
        exists.  For each threshold ``m`` among the later integers, lower the
        later ``handle``/``handles`` arguments ``>= m``, then, for drivers that
        name handles otherwise (inside a ``batch``), every later integer ``>= m``.
        """
        changed = False
        index = 0
        while index < len(self.steps) and not self.exhausted:
            later = self.steps[index + 1 :]
            thresholds = sorted({v for step in later for v in _ints(step["args"]) if v >= 1})[:max_thresholds]
            prefix = self.steps[:index]
            shifts = _handles_made(self.steps[index])
            if any(
                self.attempt(prefix + [{"op": s["op"], "args": _renumbered(s["args"], m, only, shift)} for s in later])
                for shift in shifts
                for only in (HANDLE_ARGS, None)
                for m in thresholds
                if m >= shift
            ):
                changed = True
            else:
                index += 1
        return changed

    def simplify_args(self) -> bool:
        changed = False
        index = 0
        while index < len(self.steps) and not self.exhausted:
            for name in sorted(self.steps[index]["args"]):
                while index < len(self.steps) and name in self.steps[index]["args"] and self.simplify_arg(index, name):
                    changed = True
            index += 1
        return changed

    def simplify_arg(self, index: int, name: str) -> bool:
        for simpler in _simpler_values(self.steps[index]["args"][name]):
            candidate = copy.deepcopy(self.steps)
            candidate[index]["args"][name] = simpler
            if self.attempt(candidate):
                return True
        return False

    def simplify_config(self) -> bool:
        changed = False
        for name in sorted(self.config):
            while any(self.attempt(self.steps, {**self.config, name: simpler}) for simpler in _simpler_values(self.config.get(name))):
                changed = True
        return changed

"""Realistic shrinking: the smallest failing trace a server could produce, beside the smallest one.

The replay shrinker (:mod:`poolfuzz.harness.traces.shrink`) drives sizes toward 0, so an upstream
finding reads "a 0-slot SWA pool, a request of 0 tokens": true, and minimal, and no
scheduler builds it; a maintainer then has to work out whether the bug needs it.  A
family's kit names the least value a server builds or sends for each config key or step
argument (:attr:`~poolfuzz.harness.judge.kit.Family.realistic`: a pool of a few pages, a
request of at least one token), and :func:`shrink_realistic` shrinks within those floors:

1. lift the trace as found (unshrunk: it has the room to absorb the change) to the floors;
2. if it still fails, shrink it with every candidate below a floor refused, keeping the invariant
   it now violates (often the one found; in a pool with room, sometimes the next symptom).

Floors are keyed like the size limits (:mod:`poolfuzz.harness.judge.limits`): a config key, or
``op.arg`` / ``op.arg[*][1]`` for step arguments; a floor on a list is on its length (a
prompt of at least one token).  A floor is an int or a function of the config (``4 *
page_size`` tokens).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from poolfuzz.harness.judge.families import family
from poolfuzz.harness.judge.limits import parse_arg_path, select_values
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.shrink import Steps, shrink_trace

Floor = int | Callable[[Mapping[str, Any]], int]
"""The least realistic value: an int, or one computed from the trace's config."""

__all__ = ["Floor", "floors_of", "lift", "lift_config", "lift_step", "shrink_realistic", "unrealistic", "within_floors"]


def floors_of(family_name: str) -> Mapping[str, Floor]:
    """The family's realistic floors (its kit's ``realistic``), by config key or step argument path."""
    return dict(family(family_name).realistic)


def _least(floor: Floor, config: Mapping[str, Any]) -> int:
    return floor(config) if callable(floor) else floor


def _measure(value: Any) -> int | None:
    """What a floor bounds: an int itself, a list its length (``None`` for what a floor cannot read)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    return len(value) if isinstance(value, list) else None


def unrealistic(family_name: str, config: Mapping[str, Any], steps: Steps) -> str | None:
    """The first value below its floor, as ``field = value < floor``; ``None`` when the trace is realistic."""
    for key, floor in floors_of(family_name).items():
        least = _least(floor, config)
        op, dot, path = key.partition(".")
        if not dot:
            value = _measure(config.get(key))
            if value is not None and value < least:
                return f"config.{key} = {value} < {least}"
            continue
        name, selectors = parse_arg_path(path)
        for index, step in enumerate(steps):
            if step["op"] != op or name not in step["args"]:
                continue
            for where, found in select_values(step["args"][name], selectors, f"steps[{index}].args.{name}"):
                value = _measure(found)
                if value is not None and value < least:
                    return f"{where} = {value} < {least}"
    return None


def _raised(value: Any, least: int) -> Any:
    """``value`` brought up to ``least``: an int raised, a list padded by repeating its last item (or ``1``)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return max(value, least)
    if isinstance(value, list) and len(value) < least:
        pad = value[-1] if value else 1
        return value + [copy.deepcopy(pad) for _ in range(least - len(value))]
    return value


def _lifted_at(value: Any, selectors: tuple[str, ...], least: int) -> Any:
    if not selectors:
        return _raised(value, least)
    if not isinstance(value, list):
        return value
    head, rest = selectors[0], selectors[1:]
    return [_lifted_at(item, rest, least) if head in ("*", str(position)) else item for position, item in enumerate(value)]


def lift_step(family_name: str, op: str, args: dict[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """One step's arguments with every value below its floor raised to it (``args`` is not changed)."""
    out = args
    for key, floor in floors_of(family_name).items():
        step_op, dot, path = key.partition(".")
        if not dot or step_op != op:
            continue
        name, selectors = parse_arg_path(path)
        if name in out:
            out = {**out, name: _lifted_at(out[name], selectors, _least(floor, config))}
    return out


def lift_config(family_name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every key below its floor raised to it (floors computed from the config as given)."""
    lifted = dict(config)
    for key, floor in floors_of(family_name).items():
        if "." not in key and key in lifted:
            lifted[key] = _raised(lifted[key], _least(floor, config))
    return lifted


def lift(family_name: str, config: Mapping[str, Any], steps: Steps) -> tuple[dict[str, Any], Steps]:
    """``config`` and ``steps`` with every value below its floor raised to it (config first: a step's floor may
    be computed from the config)."""
    lifted = lift_config(family_name, config)
    return lifted, [{**step, "args": lift_step(family_name, step["op"], copy.deepcopy(step["args"]), lifted)} for step in steps]


def shrink_realistic(trace: Trace, *, invariant_id: str, stop: Callable[[], bool] | None = None, **replay: Any) -> Trace | None:
    """The smallest trace within the family's floors that still fails; ``None`` when the family has no floors,
    or the trace lifted to them runs clean.

    It fails as ``invariant_id`` if the lifted trace still does, else as whatever the lifted trace violates: a
    bug often shows one way in a pool of no pages (``empty-pool-guard``) and another in a real one (the slot
    handed out is live: ``no-double-allocation``).  The returned trace expects the invariant it shows.
    ``replay`` takes :func:`~poolfuzz.harness.traces.shrink.shrink_trace`'s keywords (target, factory, budgets).  Pass
    the trace as found, not the minimal one: lifting a minimal trace often removes what made it fail.
    """
    name = trace.family
    if not floors_of(name):
        return None
    config, steps = lift(name, trace.config, trace.steps)
    lifted = replace(copy.deepcopy(trace), config=config, steps=steps)
    replay_keys = ("target", "device", "factory", "check_misuse")
    result = replay_trace(lifted, **{k: v for k, v in replay.items() if k in replay_keys})
    if result.outcome != "violation" or result.invariant is None:
        return None
    return within_floors(lifted, invariant_id=result.invariant, stop=stop, **replay)


def within_floors(trace: Trace, *, invariant_id: str, stop: Callable[[], bool] | None = None, **replay: Any) -> Trace | None:
    """:func:`~poolfuzz.harness.traces.shrink.shrink_trace` of a realistic ``trace`` that refuses every candidate below a
    floor (and, once ``stop()``, every candidate: the trace so far is returned); the result expects
    ``invariant_id``.  ``None`` if ``trace`` itself is not realistic."""
    name = trace.family
    if unrealistic(name, trace.config, trace.steps) is not None:
        return None

    def admissible(config: dict[str, Any], steps: Steps) -> bool:
        return not (stop is not None and stop()) and unrealistic(name, config, steps) is None

    shrunk = shrink_trace(trace, invariant_id=invariant_id, admissible=admissible, **replay)
    shrunk.expect_violation(invariant_id)
    return shrunk

"""Limits on what one trace may ask of this machine: pool sizes, page sizes, lengths and counts, per family.

A trace is data from anywhere (a bug report, a hand edit, a damaged file), and
its config goes straight into a pool constructor: ``num_gpu_blocks`` 10**12 would
build a trillion blocks, and an ``alloc`` of 10**12 tokens is one call away.
:func:`check_config` and :func:`check_step` hold every value that sizes an
allocation against its family's :class:`FamilyLimits` *before* anything is built or called, and raise
:class:`LimitError` (a ``ValueError``) naming the field, its value and the limit.
Config keys a family does not know are refused too.  The trace loader, the
replay and the fuzz ``--target`` path all call these, so the numbers live here
once.

Why these numbers.  They are generous: 50 to 200 times above anything
``strategies/`` draws (at most 80 pages, page size 64, 20 rows, contexts of 48,
10 blocks) and above every committed corpus trace, so no real finding is ever
refused.  Yet the largest legal pool of every family stays under 1 GiB of
resident memory with the driver's model and its audits (measured: 850 MB for
the largest scheduler, about 500 MB for the others, most of it torch itself),
so a replay's memory is bounded by construction, whatever the file says:

* :data:`TOKENS`, 2**20 token slots in one KV pool (``size``, ``size_swa``,
  ``kv_pages`` x ``page_size``): real serving pools are this size; a Python
  model and free list of them is about 150 MB;
* :data:`ROWS`, 2**16 request rows or Mamba slots, and :data:`CONTEXT`, 2**20
  tokens of ``max_context_len``, but rows x context at most :data:`CELLS`
  (2**26 int32 cells of ``req_to_token``, 256 MiB): each alone is harmless,
  their product is the allocation;
* Mamba state: ``num_layers`` x (``mamba_size`` + 1) x (elements of
  ``conv_shape`` + ``temporal_shape``) at most :data:`CELLS` float32 (256 MiB);
* :data:`PAGE`, page sizes up to 2**12 (production uses up to 128);
* :data:`BLOCKS`, 2**20 blocks of a block pool (Python objects, about 300 MB);
* :data:`REQUEST`, 2**21: a step argument that sizes one call (an ``alloc`` of
  tokens, an extend length, a block count, a write offset), twice the largest
  pool, so "more than the pool holds" stays expressible for every legal pool;
  several in one step (an extend batch) sum to at most this.  Negative values
  (misuse probes) are bounded by magnitude;
* :data:`MAX_STEPS`, 100 000 steps (fuzz runs record at most 200 before
  shrinking), and :data:`MAX_TRACE_BYTES`, 16 MiB of file.

This module imports nothing above the judge (no hypothesis, machines or fuzz).
Each family's row is part of its kit (``Family.limits``, required): a new family
cannot skip its limits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from poolfuzz.harness.judge.ops import Operations

TOKENS = 1 << 20
ROWS = 1 << 16
CONTEXT = 1 << 20
CELLS = 1 << 26
PAGE = 1 << 12
BLOCKS = 1 << 20
LAYERS = 1 << 8
STATE_DIM = 1 << 12
REQUEST = 1 << 21
MAX_STEPS = 100_000
MAX_TRACE_BYTES = 16 << 20


class LimitError(ValueError):
    """A trace value out of bounds for this machine (or a key the family does not know).

    ``family``, ``field`` (``config.num_gpu_blocks``, ``steps[3].args.need_size``),
    ``value`` and ``limit`` (the bound it broke, ``None`` for an unknown key or a
    wrong type) are kept for callers; ``problem`` is the message without the field.
    """

    def __init__(self, family: str, field_name: str, value: object, limit: int | None, problem: str) -> None:
        self.family = family
        self.field = field_name
        self.value = value
        self.limit = limit
        self.problem = problem
        super().__init__(f"{field_name} {problem}")


@dataclass(frozen=True)
class Limit:
    """The bound on one config key: an integer ``low..high``, or (``high`` None) a setting that sizes nothing.

    ``nullable`` allows ``null``; ``dims`` > 0 makes it a shape, a list of at most
    ``dims`` integers each ``low..high``.
    """

    low: int = 0
    high: int | None = None
    nullable: bool = False
    dims: int = 0


SETTING = Limit()
"""A key that sizes nothing (``device``, ``kernel``, flags): known, its type checked by the trace schema."""


@dataclass(frozen=True)
class Footprint:
    """A bound on what several keys allocate together, e.g. rows x ``max_context_len`` cells."""

    name: str
    high: int
    of: Callable[[Callable[[str, int], int]], int]
    """Given ``number(key, default)`` (the key's magnitude, or ``default`` when absent), the footprint."""


@dataclass(frozen=True)
class FamilyLimits:
    """One family's limits (its kit's ``Family.limits``)."""

    config: Mapping[str, Limit]
    """Every key a trace's config may hold, and its bound."""
    footprints: tuple[Footprint, ...] = ()
    args: Mapping[str, int] = field(default_factory=dict)
    """Step arguments that size a call, as ``op.arg`` or ``op.arg[*][1]`` (items of a list), and their bound."""
    typed: type | None = None
    """The kit's config class (a :class:`~poolfuzz.harness.judge.config.PoolConfig`, which imports this module), when the
    row was built from one
    (:meth:`~poolfuzz.harness.judge.config.PoolConfig.limits`); else the registry generates one from ``config``."""


# ------------------------------------------------------------------ checks
LIMITS: dict[str, FamilyLimits] = {}
"""Every registered family's limits by name: :mod:`poolfuzz.harness.judge.families` fills it from the kits' ``Family.limits``
as it builds the registry (this module stays below the registry, so it does not import it)."""


def register_limits(family: str, row: FamilyLimits) -> None:
    """Add ``family``'s row; the registry calls this once per family it registers."""
    if family in LIMITS:
        raise ValueError(f"{family!r} already has size limits")
    LIMITS[family] = row


def limits_for(family: str) -> FamilyLimits:
    """The family's row (its kit's ``Family.limits``); a family the registry does not hold is refused."""
    row = LIMITS.get(family)
    if row is None:
        raise LimitError(
            family, "family", family, None, f"{family!r} has no size limits (no registered family declares it); known: {', '.join(LIMITS)}"
        )
    return row


def check_config(family: str, config: Mapping[str, object], row: FamilyLimits | None = None) -> None:
    """Refuse a pool config that names a key ``family`` does not know or a size outside its limits
    (``row``, else the registered family's).

    Raises :class:`LimitError` for the first offending key (in the config's
    order), then for the first footprint over its bound.  Nothing is built.
    """
    row = limits_for(family) if row is None else row
    for key, value in config.items():
        limit = _known(family, row, key, f"config.{key}")
        if limit.high is None:
            continue
        where = f"config.{key}"
        if value is None and limit.nullable:
            continue
        if limit.dims:
            _check_shape(family, where, value, limit)
        elif not is_int(value):
            raise LimitError(family, where, value, None, f"= {_shown(value)} must be an integer")
        else:
            _check_range(family, where, value, limit.low, limit.high)
    _check_footprints(family, row, config, "config")


def check_steps(family: str, steps: Sequence[Mapping[str, Any]], config: Mapping[str, object]) -> None:
    """:func:`check_step` for each step, after the count (:data:`MAX_STEPS`)."""
    if len(steps) > MAX_STEPS:
        raise LimitError(family, "len(steps)", len(steps), MAX_STEPS, f"= {len(steps)} exceeds the limit {MAX_STEPS} for {family}")
    for index, step in enumerate(steps):
        args = step.get("args")
        if isinstance(args, Mapping):
            check_step(family, str(step.get("op")), args, config, index=index)


def check_step(family: str, op: str, args: Mapping[str, Any], config: Mapping[str, object], *, index: int | None = None) -> None:
    """Refuse step arguments that would size an allocation beyond its family's limits (``index``: for the field name).

    ``construct`` (a malformed config the pool must refuse) may break lower
    bounds, that is its point, but not upper ones: the merged config's sizes
    and footprints are bounded by magnitude, and its keys must be known.
    """
    row = limits_for(family)
    prefix = f"steps[{index}].args" if index is not None else "args"
    if op == Operations.construct:
        overrides = args.get("overrides")
        if isinstance(overrides, Mapping):
            _check_overrides(family, row, config, overrides, f"{prefix}.overrides")
        return
    for key, high in row.args.items():
        step_op, _, path = key.partition(".")
        if step_op != op:
            continue
        name, selectors = parse_arg_path(path)
        if name not in args:
            continue
        total = 0.0
        for where, value in select_values(args[name], selectors, f"{prefix}.{name}"):
            if isinstance(value, (int, float)):
                _check_magnitude(family, where, value, high)
                total += max(0.0, float(value))
        if selectors and total > high:
            raise LimitError(family, f"sum of {prefix}.{path}", int(total), high, f"= {int(total)} exceeds the limit {high} for {family}")


# ----------------------------------------------------------------- helpers
def _known(family: str, row: FamilyLimits, key: str, where: str) -> Limit:
    limit = row.config.get(key)
    if limit is None:
        raise LimitError(family, where, None, None, f"is not a config field of {family}; known: {', '.join(row.config)}")
    return limit


def is_int(value: object) -> TypeGuard[int]:
    """A plain ``int``: ``bool`` subclasses it but is never a size, a count or a limit.  The one statement of the
    rule, for the limits here and for every driver that tells a valid size from a misuse one."""
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: object) -> str:
    text = str(value) if is_int(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_range(family: str, where: str, value: int, low: int, high: int) -> None:
    if value > high:
        raise LimitError(family, where, value, high, f"= {_shown(value)} exceeds the limit {high} for {family}")
    if value < low:
        raise LimitError(family, where, value, low, f"= {_shown(value)} is below the minimum {low} for {family}")


def _check_magnitude(family: str, where: str, value: float, high: int) -> None:
    if not abs(value) <= high:  # also NaN, which json reads
        raise LimitError(family, where, value, high, f"= {_shown(value)} exceeds the limit {high} (in magnitude) for {family}")


def _check_shape(family: str, where: str, value: object, limit: Limit) -> None:
    if not isinstance(value, list) or not all(is_int(v) for v in value):
        raise LimitError(family, where, value, None, f"= {_shown(value)} must be an array of integers")
    if len(value) > limit.dims:
        raise LimitError(
            family, where, value, limit.dims, f"= {_shown(value)} has more than {limit.dims} dimensions, the limit for {family}"
        )
    for position, dim in enumerate(value):
        _check_range(family, f"{where}[{position}]", dim, limit.low, limit.high or 0)


def _check_overrides(family: str, row: FamilyLimits, config: Mapping[str, object], overrides: Mapping[str, Any], where: str) -> None:
    for key, value in overrides.items():
        limit = _known(family, row, key, f"{where}.{key}")
        if limit.high is None:
            continue
        values = value if limit.dims and isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, (int, float)):
                _check_magnitude(family, f"{where}.{key}", item, limit.high)
    _check_footprints(family, row, {**config, **overrides}, where)


def _check_footprints(family: str, row: FamilyLimits, config: Mapping[str, object], where: str) -> None:
    def number(key: str, default: int) -> int:
        value = config.get(key)
        if isinstance(value, list):
            return math.prod(abs(int(v)) for v in value if isinstance(v, (int, float)) and math.isfinite(v))
        if isinstance(value, (int, float)) and math.isfinite(value):
            return abs(int(value))
        return default

    for footprint in row.footprints:
        total = footprint.of(number)
        if total > footprint.high:
            raise LimitError(
                family, f"{where}: {footprint.name}", total, footprint.high, f"= {total} exceeds the limit {footprint.high} for {family}"
            )


_SELECTOR = re.compile(r"\[(\*|\d+)\]")


def parse_arg_path(path: str) -> tuple[str, tuple[str, ...]]:
    """``batch[*][1]`` to ``("batch", ("*", "1"))``."""
    name, bracket, rest = path.partition("[")
    return name, tuple(_SELECTOR.findall(bracket + rest))


def select_values(value: Any, selectors: tuple[str, ...], where: str) -> Iterator[tuple[str, Any]]:
    """The values a path names, with their field names (``steps[3].args.batch[0][1]``); misfits are skipped."""
    if not selectors:
        yield where, value
        return
    if not isinstance(value, list):
        return
    head, rest = selectors[0], selectors[1:]
    positions = range(len(value)) if head == "*" else [int(head)] if int(head) < len(value) else []
    for position in positions:
        yield from select_values(value[position], rest, f"{where}[{position}]")

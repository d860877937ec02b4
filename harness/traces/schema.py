"""Traces: the ordered driver steps of one run, as durable JSON.

A trace is what outlives refactors: hypothesis's example database is a cache
keyed by source digests and drops entries when a machine changes, while a trace
names operations and concrete arguments only (docs/corpus.md has the format,
harness/traces/trace.schema.json its JSON Schema, shipped with the package).

:func:`load_trace` is the only way a file becomes a :class:`Trace`.  The file
first (a file over 16 MiB is not even read; UTF-8, not empty, not truncated
JSON), then the ``schema`` version, then the structure, all of it checked by
the committed JSON Schema (:func:`trace_schema`) and its first error told in
this module's words; then what a schema cannot know: the family is registered,
config keys and types fit the pool constructor, each step's op and arguments
fit the signature of the family driver's operation, invariant ids are in the
catalogue, and every size is within the limits of :mod:`poolfuzz.harness.judge.limits`.
Every problem is a :class:`TraceError` naming the file and the field, so a
corrupt, truncated, hand-edited or oversized file is reported as such, never
as a traceback from deep inside a replay or a pool that exhausts the machine.

One deliberate difference from a plain JSON Schema validator: ``integer`` means
a JSON number written without a fraction or exponent (``8``, not ``8.0``), as
Python's ``json`` reads them; JSON Schema would take ``8.0`` for an integer.
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from poolfuzz.harness.json_schema import (
    PY_TO_JSON,
    first_schema_error,
    is_json_int,
    json_type,
    packaged_schema,
    schema_error_field,
    schema_error_words,
    strict_validator,
)
from poolfuzz.harness.judge.limits import MAX_TRACE_BYTES, LimitError, check_config, check_steps
from poolfuzz.harness.judge.trace import DEFAULT_AUDIT_PERIOD, SCHEMA_VERSION, Trace

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

SCHEMA_RESOURCE = ("poolfuzz.harness.traces", "trace.schema.json")
"""Package and file name of the trace's JSON Schema (package data, see pyproject.toml)."""


class TraceError(ValueError):
    """A trace file that cannot be used: corrupt, truncated, inconsistent, from an unknown schema, or too big.

    ``text``, when given, replaces the ``field 'F': problem`` part of the
    message (a size limit reads ``config.size = 10 exceeds the limit 4 for ...``).
    """

    def __init__(self, source: str, field_name: str, problem: str, text: str | None = None) -> None:
        self.source = source
        self.field = field_name
        self.problem = problem
        super().__init__(f"{source}: {text}" if text else f"{source}: field {field_name!r}: {problem}")

    @classmethod
    def from_limit(cls, source: str, error: LimitError) -> TraceError:
        """A size limit broken (:mod:`poolfuzz.harness.judge.limits`), as an invalid trace naming the field."""
        return cls(source, error.field, error.problem, text=str(error))


# --------------------------------------------------------------------- loading
def load_trace(path: Path | str) -> Trace:
    """Read and fully validate one trace file; every problem is a :class:`TraceError` naming ``path``."""
    source = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_TRACE_BYTES:
            raise TraceError(source, "(file)", f"is {size} bytes, over the limit of {MAX_TRACE_BYTES} for a trace")
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TraceError(source, "(file)", f"cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(source, "(file)", f"is not UTF-8 text (byte {exc.start})") from None
    return loads_trace(text, source)


def loads_trace(text: str, source: str = "<string>") -> Trace:
    """Parse and validate trace JSON text."""
    if not text.strip():
        raise TraceError(source, "(file)", "is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} (line {exc.lineno} column {exc.colno})"
        stripped = text.rstrip()
        if exc.pos >= len(stripped) or not stripped.endswith("}"):
            raise TraceError(source, "(file)", f"ends early, the file looks truncated: {where}") from None
        raise TraceError(source, "(file)", f"is not valid JSON: {where}") from None
    return parse_trace(data, source)


def parse_trace(data: Any, source: str = "<memory>") -> Trace:
    """Validate a decoded JSON document and build the :class:`Trace` it describes."""
    if not isinstance(data, dict):
        raise TraceError(source, "(file)", f"must hold a JSON object, not {json_type(data)}")
    # The version before anything else: a newer schema may have renamed any other field.
    if "schema" not in data:
        raise TraceError(source, "schema", "is missing")
    schema = data["schema"]
    if not is_json_int(schema):
        raise TraceError(source, "schema", f"must be an integer, not {json_type(schema)}")
    if schema != SCHEMA_VERSION:
        raise TraceError(source, "schema", f"schema {schema} is not supported; this poolfuzz reads {SCHEMA_VERSION}")
    error = first_schema_error(trace_validator().iter_errors(data), trace_schema())
    if error is not None:
        raise TraceError(source, schema_error_field(error), _problem(error))
    # The structure is sound from here on: what is left is what only this poolfuzz knows.
    family_name: str = data["family"]
    driver_cls = _driver_for(source, family_name)
    config = _check_config(source, family_name, data["config"])
    steps = _check_steps(source, driver_cls, data["steps"])
    try:  # sizes last: a mistyped value is reported as such, not as out of bounds
        check_config(family_name, config)
        check_steps(family_name, steps, config)
    except LimitError as exc:
        raise TraceError.from_limit(source, exc) from None
    expect = data["expect"]
    _check_invariant(source, "expect.invariant", expect.get("invariant"))
    _check_invariant(source, "expect.regression.invariant", expect.get("regression", {}).get("invariant"))
    return Trace(
        family_name,
        data["implementation"],
        config,
        steps,
        dict(expect),
        dict(data.get("provenance", {})),
        data.get("audit_period", DEFAULT_AUDIT_PERIOD),
    )


def _driver_for(source: str, family_name: str) -> type:
    from poolfuzz.harness.judge.families import UnknownTargetError, family, resolve

    try:
        fam = family(family_name)
    except UnknownTargetError as exc:
        raise TraceError(source, "family", str(exc)) from None
    try:
        driver: type = resolve(fam.driver)
    except UnknownTargetError as exc:
        raise TraceError(source, "family", f"family {family_name!r} has no replayable driver here: {exc}") from None
    return driver


def _check_config(source: str, family_name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments: checked against the family's default pool signature."""
    from poolfuzz.harness.judge.families import family, resolve

    spec = family(family_name).default
    try:
        default = resolve(spec)
        signature = inspect.signature(default)
    except (ValueError, TypeError, LookupError):
        return dict(config)
    hints = _hints(getattr(default, "__init__") if isinstance(default, type) else default)  # noqa: B009 - mypy: a class's own __init__
    _check_call(source, "config", signature, config, hints, spec)
    return dict(config)


def _check_steps(source: str, driver_cls: type, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step's op is an operation of the driver, and its args bind to that operation's signature."""
    known: frozenset[str] = getattr(driver_cls, "operations", frozenset())
    operations: dict[str, tuple[inspect.Signature, dict[str, Any]]] = {}  # op: its signature less self, its hints
    checked = []
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        op, args = step["op"], step["args"]
        if op not in known:
            raise TraceError(
                source,
                f"{where}.op",
                f"step {index + 1}: {op!r} is not an operation of {driver_cls.__name__}; known: {', '.join(sorted(known))}",
            )
        if op not in operations:  # once per operation, not per step: a trace may have 100000 steps
            method = getattr(driver_cls, op)
            signature = inspect.signature(method)
            params = list(signature.parameters.values())[1:]  # drop self
            operations[op] = signature.replace(parameters=params), _hints(method)
        signature, hints = operations[op]
        _check_call(source, f"{where}.args", signature, args, hints, op, prefix=f"step {index + 1}: ")
        checked.append({"op": op, "args": args})
    return checked


def _check_call(
    source: str, where: str, signature: inspect.Signature, args: dict[str, Any], hints: dict[str, Any], callee: str, prefix: str = ""
) -> None:
    """``args`` must bind to ``signature`` by keyword, and each value must fit its annotation."""
    shown = f"{callee}({', '.join(signature.parameters)})"
    open_ended = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    for name, value in args.items():
        if name not in signature.parameters:
            if open_ended:
                continue
            raise TraceError(source, f"{where}.{name}", f"{prefix}is not a parameter of {shown}")
        hint = hints.get(name)
        if hint is not None and not _conforms(value, hint):
            raise TraceError(source, f"{where}.{name}", f"{prefix}must be {_hint_name(hint)}, not {json_type(value)} {value!r}")
    for name, param in signature.parameters.items():
        if param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL) and param.default is param.empty and name not in args:
            raise TraceError(source, f"{where}.{name}", f"{prefix}is missing (required by {shown})")


def _check_invariant(source: str, where: str, invariant: str | None) -> None:
    """An invariant id the expectation names (``None``: it names none there) must be in the catalogue."""
    from poolfuzz.harness.judge.invariants import INVARIANTS

    if invariant is not None and invariant not in INVARIANTS:
        raise TraceError(source, where, f"{invariant!r} is not an invariant id; known: {', '.join(INVARIANTS)}")


# ---------------------------------------------------------------- JSON Schema
def trace_schema() -> dict[str, Any]:
    """The committed JSON Schema of a trace (``harness/traces/trace.schema.json``)."""
    return packaged_schema(*SCHEMA_RESOURCE)


@functools.cache
def trace_validator() -> Validator:
    """The validator of :func:`trace_schema`, built once, on first use (jsonschema is imported then, not before)."""
    return strict_validator(trace_schema())


_WORDS = {
    "type": "must be {expected}, not {type}",
    "required": "is missing",
    "additionalProperties": "is not a field here; known: {known}",
    "const": "must be {limit!r}, not {value!r}",
    "enum": "{value!r} is not one of {options}",
    "pattern": "{value!r} does not match {limit}",
    "minimum": "must be at least {limit}, not {value}",
}
"""How this loader words an error of each keyword the trace schema uses (a schema's ``x-problem`` goes first)."""


def _problem(error: ValidationError) -> str:
    return schema_error_words(error, _WORDS)


# ---------------------------------------------------------------- type checks
def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations only turn type checks off
        return {}


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a (simple) annotation; annotations we do not understand accept anything."""
    if hint is Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, option) for option in typing.get_args(hint))
    if origin in (list, tuple, typing.get_origin(typing.Sequence[int])):
        inner = typing.get_args(hint)
        return isinstance(value, list) and (not inner or all(_conforms(v, inner[0]) for v in value))
    if origin is dict:
        inner = typing.get_args(hint)
        return isinstance(value, dict) and (not inner or all(_conforms(v, inner[1]) for v in value.values()))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return is_json_int(value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint in (str, list, dict):
        return isinstance(value, hint)
    return True


def _hint_name(hint: Any, article: bool = True) -> str:
    """``list[int | None]`` as ``an array of integer or null``."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_hint_name(option, article) for option in typing.get_args(hint))
    name = PY_TO_JSON.get(origin or hint, getattr(origin or hint, "__name__", str(hint)))
    if not article:
        name = name.split(" ", 1)[-1]
    inner = typing.get_args(hint)
    if origin in (list, tuple) and inner:
        return f"{name} of {_hint_name(inner[0], article=False)}"
    return name

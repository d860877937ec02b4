"""Traces: the ordered driver steps of one run, as durable JSON.

A trace is what outlives refactors: hypothesis's example database is a cache
keyed by source digests and drops entries when a machine changes, while a trace
names operations and concrete arguments only (docs/corpus.md has the format,
docs/trace.schema.json its JSON Schema).

:func:`load_trace` is the only way a file becomes a :class:`Trace`: it checks
every field, down to each step's arguments against the signature of the
family driver's operation, then every size against the limits of
:mod:`harness.judge.limits` (a file over 16 MiB is not even read), and names the
file and the field in the :class:`TraceError` it raises, so a corrupt,
truncated, hand-edited or oversized file is reported as such, never as a
traceback from deep inside a replay or a pool that exhausts the machine.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Union

from harness.judge.limits import MAX_TRACE_BYTES, LimitError, check_config, check_steps
from harness.judge.trace import DEFAULT_AUDIT_PERIOD, SCHEMA_VERSION, Trace

REQUIRED = ("schema", "family", "implementation", "config", "steps", "expect")
TOP_LEVEL = (*REQUIRED, "audit_period", "provenance")
OUTCOMES = ("pass", "violation")
REGRESSION_FIELDS = ("invariant", "implementation")
SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*")
PROVENANCE_FIELDS: dict[str, tuple[type, ...]] = {
    "poolfuzz": (str, type(None)),
    "hypothesis": (str, type(None)),
    "torch": (str, type(None)),
    "seed": (int, str, type(None)),
    "date": (str, type(None)),
    "note": (str,),
}


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
        """A size limit broken (:mod:`harness.judge.limits`), as an invalid trace naming the field."""
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
        raise TraceError(source, "(file)", f"must hold a JSON object, not {_json_type(data)}")
    if "schema" not in data:
        raise TraceError(source, "schema", "is missing")
    schema = data["schema"]
    if not _is_int(schema):
        raise TraceError(source, "schema", f"must be an integer, not {_json_type(schema)}")
    if schema != SCHEMA_VERSION:
        raise TraceError(source, "schema", f"schema {schema} is not supported; this poolfuzz reads {SCHEMA_VERSION}")
    for key in data:
        if key not in TOP_LEVEL:
            raise TraceError(source, str(key), f"is not a trace field; known: {', '.join(TOP_LEVEL)}")
    for key in REQUIRED:
        if key not in data:
            raise TraceError(source, key, "is missing")
    family_name = _typed(source, "family", data["family"], str)
    implementation = _typed(source, "implementation", data["implementation"], str)
    driver_cls = _driver_for(source, family_name)
    config = _check_config(source, family_name, data["config"])
    steps = _check_steps(source, driver_cls, data["steps"])
    try:  # sizes last: a mistyped value is reported as such, not as out of bounds
        check_config(family_name, config)
        check_steps(family_name, steps, config)
    except LimitError as exc:
        raise TraceError.from_limit(source, exc) from None
    expect = _check_expect(source, data["expect"])
    provenance_ = _check_provenance(source, data.get("provenance", {}))
    audit_period = _typed(source, "audit_period", data.get("audit_period", DEFAULT_AUDIT_PERIOD), int)
    if audit_period < 1:
        raise TraceError(source, "audit_period", f"must be at least 1, not {audit_period}")
    return Trace(family_name, implementation, config, steps, expect, provenance_, audit_period)


def _driver_for(source: str, family_name: str) -> type:
    from harness.judge.families import UnknownTargetError, family, resolve

    try:
        fam = family(family_name)
    except UnknownTargetError as exc:
        raise TraceError(source, "family", str(exc)) from None
    try:
        driver: type = resolve(fam.driver)
    except UnknownTargetError as exc:
        raise TraceError(source, "family", f"family {family_name!r} has no replayable driver here: {exc}") from None
    return driver


def _check_config(source: str, family_name: str, config: Any) -> dict[str, Any]:
    """The constructor arguments: checked against the family's default pool signature."""
    from harness.judge.families import family, resolve

    config = _typed(source, "config", config, dict)
    if "device" not in config:
        raise TraceError(source, "config.device", "is missing")
    device = _typed(source, "config.device", config["device"], str)
    if not re.fullmatch(r"(cpu|cuda)(:[0-9]+)?", device):
        raise TraceError(source, "config.device", f"{device!r} is not cpu, cuda or cuda:N")
    spec = family(family_name).default
    try:
        default = resolve(spec)
        signature = inspect.signature(default)
    except (ValueError, TypeError, LookupError):
        return dict(config)
    hints = _hints(getattr(default, "__init__") if isinstance(default, type) else default)  # noqa: B009 - mypy: a class's own __init__
    _check_call(source, "config", signature, config, hints, spec)
    return dict(config)


def _check_steps(source: str, driver_cls: type, steps: Any) -> list[dict[str, Any]]:
    steps = _typed(source, "steps", steps, list)
    known: frozenset[str] = getattr(driver_cls, "operations", frozenset())
    checked = []
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        step = _typed(source, where, step, dict)
        for key in step:
            if key not in ("op", "args"):
                raise TraceError(source, f"{where}.{key}", "is not a step field; a step has op and args")
        for key in ("op", "args"):
            if key not in step:
                raise TraceError(source, f"{where}.{key}", "is missing")
        op = _typed(source, f"{where}.op", step["op"], str)
        if op not in known:
            raise TraceError(source, f"{where}.op", f"step {index + 1}: {op!r} is not an operation of "
                                                    f"{driver_cls.__name__}; known: {', '.join(sorted(known))}")
        args = _typed(source, f"{where}.args", step["args"], dict)
        method = getattr(driver_cls, op)
        signature = inspect.signature(method)
        params = list(signature.parameters.values())[1:]  # drop self
        _check_call(source, f"{where}.args", signature.replace(parameters=params), args, _hints(method),
                    op, prefix=f"step {index + 1}: ")
        checked.append({"op": op, "args": args})
    return checked


def _check_call(source: str, where: str, signature: inspect.Signature, args: dict[str, Any],
                hints: dict[str, Any], callee: str, prefix: str = "") -> None:
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
            raise TraceError(source, f"{where}.{name}",
                             f"{prefix}must be {_hint_name(hint)}, not {_json_type(value)} {value!r}")
    for name, param in signature.parameters.items():
        if param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL) and param.default is param.empty \
                and name not in args:
            raise TraceError(source, f"{where}.{name}", f"{prefix}is missing (required by {shown})")


def _check_expect(source: str, expect: Any) -> dict[str, Any]:
    from harness.judge.invariants import INVARIANTS

    expect = _typed(source, "expect", expect, dict)
    if "outcome" not in expect:
        raise TraceError(source, "expect.outcome", "is missing")
    outcome = _typed(source, "expect.outcome", expect["outcome"], str)
    if outcome not in OUTCOMES:
        raise TraceError(source, "expect.outcome", f"{outcome!r} is not one of {', '.join(OUTCOMES)}")
    allowed = ("outcome", "regression") if outcome == "pass" else ("outcome", "invariant", "implementation")
    for key in expect:
        if key not in allowed:
            raise TraceError(source, f"expect.{key}", f"is not allowed with outcome {outcome!r}")
    if "regression" in expect:
        _check_regression(source, expect["regression"])
    if outcome == "violation":
        if "invariant" not in expect:
            raise TraceError(source, "expect.invariant", "is missing (a violation names its invariant id)")
        invariant = _typed(source, "expect.invariant", expect["invariant"], str)
        if invariant not in INVARIANTS:
            raise TraceError(source, "expect.invariant", f"{invariant!r} is not an invariant id; known: {', '.join(INVARIANTS)}")
        if "implementation" in expect:
            _typed(source, "expect.implementation", expect["implementation"], str)
    return dict(expect)


def _check_regression(source: str, value: Any) -> None:
    """``expect.regression``: the old implementation and the invariant it broke (docs/corpus.md, regression traces)."""
    from harness.judge.invariants import INVARIANTS

    value = _typed(source, "expect.regression", value, dict)
    for key in value:
        if key not in REGRESSION_FIELDS:
            raise TraceError(source, f"expect.regression.{key}",
                             f"is not a regression field; known: {', '.join(REGRESSION_FIELDS)}")
    for key in REGRESSION_FIELDS:
        if key not in value:
            raise TraceError(source, f"expect.regression.{key}", "is missing")
    invariant = _typed(source, "expect.regression.invariant", value["invariant"], str)
    if invariant not in INVARIANTS:
        raise TraceError(source, "expect.regression.invariant",
                         f"{invariant!r} is not an invariant id; known: {', '.join(INVARIANTS)}")
    spec = _typed(source, "expect.regression.implementation", value["implementation"], str)
    if not SPEC.fullmatch(spec):
        raise TraceError(source, "expect.regression.implementation", f"{spec!r} is not module:attr")


def _check_provenance(source: str, value: Any) -> dict[str, Any]:
    value = _typed(source, "provenance", value, dict)
    for key, kinds in PROVENANCE_FIELDS.items():
        if key in value and (not isinstance(value[key], kinds) or isinstance(value[key], bool)):
            names = " or ".join(_PY_TO_JSON.get(k, k.__name__) for k in kinds)
            raise TraceError(source, f"provenance.{key}", f"must be {names}, not {_json_type(value[key])}")
    return dict(value)


# ---------------------------------------------------------------- type checks
_PY_TO_JSON: dict[type, str] = {
    dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number",
    bool: "a boolean", type(None): "null",
}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    for kind, name in _PY_TO_JSON.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _typed(source: str, where: str, value: Any, kind: type) -> Any:
    if not (_is_int(value) if kind is int else isinstance(value, kind)):
        raise TraceError(source, where, f"must be {_PY_TO_JSON[kind]}, not {_json_type(value)}")
    return value


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
        return _is_int(value)
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
    name = _PY_TO_JSON.get(origin or hint, getattr(origin or hint, "__name__", str(hint)))
    if not article:
        name = name.split(" ", 1)[-1]
    inner = typing.get_args(hint)
    if origin in (list, tuple) and inner:
        return f"{name} of {_hint_name(inner[0], article=False)}"
    return name

"""Is it a report this dashboard reads: the report's JSON Schema cut down to what the page reads, and the
first problem of a report as one :class:`ReportError` naming the file and the field.

After the two checks that tell whether it is a report at all (``tool``, then ``schema``, so an
unknown version is refused as such before any field it may have renamed), a report is validated
against the committed schema (``harness/fuzz/report.schema.json``) cut down to :data:`READ`
(:func:`reader_schema`); :mod:`poolfuzz.harness.dashboard.reports` types what passes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poolfuzz.harness.json_schema import first_schema_error, packaged_schema, schema_error_field, schema_error_words, strict_validator

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "READ",
    "SCHEMAS",
    "TOOL",
    "DashboardError",
    "NoReportsError",
    "ReportError",
    "check_report",
    "reader_schema",
    "reader_validator",
    "report_schema",
]

TOOL = "poolfuzz fuzz"
SCHEMAS = (1, 2, 3)
"""The report versions this dashboard reads: the runner's (``REPORT_SCHEMA``, the schema's ``const``), 2 and 1."""
SCHEMA_RESOURCE = ("poolfuzz.harness.fuzz", "report.schema.json")
"""Package and file name of the report's JSON Schema (package data, see pyproject.toml)."""


class DashboardError(ValueError):
    """The dashboard cannot be built from what it was given; the message is one line for the user."""


class ReportError(DashboardError):
    """A file that is not a report this dashboard reads: unreadable, not JSON, an unknown schema, a bad field."""

    def __init__(self, source: Path, field_name: str, problem: str) -> None:
        self.source = source
        self.field = field_name
        self.problem = problem
        where = f"field {field_name!r}: " if field_name else ""
        super().__init__(f"{source}: {where}{problem}")


class NoReportsError(DashboardError):
    """The sources named exist but hold no poolfuzz report."""

    def __init__(self, sources: Sequence[Path]) -> None:
        self.sources = list(sources)
        named = ", ".join(str(s) for s in sources)
        super().__init__(f"no poolfuzz fuzz report found in {named} (searched for *.json)")


# --------------------------------------------------------------- validation
NEEDED, SINCE_2, OPTIONAL = "needed", "needed from schema 2 on", "optional"
READ: dict[str, dict[str, str]] = {
    "": {
        "started": NEEDED,
        "duration_s": NEEDED,
        "interrupted": OPTIONAL,
        "run": NEEDED,
        "series_interval_s": SINCE_2,
        "targets": NEEDED,
        "skipped": OPTIONAL,
        "coverage": OPTIONAL,
    },
    "/properties/run": {"seed": OPTIONAL, "workers": OPTIONAL, "device": NEEDED, "database": OPTIONAL, "cwd": OPTIONAL, "strict": OPTIONAL},
    "/properties/coverage": {"percent": OPTIONAL},
    "/properties/skipped/items": {"family": OPTIONAL, "reason": OPTIONAL},
    "/$defs/target": {
        "target": NEEDED,
        "family": NEEDED,
        "implementation": NEEDED,
        "status": NEEDED,
        "examples": NEEDED,
        "steps": NEEDED,
        "steps_per_second": NEEDED,
        "events": NEEDED,
        "coverage": SINCE_2,
        "failures": NEEDED,
        "crashes": NEEDED,
        "series": SINCE_2,
        "upstream": OPTIONAL,
    },
    "/$defs/target/properties/upstream": {"title": OPTIONAL, "version": OPTIONAL, "origin": OPTIONAL},
    "/$defs/sample": {"t": NEEDED, "steps": NEEDED, "examples": NEEDED, "events": NEEDED, "coverage": OPTIONAL, "failures": NEEDED},
    "/$defs/failure": {
        "invariant": OPTIONAL,
        "kind": NEEDED,
        "message": NEEDED,
        "trace": OPTIONAL,
        "steps": OPTIONAL,
        "shrunk": OPTIONAL,
        "replay": OPTIONAL,
        "found_after_s": OPTIONAL,
        "first_seen_after_s": OPTIONAL,
        "unshrunk_steps": OPTIONAL,
        "found_at": OPTIONAL,
        "shrink": OPTIONAL,
        "known": OPTIONAL,
    },
    "/$defs/failure/properties/known": {"key": NEEDED, "number": OPTIONAL, "upstream": OPTIONAL, "document": OPTIONAL},
    "/$defs/found_at": {"after_s": NEEDED, "trace": OPTIONAL, "steps": OPTIONAL},
    "/$defs/shrink": {"state": NEEDED, "seconds": OPTIONAL, "note": OPTIONAL},
}
"""The fields the dashboard reads, per object of the report schema (a JSON pointer into it).

``NEEDED``: it must be there (``SINCE_2``: in a report of schema 2 or later;
it may still be null where the schema allows null); ``OPTIONAL``: it may be
absent or null, and the page does without.  Any other field, and any object not
listed (crash records, ``machine``, ...), is not the dashboard's business: an
object not listed is only checked to be an object.
"""


def report_schema() -> dict[str, Any]:
    """The committed JSON Schema of a report (``harness/fuzz/report.schema.json``)."""
    return packaged_schema(*SCHEMA_RESOURCE)


@functools.cache
def reader_schema(version: int) -> dict[str, Any]:
    """:func:`report_schema` as the dashboard reads a report of schema ``version``: cut down to :data:`READ`.

    Each object listed keeps the fields :data:`READ` lists (in the schema's
    order, with their own subschemas), requires those needed in ``version``,
    lets an optional one be null, and is open: keys it does not list are
    ignored.  An object not listed keeps only its type.
    """
    seen: set[str] = set()

    def cut(node: Mapping[str, Any], pointer: str) -> dict[str, Any]:
        out = dict(node)
        if "properties" in node:
            seen.add(pointer)
            read = READ.get(pointer, {})
            unknown = sorted(set(read) - set(node["properties"]))
            assert not unknown, f"READ names fields the report schema lacks at {pointer or '/'}: {unknown}"
            if not read:
                return {key: node[key] for key in ("description", "type") if key in node}
            out["properties"] = {
                name: _nullable(cut(sub, f"{pointer}/properties/{name}"), read[name] == OPTIONAL)
                for name, sub in node["properties"].items()
                if name in read
            }
            out["required"] = [name for name in out["properties"] if read[name] == NEEDED or (read[name] == SINCE_2 and version >= 2)]
            if node.get("additionalProperties") is False:
                del out["additionalProperties"]
        for key in ("items", "additionalProperties"):
            if isinstance(out.get(key), Mapping):
                out[key] = cut(out[key], f"{pointer}/{key}")
        if "$defs" in node:
            out["$defs"] = {name: cut(sub, f"/$defs/{name}") for name, sub in node["$defs"].items()}
        return out

    root = report_schema()
    read = {key: value for key, value in root["properties"].items() if key not in ("schema", "tool")}
    schema = cut({**root, "properties": read}, "")  # schema and tool: checked first, by hand
    assert set(READ) <= seen, f"READ names objects the report schema lacks: {sorted(set(READ) - seen)}"
    return schema


def _nullable(schema: dict[str, Any], optional: bool) -> dict[str, Any]:
    """``schema``, letting the value be null too when the field is optional."""
    kinds = schema.get("type")
    if not optional or kinds is None or "null" in kinds:
        return schema
    return {**schema, "type": [*([kinds] if isinstance(kinds, str) else kinds), "null"]}


@functools.cache
def reader_validator(version: int) -> Validator:
    """The validator of :func:`reader_schema` (``integer`` as Python reads it), built once per version."""
    return strict_validator(reader_schema(version))


_WORDS = {
    "type": "expected {expected}, got {type}",
    "required": "missing",
    "const": "expected {limit!r}, got {value!r}",
    "enum": "expected one of {options}, got {value!r}",
    "pattern": "expected a string matching {limit}, got {value!r}",
    "minimum": "expected at least {limit}, got {value!r}",
    "exclusiveMinimum": "expected more than {limit}, got {value!r}",
    "maximum": "expected at most {limit}, got {value!r}",
}
"""How the dashboard words an error of each keyword the report schema uses (a schema's ``x-problem`` goes first)."""


def _json_type(value: Any) -> str:
    names = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "an integer",
        float: "a number",
    }
    return names.get(type(value), type(value).__name__)


def check_report(report: Any, source: Path) -> int:
    """Raise the :class:`ReportError` of the first thing wrong with ``report``; its schema version when none."""
    if not isinstance(report, dict) or report.get("tool") != TOOL:
        raise ReportError(source, "tool", f"not a {TOOL!r} report")
    if "schema" not in report:
        raise ReportError(source, "schema", "missing")
    schema = report["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise ReportError(source, "schema", f"expected an integer, got {_json_type(schema)}")
    if schema not in SCHEMAS:
        raise ReportError(source, "schema", f"report schema {schema} is not one this dashboard reads ({', '.join(map(str, SCHEMAS))})")
    error = first_schema_error(reader_validator(schema).iter_errors(report), reader_schema(schema))
    if error is not None:
        raise ReportError(source, schema_error_field(error), schema_error_words(error, _WORDS))
    return schema

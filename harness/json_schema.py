"""JSON Schema as poolfuzz reads it: the committed schemas shipped as package data, a validator whose
``integer`` is Python's, and the one error to tell, in a reader's words.

The trace loader (:mod:`poolfuzz.harness.traces.schema`) and the dashboard's report check
(:mod:`poolfuzz.harness.dashboard.report_check`) validate their files against committed
schemas with these: the first error in the order the schema lists the fields (not
the order jsonschema finds them in), the field it is about as ``steps[1].args``, and
the problem worded from the schema's ``x-problem`` or the reader's own templates.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "AT_ONE_PLACE",
    "JSON_TYPE_NAMES",
    "PY_TO_JSON",
    "first_schema_error",
    "is_json_int",
    "json_type",
    "packaged_schema",
    "schema_error_field",
    "schema_error_words",
    "strict_validator",
]


PY_TO_JSON: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def json_type(value: Any) -> str:
    """A Python value's JSON type as the error messages name it (``an integer``, ``null``)."""
    if isinstance(value, bool):
        return "a boolean"
    for kind, name in PY_TO_JSON.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


def is_json_int(value: Any) -> bool:
    """An integer as Python's ``json`` reads one (``8``, not ``8.0``; ``true`` is a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def packaged_schema(package: str, name: str) -> dict[str, Any]:
    """A JSON Schema shipped as package data (``name`` in ``package``), read once."""
    schema: dict[str, Any] = json.loads(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
    return schema


def strict_validator(schema: Mapping[str, Any]) -> Validator:
    """A draft 2020-12 validator of ``schema`` whose ``integer`` is Python's: ``8.0`` is a number, not an integer."""
    from jsonschema import Draft202012Validator, validators

    integers = Draft202012Validator.TYPE_CHECKER.redefine("integer", lambda _checker, value: is_json_int(value))
    strict = validators.extend(Draft202012Validator, type_checker=integers)
    validator: Validator = strict(schema)
    return validator


AT_ONE_PLACE = ("type", "additionalProperties", "required")
"""At one place in a document, a wrong type is told first, then an unknown key, then a missing one, then the rest."""


def first_schema_error(errors: Iterable[ValidationError], schema: Mapping[str, Any]) -> ValidationError | None:
    """The one error of ``errors`` to tell: the first in the order the schema lists the fields.

    Errors are ordered by where they are in the document: an object's own
    errors (a wrong type, an unknown or a missing key) before those of its
    fields, its fields in the order of the schema's ``properties`` (for a trace:
    schema, family, implementation, config, steps, expect, audit_period,
    provenance), an array's items by index; at one place by :data:`AT_ONE_PLACE`.
    So the error told depends neither on the key order of the file nor on the
    order jsonschema happens to find them in.
    """
    return min(errors, key=lambda error: _place(error, schema), default=None)


def _place(error: ValidationError, root: Mapping[str, Any]) -> tuple[tuple[tuple[int, str], ...], int, str]:
    """Sort key of an error: a rank per step down the document to it, then its keyword's rank at that place.

    A key ranks by its position among the properties of every subschema that
    applies at that place (the object's own first, then its ``$ref``,
    ``then``/``else`` and ``allOf`` branches), so a field keeps one rank
    whichever branch reports it; a key no subschema lists ranks after them.
    """
    steps: list[tuple[int, str]] = []
    nodes: list[Mapping[str, Any]] = [root]
    for part in error.absolute_path:
        nodes = [each for node in nodes for each in _alongside(node, root)]
        if isinstance(part, int):
            steps.append((part, ""))
            nodes = [node["items"] for node in nodes if isinstance(node.get("items"), Mapping)]
            continue
        names = list(dict.fromkeys(name for node in nodes for name in node.get("properties", {})))
        steps.append((names.index(part) if part in names else len(names), str(part)))
        nodes = [node["properties"][part] for node in nodes if part in node.get("properties", {})] or [
            node["additionalProperties"] for node in nodes if isinstance(node.get("additionalProperties"), Mapping)
        ]
    keyword = str(error.validator)
    rank = AT_ONE_PLACE.index(keyword) if keyword in AT_ONE_PLACE else len(AT_ONE_PLACE)
    return tuple(steps), rank, keyword


def _alongside(node: Mapping[str, Any], root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``node`` and every subschema it applies to the same value: its ``$ref``, ``then``, ``else``, ``allOf``..."""
    found = [node]
    branches = [
        node.get("$ref") and _resolve(root, node["$ref"]),
        node.get("then"),
        node.get("else"),
        *node.get("allOf", ()),
        *node.get("anyOf", ()),
        *node.get("oneOf", ()),
    ]
    for branch in branches:
        if isinstance(branch, Mapping):
            found += _alongside(branch, root)
    return found


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    """A ``#/...`` reference inside ``root`` (the only kind these schemas use)."""
    node: Any = root
    for part in ref.removeprefix("#").strip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def schema_error_field(error: ValidationError) -> str:
    """The field an error is about, as ``steps[1].args``: the key itself for a missing or an unknown key."""
    where = ""
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else f"{'.' if where else ''}{part}"
    key = _key(error)
    return f"{where}.{key}" if where and key is not None else key if key is not None else where


def _key(error: ValidationError) -> str | None:
    """For ``required`` the first key missing, for ``additionalProperties`` the first unknown one (file order)."""
    if error.validator == "required":
        return next((str(k) for k in error.validator_value if k not in error.instance), None)
    if error.validator == "additionalProperties" and isinstance(error.schema, Mapping):
        known = error.schema.get("properties", {})
        return next((str(k) for k in error.instance if k not in known), None)
    return None


JSON_TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}
"""A JSON Schema type as the error messages name it."""


def schema_error_words(error: ValidationError, generic: Mapping[str, str]) -> str:
    """The problem of an error in a reader's words: the schema's ``x-problem`` for the keyword, else ``generic``.

    Both are templates of ``value`` (the offending value), ``type`` (its JSON
    type, ``an integer``), ``expected`` (what ``type`` allows, ``a string or
    null``), ``limit`` (the keyword's value), ``options`` (an enum's values) and
    ``known`` (the object's properties); a keyword neither names is jsonschema's
    own message.
    """
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    template = schema.get("x-problem", {}).get(error.validator) or generic.get(str(error.validator))
    if template is None:
        return str(error.message)
    allowed = schema.get("type", [])
    return str(template).format(
        value=error.instance,
        type=json_type(error.instance),
        limit=error.validator_value,
        expected=" or ".join(JSON_TYPE_NAMES.get(t, t) for t in ([allowed] if isinstance(allowed, str) else allowed)),
        options=", ".join(str(o) for o in schema.get("enum", ())),
        known=", ".join(schema.get("properties", {})),
    )

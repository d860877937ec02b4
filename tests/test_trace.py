"""The trace format: canonical text, full validation with the file and field named, and the JSON Schema."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.traces.replay import trace_files
from harness.judge.trace import SCHEMA_VERSION, Trace, fill_provenance
from harness.traces.schema import TraceError, load_trace, loads_trace, parse_trace

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "docs" / "trace.schema.json"
CORPUS = ROOT / "corpus"


def sample() -> dict[str, Any]:
    """A valid trace document to mutate."""
    return Trace(
        family="req_to_token",
        implementation="pools:ReqToTokenPool",
        config={"size": 3, "max_context_len": 4, "device": "cpu"},
        steps=[
            {"op": "alloc", "args": {"batch": [None, None]}},
            {"op": "alloc_rows", "args": {"need_size": 1}},
            {"op": "free", "args": {"handle": 0}},
            {"op": "clear", "args": {}},
        ],
        expect={"outcome": "violation", "invariant": "conservation", "implementation": "tests.x:Broken"},
        provenance={"note": "a sample", "seed": 7},
    ).to_json()


def error_for(mutate: Callable[[dict[str, Any]], Any]) -> TraceError:
    document = sample()
    mutate(document)
    with pytest.raises(TraceError) as caught:
        parse_trace(document, "corpus/x.json")
    return caught.value


# ------------------------------------------------------------ round trips
def test_a_trace_survives_dumps_and_load_unchanged(tmp_path: Path) -> None:
    trace = parse_trace(sample())
    path = tmp_path / "t.json"
    path.write_text(trace.dumps())
    assert load_trace(path) == trace


def test_dumps_is_the_same_bytes_whatever_the_file_was_formatted_like() -> None:
    trace = parse_trace(sample())
    reformatted = json.dumps(dict(reversed(list(trace.to_json().items()))), indent=4)
    assert loads_trace(reformatted).dumps() == trace.dumps()


def test_a_trace_without_an_audit_period_audits_every_8_steps() -> None:
    document = sample()
    del document["audit_period"]
    assert parse_trace(document).audit_period == 8


def test_recorded_tensors_and_tuples_become_plain_lists() -> None:
    trace = Trace("req_to_token", "", {"device": "cpu"})
    trace.record("free_rows", {"rows": torch.tensor([3, 1])})
    trace.record("alloc", {"batch": (None, 2)})
    assert trace.steps == [{"op": "free_rows", "args": {"rows": [3, 1]}}, {"op": "alloc", "args": {"batch": [None, 2]}}]


def test_fill_provenance_adds_versions_and_date_but_keeps_an_existing_note() -> None:
    trace = fill_provenance(parse_trace(sample()), note="ignored, a note is there")
    assert trace.provenance["note"] == "a sample"
    assert trace.provenance["seed"] == 7
    assert trace.provenance["hypothesis"] and trace.provenance["torch"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", trace.provenance["date"])


# -------------------------------------------------------------- rejection
def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Mutation setting a dotted path (``steps.1.args.need_size``) in the document."""
    def mutate(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value
    return mutate


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]
    return mutate


REJECTED = [
    ("schema missing", _drop("schema"), "schema", "is missing"),
    ("schema a string", _set("schema", "1"), "schema", "must be an integer, not a string"),
    ("unknown top-level field", _set("steps_count", 4), "steps_count", "is not a trace field"),
    ("family missing", _drop("family"), "family", "is missing"),
    ("unknown family", _set("family", "row_pool"), "family", "unknown family 'row_pool'"),
    ("implementation not a string", _set("implementation", None), "implementation", "must be a string, not null"),
    ("config not an object", _set("config", [3, 4]), "config", "must be an object, not an array"),
    ("config without device", _drop("config.device"), "config.device", "is missing"),
    ("config on an unknown device", _set("config.device", "tpu"), "config.device", "is not cpu, cuda or cuda:N"),
    ("config key misspelt", _set("config.sise", 3), "config.sise", "is not a parameter of pools:ReqToTokenPool"),
    ("config value of the wrong type", _set("config.size", "3"), "config.size", "must be an integer, not a string"),
    ("config missing a required key", _drop("config.max_context_len"), "config.max_context_len", "is missing"),
    ("steps not a list", _set("steps", {}), "steps", "must be an array, not an object"),
    ("step not an object", _set("steps.1", "alloc_rows"), "steps[1]", "must be an object, not a string"),
    ("step without op", _drop("steps.0.op"), "steps[0].op", "is missing"),
    ("step with an extra field", _set("steps.0.result", [1]), "steps[0].result", "is not a step field"),
    ("unknown op", _set("steps.2.op", "release"), "steps[2].op", "step 3: 'release' is not an operation of RowPoolDriver"),
    ("argument misspelt", _set("steps.1.args", {"need": 1}), "steps[1].args.need", "step 2: is not a parameter of alloc_rows(need_size)"),
    ("argument missing", _set("steps.1.args", {}), "steps[1].args.need_size", "step 2: is missing (required by alloc_rows(need_size))"),
    ("argument of the wrong type", _set("steps.1.args.need_size", 1.5), "steps[1].args.need_size", "step 2: must be an integer, not a number 1.5"),
    ("bool for an int", _set("steps.2.args.handle", True), "steps[2].args.handle", "must be an integer, not a boolean"),
    ("list item of the wrong type", _set("steps.0.args.batch", [None, "a"]), "steps[0].args.batch", "must be an array of integer or null"),
    ("expect missing", _drop("expect"), "expect", "is missing"),
    ("unknown outcome", _set("expect.outcome", "fail"), "expect.outcome", "'fail' is not one of pass, violation"),
    ("violation without invariant", _drop("expect.invariant"), "expect.invariant", "is missing"),
    ("unknown invariant id", _set("expect.invariant", "no-leaks"), "expect.invariant", "'no-leaks' is not an invariant id"),
    ("pass naming an invariant", _set("expect.outcome", "pass"), "expect.invariant", "is not allowed with outcome 'pass'"),
    ("audit period of the wrong type", _set("audit_period", "8"), "audit_period", "must be an integer, not a string"),
    ("audit period below 1", _set("audit_period", 0), "audit_period", "must be at least 1, not 0"),
    ("seed of the wrong type", _set("provenance.seed", 1.5), "provenance.seed", "must be an integer or a string or null"),
    ("note not a string", _set("provenance.note", None), "provenance.note", "must be a string, not null"),
]


@pytest.mark.parametrize(("mutate", "field", "problem"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_an_inconsistent_trace_is_refused_naming_the_file_and_field(
    mutate: Callable[[dict[str, Any]], Any], field: str, problem: str
) -> None:
    error = error_for(mutate)
    assert (error.source, error.field) == ("corpus/x.json", field)
    assert problem in error.problem
    assert str(error).startswith(f"corpus/x.json: field {field!r}: ")


def test_an_unknown_schema_version_says_which_one_this_poolfuzz_reads() -> None:
    error = error_for(_set("schema", 2))
    assert error.field == "schema"
    assert error.problem == f"schema 2 is not supported; this poolfuzz reads {SCHEMA_VERSION}"


def test_a_newer_schema_is_reported_before_any_field_it_may_have_renamed() -> None:
    error = error_for(lambda d: d.update(schema=3, operations=d.pop("steps")))
    assert error.field == "schema"


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.99])
def test_a_truncated_file_is_reported_as_truncated(tmp_path: Path, keep: float) -> None:
    text = parse_trace(sample()).dumps()
    path = tmp_path / "cut.json"
    path.write_text(text[: int(len(text) * keep)])
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.source, caught.value.field) == (str(path), "(file)")
    assert "truncated" in caught.value.problem


@pytest.mark.parametrize(("content", "problem"), [
    (b"", "is empty"),
    (b'{"schema": 1 "family": 2}', "is not valid JSON: Expecting ',' delimiter (line 1 column 14)"),
    (b"[1, 2]", "must hold a JSON object, not an array"),
    (b'{"schema": 1}\xff', "is not UTF-8 text (byte 13)"),
])
def test_a_file_that_is_not_a_trace_object_is_refused(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.field, caught.value.problem) == ("(file)", problem)


def test_a_missing_file_is_a_trace_error_not_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot be read"):
        load_trace(tmp_path / "nowhere.json")


# ------------------------------------------------------------- JSON Schema
SUPPORTED = {"$schema", "$id", "title", "description", "$defs", "$ref", "type", "const", "pattern", "minimum",
             "required", "properties", "additionalProperties", "items", "oneOf"}
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_errors(value: Any, schema: dict[str, Any], root: dict[str, Any], at: str = "$") -> list[str]:
    """A validator for the subset of draft 2020-12 that docs/trace.schema.json uses (:data:`SUPPORTED`)."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return schema_errors(value, target, root, at)
    errors: list[str] = []
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[k](value) for k in kinds):
            return [f"{at}: not {' or '.join(kinds)}"]
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        errors.append(f"{at}: not {schema['const']!r}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        errors.append(f"{at}: below {schema['minimum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        errors.append(f"{at}: does not match {schema['pattern']}")
    if isinstance(value, dict):
        errors += [f"{at}.{k}: required" for k in schema.get("required", []) if k not in value]
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                errors += schema_errors(item, properties[key], root, f"{at}.{key}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{at}.{key}: not allowed")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += schema_errors(item, schema["items"], root, f"{at}[{index}]")
    if "oneOf" in schema:
        matching = [option for option in schema["oneOf"] if not schema_errors(value, option, root, at)]
        if len(matching) != 1:
            errors.append(f"{at}: matches {len(matching)} of the oneOf alternatives, not exactly 1")
    return errors


def keywords(schema: Any) -> set[str]:
    if isinstance(schema, list):
        return set().union(*(keywords(s) for s in schema))
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    for key, sub in schema.items():
        if key in ("properties", "$defs"):
            found |= set().union(*(keywords(s) for s in sub.values()))
        elif key in ("items", "additionalProperties", "oneOf"):
            found |= keywords(sub)
    return found


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return loaded


def test_the_schema_uses_only_keywords_the_test_validator_checks(schema: dict[str, Any]) -> None:
    assert keywords(schema) <= SUPPORTED
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema"]["const"] == SCHEMA_VERSION


def test_a_dumped_trace_matches_the_schema(schema: dict[str, Any]) -> None:
    document = json.loads(fill_provenance(parse_trace(sample())).dumps())
    assert schema_errors(document, schema, schema) == []
    passing = {**document, "expect": {"outcome": "pass"}, "implementation": ""}
    assert schema_errors(passing, schema, schema) == []


@pytest.mark.parametrize(("mutate", "error"), [
    (_set("schema", 2), "$.schema: not 1"),
    (_drop("steps"), "$.steps: required"),
    (_set("steps.0.op", 3), "$.steps[0].op: not string"),
    (_set("expect.outcome", "pass"), "$.expect: matches 0 of the oneOf alternatives, not exactly 1"),
    (_set("config.device", "tpu"), "$.config.device: does not match"),
    (_set("extra", 1), "$.extra: not allowed"),
    (_set("audit_period", 0), "$.audit_period: below 1"),
])
def test_the_schema_rejects_what_the_loader_rejects(
    schema: dict[str, Any], mutate: Callable[[dict[str, Any]], Any], error: str
) -> None:
    document = sample()
    mutate(document)
    assert any(e.startswith(error) for e in schema_errors(document, schema, schema))


def test_every_committed_trace_matches_the_schema(schema: dict[str, Any]) -> None:
    for path in trace_files([CORPUS]) if CORPUS.is_dir() else []:
        assert schema_errors(json.loads(path.read_text()), schema, schema) == [], path


def test_jsonschema_agrees_with_the_tiny_validator_when_installed(schema: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)
    documents = [json.loads(p.read_text()) for p in (trace_files([CORPUS]) if CORPUS.is_dir() else [])]
    for document in [sample(), *documents]:
        jsonschema.validate(copy.deepcopy(document), schema, cls=jsonschema.Draft202012Validator)

"""The trace format: canonical text, full validation with the file and field named, and its JSON Schema."""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import torch

from poolfuzz.harness.json_schema import schema_error_field
from poolfuzz.harness.judge import limits
from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.families import FAMILIES, family_unavailable, resolve
from poolfuzz.harness.judge.kit import Family
from poolfuzz.harness.judge.limits import LimitError, check_config, check_step, check_steps, limits_for
from poolfuzz.harness.judge.trace import SCHEMA_VERSION, Trace, fill_provenance
from poolfuzz.harness.machines.table import config_strategy
from poolfuzz.harness.traces.replay import trace_files
from poolfuzz.harness.traces.schema import TraceError, load_trace, loads_trace, parse_trace, trace_schema

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"


def sample() -> dict[str, Any]:
    """A valid trace document to mutate."""
    return Trace(
        family="req_to_token",
        implementation="poolfuzz.pools:ReqToTokenPool",
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
    ("config key misspelt", _set("config.sise", 3), "config.sise", "is not a parameter of poolfuzz.pools:ReqToTokenPool"),
    ("config value of the wrong type", _set("config.size", "3"), "config.size", "must be an integer, not a string"),
    ("config missing a required key", _drop("config.max_context_len"), "config.max_context_len", "is missing"),
    ("steps not a list", _set("steps", {}), "steps", "must be an array, not an object"),
    ("step not an object", _set("steps.1", "alloc_rows"), "steps[1]", "must be an object, not a string"),
    ("step without op", _drop("steps.0.op"), "steps[0].op", "is missing"),
    ("step with an extra field", _set("steps.0.result", [1]), "steps[0].result", "is not a step field"),
    ("unknown op", _set("steps.2.op", "release"), "steps[2].op", "step 3: 'release' is not an operation of RowPoolDriver"),
    ("argument misspelt", _set("steps.1.args", {"need": 1}), "steps[1].args.need", "step 2: is not a parameter of alloc_rows(need_size)"),
    ("argument missing", _set("steps.1.args", {}), "steps[1].args.need_size", "step 2: is missing (required by alloc_rows(need_size))"),
    (
        "argument of the wrong type",
        _set("steps.1.args.need_size", 1.5),
        "steps[1].args.need_size",
        "step 2: must be an integer, not a number 1.5",
    ),
    ("bool for an int", _set("steps.2.args.handle", True), "steps[2].args.handle", "must be an integer, not a boolean"),
    ("list item of the wrong type", _set("steps.0.args.batch", [None, "a"]), "steps[0].args.batch", "must be an array of integer or null"),
    ("expect missing", _drop("expect"), "expect", "is missing"),
    ("unknown outcome", _set("expect.outcome", "fail"), "expect.outcome", "'fail' is not one of pass, violation"),
    ("violation without invariant", _drop("expect.invariant"), "expect.invariant", "is missing"),
    ("unknown invariant id", _set("expect.invariant", "no-leaks"), "expect.invariant", "'no-leaks' is not an invariant id"),
    ("pass naming an invariant", _set("expect.outcome", "pass"), "expect.invariant", "is not allowed with outcome 'pass'"),
    (
        "regression with a violation",
        _set("expect.regression", {"invariant": "conservation", "implementation": "a:B"}),
        "expect.regression",
        "is not allowed with outcome 'violation'",
    ),
    (
        "regression not an object",
        lambda d: d.update(expect={"outcome": "pass", "regression": "conservation"}),
        "expect.regression",
        "must be an object, not a string",
    ),
    (
        "regression without invariant",
        lambda d: d.update(expect={"outcome": "pass", "regression": {"implementation": "a:B"}}),
        "expect.regression.invariant",
        "is missing",
    ),
    (
        "regression of an unknown invariant",
        lambda d: d.update(expect={"outcome": "pass", "regression": {"invariant": "leaks", "implementation": "a:B"}}),
        "expect.regression.invariant",
        "'leaks' is not an invariant id",
    ),
    (
        "regression naming no implementation",
        lambda d: d.update(expect={"outcome": "pass", "regression": {"invariant": "conservation", "implementation": ""}}),
        "expect.regression.implementation",
        "'' is not module:attr",
    ),
    (
        "regression with an extra field",
        lambda d: d.update(expect={"outcome": "pass", "regression": {"invariant": "conservation", "implementation": "a:B", "fixed": True}}),
        "expect.regression.fixed",
        "is not a regression field",
    ),
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


def test_a_regression_expectation_loads_and_round_trips() -> None:
    regression = {"outcome": "pass", "regression": {"invariant": "conservation", "implementation": "tests.x:Broken"}}
    trace = parse_trace({**sample(), "expect": regression})
    assert trace.expect == regression
    assert loads_trace(trace.dumps()) == trace


# ---------------------------------------------------------------- limits
def test_every_family_has_limits_naming_only_keys_its_default_pool_takes() -> None:
    """A row naming a key the pool lacks would be dead; one missing a key its bench config uses refuses its traces."""
    for name in FAMILIES:
        row = limits_for(name)
        if family_unavailable(name) is None:  # an upstream default (engine) resolves only where upstream loads
            default = resolve(FAMILIES[name].default)
            assert set(row.config) <= set(inspect.signature(default).parameters), name
        assert set(FAMILIES[name].bench_kwargs) <= set(row.config), name
        check_config(name, FAMILIES[name].bench_kwargs)
        driver = resolve(FAMILIES[name].driver)
        assert {key.partition(".")[0] for key in row.args} <= driver.operations, name


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_configs_the_fuzzers_draw_are_well_inside_the_limits(name: str) -> None:
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=200, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(config_strategy(name))
    def drawn(config: PoolConfig) -> None:
        check_config(name, config.to_json())
        scaled = {
            k: v * 50 if isinstance(v, int) and not isinstance(v, bool) and k != "page_size" else v for k, v in config.to_json().items()
        }
        check_config(name, {**scaled, "device": "cpu"})  # 50 times as large still passes: generous

    drawn()


LIMITED = [
    (
        "a trillion blocks",
        "block_pool",
        {"num_gpu_blocks": 10**12},
        "config.num_gpu_blocks",
        "config.num_gpu_blocks = 1000000000000 exceeds the limit 1048576 for block_pool",
    ),
    (
        "a negative page size",
        "paged_kv",
        {"size": 8, "page_size": -4},
        "config.page_size",
        "config.page_size = -4 is below the minimum 1 for paged_kv",
    ),
    (
        "a page size of 0",
        "prefix_cache",
        {"size": 8, "page_size": 0},
        "config.page_size",
        "config.page_size = 0 is below the minimum 1 for prefix_cache",
    ),
    (
        "rows x context too large together",
        "req_to_token",
        {"size": 1 << 16, "max_context_len": 1 << 20},
        "config: (size + pre_alloc_size) x max_context_len",
        "config: (size + pre_alloc_size) x max_context_len = 68719476736 exceeds the limit 67108864 for req_to_token",
    ),
    (
        "a key the family does not know",
        "hybrid_req_to_token",
        {"size": 2, "max_context_len": 4, "mamba_size": 2, "dtype": "float16"},
        "config.dtype",
        "config.dtype is not a config field of hybrid_req_to_token; known: size, max_context_len, mamba_size, num_layers",
    ),
    ("a boolean size", "token_kv", {"size": True}, "config.size", "config.size = True must be an integer"),
    (
        "a state shape too large",
        "hybrid_req_to_token",
        {"size": 2, "max_context_len": 4, "mamba_size": 1 << 16, "num_layers": 64, "conv_shape": [4096]},
        "config: num_layers x (mamba_size + 1) x (conv_shape + temporal_shape elements)",
        "exceeds the limit 67108864",
    ),
    (
        "KV pages of a scheduler",
        "scheduler",
        {"size": 1, "max_context_len": 4, "page_size": 64, "kv_pages": 1 << 20},
        "config: kv_pages x page_size",
        "= 67108864 exceeds the limit 1048576 for scheduler",
    ),
]


@pytest.mark.parametrize(("family", "config", "field", "message"), [r[1:] for r in LIMITED], ids=[r[0] for r in LIMITED])
def test_check_config_names_the_field_its_value_and_the_limit(family: str, config: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(LimitError) as caught:
        check_config(family, {**config, "device": "cpu"})
    assert isinstance(caught.value, ValueError)
    assert (caught.value.family, caught.value.field) == (family, field)
    assert message in str(caught.value)


def test_a_limit_error_keeps_the_value_and_the_limit() -> None:
    with pytest.raises(LimitError) as caught:
        check_config("block_pool", {"num_gpu_blocks": 10**12, "device": "cpu"})
    assert (caught.value.value, caught.value.limit) == (10**12, limits.BLOCKS)


def test_a_family_without_limits_is_refused() -> None:
    with pytest.raises(LimitError, match="'new_family' has no size limits"):
        check_config("new_family", {"device": "cpu"})


def test_a_kit_cannot_declare_a_family_without_limits() -> None:
    with pytest.raises(TypeError, match="limits"):
        Family(
            name="new_family",
            summary="no limits",
            default="poolfuzz.pools:ReqToTokenPool",  # type: ignore[call-arg]
            driver="poolfuzz.harness.kits.rows.driver:RowPoolDriver",
            moves="poolfuzz.harness.kits.rows.moves:row_table",
        )


ROWS = {"size": 2, "max_context_len": 4, "device": "cpu"}
STEP_LIMITED = [
    (
        "an alloc of a trillion tokens",
        "token_kv",
        "alloc",
        {"need_size": 10**12},
        "steps[0].args.need_size",
        "= 1000000000000 exceeds the limit 2097152 (in magnitude) for token_kv",
    ),
    (
        "a negative write offset",
        "req_to_token",
        "write",
        {"handle": 0, "start": -(10**12), "length": 10**12},
        "steps[0].args.start",
        "exceeds the limit 2097152 (in magnitude)",
    ),
    (
        "one long extend in a batch",
        "paged_kv",
        "extend",
        {"batch": [[None, 4], [None, 1 << 22]]},
        "steps[0].args.batch[1][1]",
        "= 4194304 exceeds",
    ),
    (
        "an extend batch too long in total",
        "paged_kv",
        "extend",
        {"batch": [[None, 1 << 20]] * 3},
        "sum of steps[0].args.batch[*][1]",
        "= 3145728 exceeds the limit 2097152 for paged_kv",
    ),
    (
        "a value far longer than its key",
        "prefix_cache",
        "insert_mismatched",
        {"prompt": [1], "extra": 10**12},
        "steps[0].args.extra",
        "exceeds",
    ),
    ("NaN, which json reads", "mamba_slots", "alloc", {"need_size": float("nan")}, "steps[0].args.need_size", "= nan exceeds"),
    (
        "a huge pool built by construct",
        "req_to_token",
        "construct",
        {"overrides": {"size": 10**12, "max_context_len": -1}},
        "steps[0].args.overrides.size",
        "exceeds the limit 65536 (in magnitude)",
    ),
    (
        "construct naming an unknown key",
        "block_pool",
        "construct",
        {"overrides": {"blocks": 3}},
        "steps[0].args.overrides.blocks",
        "is not a config field of block_pool",
    ),
]


@pytest.mark.parametrize(("family", "op", "args", "field", "problem"), [r[1:] for r in STEP_LIMITED], ids=[r[0] for r in STEP_LIMITED])
def test_step_arguments_that_size_an_allocation_are_bounded(family: str, op: str, args: dict[str, Any], field: str, problem: str) -> None:
    config = {**FAMILIES[family].bench_kwargs, **(ROWS if family == "req_to_token" else {})}
    with pytest.raises(LimitError) as caught:
        check_steps(family, [{"op": op, "args": args}], config)
    assert caught.value.field == field
    assert problem in caught.value.problem


def test_misuse_probes_stay_legal_within_the_limits() -> None:
    """Negative sizes and malformed constructors are what misuse steps are for: only their magnitude is bounded."""
    check_step("token_kv", "alloc", {"need_size": -1}, {"size": 4})
    check_step("req_to_token", "construct", {"overrides": {"size": -1, "max_context_len": 4.5}}, ROWS)
    check_step("paged_kv", "extend", {"batch": [[None, limits.REQUEST]]}, {"size": 8, "page_size": 2})
    check_step("paged_kv", "free", {"handle": 10**12}, {"size": 8, "page_size": 2})  # handles size nothing


def test_the_number_of_steps_is_bounded() -> None:
    steps = [{"op": "clear", "args": {}}] * (limits.MAX_STEPS + 1)
    with pytest.raises(LimitError) as caught:
        check_steps("req_to_token", steps, ROWS)
    assert str(caught.value) == f"len(steps) = {limits.MAX_STEPS + 1} exceeds the limit {limits.MAX_STEPS} for req_to_token"


def test_a_trace_over_the_limits_is_refused_at_load_naming_file_and_field() -> None:
    error = error_for(_set("config.size", 1 << 20))
    expected = "corpus/x.json: config.size = 1048576 exceeds the limit 65536 for req_to_token"
    assert (error.field, str(error)) == ("config.size", expected)
    error = error_for(_set("steps.1.args.need_size", -(10**12)))
    assert error.field == "steps[1].args.need_size"


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:
        handle.truncate(limits.MAX_TRACE_BYTES + 1)  # sparse: nothing to read, only its size
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.field, caught.value.problem) == (
        "(file)",
        f"is {limits.MAX_TRACE_BYTES + 1} bytes, over the limit of {limits.MAX_TRACE_BYTES} for a trace",
    )


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


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "is empty"),
        (b'{"schema": 1 "family": 2}', "is not valid JSON: Expecting ',' delimiter (line 1 column 14)"),
        (b"[1, 2]", "must hold a JSON object, not an array"),
        (b'{"schema": 1}\xff', "is not UTF-8 text (byte 13)"),
    ],
)
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
@pytest.fixture(scope="module")
def validator() -> Any:
    """A plain draft 2020-12 validator of the schema as installed: what any other tool reading traces would use."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(resources.files("poolfuzz.harness.traces").joinpath("trace.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def raw_errors(validator: Any, document: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(copy.deepcopy(document))]


def test_the_schema_is_the_loaders_and_names_this_version(validator: Any) -> None:
    assert validator.schema == trace_schema()
    assert validator.schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert validator.schema["properties"]["schema"]["const"] == SCHEMA_VERSION
    assert not (ROOT / "docs" / "trace.schema.json").exists()  # one copy, shipped in the package


def test_a_dumped_trace_matches_the_schema(validator: Any) -> None:
    document = json.loads(fill_provenance(parse_trace(sample())).dumps())
    assert raw_errors(validator, document) == []
    passing = {**document, "expect": {"outcome": "pass"}, "implementation": ""}
    assert raw_errors(validator, json.loads(parse_trace(passing).dumps())) == []
    regression = {**document, "expect": {"outcome": "pass", "regression": {"invariant": "conservation", "implementation": "a.b:C"}}}
    assert raw_errors(validator, json.loads(parse_trace(regression).dumps())) == []


def test_every_committed_trace_matches_the_schema(validator: Any) -> None:
    paths = trace_files([CORPUS])
    assert paths
    for path in paths:
        assert raw_errors(validator, json.loads(path.read_text())) == [], path


STRUCTURAL = {r[0] for r in REJECTED} - {
    # what only the loader knows: the registry, the pool's constructor, the driver's operations, the catalogue
    "unknown family",
    "config key misspelt",
    "config value of the wrong type",
    "config missing a required key",
    "unknown op",
    "argument misspelt",
    "argument missing",
    "argument of the wrong type",
    "bool for an int",
    "list item of the wrong type",
    "unknown invariant id",
    "regression of an unknown invariant",
}


@pytest.mark.parametrize(("name", "mutate", "field"), [r[:3] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_the_loader_and_the_raw_schema_agree_on_every_rejected_trace(
    validator: Any, name: str, mutate: Callable[[dict[str, Any]], Any], field: str
) -> None:
    """A structural mistake is one the schema itself rejects, at the field the loader names; the rest it lets by."""
    document = sample()
    mutate(document)
    errors = list(validator.iter_errors(copy.deepcopy(document)))
    if name not in STRUCTURAL:
        assert errors == [], name
        return
    fields = {schema_error_field(e) for e in errors}
    assert field in fields, (name, [e.message for e in errors])


def test_the_loader_reports_the_first_error_in_the_schemas_field_order() -> None:
    def several(document: dict[str, Any]) -> None:
        document.update(zz=1, audit_period=0)
        document["steps"][3]["extra"] = 1
        del document["config"]["device"]
        del document["steps"][1]["args"]

    def known_keys(document: dict[str, Any]) -> None:
        several(document)
        document.pop("zz")

    def device_too(document: dict[str, Any]) -> None:
        known_keys(document)
        document["config"].update(device="cpu")

    assert error_for(several).field == "zz"  # an unknown top-level key before any field's own error
    error = error_for(known_keys)
    assert error.field == "config.device"  # config before steps and audit_period, whatever the key order
    error = error_for(device_too)
    assert (error.field, error.problem) == ("steps[1].args", "is missing")  # steps by index
    assert error_for(lambda d: d["expect"].update(outcome=3)).problem == "must be a string, not an integer"


def test_an_integer_field_refuses_a_number_with_a_fraction_part() -> None:
    """JSON Schema takes 8.0 for an integer; the loader, as Python's json reads it, does not."""
    error = error_for(_set("audit_period", 8.0))
    assert (error.field, error.problem) == ("audit_period", "must be an integer, not a number")

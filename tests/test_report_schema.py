"""``harness/fuzz/report.schema.json`` describes the report a real ``fuzz`` run writes, field for field.

One short real run (a planted leak next to a healthy target, with coverage, so
failures, series and coverage are all filled in) must validate; the schema's
objects are closed, so a field the runner adds without documenting it fails
here.  Crash records come from the runner's own :class:`CrashRecord`, since
crashing a worker would cost this file seconds.  The dashboard reads the same
report through the same schema (cut down to the fields it reads).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness import cli
from poolfuzz.harness.dashboard.report_check import SCHEMAS, report_schema
from poolfuzz.harness.dashboard.reports import parse_report
from poolfuzz.harness.fuzz.report import REPORT_SCHEMA, CrashRecord, TargetStats, possible_arcs
from tests.once import computed_once

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a test dependency (pip install -e '.[test]')")

REPO = Path(__file__).resolve().parent.parent
LEAKY = "req_to_token=tests.fuzz_planted:ForgetfulFree"


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json.loads(resources.files("poolfuzz.harness.fuzz").joinpath("report.schema.json").read_text(encoding="utf-8"))
    assert schema == report_schema()  # the file the dashboard validates against, as installed
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real run's report, made once per test run (:func:`tests.once.computed_once`)."""
    folder = computed_once(tmp_path_factory, "real-report", _fuzz_a_planted_leak)
    data: dict[str, Any] = json.loads((folder / "report.json").read_text())
    return data


def _fuzz_a_planted_leak(tmp: Path) -> None:
    code = cli.main(
        [
            "fuzz",
            "--database",
            str(tmp / "db"),
            "--corpus",
            str(tmp / "corpus"),
            "--report",
            str(tmp / "report.json"),
            "--seed",
            "7",
            "--seconds",
            "6",  # the planted leak must be found: three seconds missed it on a box loaded by other runs
            "--workers",
            "1",
            "--steps",
            "20",
            "--coverage",
            "--series-every",
            "1",
            "--target",
            LEAKY,
            "--target",
            "decode_req_to_token",
        ]
    )
    assert code == 1


def errors(validator: Any, report: dict[str, Any]) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(report)]


def test_a_real_runs_report_matches_the_schema_with_every_section_filled(validator: Any, real_report: dict[str, Any]) -> None:
    assert errors(validator, real_report) == []
    assert real_report["schema"] == REPORT_SCHEMA == validator.schema["properties"]["schema"]["const"]
    leaky = next(t for t in real_report["targets"] if t["target"] == LEAKY)
    assert leaky["failures"] and leaky["failures"][0]["replay"]  # failures were checked, not an empty list
    assert all(len(t["series"]) >= 2 and t["coverage"] is not None for t in real_report["targets"])
    assert real_report["coverage"]["files"]


def test_the_dashboard_reads_a_real_runs_report_through_the_schema(real_report: dict[str, Any]) -> None:
    assert REPORT_SCHEMA in SCHEMAS
    run = parse_report(copy.deepcopy(real_report), Path("report.json"))
    leaky = run.target(LEAKY)
    assert leaky is not None and leaky.failures and leaky.series
    assert not (REPO / "docs" / "report.schema.json").exists()  # one copy, shipped in the package


def test_crash_records_as_the_runner_writes_them_match_the_schema(validator: Any, real_report: dict[str, Any]) -> None:
    report = copy.deepcopy(real_report)
    crash = CrashRecord(
        worker="w0",
        target=LEAKY,
        round=3,
        seed=12345,
        exit_code=-11,
        reason="killed by SIGSEGV",
        log="report.logs/w0.log",
        log_tail="Fatal Python error: Segmentation fault",
    ).to_json()
    before_first_round = {**crash, "target": None, "round": None, "seed": None}
    report["crashes"] = [crash, before_first_round]
    report["targets"][0]["crashes"] = [crash]
    assert errors(validator, report) == []


def test_a_target_that_never_ran_is_written_with_null_coverage_and_matches_the_schema(validator: Any, real_report: dict[str, Any]) -> None:
    report = copy.deepcopy(real_report)
    unreached = TargetStats("mamba_slots", "mamba_slots", "poolfuzz.pools:MambaSlotAllocator", possible_arcs=possible_arcs())
    unreached.sample(0.0)
    report["targets"].append(unreached.to_json())
    assert report["targets"][-1]["coverage"] is None and report["targets"][-1]["series"][0]["coverage"] is None
    assert errors(validator, report) == []


@pytest.mark.parametrize("change", ["an undocumented field", "a missing field", "a wrong type"])
def test_the_schema_rejects_a_report_that_drifts_from_it(validator: Any, real_report: dict[str, Any], change: str) -> None:
    report = copy.deepcopy(real_report)
    sample = report["targets"][0]["series"][-1]
    if change == "an undocumented field":
        sample["memory_mb"] = 12
    elif change == "a missing field":
        del report["targets"][0]["failures"][0]["replay"]
    else:
        report["series_interval_s"] = "1"
    assert errors(validator, report)


def test_every_report_field_in_the_schema_is_explained_in_the_nightly_docs(validator: Any) -> None:
    schema = validator.schema
    docs = (REPO / "docs" / "nightly.md").read_text()
    fields = set(schema["properties"]) | set(schema["$defs"]["target"]["properties"])
    fields |= set(schema["$defs"]["sample"]["properties"]) | set(schema["$defs"]["failure"]["properties"])
    missing = sorted(name for name in fields if f"`{name}`" not in docs and f"`{name}[]`" not in docs)
    assert missing == []

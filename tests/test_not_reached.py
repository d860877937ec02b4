"""A target that ran no step is *not reached*: no coverage number, and never shown as ``ok``.

A short or crowded run can end before some target gets a round.  The runner used
to report such a target as ``ok`` with 0.0% branch coverage, a measurement that
was never made; :attr:`TargetStats.coverage` is now ``None`` for it, and the text
summary says ``not reached``.
"""

from __future__ import annotations

from typing import Any

import pytest

from poolfuzz.harness.fuzz.report import NOT_REACHED, FailureRecord, TargetStats, shown_status, summary_text

POOL_MODULE = "/repo/pools/req_to_token.py"
OTHER_MODULE = "/repo/tests/fuzz_planted.py"
POSSIBLE = {POOL_MODULE: frozenset({(1, 2), (2, 3), (3, 4), (2, 5)})}


def target(
    key: str = "req_to_token", *, steps: int = 0, arcs: frozenset[tuple[str, int, int]] = frozenset(), measured: bool = True
) -> TargetStats:
    stats = TargetStats(
        key,
        "req_to_token",
        "poolfuzz.pools:ReqToTokenPool",
        steps=steps,
        examples=steps // 10,
        seconds=1.0 if steps else 0.0,
        possible_arcs=POSSIBLE if measured else None,
    )
    stats.add_arcs(arcs)
    return stats


def test_a_target_that_ran_no_step_has_no_coverage_not_zero_percent() -> None:
    assert target(steps=0).coverage is None


def test_arcs_from_building_the_pool_do_not_make_an_unrun_target_measured() -> None:
    assert target(steps=0, arcs=frozenset({(POOL_MODULE, 1, 2)})).coverage is None


def test_a_target_that_executed_no_pool_module_has_no_coverage() -> None:
    assert target(steps=50, arcs=frozenset({(OTHER_MODULE, 1, 2)})).coverage is None


def test_a_target_that_ran_is_measured_against_its_pool_modules() -> None:
    assert target(steps=50, arcs=frozenset({(POOL_MODULE, 1, 2), (POOL_MODULE, 2, 3)})).coverage == 50.0


def test_without_coverage_every_target_has_none() -> None:
    assert target(steps=50, arcs=frozenset({(POOL_MODULE, 1, 2)}), measured=False).coverage is None


def test_the_series_sample_of_an_unrun_target_has_null_coverage() -> None:
    stats = target(steps=0)
    stats.sample(5.0)
    assert stats.to_json()["series"][0]["coverage"] is None and stats.to_json()["coverage"] is None


def failed(stats: TargetStats) -> TargetStats:
    stats.failures.append(
        FailureRecord(
            target=stats.key,
            family=stats.family,
            implementation=stats.implementation,
            kind="error",
            invariant=None,
            trace=None,
            steps=None,
            message="HealthCheck: too slow",
            shrunk=True,
            round=0,
            seed=1,
            realistic=None,
            worker="w0",
            found_after_s=0.2,
        )
    )
    return stats


@pytest.mark.parametrize(
    ("stats", "shown"),
    [
        pytest.param(target(steps=0), NOT_REACHED, id="ok-without-steps"),
        pytest.param(target(steps=10), "ok", id="ok-with-steps"),
        pytest.param(failed(target(steps=0)), "failed", id="failed-before-its-first-step"),
    ],
)
def test_only_an_ok_target_without_steps_is_shown_as_not_reached(stats: TargetStats, shown: str) -> None:
    report_target = stats.to_json()
    assert report_target["status"] == ("failed" if stats.failures else "ok")  # the report's field is unchanged
    assert shown_status(report_target) == shown


def report_of(*targets: TargetStats) -> dict[str, Any]:
    rows = [t.to_json() for t in targets]
    return {
        "duration_s": 3.0,
        "interrupted": False,
        "crashes": [],
        "skipped": [],
        "coverage": None,
        "run": {"workers": 1, "seed": 7, "device": "cpu"},
        "targets": rows,
        "totals": {"examples": sum(t["examples"] for t in rows), "steps": sum(t["steps"] for t in rows), "steps_per_second": 10.0},
    }


def test_the_summary_row_of_an_unrun_target_says_not_reached() -> None:
    text = summary_text(report_of(target("req_to_token", steps=30), target("mamba_slots", steps=0)))
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert rows["mamba_slots"].endswith(NOT_REACHED)
    assert rows["req_to_token"].endswith(" ok")

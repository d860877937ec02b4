"""``poolfuzz selfcheck``: a fast subset in CI, and the report and exit status on fakes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from poolfuzz.harness.canaries import CANARIES, Canary, selfcheck
from poolfuzz.harness.canaries.selfcheck import Outcome, exit_status, family_report, report
from poolfuzz.harness.judge.families import FAMILIES

FAST = ["negative-zero-slice", "silent-double-free-rows", "decode-clear-forgets-prealloc", "clear-leaves-group-open"]


def test_the_fast_subset_is_caught_by_the_expected_invariants(capsys: pytest.CaptureFixture[str]) -> None:
    status = selfcheck.main(["--seconds-per-canary", "20", "--canary", *FAST])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"{len(FAST)}/{len(FAST)} canaries caught by their expected invariant" in out
    for name in FAST:
        assert name in out and CANARIES[name].invariant in out


def test_a_detection_reports_the_time_steps_and_shrunk_trace_length() -> None:
    outcome = selfcheck.check_canary("negative-zero-slice", seconds=20)
    assert outcome.status == "caught" and outcome.invariant == "empty-pool-guard"
    assert outcome.steps_to_detect is not None and outcome.steps_to_detect > 0
    assert outcome.seconds_to_detect is not None and outcome.seconds_to_report is not None
    assert outcome.seconds_to_detect <= outcome.seconds_to_report <= outcome.seconds_total
    assert outcome.shrunk_steps is not None and outcome.shrunk_steps <= outcome.steps_to_detect


def test_the_family_table_gives_median_and_worst_times_to_detect_and_to_report() -> None:
    rows, cache = CANARIES["negative-zero-slice"], CANARIES["double-unlock-goes-negative"]
    outcomes = [
        Outcome("a", rows, "caught", seconds_to_detect=0.5, seconds_to_report=1.0),
        Outcome("a", rows, "caught", seconds_to_detect=1.5, seconds_to_report=4.0),
        Outcome("a", rows, "caught", seconds_to_detect=0.25, seconds_to_report=0.75),
        Outcome("b", cache, "missed"),
    ]
    table = family_report(outcomes, shrunk=True).splitlines()
    assert table[2].split() == ["req_to_token", "3", "3", "0.50", "1.50", "1.00", "4.00"]
    assert table[3].split() == ["prefix_cache", "1", "0", "-", "-", "-", "-"]
    assert "report" not in family_report(outcomes, shrunk=False)


def test_a_correct_pool_posing_as_a_canary_is_reported_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CANARIES, "no-bug", Canary("req_to_token", "poolfuzz.pools:ReqToTokenPool", "none", "none", "conservation"))
    outcome = selfcheck.check_canary("no-bug", seconds=0.5)
    assert outcome.status == "missed" and outcome.invariant is None
    assert exit_status([outcome]) == 1


def test_a_canary_whose_machine_has_not_landed_is_skipped_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # req_to_token's kit under another name, its move table not written yet
    unwritten = replace(
        FAMILIES["req_to_token"], name="future", summary="not written yet", moves="poolfuzz.harness.kits.future.moves:table"
    )
    monkeypatch.setitem(FAMILIES, "future", unwritten)
    monkeypatch.setitem(CANARIES, "future-bug", Canary("future", "poolfuzz.pools:ReqToTokenPool", "b", "u", "conservation"))
    outcome = selfcheck.check_canary("future-bug", seconds=1)
    assert outcome.status == "unavailable" and "machine not available" in outcome.detail
    assert exit_status([outcome]) == 2
    assert "machine not available" in report([outcome])


def test_only_all_caught_by_the_expected_invariant_exits_zero() -> None:
    entry = CANARIES["negative-zero-slice"]
    caught = Outcome("a", entry, "caught", invariant=entry.invariant, seconds_to_detect=0.1)
    wrong = Outcome("b", entry, "wrong-invariant", invariant="conservation", seconds_to_detect=0.2)
    assert exit_status([caught]) == 0
    assert exit_status([caught, wrong]) == 1
    text = report([caught, wrong])
    assert "1/2 canaries caught by their expected invariant" in text
    assert "median time to detect 0.15 s" in text
    assert f"want {entry.invariant}" in text

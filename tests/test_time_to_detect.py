"""Time to detect, in steps: each combination canary falls to the walk within a fixed budget, deterministically.

Timings live in ``poolfuzz bench`` (and ``selfcheck --seeds``); here a
fixed seed makes the walk's step sequence fixed, so "caught within N steps" is a
property, not a measurement.  The walk reads the shadow model, never the pool,
so the production pool walked with the same seed takes exactly the same steps
up to the canary's failure: that it passes them shows the planted conditions,
not the walk, trip the invariant.
"""

from __future__ import annotations

import pytest

from poolfuzz.harness.canaries import CANARIES, selfcheck
from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.canaries.combinations import CANARIES as ROW_COMBINATIONS
from poolfuzz.harness.canaries.combinations_caches import CANARIES as CACHE_COMBINATIONS
from poolfuzz.harness.canaries.selfcheck import Outcome, SeedSummary, seeds_report, summarise
from poolfuzz.harness.fuzz.walk import WalkRun
from poolfuzz.harness.judge.families import family

COMBINATIONS = {**ROW_COMBINATIONS, **CACHE_COMBINATIONS}
STEP_BUDGET = 5_000
"""Walk steps (seed 0) within which every combination canary must be caught; the slowest needs about 3,600."""


@pytest.fixture(scope="module", params=sorted(COMBINATIONS))
def caught(request: pytest.FixtureRequest) -> tuple[str, Canary, int]:
    """A combination canary and the steps the seed-0 walk needed to catch it (by its expected invariant)."""
    name = request.param
    entry = COMBINATIONS[name]
    walk = WalkRun(entry.family, 0, spec=entry.spec, driver=entry.driver or "", shrink=False)
    finding = walk.run(max_steps=STEP_BUDGET)
    assert finding is not None, f"{name} not caught in {STEP_BUDGET} walk steps"
    assert finding.violation is not None, f"{name} crashed the harness: {finding.error!r}"
    assert finding.violation.invariant_id == entry.invariant, str(finding.violation)
    return name, entry, walk.steps


def test_each_combination_canary_is_caught_by_its_invariant_within_the_step_budget(caught: tuple[str, Canary, int]) -> None:
    assert caught[2] <= STEP_BUDGET


def test_the_production_pool_passes_the_very_steps_that_catch_the_canary(caught: tuple[str, Canary, int]) -> None:
    name, entry, steps = caught
    walk = WalkRun(entry.family, 0, spec=family(entry.family).default, shrink=False)
    assert walk.run(max_steps=steps) is None, f"the production pool fails the walk that catches {name}"


def test_there_are_at_least_eight_combination_canaries_across_six_families_and_selfcheck_has_them() -> None:
    assert len(COMBINATIONS) >= 8
    assert len({c.family for c in COMBINATIONS.values()}) >= 6
    assert set(COMBINATIONS) <= set(CANARIES)
    assert all(c.upstream.startswith("combination: ") and " x " in c.upstream for c in COMBINATIONS.values())


def test_a_seeds_run_reports_median_and_worst_per_canary(capsys: pytest.CaptureFixture[str]) -> None:
    names = ["free-rows-checks-a-set", "capacity-counts-whole-batch"]
    status = selfcheck.main(["--seeds", "2", "--seconds-per-canary", "20", "--engine", "walk", "--canary", *names])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "median s" in out and "worst s" in out
    assert "2/2 canaries caught by their expected invariant under every seed" in out
    for name in names:
        assert f"{name} (seed 1): caught" in out


def test_the_summary_gives_no_worst_time_when_a_seed_missed() -> None:
    entry = COMBINATIONS["free-rows-checks-a-set"]
    chases = [
        Outcome("c", entry, "caught", seconds_to_detect=0.5, engine="walk"),
        Outcome("c", entry, "caught", seconds_to_detect=1.5, engine="hypothesis"),
        Outcome("c", entry, "missed"),
    ]
    summary = summarise("c", chases)
    assert summary == SeedSummary("c", entry.family, 2, 3, 1.0, None, 0.5)
    text = seeds_report([summary], chases, budget=10)
    assert ">10" in text and "0/1 canaries caught by their expected invariant under every seed" in text


def test_a_violation_of_another_invariant_first_does_not_end_the_chase() -> None:
    outcome = selfcheck.check_canary("decode-clear-forgets-prealloc", seconds=20, seed=1, engine="walk", shrink=False)
    assert outcome.status == "caught" and outcome.invariant == "clear-restores"
    assert outcome.engine == "walk"

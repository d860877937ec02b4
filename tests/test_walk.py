"""The walk engine (:mod:`harness.fuzz.walk`) and the adaptive time shares (:mod:`harness.fuzz.shares`)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.fuzz.shares import FLOOR, ShareBook, pick
from harness.fuzz.walk import WALKS, WalkRun, bench_walk
from harness.judge.families import FAMILIES
from harness.traces.schema import load_trace
from harness.traces.replay import replay_trace

STEPS = 400


def walked(family: str, seed: int, steps: int = STEPS, **kwargs: object) -> WalkRun:
    walk = WalkRun(family, seed, **kwargs)  # type: ignore[arg-type]
    assert walk.run(max_steps=steps) is None, f"the production {family} pool failed its walk"
    return walk


@pytest.mark.parametrize("family", sorted(WALKS))
def test_each_corner_walk_runs_clean_on_the_production_pool(family: str) -> None:
    walk = walked(family, seed=1)
    assert walk.steps == STEPS and walk.episodes >= 1


@pytest.mark.parametrize("family", ["req_to_token", "paged_kv"])
def test_a_walk_is_the_same_sequence_for_the_same_seed(family: str) -> None:
    first, second, other = walked(family, 3), walked(family, 3), walked(family, 4)
    assert (first.episodes, first.events) == (second.episodes, second.events)
    assert (first.episodes, first.events) != (other.episodes, other.events)


def test_a_resumed_walk_goes_on_counting_from_where_it_stopped() -> None:
    walk = WalkRun("mamba_slots", 5)
    assert walk.run(max_steps=150) is None
    episodes = walk.episodes
    assert walk.run(max_steps=150) is None
    assert walk.steps == 300 and walk.episodes > episodes


@pytest.mark.parametrize("family", ["req_to_token", "mamba_slots", "hybrid_req_to_token", "token_kv", "paged_kv"])
def test_the_walk_reaches_its_corners_and_counts_them_as_events(family: str) -> None:
    walk = walked(family, seed=2, steps=1500)
    corners = {label for label in walk.events if label.startswith("corner: ")}
    assert corners, dict(walk.events)


def test_without_misuse_no_misuse_move_is_drawn() -> None:
    walk = WalkRun("req_to_token", 0, check_misuse=False)
    assert walk.moves and not any(move.misuse for move in walk.moves)
    assert walk.run(max_steps=200) is None


def test_a_family_without_a_corner_walk_falls_back_to_its_bench_walk() -> None:
    fallback = next(name for name, fam in FAMILIES.items() if name not in WALKS and fam.bench)
    walk = bench_walk(fallback)
    assert [m.name for m in walk.moves] == ["bench walk"]
    assert walk.configs(random.Random(0)) == {k: v for k, v in FAMILIES[fallback].bench_kwargs.items() if k != "device"}


def test_a_failing_walk_is_shrunk_saved_and_replays_to_the_same_invariant(tmp_path: Path) -> None:
    walk = WalkRun("req_to_token", 0, spec="harness.canaries.combinations:FreeRowsChecksASet", corpus=tmp_path)
    finding = walk.run(max_steps=5000)
    assert finding is not None and finding.violation is not None
    assert finding.violation.invariant_id == "misuse-rejected"
    assert finding.trace_path is not None and finding.trace_path.is_relative_to(tmp_path)
    assert len(finding.trace.steps) <= finding.found_steps
    saved = load_trace(finding.trace_path)
    assert saved.expect["invariant"] == "misuse-rejected"
    assert replay_trace(saved).invariant == "misuse-rejected"


# ------------------------------------------------------------------ adaptive shares
def test_an_untried_target_gets_more_time_than_one_that_has_settled() -> None:
    book = ShareBook(["settled", "new"])
    book.observe("settled", behaviours=5, seconds=1.0)
    book.observe("settled", behaviours=5, seconds=60.0)
    shares = book.shares()
    assert shares["new"] > shares["settled"] >= FLOOR / 2
    assert sum(shares.values()) == pytest.approx(1.0)


def test_a_target_still_finding_new_behaviour_outweighs_one_that_stopped() -> None:
    book = ShareBook(["finding", "stopped"])
    for second in range(1, 31):
        book.observe("finding", behaviours=second, seconds=float(second))
        book.observe("stopped", behaviours=3, seconds=float(second))
    shares = book.shares()
    assert shares["finding"] > 3 * shares["stopped"]
    assert shares["stopped"] >= FLOOR / 2  # the floor: a settled target is still revisited


def test_time_spent_elsewhere_does_not_make_a_starved_target_look_stale() -> None:
    book = ShareBook(["busy", "starved"])
    book.observe("starved", behaviours=2, seconds=1.0)
    for second in range(2, 100):
        book.observe("busy", behaviours=2, seconds=float(second))
    shares = book.shares()
    assert shares["starved"] > shares["busy"]


def test_a_retired_target_gets_nothing_and_the_rest_share_all_the_time() -> None:
    book = ShareBook(["a", "b", "c"])
    book.retire("b")
    shares = book.shares()
    assert shares["b"] == 0.0 and shares["a"] + shares["c"] == pytest.approx(1.0)
    book.retire("a")
    book.retire("c")
    assert set(book.shares().values()) == {0.0}


def test_workers_draw_targets_in_proportion_to_their_shares_and_uniformly_before_any_is_set() -> None:
    rng = random.Random(0)
    drawn = [pick([0, 1, 2], [0.1, 0.0, 0.9], rng) for _ in range(2000)]
    assert drawn.count(1) == 0 and drawn.count(2) > 6 * drawn.count(0)
    unset = [pick([0, 1], [0.0, 0.0], rng) for _ in range(400)]
    assert 100 < unset.count(0) < 300


def test_a_floor_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError):
        ShareBook(["a"], floor=1.5)

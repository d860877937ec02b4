"""The walk engine (:mod:`poolfuzz.harness.fuzz.walk`) and the adaptive time shares (:mod:`poolfuzz.harness.fuzz.shares`)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from poolfuzz.harness.fuzz.protocol import FailureFound, ProgressReport, RoundStarted, Shared, TargetRef, WorkerPlan
from poolfuzz.harness.fuzz.shares import FLOOR, WALK_SHARE_BOUNDS, EngineBook, ShareBook, pick
from poolfuzz.harness.fuzz.walk import WalkRun
from poolfuzz.harness.fuzz.worker import Worker
from poolfuzz.harness.judge.families import FAMILIES, family_unavailable, upstream_default
from poolfuzz.harness.judge.limits import check_config
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.schema import load_trace

STEPS = 400


def walked(family: str, seed: int, steps: int = STEPS, **kwargs: object) -> WalkRun:
    walk = WalkRun(family, seed, **kwargs)  # type: ignore[arg-type]
    assert walk.run(max_steps=steps) is None, f"the production {family} pool failed its walk"
    return walk


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_corner_walk_runs_clean_on_the_production_pool(family: str) -> None:
    if upstream_default(family):
        pytest.skip("its default is upstream code with known findings (docs/upstream-findings.md): tests/test_engine_family.py")
    if (reason := family_unavailable(family)) is not None:
        pytest.skip(reason)
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


def test_the_walk_draws_its_configurations_from_the_table_the_machine_draws_from() -> None:
    for name in FAMILIES:
        if family_unavailable(name) is not None:
            continue  # its default (upstream code) is not installed here: there is no walk to build
        walk = WalkRun(name, 0, shrink=False)
        config = walk.walk.configs(random.Random(0))
        check_config(name, config.to_json())  # a configuration the family's limits accept


def test_a_failing_walk_is_shrunk_saved_and_replays_to_the_same_invariant(tmp_path: Path) -> None:
    walk = WalkRun("req_to_token", 0, spec="poolfuzz.harness.canaries.combinations:FreeRowsChecksASet", corpus=tmp_path)
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


# ------------------------------------------------------------------ the worker's walk rounds
class _Pipe:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, message: object) -> None:
        self.sent.append(message)


class _Flag:
    def is_set(self) -> bool:
        return False


def walk_worker(tmp_path: Path, spec: str, *, walk_share: float | None = None) -> tuple[Worker, _Pipe, TargetRef]:
    target = TargetRef(index=0, family="req_to_token", spec=spec, key="req_to_token")
    plan = WorkerPlan(worker=0, generation=0, targets=(target,), seed=1, deadline=time.time() + 60, steps=50,
                      misuse=True, device="cpu", corpus=str(tmp_path / "corpus"), database="none",
                      log_path=str(tmp_path / "log"), round_seconds=0.2, walk_share=walk_share)
    pipe = _Pipe()
    shared = Shared(go=_Flag(), stop=_Flag(), retired=[0], shares=[1.0])
    return Worker(plan, pipe, shared, {"now": False}), pipe, target


def test_a_walk_round_reports_its_finding_with_the_shrunk_trace_saved(tmp_path: Path) -> None:
    worker, pipe, target = walk_worker(tmp_path, "poolfuzz.harness.canaries.combinations:FreeRowsChecksASet")
    worker.run_walk_round(target, 0)
    started = [m for m in pipe.sent if isinstance(m, RoundStarted)]
    failures = [m for m in pipe.sent if isinstance(m, FailureFound)]
    assert started and started[0].engine == "walk"
    assert len(failures) == 1 and failures[0].invariant == "misuse-rejected" and failures[0].shrunk
    assert failures[0].trace is not None and Path(failures[0].trace).exists()
    assert worker.retired[0] == 1


def test_a_clean_walk_round_counts_steps_episodes_and_events(tmp_path: Path) -> None:
    worker, pipe, target = walk_worker(tmp_path, "poolfuzz.pools:ReqToTokenPool")
    worker.run_walk_round(target, 0)
    progress = [m for m in pipe.sent if isinstance(m, ProgressReport)]
    assert not [m for m in pipe.sent if isinstance(m, FailureFound)]
    assert sum(m.steps for m in progress) == worker.steps > 0 and worker.examples > 0
    assert any(label.startswith("corner: ") for m in progress for label in m.events)


def test_a_fixed_walk_share_splits_each_targets_time_after_a_first_hypothesis_round(tmp_path: Path) -> None:
    worker, _, target = walk_worker(tmp_path, "poolfuzz.pools:ReqToTokenPool", walk_share=0.75)
    book = worker.engines
    assert book.next_engine(target.key) == "hypothesis"
    book.meet(target.key, "hypothesis")
    book.observe(target.key, "hypothesis", seconds=1.0, labels={"a"})
    assert book.next_engine(target.key) == "walk"
    book.meet(target.key, "walk")
    book.observe(target.key, "walk", seconds=2.0, labels={"a"})
    assert book.next_engine(target.key) == "walk"  # 2 s of walk against 1 s of hypothesis: under 3:1
    book.observe(target.key, "walk", seconds=1.0, labels=set())
    assert book.next_engine(target.key) == "hypothesis"
    never, _, target = walk_worker(tmp_path, "poolfuzz.pools:ReqToTokenPool", walk_share=0.0)
    never.engines.meet(target.key, "hypothesis")
    never.engines.observe(target.key, "hypothesis", seconds=5.0, labels=set())
    assert never.engines.next_engine(target.key) == "hypothesis"


def test_the_measured_walk_share_follows_the_engine_still_finding_new_behaviour() -> None:
    book = EngineBook(0.75)
    book.observe("t", "hypothesis", seconds=1.0, labels={"a", "b"})
    book.observe("t", "walk", seconds=3.0, labels={"a", "b"})
    # the walk found nothing new in 3 s (rate 1/(3+5)), hypothesis found both labels just now (1/5)
    assert book.walk_share("t") == pytest.approx((0.75 / 8) / (0.75 / 8 + 0.25 / 5))
    for _ in range(10):  # the walk settles while hypothesis keeps finding labels the walk never showed
        book.observe("t", "walk", seconds=3.0, labels={"a"})
        book.observe("t", "hypothesis", seconds=1.0, labels={f"new {book.records['t', 'hypothesis'].seconds}"})
    assert book.walk_share("t") < 0.5
    book.observe("t", "walk", seconds=1.0, labels={"walk only"})
    assert book.walk_share("t") > 0.5
    assert WALK_SHARE_BOUNDS[0] <= book.walk_share("t") <= WALK_SHARE_BOUNDS[1]
    assert EngineBook(0.75, fixed=True).walk_share("t") == 0.75




def test_a_worker_meets_every_target_under_both_engines_first_alternating_by_its_time_split(tmp_path: Path) -> None:
    targets = tuple(TargetRef(index=i, family="req_to_token", spec="poolfuzz.pools:ReqToTokenPool", key=f"t{i}")
                    for i in range(3))
    plan = WorkerPlan(worker=0, generation=0, targets=targets, seed=1, deadline=time.time() + 60, steps=50,
                      misuse=True, device="cpu", corpus=str(tmp_path / "corpus"), database="none",
                      log_path=str(tmp_path / "log"), round_seconds=0.2)
    worker = Worker(plan, _Pipe(), Shared(go=_Flag(), stop=_Flag(), retired=[0, 0, 0], shares=[1 / 3] * 3),
                    {"now": False})
    rounds = []
    for _ in range(6):
        target, engine = worker.next_round(list(targets))
        worker.engines.meet(target.key, engine)
        worker.engines.observe(target.key, engine, seconds=2.0 if engine == "hypothesis" else 1.0, labels=set())
        rounds.append((target.key, engine))
    assert rounds == [("t0", "hypothesis"), ("t0", "walk"), ("t1", "walk"), ("t2", "walk"),
                      ("t1", "hypothesis"), ("t2", "hypothesis")]

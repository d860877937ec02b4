"""The engine judges (harness/engines) over a second engine: a fake whose results land one step late.

Each judge is shown to fire on a fault planted in the fake (tests/engine_fake.py), so none of these tests
passes with its judge removed; the clean fake, in-flight work and deferred frees included, passes them all.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from poolfuzz.harness.engines import judges
from poolfuzz.harness.engines.interface import (
    EngineTarget,
    FreePlace,
    Holder,
    HolderKind,
    Holding,
    Observation,
    PoolState,
    Progress,
    Submission,
)
from poolfuzz.harness.judge.invariants import INVARIANTS, InvariantViolation
from tests.engine_fake import EOS, FakeEngine

STEMS = ((11, 12, 13, 14), (11, 12, 21, 22), (31, 32, 33))


def _workload(engines: list[FakeEngine], seed: int, steps: int = 60) -> list[Observation]:
    """Random arrivals (shared prefixes), steps with EOS picks and aborts; judged after every step, then drained."""
    rng = random.Random(seed)
    seen: list[Observation] = []

    def judged() -> None:
        observations = [engine.observe() for engine in engines]
        for observation in observations:
            judges.judge(observation)
        if len(observations) == 2:
            judges.agree(*observations)
        seen.append(observations[0])

    for _ in range(steps):
        move = rng.random()
        if move < 0.35:
            stem = STEMS[rng.randrange(len(STEMS))]
            prompt = stem[: rng.randint(1, len(stem))] + tuple(40 + rng.randrange(3) for _ in range(rng.randint(0, 2)))
            request = Submission(prompt, rng.randint(1, 4))
            for engine in engines:
                engine.submit(request)
        elif move < 0.4:
            pick = rng.randrange(8)
            for engine in engines:
                live = [r.rid for r in engine.waiting + engine.running]
                if live:
                    engine.abort(live[pick % len(live)])
        else:
            live = [r.rid for r in engines[0].running]
            eos = {rid: EOS for rid in live if rng.random() < 0.3}
            for engine in engines:
                engine.step(eos)
        judged()
    for _ in range(100):
        if seen[-1].at_rest:
            break
        for engine in engines:
            engine.step({r.rid: EOS for r in engine.running})
        judged()
    return seen


def caught_on_the_fake(faults: frozenset[str], *, mirror: bool = False, seeds: int = 30) -> InvariantViolation | None:
    for seed in range(seeds):
        engines = [FakeEngine(faults=faults, name="faulty")]
        if mirror:
            engines.insert(0, FakeEngine(name="clean"))
        try:
            _workload(engines, seed)
        except InvariantViolation as violation:
            return violation
    return None


def test_the_fake_engine_is_an_engine_target() -> None:
    assert isinstance(FakeEngine(), EngineTarget)


@pytest.mark.parametrize("seed", range(12))
def test_a_second_engine_with_work_in_flight_runs_clean_under_the_engine_judges(seed: int) -> None:
    seen = _workload([FakeEngine()], seed)
    assert seen[-1].at_rest, "the drain brings the fake to rest"
    assert any(o.in_flight and o.in_flight[0].reads for o in seen), "work was in flight at some observation"


def test_a_finish_that_lands_while_its_next_batch_is_in_flight_defers_the_free() -> None:
    engine = FakeEngine()
    rid = engine.submit(Submission((11, 12, 13), 4))
    engine.step({})  # schedules the prefill
    engine.step({})  # schedules a decode, then lands the prefill's first token
    engine.step({rid: EOS} if rid else {})  # schedules another decode ahead of the EOS that lands now
    observation = engine.observe()
    flight = observation.in_flight[0]
    reader = Holder(HolderKind.REQUEST, str(rid))
    assert [read.reader for read in flight.reads] == [reader], "the late decode still reads the finished request's blocks"
    assert any(h.holder == reader for h in observation.pool("KV block").holdings), "and the request still holds them"
    judges.judge(observation)
    engine.step({})  # the late decode lands: the request is released
    judges.judge(engine.observe())
    engine.step({})  # a step that finds nothing to do
    assert engine.observe().at_rest
    judges.judge(engine.observe())


@pytest.mark.parametrize(
    ("fault", "invariant"),
    [
        ("double-free", "no-double-allocation"),
        ("hands-out-a-free-block", "scheduler-conservation"),
        ("leaks-a-block", "kv-accounting"),
        ("miscounts-a-free", "checker-agreement"),
        ("keeps-a-lock", "lock-balance"),
        ("admits-nothing-when-idle", "scheduler-progress"),
        ("frees-under-in-flight", "in-flight-reuse"),
    ],
)
def test_each_judge_catches_the_fault_planted_in_the_fake_for_it(fault: str, invariant: str) -> None:
    violation = caught_on_the_fake(frozenset({fault}))
    assert violation is not None, f"{fault} went unseen"
    assert violation.invariant_id == invariant, str(violation)


def test_two_engines_whose_allocators_pick_different_blocks_disagree() -> None:
    violation = caught_on_the_fake(frozenset({"takes-from-the-tail"}), mirror=True)
    assert violation is not None and violation.invariant_id == "implementations-agree"
    assert "blocks" in violation.detail


def test_a_lock_count_below_zero_is_caught_while_the_engine_is_busy() -> None:
    violation = caught_on_the_fake(frozenset({"unlocks-twice"}))
    assert violation is not None and violation.invariant_id == "lock-balance"
    assert "negative" in violation.detail and violation.numbers["locked"] < 0


def test_the_in_flight_judge_names_the_batch_the_reader_and_where_the_block_went() -> None:
    violation = caught_on_the_fake(frozenset({"frees-under-in-flight"}))
    assert violation is not None
    assert violation.numbers["batch"].startswith("b") and "now free" in violation.detail


def _shared_pool(ref_counts: tuple[tuple[int, int], ...], free: tuple[int, ...] = (3, 4)) -> PoolState:
    """A vLLM-shaped pool: blocks 1..4, block 0 the null block; two requests share block 1 by reference."""
    a, b = Holder(HolderKind.REQUEST, "a"), Holder(HolderKind.REQUEST, "b")
    return PoolState(
        "block",
        range(1, 5),
        free=(FreePlace("free queue", free),),
        holdings=(Holding(a, (1, 2), owned=False), Holding(b, (1,), owned=False)),
        reserved=(0,),
        shared=True,
        ref_counts=ref_counts,
    )


def test_a_shared_pool_whose_reference_counts_match_its_references_passes() -> None:
    leak = judges.partition(_shared_pool(((1, 2), (2, 1), (3, 0), (4, 0))))
    assert not leak.leak


@pytest.mark.parametrize(
    ("counts", "free"),
    [
        (((1, 1), (2, 1), (3, 0), (4, 0)), (3, 4)),  # block 1 has two readers, counted once: a free would drop it
        (((1, 2), (2, 1), (3, -1), (4, 0)), (3, 4)),  # a count below zero
        (((1, 2), (2, 1), (3, 0), (4, 0)), (3,)),  # block 4 at count 0 yet off the free queue (and lost)
    ],
)
def test_a_reference_count_off_the_references_held_iscaught_on_the_fake(counts: tuple[tuple[int, int], ...], free: tuple[int, ...]) -> None:
    with pytest.raises(InvariantViolation) as caught:
        judges.partition(_shared_pool(counts, free))
    assert caught.value.invariant_id == "ref-count"


def test_a_reference_to_a_block_on_the_free_queue_iscaught_on_the_fake() -> None:
    with pytest.raises(InvariantViolation) as caught:
        judges.partition(_shared_pool(((1, 2), (2, 1), (3, 0), (4, 0)), free=(2, 3, 4)))
    assert caught.value.invariant_id == "scheduler-conservation"


def test_a_hang_report_shows_the_queue_and_the_engines_numbers() -> None:
    observation = Observation("stuck", (), Progress(("r0",), (), False, (("head_prompt", 9),)))
    with pytest.raises(InvariantViolation) as caught:
        judges.judge(observation)
    assert caught.value.invariant_id == "scheduler-progress"
    assert caught.value.numbers == {"waiting": 1, "head_prompt": 9}


def test_the_in_flight_reuse_invariant_is_in_the_catalogue_with_its_reason() -> None:
    assert "overlap" in INVARIANTS["in-flight-reuse"].guards_against


def test_the_engine_judges_import_nothing_engine_specific() -> None:
    folder = Path(__file__).resolve().parents[1] / "harness" / "engines"
    imported: set[str] = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert imported, "the scan found the imports"
    banned = ("sglang", "vllm", "torch", "poolfuzz.harness.upstream", "poolfuzz.harness.kits")
    assert not [name for name in imported if name.startswith(banned)], imported

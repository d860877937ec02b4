"""SGLang's own Scheduler behind the engine target: its methods run, both loops run clean, overlap's slot and in-flight facts."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.upstream.sglang_modules import unavailable_reason

pytestmark = pytest.mark.skipif(bool(reason := unavailable_reason("Engine")), reason=reason or "")


def _engine(loop: str, **shape: Any) -> Any:
    from poolfuzz.harness.kits.engine.driver import build_engine
    from poolfuzz.harness.kits.engine.target import SGLangEngine

    return SGLangEngine(build_engine(loop=loop, **shape))


@contextmanager
def _calls(names: set[str], keep: Callable[[FrameType], Any] = lambda frame: None) -> Iterator[list[tuple[str, str, Any]]]:
    """Every call of a function named in ``names``: (file name, function name, ``keep(frame)``)."""
    seen: list[tuple[str, str, Any]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name in names:
            seen.append((frame.f_code.co_filename, frame.f_code.co_name, keep(frame)))

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def _fuzz(engine: Any, steps: int, seed: int = 0) -> None:
    """Random arrivals, EOS samples and aborts, every step judged by both judges."""
    from poolfuzz.harness.engines.interface import Submission
    from poolfuzz.harness.kits.engine.checks import judge
    from poolfuzz.harness.upstream.engine_config import EOS

    rng = random.Random(seed)
    loop = engine.loop
    for _ in range(steps):
        if rng.random() < 0.3:
            prompt = tuple(rng.choice((11, 12, 13)) for _ in range(rng.randint(1, 20)))
            engine.submit(Submission(prompt, rng.randint(1, 20)))
        live = list(loop.running_batch.reqs)
        if live and rng.random() < 0.05:
            engine.abort(rng.choice(live).rid)
        engine.step({r.rid: EOS for r in live if rng.random() < 0.1})
        judge(loop, engine.checker)


def test_the_real_schedulers_methods_run_from_upstreams_files() -> None:
    engine = _engine("overlap", chunk=8)
    wanted = {"get_next_batch_to_run", "update_running_batch", "process_batch_result_decode", "process_batch_result_prefill", "on_idle"}
    with _calls(wanted) as seen:
        _fuzz(engine, 60)
    files = {name: {f.rsplit("/", 2)[-1] for f, n, _ in seen if n == name} for name in wanted}
    assert "scheduler.py" in files["get_next_batch_to_run"]
    assert "scheduler.py" in files["update_running_batch"]
    assert "scheduler.py" in files["on_idle"]
    assert "batch_result_processor.py" in files["process_batch_result_decode"]
    assert "batch_result_processor.py" in files["process_batch_result_prefill"]


@pytest.mark.parametrize("loop", ["overlap", "normal"])
@pytest.mark.parametrize("shape", [{}, {"page_size": 4, "tokens": 64, "chunk": 8}, {"cache": "unified-rust", "tokens": 48, "rows": 4}])
def test_both_loops_run_clean_for_hundreds_of_steps_under_the_judges(loop: str, shape: dict[str, Any]) -> None:
    engine = _engine(loop, **shape)
    _fuzz(engine, 250, seed=len(shape))
    assert engine.loop.s.forward_ct > 100


def _finish_one(loop_kind: str) -> tuple[Any, list[Any]]:
    """One request decodes, then samples EOS; the release's over-allocated span recorded; run to rest."""
    from poolfuzz.harness.engines.interface import Submission
    from poolfuzz.harness.upstream.engine_config import EOS

    engine = _engine(loop_kind)
    rid = engine.submit(Submission((11, 12, 13, 14), 16))
    for _ in range(4):
        engine.step({})
    span = lambda f: (int(f.f_locals["start_p"]), int(f.f_locals["end_p"]))
    with _calls({"_release_overallocated_kv_indices"}, span) as seen:
        engine.step({rid: EOS})
        engine.step({rid: EOS})
    for _ in range(3):
        engine.step({})
    assert engine.observe().at_rest
    return engine.loop, [s for _, _, s in seen]


def test_under_overlap_a_finishing_request_owns_the_slot_its_queued_batch_got_and_the_pools_balance() -> None:
    """Batch k allocated the request's next slot before k-1's result finished it; without speculation
    ``kv_committed_len`` moved at allocation (allocation.py:685-686), so ``release_kv_cache`` owns the slot and
    ``_release_overallocated_kv_indices`` frees an empty tail (its assert, common.py:459, holds); every page is back."""
    normal, normal_spans = _finish_one("normal")
    overlap, overlap_spans = _finish_one("overlap")
    assert normal_spans and overlap_spans
    assert all(start == end for start, end in normal_spans + overlap_spans)
    for loop in (normal, overlap):
        assert loop.allocator.available_size() + int(loop.tree_cache.evictable_size()) == loop.config.tokens


def test_the_in_flight_judge_catches_a_row_freed_while_its_batch_is_queued() -> None:
    from poolfuzz.harness.engines import judges
    from poolfuzz.harness.engines.interface import Submission

    engine = _engine("overlap")
    loop = engine.loop
    engine.submit(Submission((11, 12, 13, 14), 16))
    for _ in range(3):
        engine.step({})
    observation = engine.observe()
    reads = [read for flight in observation.in_flight for read in flight.reads if read.pool == "request row"]
    assert reads, "the queued decode batch reads its request's row"
    judges.in_flight_reuse(observation)
    req = next(r for r in loop.running_batch.reqs if r.rid == reads[0].reader.name)
    loop.req_to_token_pool.free(req)  # the planted bug: the row freed (ReqToTokenPool.free) while its batch is queued
    with pytest.raises(InvariantViolation, match="in-flight-reuse"):
        judges.in_flight_reuse(engine.observe())


def test_upstreams_busy_check_runs_after_every_iteration_with_a_batch_in_flight_and_is_judged() -> None:
    """scheduler.py:2133's ``self_check_during_busy`` after each overlap iteration; its verdict is one of the observation's
    accounts, so a pool whose sizes lie (``available_size`` one short) is reported under ``checker-agreement``."""
    from poolfuzz.harness.engines import judges
    from poolfuzz.harness.engines.interface import Submission

    engine = _engine("overlap")
    loop = engine.loop
    engine.submit(Submission((11, 12, 13, 14), 16))
    for _ in range(3):
        engine.step({})
    assert loop.in_flight() and loop.busy_check == (False, "upstream's busy check passed")
    assert any("self_check_during_busy" in account.what for account in engine.observe().accounts)
    available = loop.allocator.available_size
    loop.allocator.available_size = lambda: available() - 1
    engine.step({})
    assert loop.busy_check is not None and loop.busy_check[0], loop.busy_check
    with pytest.raises(InvariantViolation, match="checker-agreement"):
        judges.judge(engine.observe())


def _judged(engine: Any, steps: int, samples: dict[str, int] | None = None) -> None:
    from poolfuzz.harness.kits.engine.checks import judge

    for _ in range(steps):
        engine.step(samples or {})
        judge(engine.loop, engine.checker)


def test_an_arrival_runs_upstreams_handle_generate_request_and_a_too_long_prompt_leaves_at_a_one_token_prefill() -> None:
    """``_handle_generate_request`` (scheduler.py:3222-3234): a prompt of ``max_req_input_len`` tokens or more is queued
    finished with an abort, cut to one token (``set_finish_with_abort``, schedule_batch.py:2233), and its one-token prefill
    releases what it took; the pools balance after."""
    engine = _engine("overlap", tokens=32, rows=2)
    loop = engine.loop
    with _calls({"_handle_generate_request"}) as seen:
        long = loop.arrive(list(range(100, 130)), 8)
        short = loop.arrive([11, 12, 13], 4)
    assert [f.rsplit("/", 1)[-1] for f, _, _ in seen] == ["scheduler.py", "scheduler.py"]
    assert long is not None and long.to_finish is not None and list(long.origin_input_ids) == [0]
    assert short is not None and short.to_finish is None
    _judged(engine, 8)
    assert long.finished() and short.finished()
    assert engine.observe().at_rest


def test_priority_preemption_under_overlap_releases_a_running_request_whose_batch_is_queued_and_requeues_it() -> None:
    """``--enable-priority-scheduling``: a request 40 above the running ones (threshold 10) preempts one
    (``preempt_to_schedule``, schedule_policy.py:1760-1778, ``release_req``) while that request's decode batch is still
    queued; the processor skips its queued result (batch_result_processor.py:1022), the request waits again, retracted,
    and every step is judged clean."""
    engine = _engine("overlap", rows=2, tokens=48, priority_scheduling=True)
    loop = engine.loop
    for tail in (50, 51):
        loop.arrive([11, 12, 13, 14, tail], 20, priority=0)
    _judged(engine, 3)
    assert loop.in_flight() and len(loop.running_batch.reqs) == 2
    loop.arrive([31, 32, 33], 5, priority=40)
    _judged(engine, 1)
    assert [(r.rid, r.is_retracted) for r in loop.waiting_queue] == [("r0-", True)]
    _judged(engine, 40)
    assert engine.observe().at_rest


def test_the_queue_limit_refuses_an_arrival_or_evicts_a_lower_priority_one_and_a_refused_priority_never_queues() -> None:
    """``_abort_on_queued_limit`` (scheduler.py:3552-3596) with ``--max-queued-requests 1``: under priority scheduling an
    arrival below the queued request is refused, one above evicts it; ``--abort-on-priority-when-disabled`` refuses any
    request naming a priority (``_set_or_validate_priority``, :3520-3543)."""
    engine = _engine("overlap", rows=2, tokens=48, priority_scheduling=True, max_queued_requests=1)
    loop = engine.loop
    assert loop.arrive([11, 12], 5, priority=5) is not None
    assert loop.arrive([11, 13], 5, priority=1) is None
    assert loop.arrive([11, 14], 5, priority=30) is not None
    assert [r.rid for r in loop.waiting_queue] == ["r2-"]
    _judged(engine, 6)
    refusing = _engine("normal", rows=2, tokens=48, abort_on_priority_when_disabled=True).loop
    assert refusing.arrive([1, 2, 3], 4, priority=3) is None and refusing.arrive([1, 2, 3], 4) is not None


@pytest.mark.parametrize("loop_kind", ["overlap", "normal"])
def test_the_timeouts_and_abort_all_go_through_upstreams_ingest_and_abort_request_and_the_pools_balance(loop_kind: str) -> None:
    """A running request past ``SGLANG_REQ_RUNNING_TIMEOUT`` and a waiting one past ``SGLANG_REQ_WAITING_TIMEOUT`` are polled
    out by ``ingest_requests`` (scheduler.py:2202, :3598-3651) and aborted by ``abort_request``; then ``abort_all`` ends the
    rest.  Nothing is held afterwards."""
    engine = _engine(loop_kind, rows=2, tokens=48, waiting_timeout=True, running_timeout=True)
    loop = engine.loop
    for tail in (50, 51, 52):
        loop.arrive([11, 12, 13, 14, tail], 20)
    _judged(engine, 3)
    assert [r.rid for r in loop.waiting_queue] == ["r2-"]
    running = loop.running_batch.reqs[0]
    assert loop.expire(1) == running.rid  # the waiting request first, then the running ones
    assert loop.expire(0) == "r2-"
    with _calls({"_poll_timeout_aborts", "abort_request"}) as seen:
        _judged(engine, 2)
    assert {name for _, name, _ in seen} == {"_poll_timeout_aborts", "abort_request"}
    assert running.finished() and "timeout" in running.finished_reason.message and not loop.waiting_queue
    loop.arrive([31, 32, 33], 30)
    _judged(engine, 2)
    assert loop.abort_all() >= 1
    _judged(engine, 4)
    assert engine.observe().at_rest


@pytest.mark.parametrize("loop_kind", ["overlap", "normal"])
def test_an_embedding_server_caches_each_prompt_at_its_prefill_and_holds_nothing_after(loop_kind: str) -> None:
    """An embedding model (``is_generation`` False): requests arrive through ``handle_embedding_request`` asking for no
    tokens, chunked prompts included, and leave at their prefill's result (batch_result_processor.py:453-500), which
    caches the prompt (``release_kv_cache(checkpoint=True)``); nothing decodes, and the tree holds what they left."""
    engine = _engine(loop_kind, rows=2, tokens=48, embedding=True, chunk=8)
    loop = engine.loop
    with _calls({"_handle_embedding_request"}) as seen:
        reqs = [loop.arrive([11, 12, 13, 14, 50 + t] * 3, 5) for t in range(3)]
    assert len(seen) == 3 and all(r is not None and r.sampling_params.max_new_tokens == 0 for r in reqs)
    _judged(engine, 10)
    assert all(r.finished() and len(r.output_ids) == 1 for r in reqs)
    assert engine.observe().at_rest and int(loop.tree_cache.evictable_size()) > 0


def test_each_refused_request_option_queues_a_one_token_request_that_leaves_at_its_prefill() -> None:
    """A logprob or routed-experts start past the prompt and a session never opened: ``_handle_generate_request`` sets
    each finished with an abort, one token long (scheduler.py:3111, :3278, :3317), and it still takes and gives back a
    row and a slot."""
    from poolfuzz.harness.upstream.engine_scheduler import REFUSED_OPTIONS

    engine = _engine("overlap", rows=2, tokens=48)
    loop = engine.loop
    reqs = [loop.arrive([11, 12, 13], 5, option=option) for option in sorted(REFUSED_OPTIONS)]
    assert all(r is not None and r.to_finish is not None and list(r.origin_input_ids) == [0] for r in reqs)
    _judged(engine, 6)
    assert all(r.finished() and not r.kv.holds_kv for r in reqs)
    assert engine.observe().at_rest


def test_the_embedding_target_runs_drawn_shapes_as_embedding_servers_and_a_short_walk_is_judged_clean() -> None:
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_embedding_engine
    from tests.engine_walk import walk

    shape = {"cache": "unified-rust", "rows": 2, "tokens": 48, "context": 64, "chunk": 8, "sliding_window": 4, "swa_tokens": 24}
    driver = EngineDriver(build_embedding_engine, shape)
    assert driver.loop.config.embedding and not driver.loop.config.hybrid_swa
    walk(driver, 1, 60)
    driver.teardown()
    assert "iteration: prefill" in " ".join(driver.events) and "iteration: decode" not in " ".join(driver.events)


def test_an_embedding_prompt_past_max_req_input_len_is_queued_unaborted_and_blocks_the_queue_unlike_a_generate_one() -> None:
    """The untriaged finding of docs/engine.md: ``_handle_embedding_request`` queues a request ``validate_input_length``
    refuses without aborting it (scheduler.py:3751-3753; the generate path aborts it, :3251-3254).  A prompt the pool can
    never admit then holds the FCFS queue head for ever and the request behind it starves (``scheduler-progress``)."""
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_embedding_engine, build_engine

    shape = {"cache": "unified-rust", "rows": 2, "tokens": 22, "context": 64}
    steps = [("arrive", {"stem": 2, "length": 22, "tail": 0, "max_new": 1}), ("arrive", {"stem": 0, "length": 4, "tail": 1, "max_new": 1})]
    generate = EngineDriver(build_engine, shape)
    for op, args in steps:
        generate.step(op, **args)
    generate.teardown()  # the generate server aborts the long prompt at a one-token prefill and serves the other
    embedding = EngineDriver(build_embedding_engine, shape)
    for op, args in steps:
        embedding.step(op, **args)
    head = embedding.loop.waiting_queue[0]
    assert head.to_finish is None and len(head.origin_input_ids) == 22 >= embedding.loop.s.max_req_input_len
    with pytest.raises(InvariantViolation, match="scheduler-progress"):
        embedding.teardown()


def test_a_builder_that_reshapes_the_drawn_shape_has_the_driver_record_the_shape_that_runs() -> None:
    """``poolfuzz_shape``: the trace names what ran, so a finding is classified on it (the embedding server's legacy
    ``RadixCache`` shape runs, and is recorded, as ``UnifiedRadixCache``) and replays on the default target."""
    from poolfuzz.harness.kits.engine.driver import (
        EngineDriver,
        build_embedding_engine,
        build_engine_with_waiting_timeout,
        build_poolfuzz_engine,
    )

    drawn = {"cache": "radix", "pools": "both", "rows": 2, "tokens": 32, "context": 16}
    embedding = EngineDriver(build_embedding_engine, drawn)
    assert (embedding.config.cache, embedding.config.embedding, embedding.trace.config["cache"]) == ("unified-rust", True, "unified-rust")
    assert EngineDriver(build_engine_with_waiting_timeout, drawn).trace.config["waiting_timeout"] is True
    ours = EngineDriver(build_poolfuzz_engine, drawn)
    assert ours.config.pools == "poolfuzz" and len(ours.loops) == 1  # no mirror identical to the loop under test

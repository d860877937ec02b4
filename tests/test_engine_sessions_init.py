"""Sessions through the scheduler's own handlers, the init methods build_scheduler runs from the file, and a pause between
an abort of the chunked request and the iteration that would carry it out."""

from __future__ import annotations

from typing import Any

import pytest

from poolfuzz.harness.upstream.sglang_modules import unavailable_reason

pytestmark = pytest.mark.skipif(bool(reason := unavailable_reason("Engine")), reason=reason or "")

SESSION_SHAPE: dict[str, Any] = dict(cache="unified-python", page_size=1, rows=4, tokens=64, context=64, chunk=8, session_radix_cache=True)


def _driver(**shape: Any) -> Any:
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine

    return EngineDriver(build_engine, EngineTargetConfig(**shape))


def test_the_init_methods_build_the_schedulers_collaborators_from_upstreams_files() -> None:
    """``init_running_status`` builds upstream's ``SessionController`` and ``SchedulerFlushWrapper``,
    ``init_batch_result_processor`` upstream's processor, and a server started with ``--chunked-prefill-size -1`` has no
    chunked prefill (scheduler.py:1372-1373)."""
    driver = _driver(cache="unified-rust", rows=2, tokens=32, context=64)
    s = driver.loop.s
    assert type(s.session_controller).__module__ == "sglang.srt.session.session_controller"
    assert type(s.flush_wrapper).__module__ == "sglang.srt.managers.scheduler_components.flush_wrapper"
    assert type(s.batch_result_processor).__module__ == "sglang.srt.managers.scheduler_components.batch_result_processor"
    assert s.chunked_prefill_size is None and s.truncation_align_size is None
    assert s.enable_skip_finishing_decode is True  # the overlap loop's (scheduler.py:2063), not init_running_status's False


def test_a_session_request_continues_its_sessions_finished_request_and_closing_releases_the_sessions_tags() -> None:
    """A request with ``session_params`` naming an open session and its finished request is built by ``Session.create_req``
    on that request's prompt and output; a radix-native request opens its session's generation; closing both leaves the
    tree with no session tag.  Every step is judged."""
    driver = _driver(**SESSION_SHAPE)
    loop = driver.loop
    driver.step("open_session", session=0)
    driver.step("session_arrive", stem=0, length=6, tail=1, max_new=3, session=0, native=False)
    driver.step("run", iterations=8)
    first = next(iter(loop.s.session_controller.get("s0").req_nodes.values())).req
    assert first.finished() and len(first.output_ids) == 3
    driver.step("session_arrive", stem=1, length=5, tail=1, max_new=3, session=0, native=False)
    second = loop.waiting_queue[-1]
    assert list(second.origin_input_ids[: len(first.origin_input_ids)]) == list(first.origin_input_ids)
    assert len(second.origin_input_ids) == len(first.origin_input_ids) + len(first.output_ids) + 6
    driver.step("session_arrive", stem=2, length=5, tail=1, max_new=3, session=1, native=True)
    native = loop.waiting_queue[-1]
    assert native.session_generation is not None
    driver.step("run", iterations=8)
    driver.step("close_session", session=0)
    driver.step("close_session", session=1)
    assert not loop.s.session_controller.sessions
    driver.teardown()


def test_a_pause_between_a_chunked_abort_and_the_next_iteration_drops_the_marker_of_the_retracted_request() -> None:
    """``abort_request`` defers the chunked request (scheduler.py:3676-3678); the pause retracts it (:5864-5869); the next
    iteration's ``process_pending_chunked_abort`` finds it past chunked prefill, holding nothing, and drops the marker
    (:3794-3799).  The abort is not lost: the request also got ``to_finish`` as a member of the last batch (:5798-5812),
    which the retraction keeps, so it is prefilled again and leaves aborted."""
    driver = _driver(cache="unified-rust", rows=2, tokens=64, context=64, chunk=8)
    loop = driver.loop
    driver.step("arrive", stem=0, length=20, tail=1, max_new=2)
    driver.step("iterate", eos=[])
    req = loop.chunked_req
    assert req is not None
    driver.step("abort", pick=-1)
    assert loop.pending_chunked_abort is not None
    driver.step("pause", flush=False)
    driver.step("iterate", eos=[])
    assert loop.pending_chunked_abort is None and loop.chunked_req is req
    driver.step("run", iterations=8)
    assert req.finished() and type(req.finished_reason).__name__ == "FINISH_ABORT"
    driver.teardown()

"""PD disaggregation under upstream's scheduler (poolfuzz.harness.upstream.engine_disagg): a prefill server and a decode server
over SGLang's fake transfer backend, their queues driven by the real mixins, every step judged."""

from __future__ import annotations

from typing import Any

import pytest

from poolfuzz.harness.upstream.sglang_modules import unavailable_reason

pytestmark = pytest.mark.skipif(bool(reason := unavailable_reason("Engine")), reason=reason or "")


def pd_driver(mode: str, loop: str) -> Any:
    from poolfuzz.harness.kits.engine.config import EngineTargetConfig
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine

    config = EngineTargetConfig(cache="unified-python", rows=3, tokens=48, context=64, loop=loop, disaggregation=mode)
    return EngineDriver(build_engine, config)


@pytest.mark.parametrize(("mode", "loop"), [("prefill", "normal"), ("prefill", "overlap"), ("decode", "overlap")])
def test_a_pd_server_serves_holds_transfers_and_aborts_at_every_queue_stage(mode: str, loop: str) -> None:
    """Requests pass the PD queues (bootstrap and in-flight; prealloc and transfer) under the judges; transfers held by the fuzzer's
    peer; aborts of PD-queued requests and a lost peer leave nothing behind at the drain."""
    driver = pd_driver(mode, loop)
    server = driver.loop
    assert server.s.disaggregation_mode.value == mode
    for stem in range(3):
        driver.step("arrive", stem=stem, length=10, tail=2, max_new=4)
    assert len(server.pd_queued()) == 3
    driver.step("abort", pick=0)  # the first live request is PD-queued: abort_request's bootstrap / prealloc branch
    assert driver.events[-1] == "abort of a PD-queued request"
    driver.step("run", iterations=8)
    driver.step("transfer_delay", iterations=2)
    driver.step("arrive", stem=4, length=10, tail=2, max_new=4)
    for _ in range(3):
        driver.step("iterate", eos=[])
    assert server.peers.delay == 2
    driver.step("arrive", stem=5, length=10, tail=2, max_new=4)
    driver.step("iterate", eos=[])
    driver.step("peer_fail", pick=0)
    lost = driver.events[-1] == "a PD peer lost"
    driver.step("arrive", stem=6, length=10, tail=2, max_new=4)
    driver.step("iterate", eos=[])
    driver.step("abort", pick=-1)
    driver.teardown()
    assert not server.pd_queued()
    assert lost or mode == "prefill", driver.events  # a decode request waits in its prealloc queue for the step


def test_pd_shapes_refused_where_0_5_23_or_this_target_does_not_run_them() -> None:
    """A mode 0.5.23 does not have, the re-enacted loop and poolfuzz's pools (no PD queues), and HiCache with PD."""
    from poolfuzz.harness.kits.engine.config import EngineShapeError, EngineTargetConfig

    shape: dict[str, Any] = dict(cache="unified-python", rows=2, tokens=24, context=64, loop="normal", disaggregation="decode")
    for refused in ({"disaggregation": "both"}, {"loop": "reenacted"}, {"pools": "poolfuzz"}, {"hicache": "write_through"}):
        with pytest.raises(EngineShapeError):
            EngineTargetConfig(**{**shape, **refused})

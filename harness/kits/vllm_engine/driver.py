"""The ``vllm_engine`` family's driver: vLLM's v1 scheduler steps, judged after every one.

The pool under test is a :class:`~poolfuzz.harness.kits.vllm_engine.target.VllmEngine`: vLLM's own ``Scheduler`` (or
``AsyncScheduler``) over its ``KVCacheManager`` and ``BlockPool``.  The fuzzer chooses arrivals (prompts from
stems sharing prefixes, output budgets), which live requests sample EOS or a stop token when a result lands,
aborts, runs of steps and prefix-cache resets; the scheduler decides everything memory does.  After every step
the engine judges of :mod:`poolfuzz.harness.engines.judges` run over the observation, with vLLM's own structures checked
right after the partition (:func:`~poolfuzz.harness.kits.vllm_engine.observe.check_structures`).  vLLM's own asserts
raising inside a step are findings (``valid-call-accepted``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from poolfuzz.harness.engines import judges
from poolfuzz.harness.engines.driver import EngineTargetDriver
from poolfuzz.harness.engines.interface import Submission
from poolfuzz.harness.judge.config import takes_config
from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, operation
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig, VllmShapeError
from poolfuzz.harness.kits.vllm_engine.hits import check_hits
from poolfuzz.harness.kits.vllm_engine.observe import check_structures, same_free_queue
from poolfuzz.harness.kits.vllm_engine.ops import VllmEngineOps
from poolfuzz.harness.kits.vllm_engine.target import EOS, STOP, VllmEngine, build_vllm_engine

STEMS: tuple[tuple[int, ...], ...] = (
    (11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22),
    (11, 12, 13, 14, 15, 16, 31, 32, 33, 34, 35, 36),
    (41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52),
)
"""Prompt stems: the first two share six tokens (a prefix hit at block sizes up to 6), the third shares nothing."""


class VllmEngineDriver(EngineTargetDriver):
    """Arrivals, steps, aborts and cache resets on one :class:`VllmEngine`, judged after each step."""

    family = "vllm_engine"
    ops = VllmEngineOps
    config: VllmEngineConfig

    def __init__(self, factory: Callable[..., Any], config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.engine: VllmEngine = self.pool
        self.engines: list[VllmEngine] = self.targets_in_step  # with "both": ours in vLLM's BlockPool's place (ours.py)

    # ------------------------------------------------------------------ operations
    @operation
    def arrive(self, stem: int, length: int, tail: int, max_new: int) -> None:
        """A request arrives: ``length`` tokens of stem ``stem`` plus ``tail`` distinct tokens."""
        base = STEMS[stem % len(STEMS)]
        prompt = [base[i % len(base)] for i in range(max(1, length))] + [60 + (self.steps + i) % 30 for i in range(tail)]
        admitted = [engine.submit(Submission(tuple(prompt), max(1, max_new))) for engine in self.engines]
        if admitted[0] is None:
            self.event("a request refused at admission (longer than max_model_len)")

    @operation
    def iterate(self, eos: list[int], stop: list[int]) -> str:
        """One engine step; the live requests at positions ``eos`` (``stop``) sample EOS (the stop token) if a result of
        theirs lands now."""
        live = self.engine.live()
        samples = {live[i]: STOP for i in stop if i < len(live)}
        samples.update({live[i]: EOS for i in eos if i < len(live)})
        return self._step(samples)

    @operation
    def speculate(self, drafts: int, accepted: int, eos: list[int]) -> str:
        """One step with speculation: each landing request accepts ``accepted`` of its scheduled drafts (at most those
        scheduled) and, synchronous, proposes ``drafts`` next (EAGLE always K); positions ``eos`` then sample EOS."""
        live = self.engine.live()
        return self._step({live[i]: EOS for i in eos if i < len(live)}, drafts, accepted)

    @operation
    def run(self, iterations: int) -> None:
        """``iterations`` steps with plain tokens: requests decode toward their budgets, preempting when short."""
        for _ in range(iterations):
            self._step({})
            self.audit_now()

    @operation
    def abort(self, pick: int) -> Any:
        """Abort a queued or running request (``finish_requests(..., FINISHED_ABORTED)``)."""
        live = self.engine.live()
        if not live:
            return SKIPPED
        wheres = [engine.abort(live[pick % len(live)]) for engine in self.engines]
        self.event(f"abort of a {wheres[0]} request")
        return None

    @operation
    def reset_cache(self) -> None:
        """``reset_prefix_cache()``: refused (False) unless no block but the null one is in use (block_pool.py:881-888)."""
        done = [self._upstream(engine.reset_prefix_cache) for engine in self.engines]
        self.event(f"prefix cache reset {'done' if done[0] else 'refused'}")

    def _step(self, samples: dict[str, int], drafts: int | None = None, accepted: int | None = None) -> str:
        reports = [self._upstream(partial(engine.step, samples, drafts, accepted)) for engine in self.engines]
        report = reports[0]
        preempted = self.engine.scheduler.reset_preempted_req_ids
        if preempted:
            self.event("a request preempted")
        self.event(f"step: {report.kind}")
        return str(report.kind)

    def _upstream(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except InvariantViolation:
            raise
        except Exception as exc:  # vLLM's own asserts and errors inside its scheduler: a finding
            raise InvariantViolation(
                "valid-call-accepted", f"vLLM's scheduler raised {type(exc).__name__}: {exc}", step=self.engine.steps
            ) from exc

    # ------------------------------------------------------------------ judging
    def observe(self) -> Hashable:
        scheduler = self.engine.scheduler
        tables = tuple(sorted((rid, r.num_computed_tokens, int(r.status)) for rid, r in scheduler.requests.items()))
        return tables, scheduler.kv_cache_manager.block_pool.get_num_free_blocks()

    def audit(self) -> None:
        """The prefix hits admitted since the last audit (``prefix-hit-sound``), then the engine judges over each
        engine; with ``pools="both"`` the two then agree on what a user sees."""
        observations = []
        for engine in self.engines:
            hits, engine.hits = engine.hits, []
            check_hits(hits)  # judged as of the step that admitted them, before what later steps made of the state
            if hits and engine is self.engine:
                self.event("a prefix hit judged (prefix-hit-sound)")
            observation = engine.observe()
            judges.judge(observation, engine_checks=partial(check_structures, engine, observation))
            observations.append(observation)
        if len(observations) == 2:
            judges.agree(*observations)
            same_free_queue(*self.engines)

    def teardown(self) -> None:
        """Drain: every live request samples EOS at each step until nothing is held or in flight, judged each step;
        then the at-rest checks (``assert_scheduler_empty``'s conditions) run on the idle engine."""
        bound = 4 * len(self.engine.scheduler.requests) + 3 * self.config.max_model_len + 8
        for _ in range(bound):
            if all(not engine.scheduler.requests and not engine.flights for engine in self.engines):
                break
            self._step(dict.fromkeys(self.engine.live(), EOS))
            self.audit_now()
        else:
            raise InvariantViolation("scheduler-progress", "the engine did not drain with EOS at every step", steps=bound)
        self._step({})  # an idle step: the observation is at rest
        self.audit_now()
        super().teardown()


def beside_our_pool(config: VllmEngineConfig) -> VllmEngineConfig:
    """``config`` over both pools where the shape allows them (Mamba align mode and EAGLE with prefix caching do not:
    :func:`~poolfuzz.harness.kits.vllm_engine.config.group_problems`); otherwise as drawn."""
    try:
        return config.replaced(pools="both")
    except VllmShapeError:
        return config


@takes_config(VllmEngineConfig)
def build_vllm_engine_beside_our_pool(**shape: Any) -> VllmEngine:
    """vLLM's scheduler over its ``BlockPool`` and, in step, over ``poolfuzz.pools.block_pool`` in every drawn shape that
    allows it (``--target vllm_engine=poolfuzz.harness.kits.vllm_engine.driver:build_vllm_engine_beside_our_pool``):
    the default target runs a third of its shapes so.  The shapes our pool cannot take (Mamba align mode, EAGLE with
    prefix caching: :func:`~poolfuzz.harness.kits.vllm_engine.config.group_problems`) run over vLLM's alone; their
    examples say ``pools upstream``."""
    return build_vllm_engine(**shape)


build_vllm_engine_beside_our_pool.poolfuzz_contract = build_vllm_engine.poolfuzz_contract  # type: ignore[attr-defined]
build_vllm_engine_beside_our_pool.poolfuzz_shape = beside_our_pool  # type: ignore[attr-defined]

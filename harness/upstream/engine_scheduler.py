"""SGLang 0.5.23's scheduler loops run from upstream's ``Scheduler`` methods: ``event_loop_normal`` and ``event_loop_overlap``.

:class:`SchedulerLoop` keeps what :class:`~poolfuzz.harness.upstream.engine.EngineLoop` builds (the pools, the tree cache, the
server shape, arrivals as ``handle_generate_request`` refuses and clips them) and hands every iteration to a real
``Scheduler`` (:func:`~poolfuzz.harness.upstream.sglang_scheduler.build_scheduler`).  Both loops are ``while True`` bodies
(scheduler.py:2026-2058, :2061-2134) that :meth:`SchedulerLoop._iterate` runs one iteration at a time, statement by
statement, each statement a call of upstream's method but these, re-enacted with the reason:

* ``ingest_requests`` (:2033, :2075): requests come from the fuzzer, through ``_add_request_to_queue`` (:3480);
* ``run_batch`` (:2048, :2109): the model, the only fake (:meth:`_run_batch`);
* ``_apply_war_barrier`` (:2111): a CUDA stream barrier, off unless ``SGLANG_ENABLE_WAR_BARRIER`` on CUDA (:2007-2023);
* ``launch_batch_sample_if_needed`` (:2128): returns at once without a delayed sampler (:5049), which the fake never sets;
* ``self_check_during_busy`` (:2057, :2133): off by default (``SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY``); it runs
  here after every iteration, as that knob runs it, and its verdict is kept (:attr:`SchedulerLoop.busy_check`) for the
  judges instead of its ``assert`` stopping the loop (:mod:`poolfuzz.harness.kits.engine.observe`).

Under overlap the result of batch *k* is queued (``result_queue``, with ``batch.copy()``) and processed in the next
iteration, after batch *k+1* was scheduled and allocated.  The token a request samples is chosen when its result
is processed, from the samples of the step that processes it; on an EAGLE server so is its verify's accept length
(:mod:`poolfuzz.harness.upstream.engine_spec`).
"""

from __future__ import annotations

import contextlib
import os
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import torch

from poolfuzz.harness.kits.engine.config import EngineTargetConfig
from poolfuzz.harness.upstream.engine import EngineLoop, StepFacts
from poolfuzz.harness.upstream.engine_config import EOS
from poolfuzz.harness.upstream.engine_disagg import (
    CLOCK,
    DisaggModelConfig,
    decode_iteration,
    prefill_iteration,
    published_disaggregation,
    queued,
)
from poolfuzz.harness.upstream.engine_hicache import clock_of
from poolfuzz.harness.upstream.engine_requests import ServerRequests
from poolfuzz.harness.upstream.engine_spec import (
    default_accepted_drafts,
    load_speculation,
    published_speculation,
    spec_rows,
    speculating,
    verify_result,
)
from poolfuzz.harness.upstream.sglang_modules import EngineModules, engine_call
from poolfuzz.harness.upstream.sglang_runtime import RUNTIME
from poolfuzz.harness.upstream.sglang_scheduler import ServerModelConfig, build_scheduler, load_scheduler
from poolfuzz.harness.upstream.sglang_scheduler_stand_ins import SessionParams, TokenizedEmbeddingReqInput, TokenizedGenerateReqInput

WAITING_TIMEOUT = "SGLANG_REQ_WAITING_TIMEOUT"
"""environ.py:685 (seconds, default -1: off)."""
RUNNING_TIMEOUT = "SGLANG_REQ_RUNNING_TIMEOUT"
"""environ.py:686 (seconds, default -1: off)."""

REFUSED_OPTIONS: dict[str, Callable[[int], dict[str, Any]]] = {
    # return_logprob with logprob_start_len past the prompt (scheduler.py:3275-3280)
    "logprob past the prompt": lambda n: {"return_logprob": True, "logprob_start_len": n + 1},
    # return_routed_experts with routed_experts_start_len past the prompt (:3300-3319)
    "routed experts past the prompt": lambda n: {"return_routed_experts": True, "routed_experts_start_len": n + 1},
    # a session the server never opened (:3093-3114)
    "unknown session": lambda n: {"session_params": SessionParams(id="never-opened")},
}
"""Request options ``_handle_generate_request`` refuses by queueing the request finished with an abort (one token long):
the option's fields for a prompt of ``n`` tokens, as the tokenizer manager would pass them on."""

DEFAULT_TOKEN = 7
"""What a request samples when the fuzzer names no token for it: a plain token, never EOS."""


class _OnScheduler:
    """An :class:`EngineLoop` attribute that lives on the scheduler (``waiting_queue``, ``running_batch``, ...).

    ``EngineLoop.__init__`` assigns each before the scheduler exists; those values are dropped, the scheduler
    starting with its own (:func:`~poolfuzz.harness.upstream.sglang_scheduler.attributes_for`)."""

    def __init__(self, upstream_name: str | None = None) -> None:
        self.upstream_name = upstream_name

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.upstream_name or name

    def __get__(self, loop: Any, owner: type | None = None) -> Any:
        return getattr(loop.s, self.name)

    def __set__(self, loop: Any, value: Any) -> None:
        if "s" in loop.__dict__:
            setattr(loop.s, self.name, value)


class DisaggServerModelConfig(DisaggModelConfig, ServerModelConfig):
    """A PD server's model config: the scheduler's (EOS set) and the HF fields its PD queues read."""


class SchedulerLoop(ServerRequests, EngineLoop):
    """One server whose iterations are upstream's ``Scheduler`` methods (``overlap`` picks the loop); the requests it
    takes besides arrivals are :class:`~poolfuzz.harness.upstream.engine_requests.ServerRequests`'."""

    drives_hicache = True  # get_next_batch_to_run polls the transfers first (_process_hicache_events, scheduler.py:3898)
    rid_format = "r{}-"
    """``abort_request`` matches by prefix (``req.rid.startswith(recv_req.rid)``, scheduler.py:5690): ``r1-`` is no
    prefix of ``r10-``."""
    waiting_queue = _OnScheduler()
    running_batch = _OnScheduler()
    last_batch = _OnScheduler()
    chunked_req = _OnScheduler()
    pending_chunked_abort = _OnScheduler("_pending_chunked_abort_req")

    @engine_call
    def __init__(self, config: EngineTargetConfig, modules: EngineModules | None = None, *, overlap: bool = True) -> None:
        super().__init__(config, modules)
        self.overlap = overlap
        self.model_config = ServerModelConfig() if config.disaggregation is None else DisaggServerModelConfig()
        self.peers = CLOCK
        """PD shapes: when the fake backend's transfers conclude (:class:`~poolfuzz.harness.upstream.engine_disagg.PeerClock`)."""
        CLOCK.delay = 0
        CLOCK.held.clear()
        self.accepted: dict[str, int] = {}
        """Speculative shapes: the drafts each request's next verify accepts, as the fuzzer chose them for this step
        (:func:`~poolfuzz.harness.upstream.engine_spec.default_accepted_drafts` for a request it did not name)."""
        self.verifies = 0
        """Speculative shapes: the verify results the loop has processed (tests read it)."""
        if config.speculative_num_steps:
            self.spec_algorithm = load_speculation()
            self.req_to_token_pool, self.tree_cache = spec_rows(self)
        self.scheduler_modules = load_scheduler()
        self.s = build_scheduler(self, self.scheduler_modules, overlap=overlap)
        self.transfers = clock_of(self.tree_cache)
        """HiCache shapes: when the tree's device-to-host copies complete (:class:`~poolfuzz.harness.upstream.engine_hicache.TransferClock`)."""
        self.landed: tuple[str, ...] = ()
        """The requests whose results the last iteration processed."""
        self.scheduled: tuple[str, ...] = ()
        """The requests of the batch the last iteration launched."""
        self.busy_check: tuple[bool, str] | None = None
        """Upstream's ``self_check_during_busy`` at the end of the last iteration (scheduler.py:2057, :2133): (leak, its
        words), or ``None`` where it did not check (no last batch) or memory changed since (an abort, a pause)."""

    @engine_call
    def attach_checker(self, checker: Any) -> None:
        """Upstream's checker and pool observer, for ``on_idle``'s leak check (scheduler.py:5284-5309), built by the
        scheduler's own ``init_pool_stats_observer`` and ``init_invariant_checker`` (:2507-2540, as ``__init__`` calls them)
        from the attributes :func:`~poolfuzz.harness.upstream.sglang_scheduler.attributes_for` set; the judges' checker
        then reads the same two objects the scheduler's ``on_idle`` and busy check use."""
        s = self.s
        s.init_pool_stats_observer()
        s.init_invariant_checker()
        checker.observer = s.pool_stats_observer
        checker.checker = s.invariant_checker

    # ------------------------------------------------------------------ requests
    @engine_call
    @speculating
    def arrive(
        self, prompt: list[int], max_new_tokens: int, priority: int | None = None, option: str | None = None, session: str | None = None
    ) -> Any:
        """A tokenized request reaches upstream's ``handle_generate_request`` (scheduler.py:2943), as ``process_input_requests``
        dispatches it (:2224-2260): the request the scheduler built, or ``None`` where it never entered the waiting queue
        (refused at the door: the queue limit, a priority the server refuses).

        Upstream decides the rest: ``init_req_max_new_tokens`` clips the budget (:2693-2740), a prompt too long
        (``validate_input_length``, :3224-3234) or past the KV budget (:2730) is queued *finished with an abort*, one token
        long, and leaves at its one-token prefill; ``_add_request_to_queue`` (:3480) applies the priority and queue checks.
        ``option`` names one of :data:`REFUSED_OPTIONS`, a request option the scheduler refuses the same way; ``session`` the
        session fields a client sends (:meth:`session_fields`)."""
        sb = self.m.schedule_batch
        embedding = self.config.embedding
        params = sb.SamplingParams(max_new_tokens=0 if embedding else max_new_tokens)  # io_struct.py:1366 for an embedding
        params.normalize(None)  # as the tokenizer manager does before the request reaches the scheduler
        rid = self.rid_format.format(next(self.rids))
        ids = array("q", prompt)
        if embedding:
            self.s.handle_embedding_request(TokenizedEmbeddingReqInput(rid=rid, input_ids=ids, sampling_params=params, priority=priority))
        else:
            extra = REFUSED_OPTIONS[option](len(prompt)) if option is not None else {}
            if session is not None:
                extra.update(self.session_fields(session))
            self.s.handle_generate_request(
                TokenizedGenerateReqInput(rid=rid, input_ids=ids, sampling_params=params, priority=priority, **extra)
            )
        queue = self.s.waiting_queue  # a queued arrival is appended (:3493), whatever the queue limit evicted
        if self.config.disaggregation is not None:  # a PD server queues it for bootstrap or preallocation (:3496-3509)
            queue = queued(self)
        return queue[-1] if queue and queue[-1].rid == rid else None

    def _record(self, *, advanced: bool) -> None:
        """The iteration's facts; on a PD server its PD-queued requests wait too (a request stuck there is a hang)."""
        super()._record(advanced=advanced)
        pd = tuple(str(r.rid) for r in self.pd_queued() if not r.finished())
        if pd:
            self.last_step = self.last_step._replace(waiting=self.last_step.waiting + pd)

    def pd_queued(self) -> list[Any]:
        """PD shapes: the requests in a PD queue (bootstrap, in-flight; prealloc, transfer, retracted)."""
        return queued(self) if self.config.disaggregation is not None else []

    # ------------------------------------------------------------------ iterations
    @contextlib.contextmanager
    def _server_environment(self) -> Iterator[None]:
        """The knobs of :meth:`EngineLoop._server_environment`, the waiting and running timeouts where the shape has them
        (one second: a stamp of :data:`EXPIRED` is past it, an unstamped request never is), and ``pp_max_micro_batch_size`` as
        the scheduler's init overrides it (``max_running_requests // pp_size``, scheduler.py:1237-1243) in the process-wide
        runtime context."""
        parallel = RUNTIME.bags["parallel"]
        saved = parallel.__dict__.get("pp_max_micro_batch_size")
        parallel.__dict__["pp_max_micro_batch_size"] = self.config.rows
        knobs = {
            name: "1" for name, on in ((WAITING_TIMEOUT, self.config.waiting_timeout), (RUNNING_TIMEOUT, self.config.running_timeout)) if on
        }
        saved_knobs = {name: os.environ.get(name) for name in knobs}
        os.environ.update(knobs)
        try:
            with super()._server_environment(), published_speculation(self.config), published_disaggregation(self.config.disaggregation):
                yield
        finally:
            parallel.__dict__["pp_max_micro_batch_size"] = saved
            for name, value in saved_knobs.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def _ingest(self) -> None:
        """``ingest_requests`` (scheduler.py:2033, :2075): the timeout aborts ``_poll_timeout_aborts`` emits, dispatched by
        ``process_input_requests`` to ``abort_request``.  Run only with a timeout on: without one the poll emits
        nothing and no request arrives through the receiver (arrivals come through :meth:`arrive`), so the call would move
        no memory and only cost the common step."""
        if self.config.waiting_timeout or self.config.running_timeout:
            self.s.ingest_requests()

    def _waiting_timeout(self) -> bool:
        """A stalled server with the waiting timeout on: its queue head has waited past any timeout.  It is stamped so, and
        the ingest the next iteration begins with runs now (nothing the scheduler does comes between): upstream's poll
        aborts it (:meth:`_ingest`), a step that advanced."""
        if not (self.stalled and self.config.waiting_timeout):
            return False
        self.expire(0)
        self._ingest()
        self.timed_out += 1
        self._record(advanced=True)
        return True

    def _iterate(self, next_tokens: dict[str, int]) -> str:
        self.iterations += 1
        active_before = set(self._active_rids())
        # an iteration boundary for HiCache's copies; one still in flight means the server is not stalled
        transferring = self.transfers.tick() if self.transfers is not None else False
        disaggregation = self.config.disaggregation
        if disaggregation is not None:  # a PD transfer held by the fuzzer's peer is progress too
            transferring = self.peers.tick()
        self._ingest()
        self.tokens = next_tokens
        self.landed = ()
        self.scheduled = ()
        if disaggregation == "prefill":
            batch = prefill_iteration(self)
        elif disaggregation == "decode":
            batch = decode_iteration(self)
        else:
            batch = self._overlap_iteration() if self.overlap else self._normal_iteration()
        self.busy_check = self._self_check_during_busy()
        kind = "idle" if batch is None else ("prefill" if batch.forward_mode.is_extend() else "decode")
        if disaggregation is not None:  # a transfer the peer holds past this iteration: the server waits on it
            transferring = transferring or self.peers.busy()
        # Requests that left the running batch (or the chunk) without a batch forming advanced it too (EngineLoop._active_rids:
        # update_running_batch's retract_decode re-queues or aborts them, scheduler.py:4469-4540, schedule_batch.py:3451-3539).
        left = bool(active_before - set(self._active_rids()))
        advanced = batch is not None or bool(self.landed) or transferring or left
        if batch is None and self.landed:
            kind = "land"
        self._record(advanced=advanced)
        return "timeout" if self._waiting_timeout() else kind

    def _self_check_during_busy(self) -> tuple[bool, str] | None:
        """``invariant_checker.self_check_during_busy()`` (invariant_checker.py:313-348), where the knob runs it: the full
        (and SWA) pool's leak equation with the owners' uncached tokens while the last batch's result may be queued.
        Its ``assert`` is its verdict: (leak, words); ``None`` without a last batch (it returns at once, :314)."""
        checker = self.s.invariant_checker
        if checker is None or self.s.last_batch is None:
            return None
        if self.pd_kv_holders():
            # Its owners are the batches' and the chunked request (_requests_owning_rows, invariant_checker.py:274-294); a PD
            # server's queued requests holding KV (prefill in flight, decode preallocated, in transfer or transferred and
            # waiting) are not among them, so on a PD server the knob's check reports those pages as a leak.  Not judged
            # then (docs/engine.md).
            return None
        try:
            checker.self_check_during_busy()
        except AssertionError as leak:
            return True, str(leak)
        return False, "upstream's busy check passed"

    def _next_batch_plan(self) -> Any:
        """scheduler.py:2039-2044 (:2082-2088): ``get_next_batch_to_run``, its plan's running batch kept."""
        s = self.s
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        s.cur_batch_for_debug = batch
        return batch

    def _normal_iteration(self) -> Any:
        """One pass of ``event_loop_normal``'s body (scheduler.py:2039-2058)."""
        s = self.s
        batch = self._next_batch_plan()
        if batch:
            result = self._run_batch(batch)
            self._process(batch, result)
        else:
            s._sched_idled = True
            s.on_idle()
        s.last_batch = batch
        return batch

    def _overlap_iteration(self) -> Any:
        """One pass of ``event_loop_overlap``'s body (scheduler.py:2082-2134)."""
        s = self.s
        batch = self._next_batch_plan()
        disable_overlap_for_batch = s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch)
        if disable_overlap_for_batch:
            self._pop_and_process()
        if batch:
            result = self._run_batch(batch)
            s.result_queue.append((batch.copy(), result))  # :2112
        else:
            s._sched_idled = True
        if s.last_batch:
            if not disable_overlap_for_batch:
                self._pop_and_process()
        elif batch is None:
            s.on_idle()  # :2121-2123
        s.last_batch = batch
        return batch

    def _pop_and_process(self) -> None:
        """``pop_and_process`` (scheduler.py:2068-2071): the oldest queued result, its tokens chosen now."""
        batch, result = self.s.result_queue.popleft()
        self._process(batch, result)

    def _process(self, batch: Any, result: Any) -> None:
        if self.config.speculative_num_steps and batch.forward_mode.is_decode():
            result = self._verify(batch, frozenset(rid for rid, token in self.tokens.items() if token == EOS))
            self.verifies += 1
        elif not self.config.embedding:
            result.next_token_ids = torch.tensor([self.tokens.get(r.rid, DEFAULT_TOKEN) for r in batch.reqs], dtype=torch.int64)
        self.s.process_batch_result(batch, result)
        self.landed += tuple(str(r.rid) for r in batch.reqs)

    def _run_batch(self, batch: Any) -> Any:
        """The model (``run_batch``, scheduler.py:4614): the memory-neutral counters it moves (:4621, :4628) and a
        real ``GenerationBatchResult`` (managers/utils.py:56); its tokens are set when it is processed."""
        s = self.s
        s.forward_ct += 1
        batch.forward_iter = s.forward_ct
        batch.launch_ts = float(s.forward_ct)  # :4622: a logical clock (step counters only, :5131)
        batch.after_idle_gap = s._sched_idled  # :4626
        s._sched_idled = False
        self.scheduled = tuple(str(r.rid) for r in batch.reqs)
        utils = self.scheduler_modules.manager_utils
        if self.config.speculative_num_steps and batch.forward_mode.is_decode():
            # Complete at launch, as a worker's is: pause_generation processes a queued result itself (scheduler.py:5839-5841).
            return self._verify(batch, frozenset())
        if self.config.embedding:  # an embedding model's forward pools one vector per request (managers/utils.py:385)
            return utils.EmbeddingBatchResult(embeddings=torch.zeros(len(batch.reqs), 1))
        result = utils.GenerationBatchResult()
        result.next_token_ids = torch.zeros(len(batch.reqs), dtype=torch.int64)
        return result

    def _verify(self, batch: Any, eos: frozenset[str]) -> Any:
        """The fake model's verify of a speculative decode batch (:func:`verify_result`): the accept lengths of this step
        (:attr:`accepted`), a default for a request it does not name, and EOS for ``eos``."""
        steps = self.config.speculative_num_steps
        accepted = {str(r.rid): self.accepted.get(r.rid, default_accepted_drafts(r.rid, self.iterations, steps)) for r in batch.reqs}
        return verify_result(self.scheduler_modules.manager_utils, batch, steps, accepted, eos, DEFAULT_TOKEN)

    # ------------------------------------------------------------------ views
    def in_flight(self) -> list[Any]:
        """The queued batches (``result_queue``'s ``batch.copy()`` snapshots) whose results have not landed."""
        return [batch for batch, _ in self.s.result_queue] if self.overlap else []

    def is_idle(self) -> bool:
        return super().is_idle() and not self.in_flight() and not self.hicache_in_flight() and not self.pd_queued()

    def owners(self) -> list[Any]:
        """The row owners the checker finds, and on a PD server every PD-queued request holding a row (a prefill request
        whose transfer is in flight; a decode request preallocated, in transfer or retracted with its KV)."""
        owners = super().owners()
        seen = {id(r) for r in owners}
        return owners + [r for r in self.pd_kv_holders() if id(r) not in seen]

    def pd_kv_holders(self) -> list[Any]:
        """PD shapes: the requests outside the batches that hold a row and KV: PD-queued ones (a prefill request whose
        transfer is in flight; a decode request preallocated, in transfer or retracted), and on a decode server the
        transferred requests in the waiting queue, whose KV is allocated (abort_request, scheduler.py:5704)."""
        if self.config.disaggregation is None:
            return []
        return [r for r in [*self.pd_queued(), *self.waiting_queue] if r.kv.holds_kv]

    @property
    def facts(self) -> StepFacts:
        return self.last_step

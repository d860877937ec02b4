"""SGLang 0.5.23's scheduler memory loop, run from upstream's own functions on upstream's own pools.

:class:`EngineLoop` holds what ``Scheduler`` holds for memory (``waiting_queue``,
``running_batch``, ``last_batch``, ``chunked_req``, the pools and the tree cache) and performs an
iteration as ``event_loop_normal`` does (``managers/scheduler.py:2026``), but only the memory
half: there is no model, so a batch's "result" is the next token each request sampled, which the
caller chooses (a plain token, or the request's EOS token to finish it).  Every memory call is a
call upstream's scheduler makes, in its order, with the line that makes it:

* **prefill** -- ``get_next_batch_to_run`` (scheduler.py:3894): stash the chunked request
  (``stash_chunked_request`` -> ``checkpoint_kv_cache``, :3911-3919), merge the last extend batch
  into the running batch (:3943-3957), ``filter_batch`` (:3960), then ``get_new_batch_prefill``:
  a real ``PrefillAdder`` (schedule_policy.py:607) over ``init_next_round_input(tree_cache)`` and
  ``add_one_req`` (scheduler.py:4157-4300), ``ScheduleBatch.init_new`` and
  ``prepare_for_extend`` (:4335-4357), which calls ``alloc_for_extend``;
* **decode** -- ``update_running_batch`` (scheduler.py:4459): ``check_decode_mem``, on failure
  ``retract_decode`` and re-queue, then ``prepare_for_decode`` (``alloc_for_decode``);
* **results** -- ``process_batch_result_prefill`` (batch_result_processor.py:258) and
  ``process_batch_result_decode`` (:998): append the token, ``update_finish_state``, then
  ``release_kv_cache(checkpoint=True)`` for a finished request, ``checkpoint_kv_cache`` for an
  unfinished prefill, inside ``free_group_begin/end``;
* **abort** -- a running request gets ``to_finish`` and is released on its next result
  (scheduler.py abort path); a queued one is dropped (it holds nothing); the chunked request is
  released with ``checkpoint=False`` (``process_pending_chunked_abort``, :3778-3819);
* **idle** -- ``on_idle`` (scheduler.py:5241): when nothing is queued or running.

What is not here: overlap scheduling, speculative decoding, mixed chunks, HiCache, sessions,
disaggregation, LoRA, grammar (each a configuration 0.5.23 runs, none reached by this loop).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from array import array
from collections.abc import Iterator
from typing import Any, NamedTuple

from poolfuzz.harness.kits.engine.config import POOLS, EngineTargetConfig
from poolfuzz.harness.upstream.engine_build import ModelConfigStandIn, NoSpeculation, build_pools, tree_cache
from poolfuzz.harness.upstream.engine_config import EOS
from poolfuzz.harness.upstream.sglang_modules import EngineModules, engine_call, load_engine


class StepFacts(NamedTuple):
    """What one iteration left (:class:`poolfuzz.harness.engines.interface.Progress`): who waits, who runs or is chunked,
    and whether it advanced (formed a batch, or the waiting timeout aborted the queue head)."""

    waiting: tuple[str, ...]
    active: tuple[str, ...]
    advanced: bool


class EngineLoop:
    """The scheduler's memory state and one iteration of its loop (see the module docstring)."""

    rid_format = "r{}"  # a request's id from its arrival number
    drives_hicache = False
    """Whether the loop polls HiCache's transfers (``check_hicache_events``, scheduler.py:3882-3889): upstream's loops do;
    this re-enacted one, written before HiCache was driven, does not, so a HiCache shape runs here without the host tier
    (a canary built on this loop from a drawn HiCache shape), where it would hold its write-through locks for ever."""

    @engine_call
    def __init__(self, config: EngineTargetConfig, modules: EngineModules | None = None) -> None:
        if config.pools not in POOLS:
            raise ValueError(f"one loop runs over {POOLS} pools, not {config.pools!r} (the driver runs both as two loops)")
        if config.hicache is not None and not self.drives_hicache:
            config = config.replaced(hicache=None)
        self.config = config
        self.m = modules or load_engine()
        self.rids = itertools.count()
        self.req_to_token_pool, self.allocator = build_pools(self.m, config)
        self.tree_cache = tree_cache(self.m, config, self.req_to_token_pool, self.allocator)
        self.model_config = ModelConfigStandIn()
        self.spec_algorithm = NoSpeculation()
        self.waiting_queue: list[Any] = []
        self.running_batch = self.m.schedule_batch.ScheduleBatch(reqs=[], batch_is_full=False)
        self.new_token_ratio = config.new_token_ratio
        """``new_token_ratio_tracker.current`` (new_token_ratio_tracker.py:14-35): a retraction sets it, each decode
        step without one decays it toward ``init * 0.14`` over 600 steps (the environment's defaults)."""
        self._ratio_floor = config.new_token_ratio * 0.14
        self._ratio_decay = (config.new_token_ratio - self._ratio_floor) / 600
        self.last_batch: Any = None
        self.chunked_req: Any = None
        self.to_abort: set[str] = set()
        self.pending_chunked_abort: Any = None
        """``_pending_chunked_abort_req``: the chunked request an abort named, released at the next iteration's top."""
        self.iterations = 0
        self.last_step = StepFacts((), (), False)  # what the last iteration left
        self.timed_out = 0
        """Queue heads aborted by the waiting timeout (``EngineTargetConfig.waiting_timeout``)."""

    # ------------------------------------------------------------------ requests
    @engine_call
    def arrive(self, prompt: list[int], max_new_tokens: int) -> Any:
        """A tokenized request reaches the scheduler: admitted to the waiting queue, or refused (``None``).

        As ``handle_generate_request`` does: a prompt of ``max_req_input_len`` tokens or more is
        refused (scheduler.py:3231; ``max_req_len = min(context - 1, kv_capacity - 1)`` and
        ``max_req_input_len = max_req_len - 5``, tp_worker.py:568-572), and ``init_req_max_new_tokens``
        (scheduler.py:2693) clips ``max_new_tokens`` to ``max_req_len - input - 1`` and then to the
        allocator's ``max_new_tokens_for_memory``; a prompt that cannot fit at all is aborted there.
        """
        sb = self.m.schedule_batch
        config = self.config
        max_req_len = min(config.context - 1, config.tokens - 1)
        if len(prompt) >= max_req_len - 5:
            return None
        budget = max(0, min(max_new_tokens, max_req_len - len(prompt) - 1))
        budget = self.allocator.max_new_tokens_for_memory(
            len(prompt), budget, token_capacity=config.tokens, sliding_window_size=config.sliding_window,
            chunk_size=config.chunk,
        )
        if budget is None or budget < 1:
            return None  # aborted at admission ("exceeds the KV memory budget"), or nothing to generate
        params = sb.SamplingParams(max_new_tokens=budget)
        params.normalize(None)  # as the tokenizer manager does before the request reaches the scheduler
        req = sb.Req(self.rid_format.format(next(self.rids)), "", array("q", prompt), params, eos_token_ids={EOS})
        self._enqueue(req)
        return req

    def _enqueue(self, req: Any) -> None:  # _add_request_to_queue (scheduler.py:3480) without PD or priorities
        self.waiting_queue.append(req)

    @engine_call
    def abort(self, rid: str) -> str:
        """``abort_request``: drop a queued request, or mark a running one to finish on its next result.

        The chunked request is only marked (scheduler.py:5676-5678): tearing it down mid-iteration is
        unsafe, so :meth:`_process_pending_chunked_abort` releases it when the next iteration begins.
        A queued request that holds a Mamba slot (one a match copied into, or a retracted request's)
        is released with ``checkpoint=False`` as the queued-abort path does (scheduler.py:5715-5720).
        """
        if self.chunked_req is not None and self.chunked_req.rid == rid:
            self.pending_chunked_abort = self.chunked_req
            return "chunked"
        for req in self.waiting_queue:
            if req.rid == rid and not req.kv.holds_kv:
                self.waiting_queue.remove(req)
                if req.kv.holds_mamba:
                    self._release(req, checkpoint=False)
                return "queued"
        self.to_abort.add(rid)
        return "running"

    # ------------------------------------------------------------------ iteration
    @engine_call
    def iterate(self, next_tokens: dict[str, int]) -> str:
        """One scheduler iteration; ``next_tokens[rid]`` is the token a request samples (default 7).

        The server's environment knobs (:meth:`_server_environment`) hold for the iteration only:
        upstream rereads them on every call, and other loops in the process may run other values.
        """
        with self._server_environment():
            return self._iterate(next_tokens)

    @contextlib.contextmanager
    def _server_environment(self) -> Iterator[None]:
        knobs = {"SGLANG_SWA_EVICTION_INTERVAL": str(self.config.swa_eviction_interval)}
        saved = {name: os.environ.get(name) for name in knobs}
        os.environ.update(knobs)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def _iterate(self, next_tokens: dict[str, int]) -> str:
        self.iterations += 1
        active_before = set(self._active_rids())
        batch = self._next_batch()
        if batch is None:
            self.last_batch = None
            # Nothing runs, nothing is chunked, and the queue admitted nothing: a fixed point.  With no
            # request running, no iteration changes the pools or the tree, so the queue head (FCFS) waits
            # for ever: the server hangs until a user aborts it (judged as ``scheduler-progress``).  Unless
            # requests left the running batch in this iteration (:meth:`_active_rids`): their release moved memory.
            self._record(advanced=bool(active_before - set(self._active_rids())))
            return "timeout" if self._waiting_timeout() else "idle"
        for req in batch.reqs:
            if req.rid in self.to_abort and not req.finished():
                self.to_abort.discard(req.rid)
                req.to_finish = self.m.schedule_batch.FINISH_ABORT("aborted by poolfuzz")
        tokens = [next_tokens.get(req.rid, 7) for req in batch.reqs]
        if batch.forward_mode.is_extend():
            self._prefill_result(batch, tokens)
            kind = "prefill"
        else:
            self._decode_result(batch, tokens)
            kind = "decode"
        self.last_batch = batch
        self._record(advanced=True)
        return kind

    def _active_rids(self) -> tuple[str, ...]:
        """The requests running or chunked now, in that order.  An iteration that forms no batch yet sees one of them leave advanced: the
        decode half of ``get_next_batch_to_run`` (``update_running_batch``, scheduler.py:4459-4540) runs ``retract_decode``,
        which re-queues a request or, when even the last one cannot fit its next decode reservation, aborts it and releases
        its KV (``retract_decode``, schedule_batch.py:3451-3539, the last request's abort at :3508-3530), and the
        batch left empty runs nothing.  The queue head may fit at the next iteration, so that one is no fixed point: only an
        iteration that changed nothing is (``scheduler-progress``)."""
        chunked = [self.chunked_req] if self.chunked_req is not None else []
        return tuple(r.rid for r in [*self.running_batch.reqs, *chunked])

    def _record(self, *, advanced: bool) -> None:
        self.last_step = StepFacts(tuple(r.rid for r in self.waiting_queue), self._active_rids(), advanced)

    def _waiting_timeout(self) -> bool:
        """Whether ``waiting_timeout`` fired: a stalled loop's AbortReq for the queue head, a step that advanced."""
        if not (self.stalled and self.config.waiting_timeout):
            return False
        self.abort(self.waiting_queue[0].rid)
        self.timed_out += 1
        self._record(advanced=True)
        return True

    @property
    def fully_idle(self) -> bool:
        """The last iteration formed no batch and nothing waits or runs: ``on_idle``'s checks apply."""
        return not (self.last_step.waiting or self.last_step.active or self.last_step.advanced)

    @property
    def stalled(self) -> bool:
        """The last iteration formed no batch with requests waiting and nothing running or chunked."""
        return bool(self.last_step.waiting) and not self.last_step.active and not self.last_step.advanced

    def _next_batch(self) -> Any:
        """``get_next_batch_to_run`` (scheduler.py:3894), the memory statements in order."""
        self._process_pending_chunked_abort()
        exclude: list[Any] = []
        if self.chunked_req is not None:
            exclude.append(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                self._checkpoint(self.chunked_req)  # stash_chunked_request
        last, running = self.last_batch, self.running_batch
        if last is not None and last.forward_mode.is_extend():
            if last.chunked_req is not None:
                exclude.append(last.chunked_req)
            last_bs = last.batch_size()
            last.filter_batch(reqs_to_exclude=exclude)
            if last.batch_size() < last_bs:
                running.batch_is_full = False  # a request left: admission may try again (scheduler.py:3950-3951)
            if not last.is_empty() and last is not running:
                if running.is_empty():
                    running = last
                else:
                    running.merge_batch(last)
        running_bs = running.batch_size()
        running.filter_batch()
        if running.batch_size() < running_bs:
            running.batch_is_full = False  # scheduler.py:3965-3968
        self.running_batch = running
        new_batch = self._new_prefill_batch()
        if new_batch is not None:
            return new_batch
        if not self.running_batch.is_empty():
            decode = self._update_running_batch(self.running_batch)
            return decode if decode is not None and not decode.is_empty() else None
        return None

    def _process_pending_chunked_abort(self) -> None:
        """``process_pending_chunked_abort`` (scheduler.py:3778-3819): the aborted chunked request is finished
        as aborted and its KV released with ``checkpoint=False``, so its next chunk never runs; the chunk
        already in the last batch leaves it at the merge, as a finished request."""
        req, self.pending_chunked_abort = self.pending_chunked_abort, None
        if req is None:
            return
        # Upstream also handles a request already past chunked prefill (:3794-3804); here an abort is taken between
        # iterations, so the request it marked is still the chunked one when the next iteration begins.
        assert self.chunked_req is req, "the chunked request changed between an abort and the next iteration"
        req.finished_reason = self.m.schedule_batch.FINISH_ABORT("aborted by poolfuzz")  # prepare_abort
        req.to_finish = None
        self.tree_cache.finish(req.cache_request_handle, self.m.base_prefix_cache.CacheRequestOutcome.ABORT)
        self._release(req, checkpoint=False)
        self.chunked_req = None

    def _new_prefill_batch(self) -> Any:
        """``get_new_batch_prefill`` (scheduler.py:4079-4360) without HiCache, LoRA and DP."""
        sp = self.m.modules["schedule_policy"]
        running = self.running_batch
        if self.config.hybrid_swa or running.is_empty():
            running.batch_is_full = False  # scheduler.py:4089-4096
        if (running.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None  # a full batch admits no one until a request leaves (scheduler.py:4098-4100)
        running_bs = running.batch_size()
        if running_bs >= self.config.rows and self.chunked_req is None:
            running.batch_is_full = True  # get_num_allocatable_reqs <= 0 (scheduler.py:4120-4126)
            return None
        adder = sp.PrefillAdder(
            self.config.page_size, self.tree_cache, self.allocator, running, self.new_token_ratio,
            self.config.tokens, self.config.chunk, 0, 0, max_prefill_bs=0, max_running_requests=self.config.rows,
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        mamba_allocator = getattr(self.req_to_token_pool, "mamba_allocator", None)
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_begin(len(self.waiting_queue))  # scheduler.py:4199-4201
        for req in list(self.waiting_queue):
            if adder.budget_state() == sp.AddReqResult.OTHER:
                break  # a spent pass budget admits no one (scheduler.py:4207-4208)
            if running_bs + len(adder.can_run_list) >= self.config.rows:
                break
            req.init_next_round_input(self.tree_cache)
            result = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None)
            if result != sp.AddReqResult.CONTINUE:
                if result == sp.AddReqResult.NO_TOKEN:  # scheduler.py:4279-4284
                    running.batch_is_full = len(adder.can_run_list) > 0 or not running.is_empty()
                self._revert_mamba_match(req, adder)
                break
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_end()  # scheduler.py:4302-4303
        can_run = adder.can_run_list
        if not can_run:
            return None
        chosen = set(map(id, can_run))
        self.waiting_queue = [r for r in self.waiting_queue if id(r) not in chosen]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = self.m.schedule_batch.ScheduleBatch.init_new(
            can_run, self.req_to_token_pool, self.allocator, self.tree_cache, self.model_config, False,
            self.spec_algorithm, chunked_req=self.chunked_req,
        )
        batch.prepare_for_extend()
        return batch

    def _revert_mamba_match(self, req: Any, adder: Any) -> None:
        """A request the adder did not take gives back the Mamba slot its match copied into (scheduler.py:4285-4299)."""
        added = len(adder.can_run_list) > 0 and req is adder.can_run_list[-1]
        if added:
            return
        req.kv.mamba_cow_src_index = None
        req.kv.mamba_needs_clear = False
        if req.kv.holds_mamba and not getattr(req, "session", None):
            self.tree_cache.req_to_token_pool.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
            req.kv.mamba_pool_idx = None

    def _update_running_batch(self, batch: Any) -> Any:
        """``update_running_batch`` (scheduler.py:4459-4551)."""
        batch.filter_batch()
        if batch.is_empty():
            return batch
        initial_bs = batch.batch_size()
        if not batch.check_decode_mem():
            retracted, ratio, aborted = batch.retract_decode()
            self.new_token_ratio = ratio  # scheduler.py:4513
            self._retracted(retracted)
            for req in retracted:
                self.waiting_queue.append(req)  # _add_request_to_queue(req, is_retracted=True)
            del aborted  # already released by retract_decode; the scheduler only reports them
        else:
            self.new_token_ratio = max(self.new_token_ratio - self._ratio_decay, self._ratio_floor)  # decay_step
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False  # scheduler.py:4544-4545
        if batch.is_empty():
            return batch
        batch.prepare_for_decode()
        self._decoded(batch)
        return batch

    def _prefill_result(self, batch: Any, tokens: list[int]) -> None:
        """``process_batch_result_prefill`` (batch_result_processor.py:258-430), memory statements only."""
        self.allocator.free_group_begin()
        for req, token in zip(batch.reqs, tokens):
            if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                continue
            if req.inflight_middle_chunks <= 0:
                req.output_ids.append(token)
                req.update_finish_state()
                if req.finished():
                    self._release(req, checkpoint=True)
                else:
                    self._checkpoint(req)
            else:
                req.inflight_middle_chunks -= 1
        self._end_free_group()

    def _decode_result(self, batch: Any, tokens: list[int]) -> None:
        """``process_batch_result_decode`` (:998-1100) and ``_handle_finish_state_updated_req`` (:1377-1466)."""
        self.allocator.free_group_begin()
        for req, token in zip(batch.reqs, tokens):
            req.output_ids.extend([token])
            req.update_finish_state(1)
            if req.finished():
                self._release(req, checkpoint=True)
        self._end_free_group()

    # ------------------------------------------------------------------ the glue calls (canaries override these)
    def _release(self, req: Any, *, checkpoint: bool) -> None:
        self.m.common.release_kv_cache(req, self.tree_cache, checkpoint=checkpoint)

    def _checkpoint(self, req: Any) -> None:
        self.m.common.checkpoint_kv_cache(req, self.tree_cache)

    def _retracted(self, reqs: list[Any]) -> None:
        """After ``retract_decode`` released ``reqs`` (``release_req``, schedule_batch.py:2360)."""

    def _decoded(self, batch: Any) -> None:
        """After ``prepare_for_decode`` allocated the step's slots (``alloc_for_decode``)."""

    def _end_free_group(self) -> None:
        self.allocator.free_group_end()

    # ------------------------------------------------------------------ views
    def owners(self) -> list[Any]:
        """The requests owning rows, as the checker finds them (``_requests_owning_rows``, invariant_checker.py:274)."""
        reqs = [] if self.last_batch is None else list(self.last_batch.reqs)
        if self.running_batch is not self.last_batch:
            reqs += self.running_batch.reqs
        if self.chunked_req is not None:
            reqs.append(self.chunked_req)
        seen: set[int] = set()
        out = []
        for req in reqs:
            if id(req) not in seen and req.kv.holds_kv:
                seen.add(id(req))
                out.append(req)
        return out

    def is_idle(self) -> bool:
        """``is_fully_idle`` (scheduler.py:5254) for this loop: nothing queued, running or chunked."""
        return not self.waiting_queue and self.running_batch.is_empty() and self.chunked_req is None

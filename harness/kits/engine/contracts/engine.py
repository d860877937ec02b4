"""The calls SGLang 0.5.23's scheduler makes on its memory path, as the engine loop makes them (target
``poolfuzz.harness.upstream:Engine``, the factory :func:`poolfuzz.harness.kits.engine.driver.build_engine`).

The fuzzer does not call a pool here: it chooses what users and the model choose (arrivals,
which requests sample EOS, aborts, when the scheduler iterates), and
:class:`poolfuzz.harness.upstream.engine.EngineLoop` makes upstream's own scheduler calls in their order.
``handle_generate_request`` clips a new request's ``max_new_tokens`` with the allocator's
``max_new_tokens_for_memory`` and queues it.  Each ``event_loop_normal`` iteration runs
``get_next_batch_to_run``: the chunked request is stashed (``checkpoint_kv_cache``), the last
prefill batch filtered and merged into the running batch, then ``get_new_batch_prefill`` builds a
``PrefillAdder``, resumes the chunked request (``add_chunked_req``), matches each queued request's
prefix (``init_next_round_input``) and offers it (``add_one_req``), and ``prepare_for_extend``
allocates (``alloc_for_extend``); with no prefill, ``update_running_batch`` checks decode memory,
retracts (``retract_decode``, which releases) and ``prepare_for_decode`` allocates
(``alloc_for_decode``).  The result processors append the sampled token, update the finish state
and, inside ``free_group_begin``/``free_group_end``, release a finished request
(``release_kv_cache(checkpoint=True)``) or checkpoint an unfinished prefill.  ``abort_request``
drops a queued request (releasing a Mamba slot it holds with ``checkpoint=False``) and marks a
running one ``to_finish``, so its next result releases it.  The contract is descriptive: the
recording proxy does not apply (``upstream_attr=""``) and ``build_engine`` validates its input, so
the driver consults no table.  Paths are relative to the ``sglang`` package folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, NotCalled
from poolfuzz.harness.kits.engine.ops import EngineOps as Ops
from poolfuzz.harness.upstream import callers
from poolfuzz.harness.upstream.classify import Classification

SCHEDULER = "srt/managers/scheduler.py"
RESULTS = "srt/managers/scheduler_components/batch_result_processor.py"


def _at(line: int, text: str, note: str = "", path: str = SCHEDULER) -> Cite:
    return Cite(path, line, text, note=note)


# ------------------------------------------------------------------ arrivals
CLIP = _at(
    2723,
    "max_new_tokens = self.token_to_kv_pool_allocator.max_new_tokens_for_memory(",
    note="init_req_max_new_tokens, called at :3243 before the length check",
)
LENGTH = _at(
    3246, "error_msg = validate_input_length(", note="prompts of max_req_input_len (= max_req_len - 5, tp_worker.py:572) tokens or more"
)
QUEUE = _at(3493, "self.waiting_queue.append(req)", note="_add_request_to_queue")
NORMALIZE = Cite(
    "srt/managers/tokenizer_manager.py",
    1566,
    "sampling_params.normalize(self.tokenizer)",
    note="the tokenizer manager normalizes before the request reaches the scheduler",
)

# ------------------------------------------------------------------ one iteration: get_next_batch_to_run
STASH = _at(3919, "self.stash_chunked_request(self.chunked_req)", note="-> checkpoint_kv_cache (:3776)")
FILTER_LAST = _at(3949, "last_batch.filter_batch(reqs_to_exclude=list(reqs_to_exclude))")
MERGE = _at(3961, "running_batch.merge_batch(last_batch)")
FILTER_RUNNING = _at(3966, "running_batch.filter_batch()")
ADDER = _at(4157, "adder = self.get_prefill_adder_class()(", note="PrefillAdder (schedule_policy.py)")
RESUME_CHUNK = _at(4177, "self.chunked_req.init_next_round_input()")
ADD_CHUNK = _at(4184, "self.chunked_req = adder.add_chunked_req(self.chunked_req)")
MATCH = _at(4260, "req.init_next_round_input(self.tree_cache)", note="match_prefix of a queued request")
ADD_ONE = _at(4270, "res = adder.add_one_req(")
MAMBA_REVERT = replace(callers.MAMBA_REJECTED_FREE, note="a request the adder did not take gives back the slot its match copied into")
INIT_BATCH = _at(4335, "new_batch = ScheduleBatch.init_new(")
EXTEND = _at(4357, "new_batch.prepare_for_extend()", note="-> alloc_for_extend (schedule_batch.py:2914)")
DECODE_MEM = replace(callers.DECODE_MEM_CHECK, note="update_running_batch")
RETRACT = _at(
    4493,
    "retracted_reqs, new_token_ratio, reqs_to_abort = batch.retract_decode()",
    note="release_req -> release_kv_cache(checkpoint=False), schedule_batch.py:2389",
)
REQUEUE = _at(4540, "self._add_request_to_queue(req, is_retracted=True)")
DECODE = _at(4551, "batch.prepare_for_decode()", note="-> alloc_for_decode (schedule_batch.py:3780)")

# ------------------------------------------------------------------ results
PREFILL_BEGIN = _at(264, "self.token_to_kv_pool_allocator.free_group_begin()", path=RESULTS, note="process_batch_result_prefill")
PREFILL_FINISH = _at(369, "req.update_finish_state()", path=RESULTS)
PREFILL_RELEASE = _at(387, "release_kv_cache(", path=RESULTS, note="a request finished at its prefill")
PREFILL_CHECKPOINT = _at(
    394, "checkpoint_kv_cache(req, self.tree_cache)", path=RESULTS, note="an unfinished prefill's pages go to the tree"
)
MIDDLE_CHUNK = _at(428, "req.inflight_middle_chunks -= 1", path=RESULTS, note="a middle chunk: nothing released")
PREFILL_END = _at(501, "self.token_to_kv_pool_allocator.free_group_end()", path=RESULTS)
DECODE_BEGIN = _at(998, "self.token_to_kv_pool_allocator.free_group_begin()", path=RESULTS, note="process_batch_result_decode")
DECODE_FINISH = _at(1049, "req.update_finish_state(new_accept_len)", path=RESULTS)
DECODE_RELEASE = _at(
    1466,
    "release_kv_cache(req, self.tree_cache, checkpoint=checkpoint)",
    path=RESULTS,
    note="_handle_finish_state_updated_req; checkpoint is True without the lazy Mamba buffer",
)
DECODE_END = _at(1100, "self.token_to_kv_pool_allocator.free_group_end()", path=RESULTS)

# ------------------------------------------------------------------ aborts
QUEUED_ABORT = _at(5696, "req = self.waiting_queue.pop(i)", note="abort_request: a queued request holds no KV")
QUEUED_MAMBA = _at(5721, "release_kv_cache(req, self.tree_cache, checkpoint=False)", note="a queued request holding a Mamba slot (:5717)")
RUNNING_ABORT = _at(5812, "req.to_finish = FINISH_ABORT()", note="a request of running_batch or last_batch; its next result releases it")
WAITING_TIMEOUT = _at(
    3605,
    "if (timeout_s := envs.SGLANG_REQ_WAITING_TIMEOUT.get()) > 0:",
    note="_poll_timeout_aborts: an AbortReq for a queued request waiting too long",
)

GENERATE = _at(2955, "self._handle_generate_request(", note="handle_generate_request, as process_input_requests dispatches it")
PRIORITY = _at(3522, "if self.enable_priority_scheduling and req.priority is None:", note="_set_or_validate_priority")
QUEUE_LIMIT = _at(3555, "self.max_queued_requests is None", note="_abort_on_queued_limit: refuse the arrival or evict a lower priority")
EVICT_QUEUED = _at(3578, "self._release_aborted_request(candidate_req)", note="a queued request evicted by a higher-priority arrival")
PREEMPT = Cite(
    "srt/managers/schedule_policy.py",
    1771,
    "self.running_batch.release_req(",
    note="PrefillAdder.preempt_to_schedule: a running request released for a higher-priority one, re-queued at :4321",
)
REFUSED_OPTION = _at(
    3278, "req.set_finish_with_abort(error_msg)", note="a logprob start past the prompt; likewise routed experts (:3317), a session (:3111)"
)
ABORT_ALL = _at(5677, "if recv_req.abort_all or chunked_req.rid.startswith(recv_req.rid):", note="abort_request(abort_all=True)")
POLL = _at(2202, "local_reqs = self._poll_timeout_aborts()", note="ingest_requests, the top of every iteration")
EXPIRED = _at(3608, "entry_time = req.time_stats.wait_queue_entry_time", note="a queued request past SGLANG_REQ_WAITING_TIMEOUT")
RAN_TOO_LONG = _at(3638, "if 0 < req.time_stats.forward_entry_time < deadline:", note="a running request past SGLANG_REQ_RUNNING_TIMEOUT")
TIMED_OUT_RUNNING = _at(5808, "req.to_finish = FINISH_ABORT(", note="abort_request with the timeout's abort_message (503)")

SESSION_OPEN = _at(6142, "self.tree_cache.open_radix_session(recv_req.session_id)", note="open_session on a session radix cache")
SESSION_CLOSE = _at(6153, "self.tree_cache.release_radix_session(recv_req.session_id)", note="close_session on a session radix cache")
SESSION_NATIVE = _at(3036, "req.session_generation = self.tree_cache.ensure_session_generation(", note="a top-level session_id")
SESSION_REQ = _at(3082, "req.session_generation = self.tree_cache.ensure_session_generation(", note="session_params of an open session")
SESSION_CREATE = Cite(
    "srt/session/session_controller.py", 205, "def create_req(", note="the request built on the session's finished request"
)
HICACHE_POLL = _at(3889, "self.tree_cache.check_hicache_events()", note="_process_hicache_events, every get_next_batch_to_run")
HICACHE_DETACH = _at(5498, "ok, msg = self.tree_cache.detach_storage_backend()", note="detach_hicache_storage_wrapped, when fully idle")
HICACHE_CLEAR = _at(5232, "self.tree_cache.clear_storage_backend()", note="clear_hicache_storage_wrapped")
PEER_FAILED = _at(
    1371,
    "release_kv_cache(req, self.tree_cache, checkpoint=False)",
    note="handle_bootstrap_failure, when the sender polls Failed",
    path="srt/disaggregation/prefill.py",
)
PAUSE_RETRACT = _at(5893, "retract_all(", note="pause_generation in retract mode: running, last-extend and chunked requests")
FLUSH = _at(5523, "self.tree_cache.reset()", note="flush_cache while paused: is_fully_idle(ignore_waiting=True) (:5520)")
RESUME = _at(5954, "self._engine_paused = False", note="continue_generation")

# ------------------------------------------------------------------ speculative decoding (an EAGLE server, spec v2)
SPEC_PREPARE = Cite(
    "srt/managers/schedule_batch.py", 3761, "spec_prepare_for_decode(self)", note="prepare_for_decode on a speculative server"
)
SPEC_EAGLE = Cite("srt/speculative/spec_utils.py", 1270, "eagle_prepare_for_decode(batch)")
SPEC_ALLOC = Cite(
    "srt/speculative/eagle_utils.py", 910, "alloc_for_spec_decode(", note="the page-aligned reserve of page_aligned_decode_alloc_lens"
)
SPEC_RECORD = Cite("srt/mem_cache/allocation.py", 848, "req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, nxt_kv_len)")
SPEC_COMMIT = _at(831, "req.kv.kv_committed_len += num_accept_tokens", path=RESULTS, note="_resolve_spec_v2_tokens: drafts + bonus")
SPEC_TAIL = Cite(
    "srt/mem_cache/common.py",
    476,
    "tree_cache.free_kv_row(req.kv, [(start_p, end_p)])",
    note="_release_overallocated_kv_indices: the rejected drafts' slots and the reserve, at release",
)

ARRIVAL_CALLS = ("BaseTokenToKVPoolAllocator.max_new_tokens_for_memory", "SamplingParams.normalize", "Req")
ITERATION_CALLS = (
    "checkpoint_kv_cache",
    "ScheduleBatch.filter_batch",
    "ScheduleBatch.merge_batch",
    "PrefillAdder",
    "Req.init_next_round_input",
    "PrefillAdder.add_chunked_req",
    "PrefillAdder.add_one_req",
    "MambaSlotAllocator.alloc_group_begin",
    "MambaSlotAllocator.free",
    "MambaSlotAllocator.alloc_group_end",
    "ScheduleBatch.init_new",
    "ScheduleBatch.prepare_for_extend",
    "ScheduleBatch.check_decode_mem",
    "ScheduleBatch.retract_decode",
    "ScheduleBatch.prepare_for_decode",
    "free_group_begin",
    "Req.update_finish_state",
    "release_kv_cache",
    "free_group_end",
)
ITERATION_CITES = (
    STASH,
    FILTER_LAST,
    MERGE,
    FILTER_RUNNING,
    ADDER,
    RESUME_CHUNK,
    ADD_CHUNK,
    callers.MAMBA_BEGIN,
    MATCH,
    ADD_ONE,
    MAMBA_REVERT,
    callers.MAMBA_END,
    INIT_BATCH,
    EXTEND,
    DECODE_MEM,
    RETRACT,
    REQUEUE,
    DECODE,
    PREFILL_BEGIN,
    PREFILL_FINISH,
    PREFILL_RELEASE,
    PREFILL_CHECKPOINT,
    MIDDLE_CHUNK,
    PREFILL_END,
    DECODE_BEGIN,
    DECODE_FINISH,
    DECODE_RELEASE,
    DECODE_END,
)

CONTRACT: Contract[object] = Contract(
    target="poolfuzz.harness.upstream:Engine",
    release="sglang==0.5.23",
    rules=(
        CallRule(
            Ops.arrive,
            ARRIVAL_CALLS,
            "one tokenized request: refused at max_req_input_len tokens or more, max_new_tokens clipped to "
            "the context and to the allocator's memory budget, then queued",
            (CLIP, LENGTH, QUEUE, NORMALIZE),
        ),
        CallRule(
            Ops.crowd,
            ARRIVAL_CALLS,
            "count requests sharing a four-token prefix arrive before the next iteration (arrive, repeated)",
            (CLIP, LENGTH, QUEUE),
        ),
        CallRule(
            Ops.iterate,
            ITERATION_CALLS,
            "one event_loop_normal iteration: get_next_batch_to_run (stash, filter and merge, prefill "
            "admission, else decode with retraction), then the batch's result with the chosen EOS "
            "(release at finish, checkpoint after a prefill, inside a free group); an idle iteration makes "
            "no memory call (with the waiting timeout, a hung queue head is aborted as queued)",
            ITERATION_CITES + (WAITING_TIMEOUT,),
        ),
        CallRule(
            Ops.prioritized,
            ARRIVAL_CALLS,
            "arrive, with a priority: refused where the server refuses priorities, queued by it under priority scheduling "
            "(where the queue limit may evict a lower one, and admission may preempt a running request more than the "
            "threshold below it: release_req, then re-queued)",
            (GENERATE, PRIORITY, QUEUE_LIMIT, EVICT_QUEUED, PREEMPT),
        ),
        CallRule(
            Ops.refused,
            ARRIVAL_CALLS,
            "arrive, with a request option _handle_generate_request refuses: queued finished with an abort, one token "
            "long (set_finish_with_abort), to leave at a one-token prefill",
            (GENERATE, REFUSED_OPTION, QUEUE),
        ),
        CallRule(Ops.run, ITERATION_CALLS, "iterate, n times with no EOS: requests decode to their budgets", ITERATION_CITES),
        CallRule(
            Ops.speculate,
            ITERATION_CALLS + ("alloc_for_spec_decode",),
            "iterate on an EAGLE server with the verify's accept lengths chosen: decode reserves through "
            "spec_prepare_for_decode -> eagle_prepare_for_decode -> alloc_for_spec_decode, the result commits each "
            "accepted run (drafts + bonus) to kv_committed_len, and a release returns the tail past it",
            ITERATION_CITES + (SPEC_PREPARE, SPEC_EAGLE, SPEC_ALLOC, SPEC_RECORD, SPEC_COMMIT, SPEC_TAIL),
        ),
        CallRule(
            Ops.abort,
            ("release_kv_cache",),
            "abort_request(rid) of a queued or running request: a queued one is dropped (its Mamba slot "
            "released with checkpoint=False), a running one marked to_finish and released by its next result",
            (QUEUED_ABORT, QUEUED_MAMBA, RUNNING_ABORT),
        ),
        CallRule(
            Ops.abort_all,
            ("release_kv_cache",),
            "abort_request(abort_all=True): every queued request dropped, the chunked one released at the next "
            "iteration's top, every running one marked to_finish",
            (ABORT_ALL, QUEUED_ABORT, QUEUED_MAMBA, RUNNING_ABORT),
        ),
        CallRule(
            Ops.expire,
            (),
            "a waiting request passes SGLANG_REQ_WAITING_TIMEOUT, or a running one SGLANG_REQ_RUNNING_TIMEOUT: no call now; "
            "the next iteration's ingest_requests polls it out (_poll_timeout_aborts) and abort_request drops the waiting "
            "one, or marks the running one to_finish with the timeout's message",
            (POLL, EXPIRED, WAITING_TIMEOUT, RAN_TOO_LONG, TIMED_OUT_RUNNING),
        ),
        CallRule(
            Ops.pause,
            ("retract_all", "release_kv_cache"),
            "the weight-update pause: pause_generation(mode='retract') processes the queued result and retracts every "
            "running, last-extend and chunked request back to the queue; flush_cache resets the tree and the pools "
            "if nothing holds memory; continue_generation resumes (the upstream loops only; the re-enacted one skips it)",
            (PAUSE_RETRACT, FLUSH, RESUME),
        ),
        CallRule(
            Ops.open_session,
            (),
            "open_session: the session controller opens the session and, on a session radix cache, the tree its generation",
            (SESSION_OPEN,),
        ),
        CallRule(
            Ops.session_arrive,
            ARRIVAL_CALLS,
            "arrive in a session: session_params of an open session (Session.create_req prepends its finished request's "
            "prompt and output) or a top-level session_id; each gets the session's generation on a session radix cache",
            (GENERATE, SESSION_CREATE, SESSION_REQ, SESSION_NATIVE, QUEUE),
        ),
        CallRule(
            Ops.close_session,
            (),
            "close_session: the tree releases the session's tagged leaves (release_radix_session), the controller closes it",
            (SESSION_CLOSE,),
        ),
        CallRule(
            Ops.transfer_delay,
            (),
            "on a HiCache server: no call now; the device-to-host copies submitted next complete that many iterations later, "
            "and each iteration's check_hicache_events takes their acks in order once done",
            (HICACHE_POLL,),
        ),
        CallRule(
            Ops.hicache_admin,
            (),
            "on a HiCache server, an operator's storage request: detach_hicache_storage_wrapped (refused unless fully idle) "
            "or clear_hicache_storage_wrapped",
            (HICACHE_DETACH, HICACHE_CLEAR),
        ),
        CallRule(
            Ops.peer_fail,
            (),
            "on a PD server: no call now; the fake transfer backend's sender or receiver of one PD-queued request reports "
            "Failed at its next poll, and the scheduler's failure path releases what the request holds",
            (PEER_FAILED,),
        ),
    ),
    not_called=(NotCalled(Ops.construct, "misuse: a malformed constructor (the engine models none: constructor_errors is empty)"),),
    upstream_attr="",
    ops=Ops,
)


def classify_failure(config: Mapping[str, Any], ops: Sequence[str]) -> Classification:
    """The class of a violation by the engine target (the kit's ``classifier``): ``reachable`` by construction, its
    steps being scheduler iterations run from upstream's own calls, except on the legacy ``RadixCache`` shape."""
    if config.get("cache") == "radix":
        return Classification(
            "latent",
            "the legacy RadixCache shape: 0.5.23's scheduler builds UnifiedRadixCache "
            "(mem_cache/registry.py:83-146), so this order runs only on older releases",
        )
    kinds = sorted(set(ops))
    return Classification(
        "reachable", f"scheduler iterations run from upstream's own calls (docs/engine.md); the trace's steps: {', '.join(kinds) or 'none'}"
    )

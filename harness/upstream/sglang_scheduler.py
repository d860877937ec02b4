"""SGLang 0.5.23's own ``Scheduler`` on a CPU: the real class, built without its ``__init__``, and a fake model.

``Scheduler.__init__`` (managers/scheduler.py:465) starts a whole server: ZMQ sockets, the TP worker and its
model, CUDA streams, metrics.  :func:`build_scheduler` instead makes the object with ``object.__new__`` and
sets what ``init_memory_pool_and_cache`` and its neighbours would have set for one CPU rank without PD, PP,
LoRA, HiCache or grammar: the pools and tree cache the engine loop built, the queues, the flags.  An EAGLE server
(:mod:`poolfuzz.harness.upstream.engine_spec`) gets the real ``SpeculativeAlgorithm.EAGLE`` and a sink for the model worker
its result processor reports accept counts to; its draft worker is the fake model's.  :data:`ATTRIBUTES` names each with the line that reads it.  The methods then run from the file:
``get_next_batch_to_run``, ``get_new_batch_prefill``, ``update_running_batch``, ``_reqs_finishing_inflight``,
``process_batch_result`` into ``SchedulerBatchResultProcessor.process_batch_result_prefill`` / ``_decode``,
``process_pending_chunked_abort``, ``abort_request``, ``on_idle``, ``is_fully_idle``, ``_add_request_to_queue``
and ``is_disable_overlap_for_batch``.

The model is the only fake (:func:`model_result`): ``run_batch`` (scheduler.py:4614) launches the forward
through ``future_map`` and CUDA streams (:4656-4740), none of which exists here, so it is re-enacted: the
two memory-neutral counters it moves (``forward_ct`` :4621, ``_sched_idled`` :4628) and a real
``GenerationBatchResult`` (managers/utils.py:56) carrying the tokens the fuzzer chose.

Collaborators that never touch memory (metrics, load publishing, streaming output to the tokenizer) are
:class:`Sink` objects; those whose return value the loop uses are pass-throughs (:class:`BatchPassThrough`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from poolfuzz.harness.upstream.engine_build import ModelConfigStandIn
from poolfuzz.harness.upstream.engine_config import EOS
from poolfuzz.harness.upstream.engine_disagg import published_disaggregation, server_attributes
from poolfuzz.harness.upstream.overrides import overridden
from poolfuzz.harness.upstream.sglang_files import SCHEDULER_MODULES, sglang_copy
from poolfuzz.harness.upstream.sglang_runtime import RUNTIME, Attributes
from poolfuzz.harness.upstream.sglang_scheduler_stand_ins import LocalRequests, RequestDispatcher, third_party_absent_ok
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError


@dataclass(frozen=True)
class SchedulerModules:
    """The loaded ``scheduler.py``, ``batch_result_processor.py`` and ``managers/utils.py``."""

    scheduler: Any
    batch_result_processor: Any
    manager_utils: Any
    disagg_utils: Any
    disagg_prefill: Any
    disagg_decode: Any
    disagg_fake: Any


_LOADED: list[SchedulerModules] = []


def load_scheduler() -> SchedulerModules:
    """The scheduler's modules from the SGLang copy in use (once a process), or one refusal."""
    if _LOADED:
        return _LOADED[0]
    with third_party_absent_ok():
        loaded, problems = sglang_copy().load(SCHEDULER_MODULES.values())
    if problems:
        raise UpstreamUnavailableError(next(iter(problems.values())))
    modules = SchedulerModules(**{short: loaded[dotted] for short, dotted in SCHEDULER_MODULES.items()})
    logging.getLogger("sglang.srt.managers.schedule_batch").addFilter(_quiet_refusals)
    _LOADED.append(modules)
    return modules


def _quiet_refusals(record: logging.LogRecord) -> bool:
    """``Req.set_finish_with_abort`` logs every refused request at error level (schedule_batch.py:2227-2228): a prompt too
    long, a budget past memory.  The fuzzer sends those on purpose and the driver records each as an event, so the log
    line is dropped; every other record of the module passes."""
    return record.funcName != "set_finish_with_abort"


class ServerModelConfig(ModelConfigStandIn):
    """The model config as the scheduler's own arrival path reads it too: the EOS set every request gets
    (``eos_token_ids=self.model_config.hf_eos_token_id``, scheduler.py:3009), the engine target's one EOS token."""

    hf_eos_token_id = frozenset({EOS})


class Sink(Attributes):
    """A collaborator whose calls have no memory effect (metrics, publishing, output streaming): every method is a
    no-op; attributes set on it are kept (``metrics_reporter.num_generated_tokens +=``, batch_result_processor.py:985)."""

    def _missing(self, name: str) -> Any:
        return _noop

    def __repr__(self) -> str:
        return f"<sink {self._name}>"


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class BatchPassThrough:
    """The DP-attention adapter and the n-gram embedding manager on one rank without either: each hands the batch
    back unchanged (scheduler.py:4010-4019, ``maybe_prepare_mlp_sync_batch`` / ``maybe_convert_decode_to_extend`` /
    ``prepare_for_forward``), and ``on_idle``'s ``drop_sync_wait_carry`` (:5243) has nothing to drop."""

    def maybe_prepare_mlp_sync_batch(self, batch: Any, need_sync: bool = False) -> Any:
        return batch

    def maybe_convert_decode_to_extend(self, batch: Any) -> Any:
        return batch

    def prepare_for_forward(self, batch: Any, chunked_req: Any = None) -> Any:
        return batch

    def drop_sync_wait_carry(self) -> None:
        return None


class NoStageMetrics:
    """``scheduler_stage_metrics`` with stage timing off: ``record`` (on_idle, scheduler.py:5280) times nothing."""

    def record(self, stage: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class NoGrammars:
    """``grammar_manager`` with no grammar-constrained request (scheduler.py:4085, :5749; its queue :5372)."""

    grammar_queue: tuple[Any, ...] = ()

    def clear(self) -> None:
        """``flush_cache`` (scheduler.py:5527): no grammar cache to clear."""
        return None

    def has_waiting_grammars(self) -> bool:
        return False

    def process_req_with_grammar(self, req: Any) -> bool:
        """``_handle_generate_request`` (scheduler.py:3327): a request without a grammar is not queued for one, so the
        scheduler adds it to the waiting queue itself."""
        return False

    def abort_requests(self, recv_req: Any) -> None:
        return None


class NoDllm:
    """``dllm_manager`` without diffusion LMs (``is_fully_idle``, scheduler.py:5348)."""

    def any_staging_reqs(self) -> bool:
        return False


def build_scheduler(loop: Any, modules: SchedulerModules, *, overlap: bool) -> Any:
    """The real ``Scheduler`` over ``loop``'s pools and tree cache (see :data:`ATTRIBUTES`), ``enable_overlap`` as given.

    Past the attributes ``__init__`` would have set from its model worker and server arguments, the scheduler's own
    ``init_*`` methods that run on a CPU build the rest, in ``__init__``'s order (scheduler.py:653-733):
    ``init_running_status`` (the queues, the session controller, the deferred-flush wrapper), ``init_chunked_prefill``,
    ``maybe_init_dynamic_chunk_sizer``, ``init_kv_events_publisher``, ``init_schedule_policy``,
    ``init_deterministic_inference_config``, ``init_mamba_truncation_align``, ``check_truncation_align_fits_chunk``,
    ``init_dp_attn_adapter``, ``init_load_inquirer``, ``init_output_streamer`` and ``init_batch_result_processor`` (with
    ``init_beam_coordinator``).  The collaborators these build that never touch memory are stand-ins
    (:mod:`poolfuzz.harness.upstream.sglang_scheduler_stand_ins`); the result processor is upstream's.  The pool observer
    and the invariant checker are built later, by ``SchedulerLoop.attach_checker`` (``init_pool_stats_observer`` /
    ``init_invariant_checker``, :723-725)."""
    cls = modules.scheduler.Scheduler
    scheduler = object.__new__(cls)
    attributes = attributes_for(loop, overlap=overlap)
    disaggregation = loop.config.disaggregation
    if disaggregation is not None:
        attributes.update(server_attributes(loop.config.tokens, attributes["tp_worker"]))
    scheduler.__dict__.update(attributes)
    with schedule_arguments(loop.config), published_disaggregation(disaggregation):
        scheduler.init_running_status()  # :653
        scheduler.init_chunked_prefill()  # :656
        scheduler.maybe_init_dynamic_chunk_sizer()  # :657 (off without PP)
        scheduler.init_kv_events_publisher()  # :668
        scheduler.init_schedule_policy()  # :671: the policy, the priority preemption flag, the new-token ratio tracker
        if disaggregation is not None:
            scheduler.init_disaggregation()  # :689: the PD queues over the fake transfer backend (engine_disagg)
        scheduler.init_deterministic_inference_config()  # :698 (off: no truncation alignment)
        scheduler.init_mamba_truncation_align()  # :700 (a grid of 1 without DCP and the Mamba extra buffer)
        scheduler.check_truncation_align_fits_chunk()  # :701
        scheduler.init_dp_attn_adapter()  # :721
        scheduler.init_load_inquirer()  # :729
        scheduler.init_output_streamer()  # :731
        scheduler.init_batch_result_processor()  # :733
    # event_loop_overlap sets it before its loop (:2063); init_running_status cleared it (:1337); the PD loops never set it
    # (disaggregation/decode.py:3165-3224, prefill.py:758-873), so a PD server's update_running_batch skips no finishing decode
    scheduler.enable_skip_finishing_decode = overlap and disaggregation is None
    scheduler._request_dispatcher = RequestDispatcher(scheduler)  # init_request_dispatcher (:1827)
    scheduler.invariant_checker = loop.checker.checker if hasattr(loop, "checker") else None
    return scheduler


INIT_NEW_TOKEN_RATIO = "SGLANG_INIT_NEW_TOKEN_RATIO"
"""environ.py:646 (default 0.7): with ``--schedule-conservativeness`` 1.0 (the default), the tracker's starting ratio."""


@contextlib.contextmanager
def schedule_arguments(config: Any) -> Iterator[None]:
    """The server arguments the scheduler's own init methods read, published for the length of the calls: the shape's
    ``chunked_prefill_size`` and, through ``SGLANG_INIT_NEW_TOKEN_RATIO``, its new-token ratio
    (``NewTokenRatioTracker.from_config``, new_token_ratio_tracker.py:20-32: ``init * conservativeness``, floor
    ``init * 0.14``, 600 decay steps); the rest at their defaults (arg_groups/fields/schedule.py): no decode interval,
    mixed chunks, dynamic chunking or prefill delayer, preemption on with priority scheduling."""
    schedule = RUNTIME.bags["schedule"]
    leaves = {
        # init_chunked_prefill :1352; a server without chunked prefill is started with --chunked-prefill-size -1, which
        # :1372-1373 turns into None
        "chunked_prefill_size": config.chunk if config.chunk else -1,
        "prefill_decode_interval": None,  # :1353
        "prefill_decode_interval_min_bs": 0,  # :1355-1357
        "enable_mixed_chunk": False,  # :1377
        "enable_dynamic_chunking": False,  # maybe_init_dynamic_chunk_sizer :1383
        "enable_prefill_delayer": False,  # init_schedule_policy :1451
        "disable_priority_preemption": False,  # :1471
        "schedule_conservativeness": 1.0,  # NewTokenRatioTracker.from_config
    }
    ratio = {INIT_NEW_TOKEN_RATIO: repr(float(config.new_token_ratio))}
    with overridden(schedule.__dict__, leaves), overridden(os.environ, ratio):
        yield


def attributes_for(loop: Any, *, overlap: bool) -> dict[str, Any]:
    """What ``Scheduler.__init__`` would have set, for the memory path (each: the line reading it, 0.5.23)."""
    config = loop.config
    disagg_null = load_scheduler().disagg_utils.DisaggregationMode.NULL
    tp_worker = Sink("tp_worker", model_runner=Sink("model_runner", attn_backend=object(), prefill_aware_swa=False))
    return {
        # the pools and the tree (init_memory_pool_and_cache)
        "req_to_token_pool": loop.req_to_token_pool,  # get_num_allocatable_reqs :4040
        "token_to_kv_pool_allocator": loop.allocator,  # adder :4157, update_running_batch :4482
        "tree_cache": loop.tree_cache,  # get_new_batch_prefill :4260, stash_chunked_request :3776
        "page_size": config.page_size,  # PrefillAdder :4158
        "max_total_num_tokens": config.tokens,  # max_prefill_tokens default
        "max_prefill_tokens": config.tokens,  # PrefillAdder :4163
        "max_running_requests": config.rows,  # PrefillAdder :4168
        "model_config": loop.model_config,  # ScheduleBatch.init_new :4339
        "spec_algorithm": loop.spec_algorithm,  # init_new :4341, get_next_batch_to_run :3988
        "is_hybrid_swa": config.hybrid_swa,  # :4091, init_pool_stats_observer :2514
        "is_hybrid_ssm": config.hybrid_ssm,  # init_pool_stats_observer :2515, init_invariant_checker :2526
        # init_memory_pool_and_cache (:607-608): the full and SWA pools' sizes on hybrid SWA, None otherwise
        "full_tokens_per_layer": config.tokens if config.hybrid_swa else None,  # :2517, :2529
        "swa_tokens_per_layer": config.swa_tokens if config.hybrid_swa else None,  # :2518, :2530
        "device": "cpu",
        # loop state (the queues, the last batch, the counters: init_running_status, :1315-1349)
        "processed_tokens_counter": 0,  # calc_priority :4131, _add_request_to_queue :3494
        "enable_overlap": overlap,  # init_new :4340, is_fully_idle :5349, batch_result_processor.py:1022
        "enable_overlap_mlx": False,
        "is_generation": not config.embedding,  # init_tokenizer :893; event_loop_overlap :2127
        # configurations a one-rank CPU server without PD/PP/LoRA/HiCache runs
        # init_disaggregation (:1512) sets a PD server's own mode (engine_disagg)
        "disaggregation_mode": disagg_null,  # :3772, :3488, :5258
        "dllm_config": None,  # :3901, :3980
        "enable_hisparse": False,  # :3924, :5283
        "hisparse_coordinator": None,  # :4347
        # HiCache's device-host tier (engine_hicache): check_hicache_events every iteration (:3882-3889), the host load
        # before prepare_for_extend (:4350-4353), the in-flight transfers in is_fully_idle (:5390-5395)
        "enable_hierarchical_cache": config.hicache is not None,
        "enable_hicache_storage": False,  # :3864, :4237
        "enable_unified_cache_external_linker": False,  # :3863
        "enable_lmcache": False,  # :3865
        "enable_unified_memory": False,  # event_loop_overlap :2100, on_idle :5273
        "enable_lora": False,  # :4186
        # priority scheduling and the queue limit (__init__ :486-496, init_schedule_policy :1469-1472): the shape's choice
        "enable_priority_scheduling": config.priority_scheduling,  # _set_or_validate_priority :3521, _abort_on_queued_limit :3566
        "abort_on_priority_when_disabled": config.abort_on_priority_when_disabled,  # :3528
        "schedule_policy": "fcfs",  # init_schedule_policy :1439 (the default policy)
        "schedule_low_priority_values_first": False,  # :3522, :3567 (larger values first, the default)
        "priority_scheduling_preemption_threshold": 10,  # PrefillAdder :4166 (schedule.py:122 default)
        "max_queued_requests": config.max_queued_requests,  # _abort_on_queued_limit :3555
        # arrivals (handle_generate_request, :2943-3329; init_req_max_new_tokens :2693-2740); the limits as tp_worker.py:568-572
        # derives them and Scheduler.__init__ copies them
        "max_req_len": min(config.context - 1, config.tokens - 1),  # :2713
        "max_req_input_len": min(config.context - 1, config.tokens - 1) - 5,  # validate_input_length :3224
        "max_new_tokens_limit": None,  # SGLANG_MAX_NEW_TOKENS_LIMIT unset (:2700)
        "kv_shard_widening": 1,  # page_interleave_shard_size without KV sharding (:611, read at :2719)
        "sliding_window_size": config.sliding_window,  # :2726
        "enable_session_radix_cache": config.session_radix_cache,  # :2973, :3081, open_session :6141, close_session :6150
        "tokenizer": None,  # :3033 (skip_tokenizer_init: the scheduler detokenizes nothing)
        "require_mlp_sync": False,  # :3983, is_disable_overlap_for_batch :2143
        "min_free_slots_delayer": None,  # :4106
        "decode_offload_manager": None,  # update_running_batch :4481
        "mm_receiver": None,  # abort_request :5683
        "rust_server": None,  # send_abort_output :2275
        "enable_fpm": False,  # process_batch_result :5102
        "load_snapshot_writer": None,  # publish_load_snapshot :875 (load snapshots off)
        "idle_sleeper": None,  # maybe_sleep_on_idle :6161
        "scheduler_stage_metrics": NoStageMetrics(),  # on_idle :5280
        # server arguments as a whole: init_load_inquirer (:2593) and init_output_streamer (:2637) hand them to
        # collaborators that are stand-ins here; nothing on the memory path reads them
        "server_args": Sink("server_args"),
        # collaborators
        "grammar_manager": NoGrammars(),  # :4085, abort_request :5749
        "dllm_manager": NoDllm(),  # is_fully_idle :5348
        "ngram_embedding_manager": BatchPassThrough(),  # :4018
        # init_overlap (:1664-1690) builds the future map the forward relays tokens through (run_batch, :4656-4740): the
        # forward is the fake model; init_beam_coordinator hands it to the beam coordinator (:2659), which has no beams
        "future_map": None,
        # init_weight_updater (:2389-2398): weight updates; init_dp_attn_adapter reads its offload tags (:2500)
        "weight_updater": Sink("weight_updater", offload_tags=frozenset()),
        # init_metrics_collector (:806-813) with metrics off: the processor's collector (init_batch_result_processor :2677)
        "metrics_collector": Sink("metrics_collector"),
        "tp_worker": tp_worker,  # :4151, :4359
        "metrics_reporter": Sink(
            "metrics_reporter",
            num_retracted_reqs=0,
            enable_metrics=False,
            num_generated_tokens=0,
            forward_ct_decode=0,
            current_scheduler_metrics_enabled=False,
            is_stats_logging_rank=False,  # pause_generation :5927, flush_cache :5537
        ),
        "draft_worker": None,  # flush_cache :5530 (no draft worker: an EAGLE server's draft is the fake model's)
        # init_model_worker (:1203-1206): without a draft worker the model worker is the TP worker; a speculative server's
        # processor tells it each verify's accept counts (batch_result_processor.py:803-805), which a sink takes
        "model_worker": tp_worker,
        "load_publisher": Sink("load_publisher"),  # process_batch_result :5084
        "ipc_channels": Sink("ipc_channels", send_to_tokenizer=Sink("send_to_tokenizer")),  # send_abort_output :2278
        "pool_stats_observer": loop.checker.observer if hasattr(loop, "checker") else None,  # on_idle :5285
        # ingest_requests (:2184-2222) and process_input_requests (:2224-2270), which the waiting timeout runs
        "request_receiver": LocalRequests(),  # :2205
        "external_corpus_manager": None,  # :2263
    }

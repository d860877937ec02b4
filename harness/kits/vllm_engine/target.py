"""vLLM 0.33.0's v1 ``Scheduler`` / ``AsyncScheduler`` as an engine target (:class:`poolfuzz.harness.engines.interface.EngineTarget`).

Everything the scheduler decides (admission, chunking, prefix hits, preemption, frees) runs from vLLM's
files: ``v1/core/sched/scheduler.py`` and ``async_scheduler.py``, ``KVCacheManager``, the coordinator,
the single-type managers, ``BlockPool`` and ``v1/request.py``, loaded by the one loader
(:data:`poolfuzz.harness.upstream.vllm_files.VLLM`).  The model is the only fake (:meth:`VllmEngine._model_output`):
a ``ModelRunnerOutput`` whose sampled token per request the fuzzer chooses (a plain token, EOS or a stop
token), empty for a non-final prefill chunk as the model runner discards those.

Synchronous: a step is ``schedule()`` then ``update_from_output`` of that schedule.  Asynchronous (as the
engine core runs ``AsyncScheduler`` with two batches in flight, ``EngineCore.step_with_batch_queue``): a step
is ``schedule()`` of step N+1, then ``update_from_output`` of step N; step N+1 is in flight between steps,
and :meth:`observe` reports what it still reads.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from poolfuzz.harness.engines.interface import Observation, StepReport, Submission
from poolfuzz.harness.judge.config import takes_config
from poolfuzz.harness.kits.vllm_engine.config import VllmEngineConfig
from poolfuzz.harness.kits.vllm_engine.groups import kv_cache_config, resolve_block_sizes, skipped_tokens
from poolfuzz.harness.kits.vllm_engine.hits import Hit, admitted
from poolfuzz.harness.kits.vllm_engine.observe import observe
from poolfuzz.harness.kits.vllm_engine.ours import put_our_pool
from poolfuzz.harness.upstream.loading import copy_of
from poolfuzz.harness.upstream.vllm_files import VLLM, load_vllm_scheduler
from poolfuzz.harness.upstream.vllm_scheduler_stand_ins import Fields, SamplingParams, StructuredOutputManager, sha256

EOS = 2
"""Every request's EOS token (``sampling_params.eos_token_id``)."""
STOP = 3
"""Every request's one stop token (``sampling_params.stop_token_ids``)."""
PLAIN = 100
"""A token that neither stops nor ends a request (the fuzzer's default sample)."""


def vllm_config(config: VllmEngineConfig) -> Fields:
    """The ``VllmConfig`` the scheduler reads, holding exactly the fields its path reads (the line reading each).

    Every other field raises :class:`~poolfuzz.harness.upstream.placeholders.StandInReached` when read.
    """
    eagle = config.speculative_method == "eagle"
    return Fields(
        "VllmConfig",
        scheduler_config=Fields(
            "SchedulerConfig",
            max_num_seqs=config.max_num_seqs,  # scheduler.py:131
            max_num_active_seqs=None,  # :135
            max_num_scheduled_tokens=None,  # :140
            max_num_batched_tokens=config.max_num_batched_tokens,  # :142
            long_prefill_token_threshold_adaptive=False,  # :145
            policy="fcfs",  # :226
            watermark=0.0,  # :366
            prefill_schedule_interval=1,  # :405
            scheduler_reserve_full_isl=False,  # :427
            long_prefill_token_threshold=config.long_prefill_token_threshold,  # :614
            enable_chunked_prefill=config.enable_chunked_prefill,  # :1338
            async_scheduling=config.async_scheduling,  # :1945
            disable_chunked_mm_input=False,  # :2099
            # Read by 0.34.0 only, at their defaults (config/scheduler.py:78, :223, :237): arrival-order
            # admission (scheduler.py:436-437) and no async KV-load limit (read only with a connector, :513)
            cache_aware_admission_window=0,
            cache_aware_admission_threshold=0.5,
            max_num_inflight_kv_loads=None,
        ),
        cache_config=Fields(
            "CacheConfig",
            num_gpu_blocks=config.num_blocks,  # scheduler.py:215
            enable_prefix_caching=config.enable_prefix_caching,  # :355
            enable_mamba_shared_prefix_checkpoint=False,  # :368 (groups.py: no EAGLE draft group, no partial hash hits)
            mamba_cache_mode=config.mamba_cache_mode,  # :433
            block_size=config.cache_block_size,  # :572 (core.py:347 sets it from the groups)
            prefix_match_unit=None,  # kv_cache_utils.py:846, :890 (resolve_kv_cache_block_sizes: the GCD of the groups)
        ),
        lora_config=None,  # scheduler.py:101
        model_config=Fields(
            "ModelConfig",
            uses_mrope=False,  # scheduler.py:102
            is_encoder_decoder=False,  # :117
            max_model_len=config.max_model_len,  # :147
            runner_type="generate",  # :157
            is_diffusion=False,  # :158
            supports_multimodal_inputs=False,  # :266
            return_sampling_mask=False,  # :487
        ),
        kv_events_config=None,  # scheduler.py:104
        parallel_config=Fields(
            "ParallelConfig",
            data_parallel_index=0,  # scheduler.py:207
            decode_context_parallel_size=1,  # :219
            prefill_context_parallel_size=1,  # :220
            pipeline_parallel_size=1,  # :386, async_scheduler.py:18
            data_parallel_size=1,  # :406
        ),
        observability_config=Fields(
            "ObservabilityConfig",
            per_request_spec_decode_metrics=False,  # scheduler.py:109
            kv_cache_metrics=False,  # :112
            enable_mfu_metrics=False,  # :479
            enable_logging_iteration_details=False,  # :1719
        ),
        is_mm_encoder_only=False,  # scheduler.py:118
        kv_transfer_config=None,  # :174 (no KV connector)
        ec_transfer_config=None,  # :210
        ec_manager_config=Fields("ECManagerConfig", get_encoder_cache_manager_obj=lambda: None),  # :284
        speculative_config=speculative_config(config),  # :294, :720
        num_speculative_tokens=config.num_speculative_tokens,  # :297
        num_lookahead_tokens=lookahead_tokens(config),  # :298
        num_prefill_lookahead_tokens=1 if eagle else 0,  # :315 (config/vllm.py:655-675: an EAGLE drafter reads one ahead)
        use_v2_model_runner=False,  # :320
        num_hash_lookahead_tokens=hash_lookahead_tokens(config),  # :342
        max_in_flight_tokens=(2 if config.async_scheduling else 1) * config.max_num_batched_tokens,  # :354
        aux_output_config=Fields("AuxOutputConfig", enabled=False),  # :484
        watermark_config=None,  # 0.34.0 scheduler.py:2516 (no watermarking)
        max_concurrent_batches=2 if config.async_scheduling else 1,  # :193
    )


def speculative_config(config: VllmEngineConfig) -> Fields | None:
    """``SpeculativeConfig`` as the scheduler reads it (scheduler.py:323-341, :720), for n-gram or EAGLE drafts.

    Each answer is what vllm/config/speculative.py computes for the method: ``use_eagle`` (:2116),
    ``needs_eagle_block_drop`` / ``use_eagle_block_drop`` (:2122, :2147), ``max_num_new_slots_for_drafting`` (:2058:
    0 for n-gram and sequential EAGLE), no dynamic K (``num_speculative_tokens_per_batch_size``).  It holds no
    ``method``: the scheduler's path never reads it, so ``ngram`` and ``ngram_gpu`` are one stand-in
    (config.py::SPECULATIVE_METHODS), and a read of it would raise rather than answer.
    """
    if config.speculative_method is None:
        return None
    eagle = config.speculative_method == "eagle"
    return Fields(
        "SpeculativeConfig",
        num_speculative_tokens=config.num_speculative_tokens,
        num_speculative_tokens_per_batch_size=None,  # scheduler.py:324
        use_eagle=lambda: eagle,  # :330
        uses_target_hidden_states=eagle,  # 0.34.0 scheduler.py:330 (a property: the EAGLE family drafts from them)
        use_eagle_block_drop=lambda: eagle,  # :331
        needs_eagle_block_drop=lambda: eagle,  # :333
        disable_eagle_block_drop=False,  # :334
        max_num_new_slots_for_drafting=0,  # :721
    )


def lookahead_tokens(config: VllmEngineConfig) -> int:
    """``VllmConfig.num_lookahead_tokens`` (config/vllm.py:626-652): K slots past the scheduled tokens for EAGLE, whose
    drafter writes KV there; none for n-gram (no forward pass of its own)."""
    return config.num_speculative_tokens if config.speculative_method == "eagle" else 0


def hash_lookahead_tokens(config: VllmEngineConfig) -> int:
    """``VllmConfig.num_hash_lookahead_tokens`` (config/vllm.py:678-692): with EAGLE's block drop and prefix caching
    each block hash covers the one prefill-lookahead token after it; 0 otherwise."""
    return 1 if config.speculative_method == "eagle" and config.enable_prefix_caching else 0


def request_block_hasher(utils: Any, config: VllmEngineConfig, hash_block_size: int) -> Any:
    """``get_request_block_hasher`` called as the loaded release's engine core calls it.

    0.33.0 passes ``num_hash_lookahead_tokens`` (kv_cache_utils.py:953-957); 0.31.0 and 0.32.0 take only the block
    size and hash function (their :941-944), so their EAGLE-with-prefix-caching servers hash without the lookahead.
    """
    parameters = inspect.signature(utils.get_request_block_hasher).parameters
    if "num_hash_lookahead_tokens" in parameters:
        return utils.get_request_block_hasher(hash_block_size, sha256, hash_lookahead_tokens(config))
    return utils.get_request_block_hasher(hash_block_size, sha256)


@dataclass
class Flight:
    """A scheduled step whose results have not landed: its output and, per running request, the blocks it reads."""

    seq: int
    output: Any
    chunks: frozenset[str]
    """Requests scheduled as a non-final prefill chunk: the model runner discards their sampled token."""
    reads: dict[str, tuple[int, int, tuple[int, ...]]]
    """Request id -> (its status, its preemptions, the non-null block ids of its tables) when the step was scheduled."""


class VllmEngine:
    """vLLM's v1 scheduler over one server shape, behind the engine protocol (see the module docstring)."""

    def __init__(self, config: VllmEngineConfig) -> None:
        self.config = config
        self.modules = load_vllm_scheduler()
        self.copy = copy_of(VLLM)
        m = self.modules
        with self.copy.active():
            utils = m["vllm.v1.core.kv_cache_utils"]
            utils.init_none_hash(sha256)
            stand_in = vllm_config(config)
            kv_config = kv_cache_config(config, m["vllm.v1.kv_cache_interface"])
            self.block_sizes = resolve_block_sizes(utils, kv_config, stand_in)
            self.block_hasher = request_block_hasher(utils, config, self.block_sizes.hash)
            kind = (
                m["vllm.v1.core.sched.async_scheduler"].AsyncScheduler
                if config.async_scheduling
                else m["vllm.v1.core.sched.scheduler"].Scheduler
            )
            self.scheduler = kind(  # EngineCore.__init__ (v1/engine/core.py:180-188)
                stand_in,
                kv_config,
                StructuredOutputManager(),
                block_size=self.block_sizes.scheduler,
                hash_block_size=self.block_sizes.hash,
                log_stats=False,
            )
            if config.pools == "poolfuzz":
                put_our_pool(self.scheduler, utils.make_block_hash_with_group_id)
        major, minor = (int(part) for part in self.copy.source.version.split(".")[:2])
        self.null_ref_cnt_kept = (major, minor) >= (0, 33)
        """0.33.0 on: ``touch`` and ``free_blocks`` skip the null block, so its ``ref_cnt`` stays 0 (block_pool.py:795,
        :828); 0.31.0/0.32.0 count it (observe.py reads only the queue there)."""
        self.hash_key = m["vllm.v1.core.kv_cache_utils"].make_block_hash_with_group_id
        self.hits: list[Hit] = []
        """Prefix hits admitted since the driver last judged them (:mod:`poolfuzz.harness.kits.vllm_engine.hits`)."""
        self.request_class = m["vllm.v1.request"].Request
        self.status = m["vllm.v1.request"].RequestStatus
        self.output_class = m["vllm.v1.outputs"].ModelRunnerOutput
        self._indexed_output = "req_id_to_index" in inspect.signature(self.output_class).parameters
        self.drafts_class = m["vllm.v1.outputs"].DraftTokenIds
        self.flights: deque[Flight] = deque()
        self.next_rid = 0
        self.steps = 0
        self.last_advanced = False
        self.landed_at_last_step: tuple[str, ...] = ()
        self.accepted = 0

    # ------------------------------------------------------------------ the protocol
    def submit(self, request: Submission) -> str | None:
        """``add_request``; a prompt of ``max_model_len`` tokens or more is refused, as the input processor refuses it
        (v1/engine/input_processor.py:574-601: longer, or as long for a generating model)."""
        if not request.prompt or len(request.prompt) >= self.config.max_model_len:
            return None
        rid = str(self.next_rid)
        self.next_rid += 1
        self.last_advanced = True  # the queue changed since the last step: no step has had its chance yet
        params = SamplingParams(max_tokens=max(1, request.max_new_tokens), eos_token_id=EOS, stop_token_ids=[STOP])
        with self.copy.active():
            self.scheduler.add_request(self.request_class(rid, list(request.prompt), params, None, block_hasher=self.block_hasher))
        return rid

    def abort(self, rid: str) -> str:
        """``finish_requests(rid, FINISHED_ABORTED)`` wherever the request is; where it was."""
        request = self.scheduler.requests.get(rid)
        if request is None:
            return "gone"
        where = "running" if request.status == self.status.RUNNING else "queued"
        self.last_advanced = True
        with self.copy.active():
            self.scheduler.finish_requests(rid, self.status.FINISHED_ABORTED)
        return where

    def step(self, samples: Mapping[str, int], drafts: int | None = None, accepted: int | None = None) -> StepReport:
        """One engine-core step: ``schedule()`` and, once a result is due, ``update_from_output`` of the oldest step.

        With speculation, the landing step's requests accept ``accepted`` of their scheduled drafts each (at most as many
        as were scheduled) and, synchronous, then propose ``drafts`` new ones (EAGLE always K); by default K drafts and
        ``steps % (K + 1)`` accepted, so a run of steps varies acceptance."""
        k = self.config.num_speculative_tokens
        drafts = k if drafts is None or self.config.speculative_method == "eagle" else max(0, min(k, drafts))
        self.accepted = self.steps % (k + 1) if accepted is None else max(0, accepted)
        with self.copy.active():
            output = self.scheduler.schedule()
            self.hits += admitted(
                self.scheduler, output, self.steps, self.config.enable_prefix_caching, self.block_sizes.hash, self.hash_key
            )
            scheduled = tuple(output.num_scheduled_tokens)
            if scheduled:
                self.flights.append(self._flight(output))
            landed: tuple[str, ...] = ()
            depth = 2 if self.config.async_scheduling else 1
            if self.flights and (len(self.flights) >= depth or not scheduled):
                flight = self.flights.popleft()
                landed = tuple(flight.output.num_scheduled_tokens)
                self.scheduler.update_from_output(flight.output, self._model_output(flight, samples))
                if k and not self.config.async_scheduling and not getattr(flight.output, "skip_drafts", False):
                    # EngineCore.post_step (v1/engine/core.py:699-706): the drafter's proposals after the model ran.
                    # Async scheduling drafts in the worker: the scheduler holds -1 placeholders (async_scheduler.py:41-50).
                    # 0.31.0 and 0.32.0 have no skip_drafts (sched/output.py): their post_step always drafts.
                    ids = list(flight.output.num_scheduled_tokens)
                    self.scheduler.update_draft_token_ids(self.drafts_class(ids, [[PLAIN] * drafts for _ in ids]))
            elif not scheduled:
                # Nothing scheduled and nothing in flight: the engine core still calls update_from_output with an
                # empty output (EngineCore.step), which finishes what was aborted meanwhile.
                self.scheduler.update_from_output(output, self._runner_output([], []))
        self.steps += 1
        # A step that preempted advanced too: it freed the preempted request's blocks, and by design it admits no waiting
        # request in that same step (scheduler.py:1050, "if not preempted_reqs"); the next step does.
        self.last_advanced = bool(scheduled or landed or output.preempted_req_ids)
        return StepReport("schedule" if scheduled else "idle", scheduled, landed)

    def observe(self) -> Observation:
        return observe(self)

    # ------------------------------------------------------------------ the fake model
    def _flight(self, output: Any) -> Flight:
        requests = self.scheduler.requests
        managers = self.scheduler.kv_cache_manager.coordinator.single_type_managers
        reads = {}
        for rid, count in output.num_scheduled_tokens.items():
            request = requests[rid]
            start = request.num_computed_tokens - count  # _update_after_schedule advanced it by the scheduled tokens
            ids: list[int] = []
            for manager in managers:
                first = skipped_tokens(manager.kv_cache_spec, start) // manager.block_size
                ids += [b.block_id for b in manager.req_to_blocks.get(rid, ())[first:] if not b.is_null]
            reads[rid] = (int(request.status), int(request.num_preemptions), tuple(ids))
        chunks = frozenset(rid for rid in output.num_scheduled_tokens if requests[rid].is_prefill_chunk)
        return Flight(self.steps, output, chunks, reads)

    def _model_output(self, flight: Flight, samples: Mapping[str, int]) -> Any:
        """The model's result for ``flight``: per request its accepted drafts then one sampled token (the bonus or the
        correction: scheduler.py:2346-2363 reads ``len - 1`` accepted), none for a non-final prefill chunk."""
        req_ids = list(flight.output.num_scheduled_tokens)
        spec = flight.output.scheduled_spec_decode_tokens
        sampled = [
            [] if rid in flight.chunks else [PLAIN] * min(self.accepted, len(spec.get(rid, ()))) + [int(samples.get(rid, PLAIN))]
            for rid in req_ids
        ]
        return self._runner_output(req_ids, sampled)

    def _runner_output(self, req_ids: list[str], sampled: list[list[int]]) -> Any:
        """``ModelRunnerOutput`` as the loaded release's model runner builds it: 0.31.0-0.33.0 index the requests by
        ``req_id_to_index``, 0.34.0 by their order in ``req_ids`` alone (outputs.py:267-275, scheduler.py:1006)."""
        if self._indexed_output:
            index = {rid: i for i, rid in enumerate(req_ids)}
            return self.output_class(req_ids=req_ids, req_id_to_index=index, sampled_token_ids=sampled)
        return self.output_class(req_ids=req_ids, sampled_token_ids=sampled)

    # ------------------------------------------------------------------ reads for moves and drivers
    def live(self) -> list[str]:
        """Every request the scheduler still holds, running first, then waiting (its ids)."""
        running = [r.request_id for r in self.scheduler.running]
        return running + [rid for rid in self.scheduler.requests if rid not in set(running)]

    def reset_prefix_cache(self) -> bool:
        with self.copy.active():
            return bool(self.scheduler.reset_prefix_cache())


@takes_config(VllmEngineConfig)
def build_vllm_engine(**shape: Any) -> VllmEngine:
    """The target for one server shape (``poolfuzz.harness.upstream:VllmEngine``): its keywords are the config's fields
    (:func:`~poolfuzz.harness.judge.config.takes_config`).  ``pools="both"`` builds the engine over vLLM's
    ``BlockPool``; the driver adds the mirror over ours."""
    config = VllmEngineConfig(**shape)
    return VllmEngine(config.replaced(pools="upstream") if config.pools == "both" else config)


build_vllm_engine.poolfuzz_contract = "poolfuzz.harness.kits.vllm_engine.contracts.engine:CONTRACT"  # type: ignore[attr-defined]

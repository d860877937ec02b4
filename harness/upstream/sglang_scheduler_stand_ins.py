"""Stand-ins for what SGLang 0.5.23's own ``Scheduler`` (``managers/scheduler.py``) and its result processor
(``managers/scheduler_components/batch_result_processor.py``) reach outside the memory path.

:mod:`poolfuzz.harness.upstream.sglang_files` executes ``scheduler.py``, ``batch_result_processor.py`` and
``managers/utils.py`` (the result types) from their files; the names below answer the modules they import
from whose real files drag in the server (ZMQ, metrics, the model runner, PD disaggregation).  Each entry
cites the line that needs it.  Everything else those modules export stays a placeholder that refuses use.
The input-side collaborators ``build_scheduler`` puts on the scheduler (the request receiver, the dispatcher, no
sessions, no deferred flush) live here too, since they answer with these request types.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


def _mixin(name: str) -> type:
    """An empty base class: ``Scheduler``'s bases (scheduler.py:447-454) must be distinct classes, and a
    placeholder base derives from ``object`` (two would be a duplicate base).  The mixins' methods serve PD
    disaggregation, multiplexing and pipeline parallelism, none of which a one-rank server without PD runs."""
    return type(name, (), {"__module__": "poolfuzz stand-in", "__doc__": f"stand-in for {name} (no PD, PP, multiplexing)"})


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class PrefillStats:
    """``metrics_reporter.PrefillStats``: ``from_adder`` (scheduler.py:4364) builds logging stats; ``None`` makes
    ``process_batch_result_prefill`` skip the report (batch_result_processor.py:505)."""

    @staticmethod
    def from_adder(*args: Any, **kwargs: Any) -> None:
        return None


class BaseSpecWorker:
    """``speculative.base_spec_worker.BaseSpecWorker``: a class, because the finish path asks
    ``isinstance(self.draft_worker, BaseSpecWorker)`` (batch_result_processor.py:1438); no draft worker is one."""


class ModelImpl(enum.StrEnum):
    """``configs.model_config.ModelImpl`` (model_config.py:167-171): ``init_chunked_prefill`` compares the resolved one with
    ``TRANSFORMERS`` (scheduler.py:1358-1360); the real file imports the model registry and transformers."""

    AUTO = "auto"
    SGLANG = "sglang"
    TRANSFORMERS = "transformers"
    MINDSPORE = "mindspore"


def get_resolved_model_impl(model_config: Any) -> ModelImpl:
    """``model_loader.utils.get_resolved_model_impl`` (utils.py:247): the engine target's model is a decoder-only text model
    SGLang implements itself, so chunked prefill stays on (scheduler.py:1361-1371 turns it off only for a multimodal
    model on the Transformers backend)."""
    return ModelImpl.SGLANG


def is_minimax_sparse(hf_config: Any) -> bool:
    """``configs.model_config.is_minimax_sparse`` (model_config.py:426-431), which ``init_disaggregation`` asks to size a
    decode server's metadata buffers (8x headroom for MiniMax M3, else 2x; scheduler.py:1567-1569).  The engine target's
    model is a Llama-class decoder (:data:`poolfuzz.harness.upstream.engine_disagg.HF_CONFIG`), not MiniMax M3; the real
    module imports the model registry and transformers."""
    return False


@dataclass(frozen=True)
class NetworkAddress:
    """``utils.network.NetworkAddress`` (network.py:542), with which a decode server names a request's prefill bootstrap
    server (``_bootstrap_addr``, disaggregation/decode.py:155) for the transfer backend's receiver; the ``fake`` backend's
    receiver never reads it (fake/conn.py:145-150).  The real module imports zmq and psutil (network.py:13-14)."""

    host: str | None
    port: int | None

    def to_host_port_str(self) -> str:
        return f"{self.host}:{self.port}"


TIMING = {"flush_trace_batch": _noop, "set_schedule_time_batch": _noop, "set_time_batch": _noop}
"""``observability.req_time_stats``' batch timers (scheduler.py:4023, :4332, :5080): timestamps only."""


@dataclass
class AbortReq:
    """``io_struct.AbortReq`` as the scheduler reads and builds it: ``abort_request`` matches ``rid`` as a prefix, or
    ``abort_all`` (scheduler.py:5675-5808); ``_make_abort_req`` (:6398-6409) builds one for ``send_abort_output``,
    which goes to the tokenizer (a sink here)."""

    rid: str = ""
    abort_all: bool = False
    finished_reason: Any = None
    abort_message: str | None = None
    weight_versions: Any = None


@dataclass(kw_only=True)
class TokenizedGenerateReqInput:
    """``io_struct.TokenizedGenerateReqInput`` (io_struct.py:1065): what the tokenizer manager sends the scheduler for one
    generate request, with the fields ``handle_generate_request`` and ``_handle_generate_request`` read
    (scheduler.py:2943-3329), each at the tokenizer's default for a plain text request.  The real module imports zmq and
    pydantic (io_struct.py:49-51), which a ``--no-deps`` install lacks.  The fuzzer chooses ``input_ids``,
    ``sampling_params.max_new_tokens`` and ``priority``."""

    rid: str
    input_ids: Any
    sampling_params: Any
    input_text: str = ""
    priority: int | None = None  # :3018 -> Req.priority; _set_or_validate_priority :3520
    input_embeds: Any = None  # :2979
    mm_inputs: Any = None  # handle_generate_request :2950, :3186
    token_type_ids: Any = None
    return_logprob: bool = False  # :3241
    logprob_start_len: int = -1  # :3241-3258
    top_logprobs_num: int = 0
    token_ids_logprob: Any = None
    stream: bool = False
    return_sampling_mask: bool = False  # :3159
    sampling_logprobs_mode: str = "selected"
    return_flat_raw_top_logprobs: bool = False
    return_hidden_states: bool = False
    return_routed_experts: bool = False  # :3282
    routed_experts_start_len: int = 0
    return_indexer_topk: bool = False
    session_id: str | None = None  # :2973
    session_params: Any = None  # :2966
    lora_id: str | None = None
    lora_name: str | None = None  # _record_kv_event_lora_name :3119
    custom_logit_processor: str | None = None
    positional_embed_overrides: Any = None  # process_input_requests :2231
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None  # :2969
    bootstrap_room: int | None = None
    routed_dp_rank: int | None = None
    disagg_prefill_dp_rank: int | None = None
    kv_hints: Any = None
    routing_key: str | None = None
    require_reasoning: bool = False
    extra_key: str | None = None
    cache_salt: str | None = None
    http_worker_ipc: str | None = None
    time_stats: Any = None  # Req(time_stats=None): fresh request stats (schedule_batch.py:1387-1390)
    multi_item_delimiter_indices: Any = None
    token_indices_to_pool: Any = None
    pp_prefetch_ticketed: bool | None = None  # :3116


@dataclass
class SessionParams:
    """``io_struct.SessionParams`` as ``_handle_generate_request`` and ``Session.create_req`` read it (scheduler.py:2966-2967,
    session_controller.py:214-262): the session a request continues (``id``), the earlier request of that session it appends
    to (``rid``; ``None``: none), and no rewrite of the history (``offset``, ``replace``, ``drop_previous_output`` at the
    tokenizer's defaults)."""

    id: str
    rid: str | None = None
    offset: int | None = None
    replace: bool | None = None
    drop_previous_output: bool | None = None


@dataclass(kw_only=True)
class TokenizedEmbeddingReqInput:
    """``io_struct.TokenizedEmbeddingReqInput``: what the tokenizer manager sends for one embedding request
    (tokenizer_manager.py:1640), with the fields ``handle_embedding_request`` and ``_handle_embedding_request`` read
    (scheduler.py:3653-3757), at the defaults of a plain text request.  Its sampling parameters ask for no tokens
    (io_struct.py:1366)."""

    rid: str
    input_ids: Any
    sampling_params: Any
    input_text: str = ""
    priority: int | None = None  # :3684
    mm_inputs: Any = None  # :3661, :3706
    positional_embed_overrides: Any = None  # :3681; process_input_requests :2231
    token_type_ids: Any = None
    routed_dp_rank: int | None = None
    dimensions: int | None = None
    lora_id: str | None = None
    lora_name: str | None = None  # _record_kv_event_lora_name :3696
    http_worker_ipc: str | None = None
    time_stats: Any = None
    return_pooled_hidden_states: bool = False  # :3689; batch_result_processor.py:482
    multi_item_delimiter_indices: Any = None
    token_indices_to_pool: Any = None
    decision_layout: Any = None


@dataclass
class OpenSessionReqInput:
    """``io_struct.OpenSessionReqInput`` as ``SessionController.open`` reads it (session_controller.py:387-404): the
    session's id, its capacity, whether it streams, its idle timeout (``None``: never reaped)."""

    session_id: str | None
    capacity_of_str_len: int = 1 << 16
    streaming: bool = False
    timeout: float | None = None


@dataclass
class OpenSessionReqOutput:
    """``io_struct.OpenSessionReqOutput`` (session_controller.py:392, :404): the answer to an open."""

    session_id: str | None
    success: bool


@dataclass
class CloseSessionReqInput:
    """``io_struct.CloseSessionReqInput`` as ``close_session`` and ``SessionController.close`` read it (scheduler.py:6149-6157,
    session_controller.py:407)."""

    session_id: str


@dataclass
class FlushCacheReqInput:
    """``io_struct.FlushCacheReqInput`` as ``SchedulerFlushWrapper`` reads it (flush_wrapper.py:22-35): no deferral."""

    timeout_s: float | None = None


@dataclass
class FlushCacheReqOutput:
    """``io_struct.FlushCacheReqOutput`` (flush_wrapper.py:24, :33, :46): whether the flush ran."""

    success: bool
    message: str = ""


@dataclass
class DetachHiCacheStorageReqInput:
    """``io_struct.DetachHiCacheStorageReqInput``: the admin request ``detach_hicache_storage_wrapped`` answers
    (scheduler.py:5479-5518); it carries nothing the handler reads."""


@dataclass
class DetachHiCacheStorageReqOutput:
    """``io_struct.DetachHiCacheStorageReqOutput`` (scheduler.py:5483-5518)."""

    success: bool
    message: str = ""


@dataclass
class ClearHiCacheReqInput:
    """``io_struct.ClearHiCacheReqInput``: the admin request ``clear_hicache_storage_wrapped`` answers (scheduler.py:5230)."""


@dataclass
class ClearHiCacheReqOutput:
    """``io_struct.ClearHiCacheReqOutput`` (scheduler.py:5238)."""

    success: bool


def _never_sent(name: str, line: str) -> type:
    """An io_struct request kind the engine target never sends: a distinct class, because ``_tokenized_requests`` asks
    ``isinstance`` of every input against it (scheduler.py:2292-2302); nothing builds one."""
    return type(name, (), {"__module__": "poolfuzz stand-in", "__doc__": f"io_struct.{name} (scheduler.py:{line}); never sent"})


@dataclass
class PauseGenerationReqInput:
    """``io_struct.PauseGenerationReqInput`` as ``pause_generation`` reads it (scheduler.py:5817-5818): ``mode`` is
    ``in_place`` or ``retract`` (the weight-update pause: every running, last-extend and chunked request retracted)."""

    mode: str = "retract"


@dataclass
class ContinueGenerationReqInput:
    """``io_struct.ContinueGenerationReqInput`` as ``continue_generation`` reads it (scheduler.py:5934-5935): no CUDA
    cache to empty on a CPU."""

    torch_empty_cache: bool = False


class Collaborator:
    """A collaborator ``Scheduler``'s own ``init_*`` method builds (``build_scheduler`` runs the method from the file)
    whose calls never touch memory: it takes upstream's keyword arguments and keeps them, and every method it is asked
    for is a no-op.  Each subclass names the class it answers for and the init line that builds it."""

    def __init__(self, **arguments: Any) -> None:
        self.__dict__.update(arguments)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _noop


class SchedulerOutputStreamer(Collaborator):
    """``scheduler_components.output_streamer.SchedulerOutputStreamer`` (``init_output_streamer``, scheduler.py:2633-2645;
    ``get_output_streamer_class`` :2647): streams outputs to the detokenizer over ZMQ (batch_result_processor.py:510,
    :1093); no memory."""


class SchedulerLoadInquirer(Collaborator):
    """``scheduler_components.load_inquirer.SchedulerLoadInquirer`` (``init_load_inquirer``, scheduler.py:2591): answers
    load queries from the router (:4368); reads, never moves, memory."""


class SchedulerKvEventsPublisher(Collaborator):
    """``scheduler_components.kv_events_publisher.SchedulerKvEventsPublisher`` (``init_kv_events_publisher``,
    scheduler.py:2558-2565) with ``kv_events_config`` unset: no KV events published (``on_idle`` :5312, :2892)."""

    enable_kv_cache_events = False


class SchedulerLogprobResultProcessor(Collaborator):
    """``scheduler_components.logprob_result_processor.SchedulerLogprobResultProcessor`` (``init_batch_result_processor``,
    scheduler.py:2679): fills the logprobs a request asked for; the fuzzer's requests ask for none."""


class SchedulerDPAttnAdapter:
    """``scheduler_components.dp_attn.SchedulerDPAttnAdapter`` (``init_dp_attn_adapter``, scheduler.py:2487-2505) on one rank
    without DP attention: each hook hands the batch back unchanged (:4010-4014, ``maybe_prepare_mlp_sync_batch`` /
    ``maybe_convert_decode_to_extend``), and ``on_idle``'s ``drop_sync_wait_carry`` (:5243) has nothing to drop."""

    def __init__(self, **arguments: Any) -> None:
        self.arguments = arguments

    def drop_sync_wait_carry(self) -> None:
        return None

    def maybe_prepare_mlp_sync_batch(self, batch: Any, need_sync: bool = False) -> Any:
        return batch

    def maybe_convert_decode_to_extend(self, batch: Any) -> Any:
        return batch


class BeamCoordinator:
    """``beam_search.coordinator.BeamCoordinator``: asked before a request exists (scheduler.py:2984, a static method),
    and built by ``init_beam_coordinator`` (:2650-2660, from ``init_batch_result_processor``).  The fuzzer sends no
    beam search, so every request is one sequence and no batch holds a beam member (:4043, :5705;
    batch_result_processor.py:999).  The real file imports the DP-attention layer and the overlap future map."""

    def __init__(self, **arguments: Any) -> None:
        self.arguments = arguments

    def pending_member_rows(self, batch: Any) -> int:
        return 0

    def retire_group(self, req: Any) -> None:
        return None

    def commit_decode(self, batch: Any) -> set[int]:
        return set()

    @staticmethod
    def request_beam_width(recv_req: Any) -> int:
        width = getattr(recv_req.sampling_params, "beam_width", None)
        if width not in (None, 0, 1):
            from poolfuzz.harness.upstream.placeholders import StandInReached

            raise StandInReached(f"a beam-search request (beam_width={width}): the engine target drives no beams")
        return 1


def _no_weight_version_spans(*args: Any, **kwargs: Any) -> None:
    """``utils.weight_versions.compute_weight_version_spans`` (``_make_abort_req``, scheduler.py:6404): which weight
    versions produced an aborted request's output, reported to the user only; no weight updates run here."""
    return None


def _no_capturer() -> None:
    """No routed-experts / indexer top-k capture (a MoE / DSA model's, off by default): the finish path asks for the
    capturer and returns on ``None`` (batch_result_processor.py:151-153, :182-184)."""
    return None


class LocalRequests:
    """``request_receiver`` (init_request_receiver, scheduler.py:2471) with no tokenizer socket: ``ingest_requests`` (:2184)
    hands it the scheduler's own timeout aborts (``local_reqs``, :2202-2206) and gets them back.  Arrivals reach the
    scheduler directly (``SchedulerLoop.arrive``), as this receiver would
    deliver them to the same ``handle_generate_request``."""

    def recv_requests(self, local_reqs: list[Any]) -> list[Any]:
        return list(local_reqs)


class RequestDispatcher:
    """``_request_dispatcher`` (init_request_dispatcher, scheduler.py:1827-1935) for the two kinds the engine target sends
    through ``process_input_requests`` (:2260): a tokenized generate request and an ``AbortReq``.  The real table names
    ~40 io_struct types whose module does not load here (zmq, pydantic); any other kind refuses."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def __call__(self, recv_req: Any) -> Any:
        if isinstance(recv_req, TokenizedGenerateReqInput):
            return self.scheduler.handle_generate_request(recv_req)
        if isinstance(recv_req, TokenizedEmbeddingReqInput):
            return self.scheduler.handle_embedding_request(recv_req)
        if isinstance(recv_req, AbortReq):
            return self.scheduler.abort_request(recv_req)
        raise TypeError(f"the engine target dispatches generate requests and aborts only, not {type(recv_req).__name__}")


SCHEDULER_STAND_INS: dict[str, dict[str, Any]] = {
    "sglang.srt.managers.io_struct": {
        "AbortReq": AbortReq,
        "TokenizedGenerateReqInput": TokenizedGenerateReqInput,
        "TokenizedEmbeddingReqInput": TokenizedEmbeddingReqInput,
        "BatchTokenizedGenerateReqInput": _never_sent("BatchTokenizedGenerateReqInput", "2299"),
        "BatchTokenizedEmbeddingReqInput": _never_sent("BatchTokenizedEmbeddingReqInput", "2299"),
        "PauseGenerationReqInput": PauseGenerationReqInput,
        "ContinueGenerationReqInput": ContinueGenerationReqInput,
        "OpenSessionReqInput": OpenSessionReqInput,
        "OpenSessionReqOutput": OpenSessionReqOutput,
        "CloseSessionReqInput": CloseSessionReqInput,
        "FlushCacheReqInput": FlushCacheReqInput,
        "FlushCacheReqOutput": FlushCacheReqOutput,
        "DetachHiCacheStorageReqInput": DetachHiCacheStorageReqInput,
        "DetachHiCacheStorageReqOutput": DetachHiCacheStorageReqOutput,
        "ClearHiCacheReqInput": ClearHiCacheReqInput,
        "ClearHiCacheReqOutput": ClearHiCacheReqOutput,
    },
    "sglang.srt.managers.scheduler_components.output_streamer": {"SchedulerOutputStreamer": SchedulerOutputStreamer},
    "sglang.srt.managers.scheduler_components.load_inquirer": {"SchedulerLoadInquirer": SchedulerLoadInquirer},
    "sglang.srt.managers.scheduler_components.kv_events_publisher": {"SchedulerKvEventsPublisher": SchedulerKvEventsPublisher},
    "sglang.srt.managers.scheduler_components.logprob_result_processor": {
        "SchedulerLogprobResultProcessor": SchedulerLogprobResultProcessor
    },
    "sglang.srt.managers.scheduler_components.dp_attn": {"SchedulerDPAttnAdapter": SchedulerDPAttnAdapter},
    "sglang.srt.utils.weight_versions": {"compute_weight_version_spans": _no_weight_version_spans},
    "sglang.srt.state_capturer.indexer_topk": {"get_global_indexer_capturer": _no_capturer},
    "sglang.srt.state_capturer.routed_experts": {"get_global_experts_capturer": _no_capturer},
    "sglang.srt.multiplex.multiplexing_mixin": {"SchedulerMultiplexMixin": _mixin("SchedulerMultiplexMixin")},
    "sglang.srt.managers.scheduler_pp_mixin": {"SchedulerPPMixin": _mixin("SchedulerPPMixin")},
    "sglang.srt.managers.scheduler_components.metrics_reporter": {"PrefillStats": PrefillStats},
    "sglang.srt.speculative.base_spec_worker": {"BaseSpecWorker": BaseSpecWorker},
    "sglang.srt.beam_search.coordinator": {"BeamCoordinator": BeamCoordinator},
    "sglang.srt.utils.network": {"NetworkAddress": NetworkAddress},
    "sglang.srt.configs.model_config": {"ModelImpl": ModelImpl, "is_minimax_sparse": is_minimax_sparse},
    "sglang.srt.model_loader.utils": {"get_resolved_model_impl": get_resolved_model_impl},
}
"""Module -> the names it answers with (merged into :func:`poolfuzz.harness.upstream.sglang_stand_ins.stand_in_modules`)."""

THIRD_PARTY = ("psutil", "setproctitle")
"""Imported at scheduler.py:55-56 (process title, CPU affinity and memory at startup, in ``__init__`` only); not
dependencies of the memory path, so a ``--no-deps`` install lacks them."""


@contextlib.contextmanager
def third_party_absent_ok() -> Iterator[None]:
    """While ``scheduler.py`` executes: an inert module for each of :data:`THIRD_PARTY` not installed, removed after."""
    added = []
    for name in THIRD_PARTY:
        if name in sys.modules:
            continue
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name, "poolfuzz: absent; scheduler.py's __init__ alone uses it")
            added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)

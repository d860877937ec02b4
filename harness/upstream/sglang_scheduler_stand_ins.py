"""Stand-ins for what SGLang 0.5.23's own ``Scheduler`` (``managers/scheduler.py``) and its result processor
(``managers/scheduler_components/batch_result_processor.py``) reach outside the memory path.

:mod:`poolfuzz.harness.upstream.sglang_files` executes ``scheduler.py``, ``batch_result_processor.py`` and
``managers/utils.py`` (the result types) from their files; the names below answer the modules they import
from whose real files drag in the server (ZMQ, metrics, the model runner, PD disaggregation).  Each entry
cites the line that needs it.  Everything else those modules export stays a placeholder that refuses use.
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


class DisaggregationMode(enum.Enum):
    """``disaggregation.utils.DisaggregationMode`` (utils.py:150-153): the scheduler compares its mode against these
    members (``_add_request_to_queue``, scheduler.py:3488-3511; ``stash_chunked_request`` :3772); a placeholder's
    members compare equal to nothing, so every branch would fall through to the ``ValueError`` at :3511."""

    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


def prepare_abort(req: Any, error_message: str, status_code: Any = None) -> None:
    """``disaggregation.utils.prepare_abort`` (utils.py:1926-1938), which ``process_pending_chunked_abort`` calls
    (scheduler.py:3808): the request finishes as aborted.  Its logprob resets (:1932-1938) apply only to a request
    returning logprobs, which the fuzzer never sends.  The file itself imports the PD transfer stack."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT  # as upstream, at call time (utils.py:1927)

    req.finished_reason = FINISH_ABORT(error_message, status_code)


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


def _no_weight_version_spans(*args: Any, **kwargs: Any) -> None:
    """``utils.weight_versions.compute_weight_version_spans`` (``_make_abort_req``, scheduler.py:6404): which weight
    versions produced an aborted request's output, reported to the user only; no weight updates run here."""
    return None


def _no_capturer() -> None:
    """No routed-experts / indexer top-k capture (a MoE / DSA model's, off by default): the finish path asks for the
    capturer and returns on ``None`` (batch_result_processor.py:151-153, :182-184)."""
    return None


SCHEDULER_STAND_INS: dict[str, dict[str, Any]] = {
    "sglang.srt.managers.io_struct": {
        "AbortReq": AbortReq,
        "PauseGenerationReqInput": PauseGenerationReqInput,
        "ContinueGenerationReqInput": ContinueGenerationReqInput,
    },
    "sglang.srt.utils.weight_versions": {"compute_weight_version_spans": _no_weight_version_spans},
    "sglang.srt.state_capturer.indexer_topk": {"get_global_indexer_capturer": _no_capturer},
    "sglang.srt.state_capturer.routed_experts": {"get_global_experts_capturer": _no_capturer},
    "sglang.srt.disaggregation.utils": {"DisaggregationMode": DisaggregationMode, "prepare_abort": prepare_abort},
    "sglang.srt.disaggregation.decode": {"SchedulerDisaggregationDecodeMixin": _mixin("SchedulerDisaggregationDecodeMixin")},
    "sglang.srt.disaggregation.prefill": {"SchedulerDisaggregationPrefillMixin": _mixin("SchedulerDisaggregationPrefillMixin")},
    "sglang.srt.multiplex.multiplexing_mixin": {"SchedulerMultiplexMixin": _mixin("SchedulerMultiplexMixin")},
    "sglang.srt.managers.scheduler_pp_mixin": {"SchedulerPPMixin": _mixin("SchedulerPPMixin")},
    "sglang.srt.managers.scheduler_components.metrics_reporter": {"PrefillStats": PrefillStats},
    "sglang.srt.speculative.base_spec_worker": {"BaseSpecWorker": BaseSpecWorker},
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

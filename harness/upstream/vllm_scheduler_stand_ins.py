"""Explicit stand-ins for the modules vLLM 0.33.0's v1 scheduler path calls into at run time.

:data:`poolfuzz.harness.upstream.vllm_files.VLLM` executes the scheduler (``v1/core/sched/``), the KV cache manager,
its coordinator and single-type managers, the block pool, ``v1/request.py``, ``v1/kv_cache_interface.py``,
``v1/outputs.py`` and ``v1/engine/__init__.py`` from the copy in use.  What those files call into and whose
real module drags in pydantic, transformers, zmq, cbor2 or uvloop is answered here, written from upstream's
documented behaviour for a one-rank CPU server with no KV connector, no grammars, no multimodal inputs and
stats off (never copied).  Each entry names the upstream line (vllm 0.33.0) that needs it.

The configuration is a :class:`Fields` object: it holds exactly the fields the path reads, each with the
line reading it, and refuses any other (:class:`~poolfuzz.harness.upstream.placeholders.StandInReached`), so a path
reading a field poolfuzz did not decide fails naming it, never on a silent default.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from poolfuzz.harness.upstream.placeholders import StandInReached


class Fields:
    """An object holding exactly the named fields; reading any other raises :class:`StandInReached` naming it."""

    def __init__(self, what: str, **fields: Any) -> None:
        self.__dict__["_what"] = what
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise StandInReached(
            f"upstream code read {self._what}.{name}, which poolfuzz's stand-in does not hold "
            "(harness/upstream/vllm_scheduler_stand_ins.py: add the field, with the line that reads it)"
        )

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if not k.startswith("_"))
        return f"{self._what}({inner})"


class SamplingParams(Fields):
    """``vllm.sampling_params.SamplingParams``: the fields the scheduler path reads, for a token-level request.

    ``max_tokens`` (v1/request.py:114), ``extra_args`` (:119), ``skip_reading_prefix_cache`` (:317),
    ``eos_token_id`` and ``stop_token_ids`` (v1/core/sched/utils.py:105-109), ``min_tokens`` (:126),
    ``repetition_detection`` (:129), ``num_logprobs`` (v1/core/sched/scheduler.py:2464), ``ignore_eos``.
    The real class is a msgspec struct whose module imports pydantic and the tokenizer stack.
    """

    def __init__(self, *, max_tokens: int, eos_token_id: int | None, stop_token_ids: list[int] | None = None) -> None:
        super().__init__(
            "SamplingParams",
            max_tokens=max_tokens,
            eos_token_id=eos_token_id,
            stop_token_ids=list(stop_token_ids or ()),
            all_stop_token_ids=set(stop_token_ids or ()) | ({eos_token_id} if eos_token_id is not None else set()),
            min_tokens=0,
            ignore_eos=False,
            extra_args=None,
            skip_reading_prefix_cache=None,
            repetition_detection=None,
            logprobs=None,
            num_logprobs=-1,
            prompt_logprobs=None,
            structured_outputs=None,
            thinking_token_budget=None,
            routed_experts_prompt_start=0,
            trace_decode_token_ids=None,
            prompt_logprob_token_ids=None,  # 0.34.0 v1/request.py:374 (no prompt logprobs)
        )


def sha256(value: Any) -> bytes:
    """``vllm.utils.hashing.sha256``: SHA-256 over the pickled value (utils/hashing.py:26; the module imports cbor2
    at its top, line 12).  The block hasher (v1/core/kv_cache_utils.py:953) and ``init_none_hash`` (:145) call it."""
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def length_from_prompt_token_ids_or_embeds(prompt_token_ids: Any, prompt_embeds: Any) -> int:
    """``vllm.utils.length_from_prompt_token_ids_or_embeds`` (v1/request.py:143); ``vllm/utils/__init__`` is heavy."""
    if prompt_token_ids is None:
        if prompt_embeds is None:
            raise ValueError("Neither prompt_token_ids nor prompt_embeds were defined.")
        return len(prompt_embeds)
    return len(prompt_token_ids)


class ConstantList(Sequence[Any]):
    """``vllm.v1.utils.ConstantList`` (v1/request.py:193-194): a read-only view of a request's token list.

    ``vllm/v1/utils.py`` imports uvloop, zmq and the usage module at its top.  The view reads through to the
    list it wraps, as upstream's does; it has no mutating method.
    """

    __slots__ = ("_x",)

    def __init__(self, x: list[Any]) -> None:
        self._x = x

    def __getitem__(self, item: Any) -> Any:
        return self._x[item]

    def __len__(self) -> int:
        return len(self._x)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._x)

    def __repr__(self) -> str:
        return f"ConstantList({self._x!r})"

    def copy(self) -> list[Any]:
        """v1/utils.py:106 (a resumed request's tokens, scheduler.py:1962): a copy of the wrapped list."""
        return self._x.copy()


def strip_covered_mm_data(mm_features: list[Any], num_computed_tokens: int, uses_mrope: bool = False) -> list[Any]:
    """``vllm.multimodal.utils.strip_covered_mm_data`` (v1/core/sched/output.py:69) with no multimodal inputs: the
    features unchanged (multimodal/utils.py:224 returns them when there are none); anything else is refused."""
    if mm_features:
        raise StandInReached("multimodal inputs are not driven (vllm.multimodal needs PIL, transformers)")
    return mm_features


def record_function_or_nullcontext(name: str) -> contextlib.nullcontext[None]:
    """``vllm.v1.utils.record_function_or_nullcontext`` (scheduler.py:912, :1664, :1782): profiling off."""
    return contextlib.nullcontext()


class StructuredOutputRequest:
    """``vllm.v1.structured_output.request.StructuredOutputRequest``: no grammars, so none per request (v1/request.py:89)."""

    @staticmethod
    def from_sampling_params(sampling_params: Any) -> None:
        return None


class StructuredOutputManager:
    """``vllm.v1.structured_output.StructuredOutputManager`` with no grammars: tokens pass through.

    Read by ``update_from_output`` (scheduler.py:2432, only for a request with a grammar) and
    ``update_draft_token_ids`` (:2879, :2907).
    """

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return True

    def validate_tokens(self, request_id: str, tokens: list[int]) -> list[int]:
        return tokens

    def grammar_bitmask(self, *args: Any, **kwargs: Any) -> None:
        return None

    def trim_spec_tokens(self, request: Any, spec_tokens: list[int]) -> list[int]:
        """0.34.0's ``update_draft_token_ids`` (scheduler.py:3012): a request without structured output keeps its
        drafts as proposed (v1/structured_output/__init__.py:360-363)."""
        return spec_tokens


class NullPublisher:
    """``EventPublisherFactory.create(None, ...)`` with KV events off (scheduler.py:206): publishes nothing."""

    def publish(self, batch: Any) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def get_publisher_config(self) -> None:
        return None


class EventPublisherFactory:
    """``vllm.distributed.kv_events.EventPublisherFactory`` (the real module imports zmq)."""

    @staticmethod
    def create(config: Any, data_parallel_rank: int = 0) -> NullPublisher:
        if config is not None and getattr(config, "enable_kv_cache_events", False):
            raise StandInReached("KV cache events are not driven (vllm.distributed.kv_events needs zmq)")
        return NullPublisher()


class CpuPlatform:
    """``vllm.platforms.current_platform`` on a CPU box: not XPU (async_scheduler.py:21), no custom KV specs
    (single_type_kv_cache_manager.py:2730)."""

    def is_xpu(self) -> bool:
        return False

    def register_custom_kv_cache_specs(self, vllm_config: Any) -> None:
        return None


def get_dtype_size(dtype: Any) -> int:
    """``vllm.utils.torch_utils.get_dtype_size`` (v1/kv_cache_interface.py: a spec's page size in bytes)."""
    import torch

    return int(torch.tensor([], dtype=dtype).element_size())


ENVS: Mapping[str, Any] = {
    "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": True,  # v1/core/kv_cache_utils.py:83 (the default "1"; events off)
    "VLLM_XPU_PP_MICROBATCH": False,  # v1/core/sched/async_scheduler.py:21 (read on XPU only)
    "VLLM_COMPUTE_NANS_IN_LOGITS": False,  # v1/metrics/stats.py:482 (stats off)
}
"""``vllm.envs`` values the path reads: each the documented default (vllm/envs.py)."""

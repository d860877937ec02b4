"""Explicit stand-ins for the vLLM modules that ``v1/core/kv_cache_utils.py`` and ``block_pool.py`` call into.

Both files are pure Python over lists and dicts; what they import is either used only in
annotations, only by code paths we do not drive (request hashing, multimodal extra keys,
KV-cache sizing), or is a handful of small helpers.  The real modules behind them need msgspec,
zmq, the config system and torch, so :data:`poolfuzz.harness.upstream.vllm_files.VLLM` executes the two
files from the copy and answers these modules with stand-ins written from their documented
behaviour (prefix-cache-and-peers.md section 2), not copied; every other ``vllm`` module is a
placeholder that refuses use (:mod:`poolfuzz.harness.upstream.placeholders`).

Names only reached outside the block-pool bookkeeping raise :class:`StandInReached` when called,
so a path we do not reproduce cannot run silently on a stand-in.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from poolfuzz.harness.upstream import vllm_scheduler_stand_ins as scheduler_stand_ins
from poolfuzz.harness.upstream.placeholders import StandInModule


def _module(name: str, **attrs: Any) -> ModuleType:
    module = StandInModule(name, "poolfuzz stand-in (poolfuzz.harness.upstream.vllm_stand_ins)")
    module.__dict__.update(attrs)
    return module


@dataclass
class RequestStandIn:
    """What ``BlockPool.cache_full_blocks`` reads from a ``Request`` with KV events off: its block hashes.

    ``block_hashes[i]`` is the chained hash of the request's first ``i + 1`` blocks at
    the pool's ``hash_block_size``; any distinct ``bytes`` values serve as hashes.
    With KV events on, upstream also reads token ids, LoRA and multimodal fields, which
    this stand-in does not have.
    """

    block_hashes: list[bytes] = field(default_factory=list)


class KVCacheEvent:
    """Base of vLLM's KV events (a msgspec struct upstream); keeps its fields as attributes."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{key}={value!r}" for key, value in self.__dict__.items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__


class BlockStored(KVCacheEvent):
    """Blocks entered the prefix cache."""


class BlockRemoved(KVCacheEvent):
    """Blocks left the prefix cache."""


class AllBlocksCleared(KVCacheEvent):
    """The prefix cache was reset."""


class OnceLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """``vllm.logger``'s logger: the standard one plus ``info_once``/``warning_once``/``debug_once`` (vllm/logger.py),
    which kv_cache_utils.py:865-866 calls for a model of several KV cache groups (``resolve_kv_cache_block_sizes``).
    Each message is logged once per logger, as vLLM's ``lru_cache``-backed helpers do."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})
        self._seen: set[tuple[int, str, tuple[object, ...]]] = set()

    def _once(self, level: int, msg: str, *args: object) -> None:
        key = (level, msg, tuple(map(str, args)))
        if key not in self._seen:
            self._seen.add(key)
            self.log(level, msg, *args)

    def info_once(self, msg: str, *args: object, **_: object) -> None:
        self._once(logging.INFO, msg, *args)

    def warning_once(self, msg: str, *args: object, **_: object) -> None:
        self._once(logging.WARNING, msg, *args)

    def debug_once(self, msg: str, *args: object, **_: object) -> None:
        self._once(logging.DEBUG, msg, *args)


def init_logger(name: str) -> OnceLogger:
    """``vllm.logger.init_logger``: a named logger with vLLM's ``*_once`` methods."""
    return OnceLogger(logging.getLogger(name))


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(a // -b)


def _stand_in_table() -> dict[str, ModuleType]:
    """The stand-in modules by name (each built once a loaded copy; placeholders answer the rest)."""
    modules: dict[str, ModuleType] = {}
    # The default of VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES ("1"); read only when events are on.
    s = scheduler_stand_ins
    # Read when KV events are on, by the async scheduler on XPU only, and by stats (all off): vllm/envs.py's defaults.
    modules["vllm.envs"] = _module("vllm.envs", **s.ENVS)
    modules["vllm.logger"] = _module("vllm.logger", init_logger=init_logger)
    modules["vllm.distributed.kv_events"] = _module(
        "vllm.distributed.kv_events",
        MEDIUM_GPU="GPU",
        MEDIUM_CPU="CPU",  # v1/core/single_type_kv_cache_manager.py:9
        KVCacheEvent=KVCacheEvent,
        BlockStored=BlockStored,
        BlockRemoved=BlockRemoved,
        AllBlocksCleared=AllBlocksCleared,
        EventPublisherFactory=s.EventPublisherFactory,  # v1/core/sched/scheduler.py:206
    )
    # The scheduler path (v1/request.py, v1/core/sched/): see harness/upstream/vllm_scheduler_stand_ins.py.
    modules["vllm.sampling_params"] = _module("vllm.sampling_params", SamplingParams=s.SamplingParams)
    modules["vllm.utils"] = _module("vllm.utils", length_from_prompt_token_ids_or_embeds=s.length_from_prompt_token_ids_or_embeds)
    modules["vllm.utils.hashing"] = _module("vllm.utils.hashing", sha256=s.sha256)
    modules["vllm.utils.torch_utils"] = _module("vllm.utils.torch_utils", get_dtype_size=s.get_dtype_size, PIN_MEMORY=False)
    modules["vllm.v1.utils"] = _module(
        "vllm.v1.utils", ConstantList=s.ConstantList, record_function_or_nullcontext=s.record_function_or_nullcontext
    )
    modules["vllm.v1.structured_output"] = _module("vllm.v1.structured_output", StructuredOutputManager=s.StructuredOutputManager)
    modules["vllm.v1.structured_output.request"] = _module(
        "vllm.v1.structured_output.request", StructuredOutputRequest=s.StructuredOutputRequest
    )
    # v1/kv_cache_spec_registry.py:49-51: no config is current (the real vllm.config needs pydantic and transformers).
    modules["vllm.config"] = _module("vllm.config", get_current_vllm_config_or_none=lambda: None)
    modules["vllm.multimodal.utils"] = _module("vllm.multimodal.utils", strip_covered_mm_data=s.strip_covered_mm_data)
    modules["vllm.platforms"] = _module("vllm.platforms", current_platform=s.CpuPlatform())
    return modules


def stand_in_modules() -> dict[str, Callable[[str], ModuleType]]:
    """Module name -> factory: :data:`poolfuzz.harness.upstream.vllm_files.VLLM`'s stand-ins."""
    table = _stand_in_table()
    return {name: functools.partial(_copy_of, module) for name, module in table.items()}


def _copy_of(module: ModuleType, name: str) -> ModuleType:
    return module


def block_hashes(values: Sequence[int]) -> list[bytes]:
    """Distinct, deterministic block hashes for small ints (tests and adapters name blocks by number)."""
    return [value.to_bytes(8, "big", signed=True) for value in values]

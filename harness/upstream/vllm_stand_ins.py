"""Stand-ins for the vLLM modules that ``v1/core/kv_cache_utils.py`` and ``block_pool.py`` import.

Both files are pure Python over lists and dicts; what they import is either used only
in annotations, only by code paths we do not drive (request hashing, multimodal extra
keys, KV-cache sizing), or is a handful of small helpers.  The real modules behind
them need msgspec, zmq, the config system and torch, so
:mod:`harness.upstream.vllm_loader` executes the two files under these stand-ins,
written from their documented behaviour (prefix-cache-and-peers.md section 2), not copied.

Names only reached outside the block-pool bookkeeping raise :class:`StandInUnsupported`
when called, so a path we do not reproduce cannot run silently on a stand-in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

_PACKAGES = (
    "vllm",
    "vllm.distributed",
    "vllm.multimodal",
    "vllm.utils",
    "vllm.v1",
    "vllm.v1.core",
)


class StandInUnsupported(NotImplementedError):
    """Upstream vLLM code reached a stand-in for something the block-pool harness does not reproduce."""


def _module(name: str, **attrs: Any) -> ModuleType:
    module = ModuleType(name, "poolfuzz stand-in (harness.upstream.vllm_stubs)")
    module.__dict__.update(attrs)
    return module


def _unsupported(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StandInUnsupported(f"{what} is outside the block-pool bookkeeping the stand-ins reproduce")

    refuse.__name__ = what.rsplit(".", 1)[-1]
    return refuse


def _placeholder(name: str) -> type:
    """A class that only has to exist: upstream names it in annotations and isinstance checks we never reach."""
    return type(name, (), {"__doc__": f"Stand-in for vLLM's {name} (annotation only).", "__module__": __name__})


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


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(a // -b)


def vllm_stand_ins() -> dict[str, ModuleType]:
    """The ``sys.modules`` entries the two block-pool files need while they execute.

    Packages get an empty ``__path__``: importing any other vLLM module fails loudly
    instead of pulling in the real package.
    """
    modules = {name: _module(name, __path__=[]) for name in _PACKAGES}
    # The default of VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES ("1"); read only when events are on.
    modules["vllm.envs"] = _module("vllm.envs", VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=True)
    modules["vllm.config"] = _module("vllm.config", VllmConfig=_placeholder("VllmConfig"))
    modules["vllm.logger"] = _module("vllm.logger", init_logger=logging.getLogger)
    modules["vllm.multimodal.utils"] = _module(
        "vllm.multimodal.utils",
        get_mm_features_in_window=_unsupported("vllm.multimodal.utils.get_mm_features_in_window"),
    )
    # Two distinct functions: kv_cache_utils puts them in a frozenset at import time.
    modules["vllm.utils.hashing"] = _module(
        "vllm.utils.hashing",
        xxhash=_unsupported("vllm.utils.hashing.xxhash"),
        xxhash_cbor=_unsupported("vllm.utils.hashing.xxhash_cbor"),
    )
    modules["vllm.utils.math_utils"] = _module("vllm.utils.math_utils", cdiv=cdiv)
    interface = {
        name: _placeholder(name) for name in ("KVCacheConfig", "KVCacheGroupSpec", "KVCacheSpec", "MambaSpec", "UniformTypeKVCacheSpecs")
    }
    modules["vllm.v1.kv_cache_interface"] = _module(
        "vllm.v1.kv_cache_interface",
        **interface,
        iter_layer_specs=_unsupported("vllm.v1.kv_cache_interface.iter_layer_specs"),
    )
    modules["vllm.v1.kv_cache_spec_registry"] = _module(
        "vllm.v1.kv_cache_spec_registry", KVCacheSpecRegistry=_placeholder("KVCacheSpecRegistry")
    )
    modules["vllm.v1.request"] = _module("vllm.v1.request", Request=RequestStandIn)
    modules["vllm.v1.utils"] = _module("vllm.v1.utils", tensor_data=_unsupported("vllm.v1.utils.tensor_data"))
    modules["vllm.v1.core.kv_cache_metrics"] = _module(
        "vllm.v1.core.kv_cache_metrics", KVCacheMetricsCollector=_placeholder("KVCacheMetricsCollector")
    )
    modules["vllm.distributed.kv_events"] = _module(
        "vllm.distributed.kv_events",
        MEDIUM_GPU="GPU",
        KVCacheEvent=KVCacheEvent,
        BlockStored=BlockStored,
        BlockRemoved=BlockRemoved,
        AllBlocksCleared=AllBlocksCleared,
    )
    return modules


def block_hashes(values: Sequence[int]) -> list[bytes]:
    """Distinct, deterministic block hashes for small ints (tests and adapters name blocks by number)."""
    return [value.to_bytes(8, "big", signed=True) for value in values]

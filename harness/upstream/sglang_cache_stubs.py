"""Stand-ins for the SGLang modules that the prefix-cache and SWA allocator files import.

:mod:`harness.upstream.sglang_cache` executes upstream 0.5.23's ``radix_cache.py``,
``base_prefix_cache.py`` and ``allocator/swa.py`` (plus the small leaf files they
need) from the installed wheel.  Those files import a dozen helpers whose real
modules pull in most of SGLang; this module writes the few names they use, from their
documented behaviour (prefix-cache-and-peers.md section 1.2), not copied.

Every stand-in either reproduces upstream's semantics for the configuration we run
(KV events off, metrics off, no NPU, CPU platform) or refuses loudly when a caller
leaves that configuration, so a silent divergence from upstream cannot creep in:

* the event recorder only exists disabled (upstream's ``enabled=False`` recorder is a
  no-op too); asking for events raises;
* the metrics collector and runtime context raise when touched (only
  ``enable_metrics=True`` reaches them);
* ``sglang.srt.utils.invariants.expect`` keeps upstream's data layer (``recover``) and,
  where upstream's default level (``SGLANG_INVARIANT_CHECK`` unset, i.e. off) detects
  nothing, *records* each failing check in :class:`InvariantSignals` without changing
  what the allocator does, so an adapter can report what upstream itself would have
  flagged (e.g. ``swa.peer_mapped``, the double-free guard of sglang PR #27586).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from harness.upstream import stubs

_PACKAGES = ("sglang.srt.mem_cache.unified_cache", "sglang.srt.observability")


def _module(name: str, **attrs: Any) -> ModuleType:
    module = ModuleType(name, "poolfuzz stand-in (harness.upstream.sglang_cache_stubs)")
    module.__dict__.update(attrs)
    return module


class StandInUnsupported(NotImplementedError):
    """Upstream code reached a stand-in outside the configuration it reproduces."""


# --------------------------------------------------------- mem_cache.events
class LoRANameTable:
    """LoRA id -> adapter name; only consulted when KV events are on, which we refuse."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}

    def register(self, *args: Any, **kwargs: Any) -> None:
        raise StandInUnsupported("LoRA name registration needs KV events, which the stand-in does not record")

    def get(self, extra_key: str | None) -> str | None:
        return None

    def resolve(self, extra_key: str | None) -> str | None:
        return None


class KvEventLoraNames(LoRANameTable):
    """The subclass ``CacheInitParams`` defaults to; same stand-in."""


class DisabledEventRecorder:
    """``KVCacheEventRecorder`` with ``enabled=False``: every ``record_*`` is a no-op, ``take`` is empty."""

    def __init__(self, *, enabled: bool, page_size: int, dynamo_format: bool = False, lora_names: Any = None) -> None:
        if enabled:
            raise StandInUnsupported("KV cache events are not reproduced; use enable_kv_cache_events=False")
        self.enabled = False
        self.page_size = page_size

    def record_store(self, node: Any, medium: Any = None, *, session_id: str | None = None) -> None:
        return None

    def record_remove(self, node: Any, medium: Any = None) -> None:
        return None

    def record_all_cleared(self) -> None:
        return None

    def take(self) -> list[Any]:
        return []


# ---------------------------------------------------------- mem_cache.utils
def eviction_strategy_factory(evict_policy: ModuleType) -> Callable[..., Any]:
    """``get_eviction_strategy(policy, config)`` over upstream's own strategy classes.

    The policy names are upstream's (``lru lfu fifo mru filo priority slru tlru``);
    an unknown one raises ``ValueError`` as upstream does.
    """
    factories = {
        "lru": evict_policy.LRUStrategy,
        "lfu": evict_policy.LFUStrategy,
        "fifo": evict_policy.FIFOStrategy,
        "mru": evict_policy.MRUStrategy,
        "filo": evict_policy.FILOStrategy,
        "priority": evict_policy.PriorityStrategy,
        "slru": evict_policy.SLRUStrategy,
        "tlru": evict_policy.TLRUStrategy,
    }

    def get_eviction_strategy(eviction_policy: str, config: dict[str, Any] | None = None) -> Any:
        policy = eviction_policy.lower()
        if policy not in factories:
            raise ValueError(f"Unknown eviction policy: {policy}. Supported policies: {sorted(factories)}.")
        return factories[policy](**config) if config else factories[policy]()

    return get_eviction_strategy


def split_node_hash_value(child_hash_value: list[str] | None, split_len: int, page_size: int) -> tuple[list[str] | None, list[str] | None]:
    """Per-page hashes of a node split at ``split_len`` tokens: (new parent's, child's)."""
    if child_hash_value is None:
        return None, None
    split_pages = split_len // page_size
    return child_hash_value[:split_pages], child_hash_value[split_pages:]


# ------------------------------------------------------- mem_cache.memory_pool
class KVCache:
    """Base of upstream's KV buffers; the allocators only hold a reference to one."""


class ReqToTokenPool:
    """Named in ``base_prefix_cache`` annotations only; the radix cache under test owns no request rows."""


class SWAKVPoolFake:
    """What ``SWATokenToKVPoolAllocator`` reads from its ``kvcache`` (an ``SWAKVPool`` upstream).

    The allocator registers its ``full_to_swa_index_mapping`` here and translates
    ``last_loc`` through it; upstream's pool returns ``mapping[kv_indices]``, the
    trailing ``-1`` entry turning a ``last_loc`` of ``-1`` into ``-1``.  No KV buffers.
    Made a subclass of the loaded ``BaseSWAKVPool`` by :func:`swa_kv_pool_class`.
    """

    full_kv_pool: Any = None
    swa_kv_pool: Any = None
    swa_req_ring_size: int | None = None
    full_to_swa_index_mapping: torch.Tensor | None = None

    def register_mapping(self, full_to_swa_index_mapping: torch.Tensor) -> None:
        self.full_to_swa_index_mapping = full_to_swa_index_mapping

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        assert self.full_to_swa_index_mapping is not None, "the allocator registers its mapping at construction"
        return self.full_to_swa_index_mapping[kv_indices]

    def get_state_buf_infos(self) -> tuple[list[int], list[int], list[int]]:
        return [], [], []


def swa_kv_pool_class(base_swa_kv_pool: type) -> type:
    """:class:`SWAKVPoolFake` as a subclass of upstream's ``BaseSWAKVPool`` (the allocator asserts it)."""
    return type("SWAKVPoolFake", (SWAKVPoolFake, base_swa_kv_pool), {"__module__": __name__})


# ------------------------------------------------------ utils.invariants
class Bucket(enum.Enum):
    """Upstream's blast-radius classes for an invariant."""

    SOFTEN = "soften"
    GUARD = "guard"
    FATAL_CONTAINABLE = "fatal_containable"
    FATAL_UNCONTAINABLE = "fatal_uncontainable"


class IsTrue:
    """The checked value is itself the elementwise condition."""

    name = "is_true"

    def ok(self, value: torch.Tensor) -> torch.Tensor:
        return value


@dataclass
class Invariant:
    """A declared upstream invariant: name, bucket, property, optional data-layer ``recover``."""

    name: str
    bucket: Bucket
    prop: IsTrue
    recover: Callable[[torch.Tensor], torch.Tensor] | None = None


@dataclass(frozen=True)
class InvariantHit:
    """One failing upstream ``expect``: the invariant, its bucket, the message and how many elements failed."""

    name: str
    bucket: str
    message: str
    failures: int


@dataclass
class InvariantSignals:
    """Upstream ``expect`` calls that failed since the last :meth:`drain` (recorded, never raised)."""

    hits: list[InvariantHit] = field(default_factory=list)

    def expect(self, inv: Invariant, value: torch.Tensor | None, *, msg: str = "") -> torch.Tensor | None:
        if value is not None and value.numel() > 0:
            failures = int((~inv.prop.ok(value)).sum())
            if failures:
                self.hits.append(InvariantHit(inv.name, inv.bucket.value, msg, failures))
        if inv.recover is not None and value is not None:
            value = inv.recover(value)
        return value

    def drain(self) -> list[InvariantHit]:
        hits, self.hits = self.hits, []
        return hits


# ------------------------------------------------------------ the rest
def ceil_align(x: int, y: int) -> int:
    """Smallest multiple of ``y`` that is >= ``x`` (exact for any int size)."""
    return -(-x // y) * y


def async_h2d(args: list[int], *, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """A host list as a tensor on ``device`` (upstream stages it in pinned memory; same values)."""
    return torch.tensor(args, dtype=dtype).to(device)


def _untouchable(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StandInUnsupported(f"{what} is not reproduced; build the cache with enable_metrics=False")

    return refuse


def _lazy_kernel_function(name: str, kernel_file: Path) -> Callable[..., Any]:
    """Upstream's Triton helper ``name``, loaded on first call (a CUDA SWA free only)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(stubs.load_kernel_module(kernel_file), name)(*args, **kwargs)

    call.__name__ = name
    return call


def cache_stand_ins(*, kernel_file: Path, allocator_modules: dict[str, ModuleType], signals: InvariantSignals) -> dict[str, ModuleType]:
    """The ``sys.modules`` entries the prefix-cache and SWA files need while they execute.

    ``allocator_modules`` maps ``base``/``token``/``paged`` to the modules
    :func:`harness.upstream.loader.load_upstream` already loaded, so the SWA allocator
    composes the very classes the other upstream targets fuzz.  The real leaf files
    (``component_type``, ``evict_policy``, ``cache_init_params``...) are executed by the
    caller and are not in this dict; ``sglang.srt.mem_cache.utils`` is completed by the
    caller once ``evict_policy`` exists (:func:`eviction_strategy_factory`).
    """
    modules = stubs.stub_modules(kernel_file=kernel_file)
    modules.update({name: _module(name, __path__=[]) for name in _PACKAGES})
    allocator_package = "sglang.srt.mem_cache.allocator"
    modules[allocator_package] = _module(
        allocator_package, __path__=[], BaseTokenToKVPoolAllocator=allocator_modules["base"].BaseTokenToKVPoolAllocator
    )
    for name, module in allocator_modules.items():
        modules[f"{allocator_package}.{name}"] = module
    base_utils = modules["sglang.srt.utils"].__dict__
    modules["sglang.srt.utils"] = _module(
        "sglang.srt.utils",
        __path__=[],
        **{key: base_utils[key] for key in ("get_num_new_pages", "next_power_of_2", "is_hip", "get_bool_env_var")},
        is_npu=lambda: False,
    )
    modules["sglang.srt.utils.common"] = _module(
        "sglang.srt.utils.common", ceil_align=ceil_align, async_h2d=async_h2d, get_num_new_pages=stubs.get_num_new_pages
    )
    modules["sglang.srt.utils.invariants"] = _module(
        "sglang.srt.utils.invariants", Bucket=Bucket, Invariant=Invariant, IsTrue=IsTrue, expect=signals.expect
    )
    platform = SimpleNamespace(capabilities=SimpleNamespace(supports_triton=False), get_paged_allocator_cls=lambda: None)
    modules["sglang.srt.platforms"] = _module("sglang.srt.platforms", current_platform=platform)
    kernels = modules["sglang.kernels.ops.memory.allocator"]
    vars(kernels)["get_and_clear_swa_pages"] = _lazy_kernel_function("get_and_clear_swa_pages", kernel_file)
    modules["sglang.srt.mem_cache.events"] = _module(
        "sglang.srt.mem_cache.events",
        KVCacheEventRecorder=DisabledEventRecorder,
        LoRANameTable=LoRANameTable,
        KvEventLoraNames=KvEventLoraNames,
    )
    modules["sglang.srt.mem_cache.utils"] = _module("sglang.srt.mem_cache.utils", split_node_hash_value=split_node_hash_value)
    modules["sglang.srt.mem_cache.memory_pool"] = _module(
        "sglang.srt.mem_cache.memory_pool", KVCache=KVCache, ReqToTokenPool=ReqToTokenPool
    )
    modules["sglang.srt.observability.metrics_collector"] = _module(
        "sglang.srt.observability.metrics_collector",
        STAT_LOGGER_ROLE_RADIX_CACHE="radix_cache",
        RadixCacheMetricsCollector=object,
        radix_cache_metric_labels=_untouchable("radix_cache_metric_labels"),
        resolve_collector_class=_untouchable("resolve_collector_class"),
    )
    modules["sglang.srt.runtime_context"] = _module(
        "sglang.srt.runtime_context",
        get_observability=_untouchable("get_observability"),
        get_parallel=_untouchable("get_parallel"),
    )
    return modules

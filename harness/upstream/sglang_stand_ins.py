"""Explicit stand-ins for the SGLang modules the scheduler memory path reaches at run time.

:mod:`harness.upstream.engine_loader` executes the real files of ``mem_cache/``,
``schedule_batch.py`` and the invariant checker; the modules here are the ones those files
*call into* while a request runs, whose real files drag in most of SGLang.  Each stand-in is
written from upstream's documented behaviour for the configuration the engine target runs (one
CPU rank, no speculative decoding unless asked, no disaggregation, metrics off), and every
other attribute of these modules stays a placeholder that refuses to be used, so an unplanned
path fails with the name it needed.  Nothing here is copied from SGLang.

The runtime configuration (``runtime_context``: ``get_spec()``, ``get_serving()``, ...) is a
:class:`ConfigBag` per namespace holding exactly the leaves the path reads, each with the
upstream line that reads it; reading any other leaf raises :class:`StandInReached`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from harness.upstream.engine_placeholders import StandInModule, StandInReached
from harness.upstream.sglang_cache_stubs import async_h2d
from harness.upstream.stubs import get_bool_env_var, get_num_new_pages, next_power_of_2

logger = logging.getLogger("poolfuzz.engine")


class ConfigBag:
    """One published ``runtime_context`` namespace: the leaves the memory path reads, no more."""

    def __init__(self, namespace: str, **leaves: Any) -> None:
        self._namespace = namespace
        self.__dict__.update(leaves)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise StandInReached(
            f"upstream read runtime_context.get_{self._namespace}().{name}, which the engine target does not publish "
            "(add it to harness.upstream.engine_stand_ins.RuntimeConfig)"
        )


class RuntimeConfig:
    """The published configuration of one engine target run (``runtime_context`` stand-in).

    Leaves, with the upstream reader (``srt/``-relative, 0.5.23):

    * ``spec.algorithm`` / ``spec.is_none``: no speculative decoding (``common.py:452``,
      ``schedule_batch.py:1505``);
    * ``serving.strip_thinking_cache``: off (``common.py:456``, ``schedule_batch.py:1555``);
    * ``disagg.disaggregation_mode``: ``"null"`` (``schedule_batch.py:2380``, ``:3493``);
    * ``schedule.schedule_policy``: ``"fcfs"`` (``schedule_batch.py:3555``);
    * ``parallel.dcp_enabled``: False, ``parallel.attn_dcp_size`` 1 (``invariant_checker.py:121``);
    * ``schedule.retraction_policy``: ``"length"``, the default (``arg_groups/fields/schedule.py:126``);
    * ``exec.mamba.*`` and ``exec.features.*``: every extra buffer and replay off (``schedule_policy.py:600``, ``:956``);
      for a hybrid-SSM shape also the int8 checkpoint pool off (``mamba_checkpoint_pool.py:325``), no per-path
      state cap (``mamba_max_states_per_path=-1``, ``components/mamba.py:86``; ``rust_tree_core/adapter.py:465``)
      and the default decode track interval 256 (``arg_groups/fields/exec_.py:497``, ``:530``, ``:534``).

    Each value is the server default (``arg_groups/fields/*.py``) for a one-rank full-attention server.
    """

    def __init__(self, *, speculative: bool = False) -> None:
        self.speculative = speculative
        self.bags: dict[str, ConfigBag] = {}
        self.publish()

    def publish(self, *, chunked_prefill_size: int | None = None, context_length: int = 128) -> None:
        """Publish the namespaces for one server shape (the engine loop calls it per configuration)."""
        bag = ConfigBag
        self.bags = {
            "spec": bag("spec", speculative_algorithm=None),
            "serving": bag("serving", strip_thinking_cache=False),
            "disagg": bag(
                "disagg",
                disaggregation_mode="null",
                disaggregation_decode_retraction_backup=None,
                disaggregation_decode_enable_offload_kvcache=False,
            ),
            "schedule": bag(
                "schedule",
                schedule_policy="fcfs",
                retraction_policy="length",
                schedule_low_priority_values_first=False,
                chunked_prefill_size=chunked_prefill_size,
                prefill_max_requests=None,
            ),
            "parallel": bag(
                "parallel", dcp_enabled=False, attn_dcp_size=1, attn_dcp_rank=0, attn_cp_size=1, attn_cp_rank=0, tp_rank=0, tp_size=1
            ),
            "exec": bag(
                "exec",
                features=bag("exec.features", enable_encoder_swa_bounded_replay=False),
                mamba=bag(
                    "exec.mamba",
                    enable_mamba_extra_buffer=False,
                    enable_mamba_extra_buffer_lazy=False,
                    enable_int8_mamba_checkpoint=False,
                    int8_mamba_ckpt_size=None,
                    mamba_max_states_per_path=-1,
                    mamba_track_interval=256,
                ),
            ),
            "model": bag("model", context_length=context_length),
            "memory": bag("memory", enable_hisparse=False, radix_eviction_policy="lru"),
            "observability": bag("observability", enable_metrics=False, extra_metric_labels=None),
        }

    def is_config_namespace_published(self, namespace: str) -> bool:
        """``RuntimeContext.is_config_namespace_published`` (schedule_policy.py:596 asks it)."""
        return namespace in self.bags

    def getter(self, namespace: str) -> Callable[[], ConfigBag]:
        def get() -> ConfigBag:
            return self.bags[namespace]

        get.__name__ = f"get_{namespace}"
        return get


RUNTIME = RuntimeConfig()
"""The process's published configuration; the engine driver sets it per run."""


def _module(name: str, **attrs: Any) -> ModuleType:
    module = StandInModule(name, "poolfuzz stand-in (harness.upstream.engine_stand_ins)")
    module.__dict__.update(attrs)
    return module


def _false(*args: Any, **kwargs: Any) -> bool:
    return False


def ceil_align(x: int, y: int) -> int:
    """``utils/common.py``: the smallest multiple of ``y`` at or above ``x``."""
    return -(-x // y) * y


def ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def flatten_nested_list(nested: Any) -> list[Any]:
    if isinstance(nested, list):
        return [item for sub in nested for item in flatten_nested_list(sub)]
    return [nested]


def raise_error_or_warn(obj: Any, strict: bool, counter_name: str, message: str, log_interval: int = 1000) -> None:
    """``utils/common.py:5064``: raise ``ValueError(message)`` when strict, else count and log."""
    if strict:
        raise ValueError(message)
    count = getattr(obj, counter_name, 0)
    if count % log_interval == 0:
        logger.warning(message)
    setattr(obj, counter_name, count + 1)


def assert_int64_array(values: Any, name: str) -> None:
    """``utils/common.py:1383``: the Rust core's keys must be ``array('q')``."""
    from array import array

    assert isinstance(values, array) and values.typecode == "q" and values.itemsize == 8, f"{name} must be array('q') with 8-byte items"


def flatten_arrays_to_pinned_cpu(parts: list[Any], pin: bool) -> torch.Tensor:
    """``utils/common.py:1390``: concatenate ``array('q')`` buffers into one int64 CPU tensor."""
    if pin:
        raise StandInReached("pinned memory was requested on a CPU box (is_pin_memory_available is False)")
    flat = [int(v) for part in parts for v in part]
    return torch.tensor(flat, dtype=torch.int64)


def flatten_arrays_to_int64_tensor(parts: list[Any], device: Any, pin: bool) -> torch.Tensor:
    return flatten_arrays_to_pinned_cpu(parts, pin).to(device)


class _DisabledMemorySaver:
    """``TorchMemorySaverAdapter.create(enable=False)``: upstream's no-op adapter."""

    @contextlib.contextmanager
    def region(self, tag: str = "", enable_cpu_backup: bool = False) -> Iterator[None]:
        yield

    def check_validity(self, caller_name: str) -> None:
        return None

    @property
    def enabled(self) -> bool:
        return False


class TorchMemorySaverAdapter:
    @staticmethod
    def create(enable: bool) -> _DisabledMemorySaver:
        if enable:
            raise StandInReached("the engine target runs without torch_memory_saver (enable_memory_saver=False)")
        return _DisabledMemorySaver()


_PLATFORM_FLAGS = {name: _false for name in ("is_cuda", "is_hip", "is_npu", "is_xpu", "is_cpu", "is_mps", "is_musa", "is_gfx95_supported")}
"""The platform as upstream sees it on a CPU box without ``SGLANG_USE_CPU_ENGINE`` (engine-path.md section 6)."""

_UTILS = dict(
    _PLATFORM_FLAGS,
    ceil_align=ceil_align,
    ceil_div=ceil_div,
    next_power_of_2=next_power_of_2,
    get_num_new_pages=get_num_new_pages,
    get_bool_env_var=get_bool_env_var,
    async_h2d=async_h2d,
    is_pin_memory_available=_false,
    cpu_has_amx_support=_false,
    support_triton=_false,
    flatten_nested_list=flatten_nested_list,
    assert_int64_array=assert_int64_array,
    flatten_arrays_to_pinned_cpu=flatten_arrays_to_pinned_cpu,
    flatten_arrays_to_int64_tensor=flatten_arrays_to_int64_tensor,
    raise_error_or_warn=raise_error_or_warn,
    human_readable_int=lambda n: f"{n:,}",
)


class _CPUPlatform:
    """``platforms.current_platform`` on a CPU box: the base ``SRTPlatform`` (no Triton, no pinned memory)."""

    device_type = "cpu"

    class capabilities:  # upstream's attribute name
        supports_triton = False  # allocator/paged.py:155: the torch path, as on any platform without Triton

    def supports_triton(self) -> bool:
        return False

    def is_pin_memory_available(self) -> bool:
        return False

    def get_device(self, index: int = 0) -> torch.device:
        return torch.device("cpu")

    def get_paged_allocator_cls(self) -> None:
        """platforms/interface.py:164: ``None``, the in-tree paged allocator (the SWA allocator asks it)."""
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("is_", "support")):
            return _false
        raise StandInReached(f"upstream read current_platform.{name}, which the engine target's CPU platform lacks")


class MetricsSink:
    """Request time stats and metrics recorders: they observe, and never feed back into memory decisions.

    Every attribute is a no-op method (``time_stats.set_prefill_start()``...), so the stand-in
    cannot change what the memory path does; the engine target runs with metrics off.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):
            raise AttributeError(name)
        return _noop


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class _NoPenalizers:
    """``penalizer_orchestrator`` with no penalty configured (schedule_batch.py:3732, :3769)."""

    is_required = False

    def cumulate_output_tokens(self, *args: Any) -> None:
        return None


class SamplingBatchInfo:
    """The batch's sampling tensors (temperatures, penalties): read by the sampler, never by memory code.

    ``ScheduleBatch`` builds, filters and merges it (schedule_batch.py:3132, :3613, :3915, :3928);
    with no model those are no-ops here.
    """

    def __init__(self) -> None:
        self.penalizer_orchestrator = _NoPenalizers()

    @classmethod
    def from_schedule_batch(cls, batch: Any, vocab_size: int, *args: Any, **kwargs: Any) -> SamplingBatchInfo:
        return cls()

    def filter_batch(self, *args: Any) -> None:
        return None

    def merge_batch(self, other: Any) -> None:
        return None


FLA_CHUNK_SIZE = 64
"""``sglang.kernels.ops.attention.fla.chunk_delta_h.CHUNK_SIZE``: the Mamba chunk of a model config without
``mamba_chunk_size`` (``arg_groups/overrides.py:1909-1917``)."""


def mamba_cache_chunk_size() -> int:
    """``runtime_context.mamba_cache_chunk_size`` (runtime_context.py:1958 -> arg_groups/overrides.py:1897-1925).

    ``max(hf_config.mamba_chunk_size, page_size)``: the engine target's model config has no
    ``mamba_chunk_size`` (the FLA default, 64) and every Mamba shape runs at page size 1 (``MambaComponent``
    requires it without the extra buffer, components/mamba.py:74-79), so 64.  Without the extra buffer
    this only places ``mamba_branching_seqlen`` (components/mamba.py:180-184), which the no-buffer path
    never reads (schedule_batch.py:3216 is the extra buffer's tracker).
    """
    return max(FLA_CHUNK_SIZE, 1)


def mamba_checkpoint_grid(tree_page: int) -> int:
    """``runtime_context.mamba_checkpoint_grid`` (runtime_context.py:1966-1971): ``lcm(chunk, tree page)``."""
    import math

    return math.lcm(mamba_cache_chunk_size(), tree_page)


def stand_in_modules() -> dict[str, Callable[[str], ModuleType]]:
    """Module name -> factory, for :class:`harness.upstream.engine_loader._EngineFinder`."""
    runtime: dict[str, Any] = {f"get_{ns}": RUNTIME.getter(ns) for ns in RUNTIME.bags}
    runtime["get_context"] = lambda: RUNTIME
    # runtime_context.py:2010: the (prefill, decode) attention backends.  A CPU server runs
    # torch_native, so write_cache_indices and get_last_loc take their torch paths
    # (allocation.py:72, :113-137), the ones that run without Triton.
    runtime["attention_backends"] = lambda: ("torch_native", "torch_native")
    runtime["mamba_cache_chunk_size"] = mamba_cache_chunk_size
    runtime["mamba_checkpoint_grid"] = mamba_checkpoint_grid
    table: dict[str, dict[str, Any]] = {
        "sglang.srt.utils": _UTILS,
        "sglang.srt.utils.common": _UTILS,
        "sglang.srt.utils.torch_memory_saver_adapter": {"TorchMemorySaverAdapter": TorchMemorySaverAdapter},
        "sglang.srt.platforms": {"current_platform": _CPUPlatform()},
        "sglang.srt.runtime_context": runtime,
        "sglang.srt.sampling.sampling_batch_info": {"SamplingBatchInfo": SamplingBatchInfo},
        "sglang.srt.observability.req_time_stats": {
            "SchedulerReqTimeStats": MetricsSink,
            "APIServerReqTimeStats": MetricsSink,
            "DPControllerReqTimeStats": MetricsSink,
        },
    }
    return {name: functools.partial(_module_with, attrs) for name, attrs in table.items()}


def _module_with(attrs: dict[str, Any], name: str) -> ModuleType:
    return _module(name, **attrs)


__all__ = ["RUNTIME", "ConfigBag", "RuntimeConfig", "StandInReached", "ceil_align", "stand_in_modules"]

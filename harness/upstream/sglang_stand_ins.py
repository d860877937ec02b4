"""Explicit stand-ins for the SGLang modules that SGLang's targets reach at run time.

The loader (:mod:`poolfuzz.harness.upstream.loading`, declared by :mod:`poolfuzz.harness.upstream.sglang_files`)
executes the real files of ``mem_cache/``, ``schedule_batch.py`` and the invariant checker; the
modules here are the ones those files *call into* while a request runs, whose real files drag in
most of SGLang.  Each stand-in is written from upstream's documented behaviour for the
configuration poolfuzz runs (one CPU rank, no speculative decoding unless asked, no
disaggregation, metrics off), and every other attribute of these modules stays a placeholder that
refuses to be used, so an unplanned path fails with the name it needed.  Nothing here is copied
from SGLang.  The runtime configuration (``runtime_context``) is :mod:`poolfuzz.harness.upstream.sglang_runtime`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from poolfuzz.harness.upstream.placeholders import StandInModule, StandInReached
from poolfuzz.harness.upstream.sglang_runtime import runtime_context_attributes
from poolfuzz.harness.upstream.sglang_scheduler_stand_ins import SCHEDULER_STAND_INS, TIMING

logger = logging.getLogger("poolfuzz.engine")


def _module(name: str, **attrs: Any) -> ModuleType:
    module = StandInModule(name, "poolfuzz stand-in (poolfuzz.harness.upstream.sglang_stand_ins)")
    module.__dict__.update(attrs)
    return module


def _false(*args: Any, **kwargs: Any) -> bool:
    return False


def get_num_new_pages(seq_lens: torch.Tensor, page_size: int, prefix_lens: torch.Tensor | None = None, decode: bool = False) -> int:
    """``utils/common.py``: pages a batch opens, as upstream 0.5.23 counts them (CPU tensors only, as upstream asserts).

    Upstream's semantics *including its flaw*: a decode page is counted for ``seq % page_size == 1``,
    never true at page size 1, so upstream counts **0** pages for a decode step that needs one per
    request (sglang-pools.md section 3.5; our pools use ``(seq - 1) % ps == 0``).  Extend:
    ``sum(ceil(seq / ps) - ceil(prefix / ps))``.
    """
    assert seq_lens.device.type == "cpu", "get_num_new_pages takes CPU tensors"
    if prefix_lens is None or decode:
        assert decode, "get_num_new_pages without prefix_lens is the decode count"
        return int(torch.count_nonzero(seq_lens % page_size == 1))
    assert prefix_lens.device.type == "cpu", "get_num_new_pages takes CPU tensors"
    pages_after = torch.div(seq_lens + page_size - 1, page_size, rounding_mode="floor")
    pages_before = torch.div(prefix_lens + page_size - 1, page_size, rounding_mode="floor")
    return int((pages_after - pages_before).sum())


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= ``n`` (1 for ``n <= 1``): a Triton launch's ``bs_upper``."""
    power = 1
    while power < n:
        power *= 2
    return power


def get_bool_env_var(name: str, default: str = "false") -> bool:
    """``"true"``/``"1"`` (any case) is true; upstream also warns about other values, we do not."""
    return os.getenv(name, default).lower() in ("true", "1")


def async_h2d(args: list[int], *, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """A host list as a tensor on ``device`` (upstream stages it in pinned memory; same values)."""
    return torch.tensor(args, dtype=dtype).to(device)


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


def log_info_on_rank0(logger: logging.Logger, msg: str) -> None:
    """``utils/common.py:3982-3992``: logs on TP rank 0 once ``torch.distributed`` is initialized, which a one-rank CPU
    server without a process group never is, so it logs nothing (``SessionController.open`` / ``_close``,
    session_controller.py:402, :459)."""
    return None


def available_host_memory_bytes(allow_cgroup_fallback: bool = True) -> int:
    """``mem_cache/host_memory.available_host_memory_bytes`` (psutil's available memory, host_memory.py), which HiCache's
    host pool asks before it allocates (``host_memory_budget_bytes``, pool_host/base.py:105): from ``os.sysconf``."""
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def get_device_module() -> Any:
    """``utils/common.py:646-648``: ``torch.<device type>`` for the current platform, ``torch.cpu`` on a CPU box.  Its
    ``Stream``, ``Event`` and ``stream`` context serve HiCache's controller (managers/cache_controller.py:58-76) and the
    L2 transfer (mem_cache/l2_transfer.py); its events are ``torch.cpu``'s but for a clocked device-to-host copy's
    (:class:`poolfuzz.harness.upstream.engine_hicache.CPUDevice`)."""
    from poolfuzz.harness.upstream.engine_hicache import CPU_DEVICE

    return CPU_DEVICE


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
    log_info_on_rank0=log_info_on_rank0,
    get_device_module=get_device_module,
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

    def synchronize(self) -> None:
        """Wait for the device's queued work: a PD decode server's ``cpu_tensor`` retraction backup copies a retracted
        request's KV to host between two of them (``MHATokenToKVPool.get_cpu_copy`` / ``load_cpu_copy``, memory_pool.py:2796,
        :2810); CPU tensor copies complete when issued, so nothing is queued."""
        return None

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

    @property
    def trace_ctx(self) -> MetricsSink:
        """The request's trace context (``req.time_stats.trace_ctx.abort(...)``, scheduler.py:3809): a sink too."""
        return self

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):
            raise AttributeError(name)
        return _noop


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class RequestTimeStats(MetricsSink):
    """``SchedulerReqTimeStats`` (``Req.__init__``, schedule_batch.py:1387-1392): a sink, but for the two stamps the
    scheduler compares rather than reports.

    ``wait_queue_entry_time`` and ``forward_entry_time`` are read by the timeouts (``_poll_timeout_aborts``,
    scheduler.py:3606-3608 and :3636: ``0 < entry < now - timeout``), by priority preemption's and the queue limit's
    tie-breaks (schedule_policy.py:1730, scheduler.py:3568).  The engine target has no clock: a stamp stays ``0.0``
    (upstream's "never stamped", which no timeout fires on) until the loop decides the request has waited or run past
    its timeout and sets :data:`EXPIRED` (:meth:`poolfuzz.harness.upstream.engine_scheduler.SchedulerLoop.expire`)."""

    wait_queue_entry_time = 0.0
    forward_entry_time = 0.0

    @classmethod
    def new_from_obj(cls, other: Any, *args: Any, **kwargs: Any) -> RequestTimeStats:
        """schedule_batch.py:1388: a request that arrived with time stats; none does here, but it would start unstamped."""
        return cls()


EXPIRED = 1e-9
"""A stamp before any deadline ``perf_counter() - timeout`` once the process has run a second: a request past its timeout."""


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


def stand_in_modules() -> dict[str, Callable[[str], ModuleType]]:
    """Module name -> factory: :data:`poolfuzz.harness.upstream.sglang_files.SGLANG`'s stand-ins."""
    table: dict[str, dict[str, Any]] = {
        "sglang.srt.utils": _UTILS,
        "sglang.srt.utils.common": _UTILS,
        "sglang.srt.utils.torch_memory_saver_adapter": {"TorchMemorySaverAdapter": TorchMemorySaverAdapter},
        "sglang.srt.platforms": {"current_platform": _CPUPlatform()},
        "sglang.srt.runtime_context": runtime_context_attributes(),
        "sglang.srt.sampling.sampling_batch_info": {"SamplingBatchInfo": SamplingBatchInfo},
        "sglang.srt.observability.req_time_stats": {
            "SchedulerReqTimeStats": RequestTimeStats,
            "APIServerReqTimeStats": MetricsSink,
            "DPControllerReqTimeStats": MetricsSink,
            **TIMING,
        },
        **SCHEDULER_STAND_INS,
        "sglang.srt.mem_cache.host_memory": {"available_host_memory_bytes": available_host_memory_bytes},
        # E2M1_MAX (kvfp4_tensor.py:19), which fp4_kv_cache_quant_method.py:44 imports at module level.  The file's
        # @torch.compile decorators (:57, :100) import torch._dynamo, 1.5-3 s in every process that loads the memory pool;
        # its NVFP4KVQuantizeUtil is imported only inside the FP4 KV methods (:691-875), which no shape here runs.
        "sglang.srt.layers.quantization.kvfp4_tensor": {"E2M1_MAX": 6.0},
    }
    return {name: functools.partial(_module_with, attrs) for name, attrs in table.items()}


def _module_with(attrs: dict[str, Any], name: str) -> ModuleType:
    return _module(name, **attrs)


__all__ = ["StandInReached", "ceil_align", "get_num_new_pages", "next_power_of_2", "stand_in_modules"]

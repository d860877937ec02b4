"""HiCache's device-host tier on a CPU box: what ``--enable-hierarchical-cache`` builds, from the wheel.

A server started with ``--enable-hierarchical-cache --hicache-io-backend direct --hicache-mem-layout layer_first`` builds
its tree through ``create_tree_cache`` (registry.py:196-200): ``UnifiedRadixCache.init_hicache``
(unified_radix_cache.py:455) -> ``attach_hybrid_pool_to_unified_cache`` (hybrid_cache/hybrid_pool_assembler.py:2525) ->
``_PlainKvStrategy`` (:2296) -> ``build_kv_only_stack`` (:524): an ``MHATokenToKVPoolHost`` (pool_host/mha.py:135) over the
device KV pool's buffers, and a ``HybridCacheController`` (a ``HiCacheController``, managers/cache_controller.py) that
submits write-backs and load-backs and acknowledges them in ``check_hicache_events`` (scheduler.py:3889).  Everything
runs from the installed files but three things a CPU torch lacks, each the smallest stand-in for it:

* **pinned host memory.**  ``build_kv_host_pool`` (hybrid_pool_assembler.py:224) builds the host pool with the
  constructor's default ``pin_memory=True`` (pool_host/mha.py:143), and registering the buffer calls
  ``torch.cuda.cudart()`` (pool_host/common.py:147), which raises on a CPU torch.  The pool is built unpinned
  (:class:`_Unpinned`, for the length of ``init_hicache`` only); pinning page-locks the buffer for DMA and changes no
  slot's owner;
* **the direct copy op.**  pool_host/mha.py imports ``transfer_kv_direct`` from sgl_kernel only on CUDA, HIP or XPU
  (:60-89), so on a CPU it is an undefined name (:513, :677).  :func:`transfer_kv_direct` is what the op computes: each
  destination layer's rows at ``dst_indices`` take the source layer's rows at ``src_indices``;
* **the host memory probe.**  ``host_memory_budget_bytes`` (pool_host/base.py:105) asks ``mem_cache/host_memory.py``,
  which imports psutil; its stand-in (``sglang_stand_ins.available_host_memory_bytes``) answers from ``os.sysconf``.

The KV pool under the allocator is upstream's ``MHATokenToKVPool`` (memory_pool.py:2260), one layer of one head of
:data:`HEAD_DIM` float16 values per slot: the host tier copies real data, so a load-back restores what was evicted.
On a CPU box a copy completes when submitted and ``torch.cpu.Event.query()`` is always true, so by itself every transfer
would be acknowledged at the next ``check_hicache_events``; :class:`TransferClock` lets the fuzzer say how many iterations
a device-to-host copy stays in flight.
"""

from __future__ import annotations

import contextlib
import importlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from poolfuzz.harness.upstream.overrides import overridden
from poolfuzz.harness.upstream.sglang_runtime import RUNTIME

HEAD_DIM = 4
"""Values per slot per layer in the device KV pool (one layer, one head)."""


class TransferClock:
    """When one HiCache tree's device-to-host copies complete, in scheduler iterations: the fuzzer's knob.

    On a GPU a write-back (``submit_device_to_host``, l2_transfer.py:134-145) runs on its own stream, and the scheduler
    acknowledges it at the first ``check_hicache_events`` that finds its finish event done (``_count_ready_acks``,
    unified_radix_cache.py:3404-3410, in submission order); until then the tree keeps the node's device pages and its
    write-through lock (``ongoing_write_through``).  A CPU copy is done at submit, so by itself every ack lands at once.
    A copy submitted while :attr:`delay` is ``d`` completes after ``d`` iteration boundaries (:meth:`tick`), or when
    upstream synchronizes on it (``writing_check(write_back=True)``, :3480-3492).  Host-to-device loads are not delayed:
    the forward that reads them waits for them (``LayerLoadingEvent.wait``, cache_controller.py:75-76)."""

    def __init__(self) -> None:
        self.delay = 0
        self.pending: list[TransferEvent] = []
        self.reading: list[int] = []
        """Device slots the copy being submitted reads (:func:`transfer_kv_direct` collects them)."""

    def tick(self) -> bool:
        """An iteration boundary: every pending copy is one iteration older.  Whether any was pending."""
        was = bool(self.pending)
        for event in self.pending:
            event.remaining -= 1
        self.pending = [event for event in self.pending if event.remaining > 0]
        return was

    def in_flight(self) -> list[tuple[int, ...]]:
        """The device slots each copy not yet complete still reads, in submission order."""
        return [event.reads for event in self.pending if event.remaining > 0]


_CLOCKS: weakref.WeakKeyDictionary[Any, TransferClock] = weakref.WeakKeyDictionary()
"""Each HiCache tree's device-to-host stream -> its clock (registered by :func:`init_hicache`)."""


def _clock_now() -> TransferClock | None:
    return _CLOCKS.get(torch.cpu.current_stream())


class TransferEvent(torch.cpu.Event):
    """``torch.cpu.Event`` (``query()`` always true) for events recorded off a device-to-host stream; one recorded on a
    clocked device-to-host stream (the copy's finish event, l2_transfer.py:118) completes when its :class:`TransferClock`
    says."""

    def __init__(self, **kwargs: Any) -> None:
        if kwargs:  # torch.cpu.Event takes no timing flag; l2_transfer.py:19-28 falls back on this TypeError
            raise TypeError(f"torch.cpu.Event() takes no arguments ({', '.join(kwargs)})")
        self.remaining = 0
        self.reads: tuple[int, ...] = ()

    def record(self, stream: Any = None) -> None:
        clock = _CLOCKS.get(stream) if stream is not None else _clock_now()
        if clock is None:
            return
        # A copy's finish event follows its reads; its start event (l2_transfer.py:116) precedes them and is done at once.
        self.reads, clock.reading = tuple(clock.reading), []
        self.remaining = clock.delay if self.reads else 0
        if self.remaining > 0:
            clock.pending.append(self)

    def query(self) -> bool:
        return self.remaining <= 0

    def synchronize(self) -> None:
        self.remaining = 0


class CPUDevice:
    """``get_device_module()`` on a CPU box (utils/common.py:646-648): ``torch.cpu``, whose ``Event`` is
    :class:`TransferEvent` so that a clocked device-to-host copy completes when its clock says."""

    __name__ = "torch.cpu"
    Event = TransferEvent

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)


CPU_DEVICE = CPUDevice()


def transfer_kv_direct(
    src_layers: list[torch.Tensor], dst_layers: list[torch.Tensor], src_indices: torch.Tensor, dst_indices: torch.Tensor, page_size: int
) -> None:
    """``sgl_kernel.kvcacheio.transfer_kv_direct`` as torch copies: for each (source, destination) layer, the rows at
    ``dst_indices`` become the rows at ``src_indices``.  The kernel groups the indices into contiguous page runs of
    ``page_size`` to copy them in blocks; the rows written are the same."""
    src = src_indices.to(torch.int64)
    dst = dst_indices.to(torch.int64)
    clock = _clock_now()
    if clock is not None:  # a device-to-host copy: it reads these device slots until it completes
        clock.reading += [int(i) for i in src.tolist()]
    for source, destination in zip(src_layers, dst_layers, strict=True):
        destination[dst] = source[src]


def install_transfer_ops(module: Any) -> None:
    """``after_exec`` hook for ``pool_host/mha.py``: binds :func:`transfer_kv_direct` where the file left it undefined
    (it imports it only on CUDA, HIP or XPU, :60-89)."""
    if "transfer_kv_direct" not in vars(module):
        module.transfer_kv_direct = transfer_kv_direct


class ServerArgs:
    """The server arguments ``init_hicache`` reads past the published namespaces: no file storage path (:494)."""

    file_storage_path = None


def kv_pool(m: Any, tokens: int, page_size: int) -> Any:
    """The device KV pool HiCache's host pool mirrors: upstream's ``MHATokenToKVPool`` (memory_pool.py:2260) with one
    layer of one head of :data:`HEAD_DIM` float16 values per slot, plus the padded slot 0."""
    return m.memory_pool.MHATokenToKVPool(
        tokens,
        page_size=page_size,
        dtype=torch.float16,
        head_num=1,
        head_dim=HEAD_DIM,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
    )


@contextlib.contextmanager
def published(write_policy: str) -> Iterator[None]:
    """The shape's write policy in the ``memory`` namespace for the length of the block."""
    with overridden(RUNTIME.bags["memory"].__dict__, {"hicache_write_policy": write_policy}):
        yield


def init_hicache(cache: Any, params: Any, write_policy: str) -> None:
    """``cache.init_hicache(server_args, params)`` as ``create_tree_cache`` calls it (registry.py:196-200), with the host
    pool built unpinned (see the module docstring)."""
    assembler = importlib.import_module("sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler")  # inside the copy's window
    host_inputs = assembler._mha_host_inputs

    def unpinned_inputs(*args: Any) -> tuple[Any, Any, Any]:
        host_class, buffers, keywords = host_inputs(*args)
        return _unpinned(host_class), buffers, keywords

    with published(write_policy), overridden(assembler.__dict__, {"_mha_host_inputs": unpinned_inputs}):
        cache.init_hicache(ServerArgs(), params)
    _CLOCKS[cache.cache_controller.l2_transfer_engine.device_to_host_stream] = TransferClock()


def clock_of(cache: Any) -> TransferClock | None:
    """The tree's :class:`TransferClock`, or ``None`` without a host tier."""
    controller = getattr(cache, "cache_controller", None)
    return None if controller is None else _CLOCKS.get(controller.l2_transfer_engine.device_to_host_stream)


_UNPINNED: dict[type, type] = {}


def _unpinned(host_class: type) -> type:
    """``host_class`` built with ``pin_memory=False``: pool_host/common.py:147 (``torch.cuda.cudart()``) raises on a CPU torch."""
    if host_class not in _UNPINNED:

        class Unpinned(host_class):  # type: ignore[misc,valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["pin_memory"] = False
                super().__init__(*args, **kwargs)

        Unpinned.__name__ = Unpinned.__qualname__ = host_class.__name__
        Unpinned.__module__ = host_class.__module__
        _UNPINNED[host_class] = Unpinned
    return _UNPINNED[host_class]

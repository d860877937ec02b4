"""Load upstream SGLang 0.5.23's prefix caches and SWA allocators on CPU, from the installed wheel.

Three upstream pieces, none copied into this repository:

* the Python ``RadixCache`` (``mem_cache/radix_cache.py``) over upstream's own KV
  allocators (``TokenToKVPoolAllocator`` at page size 1, ``PagedTokenToKVPoolAllocator``
  above, as :func:`harness.upstream.loader.load_upstream` loads them);
* ``SWATokenToKVPoolAllocator`` and ``PureSWATokenToKVPoolAllocator``
  (``mem_cache/allocator/swa.py`` in 0.5.23), composing those same allocator classes;
* the Rust TreeCore binding (``mem_cache/rust_tree_core/mem_cache*.so``), the core of
  the default ``UnifiedRadixCache``, driven here for its full-attention component.

The Python files are executed as :mod:`harness.upstream.loader` executes the allocator
files: ``spec_from_file_location`` under temporary ``sys.modules`` stand-ins
(:mod:`harness.upstream.sglang_cache_stubs`), all removed afterwards.  The Rust
extension is a self-contained PyO3 module linking only libtorch's CPU libraries; it is
loaded from its file under a private module name, so no ``sglang`` name is left behind.

One deliberate change: the loaded ``radix_cache`` module reads time from a
:class:`LogicalClock` instead of ``time.monotonic()``.  Upstream orders LRU eviction by
``last_access_time``; a strictly increasing tick keeps that order (the real clock is
strictly increasing between calls too) and makes it a pure function of the operation
sequence, which a differential check against the Rust core (a logical
``last_access_counter``) needs.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness.upstream import sglang_cache_stubs
from harness.upstream.loader import INSTALL_HINT, UpstreamModules, UpstreamUnavailableError, _exec_file, load_upstream, locate_distribution

_MEM_CACHE = "sglang.srt.mem_cache"
# Executed in this order: each file imports only stand-ins and the files above it.
_FILES = (
    ("unified_cache.component_type", "unified_cache/component_type.py"),
    ("evict_policy", "evict_policy.py"),
    ("cache_init_params", "cache_init_params.py"),
    ("base_prefix_cache", "base_prefix_cache.py"),
    ("radix_cache", "radix_cache.py"),
    ("base_swa_memory_pool", "base_swa_memory_pool.py"),
    ("allocator.swa", "allocator/swa.py"),
)
_RUST_FOLDER = "rust_tree_core"
_RUST_LEAF = "mem_cache"  # the extension's PyInit_ symbol fixes the last name component
_RUST_MODULE = f"harness.upstream._sglang_rust_tree_core.{_RUST_LEAF}"

FULL = 0
"""``ComponentType.FULL``: the component id the Rust binding takes and reports."""


class LogicalClock:
    """Stands in for ``time`` inside the loaded ``radix_cache``: ``monotonic()`` ticks 1, 2, 3, ..."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)

    def monotonic(self) -> float:
        return float(next(self._ticks))

    @staticmethod
    def perf_counter() -> float:
        return time.perf_counter()


@dataclass(frozen=True)
class SglangCacheModules:
    """The loaded prefix-cache and SWA modules, with constructors that fill in CPU-only arguments."""

    version: str
    root: Path
    allocators: UpstreamModules
    component_type: ModuleType
    base_prefix_cache: ModuleType
    radix_cache: ModuleType
    swa: ModuleType
    swa_kv_pool_class: type
    signals: sglang_cache_stubs.InvariantSignals
    clock: LogicalClock

    def radix_key(self, tokens: Iterable[int], extra_key: str | None = None) -> Any:
        """Upstream ``RadixKey`` over an int64 ``array`` (the only token container it accepts)."""
        return self.radix_cache.RadixKey(array("q", tokens), extra_key)

    def new_radix_cache(
        self,
        allocator: Any,
        *,
        page_size: int,
        eviction_policy: str = "lru",
        eviction_policy_config: dict[str, Any] | None = None,
    ) -> Any:
        """``RadixCache`` over ``allocator`` (upstream frees through its ``free_segment``), no request pool."""
        params = self.radix_cache.CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=allocator,
            page_size=page_size,
            eviction_policy=eviction_policy,
            eviction_policy_config=eviction_policy_config,
        )
        return self.radix_cache.RadixCache(params)

    def new_swa_allocator(
        self,
        size: int,
        size_swa: int,
        page_size: int,
        *,
        device: str | torch.device = "cpu",
        need_sort: bool = False,
        dtype: torch.dtype = torch.float16,
    ) -> Any:
        """``SWATokenToKVPoolAllocator(size, size_swa, page_size, dtype, device, kvcache, need_sort)``.

        ``kvcache`` is :class:`~harness.upstream.sglang_cache_stubs.SWAKVPoolFake` (the
        mapping holder, no buffers); the per-request SWA ring is off, as with a paged SWA pool.
        """
        kvcache = self.swa_kv_pool_class()
        return self.swa.SWATokenToKVPoolAllocator(size, size_swa, page_size, dtype, device, kvcache, need_sort)

    def new_pure_swa_allocator(
        self,
        size_swa: int,
        *,
        device: str | torch.device = "cpu",
        need_sort: bool = False,
        dtype: torch.dtype = torch.float16,
    ) -> Any:
        """``PureSWATokenToKVPoolAllocator(size_swa, 1, dtype, device, kvcache, need_sort)`` (page size 1 only)."""
        kvcache = self.swa_kv_pool_class()
        return self.swa.PureSWATokenToKVPoolAllocator(size_swa, 1, dtype, device, kvcache, need_sort)


_lock = threading.Lock()
_loaded: SglangCacheModules | None = None


def load_sglang_cache() -> SglangCacheModules:
    """Load (once per process) and return the prefix-cache and SWA modules.

    Raises :class:`UpstreamUnavailableError` (with the install command) when ``sglang``
    is missing, another version, or its files no longer match the stand-ins.
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        allocators = load_upstream()
        version, allocator_folder, kernel_file = locate_distribution()
        root = allocator_folder.parent
        missing = [path for _, path in _FILES if not (root / path).is_file()]
        if missing:
            raise UpstreamUnavailableError(
                f"sglang {version} is installed but {root} lacks {', '.join(missing)}; reinstall it: {INSTALL_HINT}"
            )
        signals = sglang_cache_stubs.InvariantSignals()
        stand_ins = sglang_cache_stubs.cache_stand_ins(
            kernel_file=kernel_file,
            allocator_modules={"base": allocators.base, "token": allocators.token, "paged": allocators.paged},
            signals=signals,
        )
        executed = _exec_under(stand_ins, root)
        clock = LogicalClock()
        executed["radix_cache"].time = clock  # its only clock: `import time` at module level
        _loaded = SglangCacheModules(
            version=version,
            root=root,
            allocators=allocators,
            component_type=executed["unified_cache.component_type"],
            base_prefix_cache=executed["base_prefix_cache"],
            radix_cache=executed["radix_cache"],
            swa=executed["allocator.swa"],
            swa_kv_pool_class=sglang_cache_stubs.swa_kv_pool_class(executed["base_swa_memory_pool"].BaseSWAKVPool),
            signals=signals,
            clock=clock,
        )
        return _loaded


def _exec_under(stand_ins: dict[str, ModuleType], root: Path) -> dict[str, ModuleType]:
    """Execute :data:`_FILES` with ``stand_ins`` in ``sys.modules``; restore ``sys.modules`` after."""
    names = [*stand_ins, *(f"{_MEM_CACHE}.{name}" for name, _ in _FILES)]
    saved = {name: sys.modules[name] for name in names if name in sys.modules}
    sys.modules.update(stand_ins)
    executed: dict[str, ModuleType] = {}
    try:
        for name, path in _FILES:
            executed[name] = _exec_file(f"{_MEM_CACHE}.{name}", root / path)
            if name == "evict_policy":
                strategy = sglang_cache_stubs.eviction_strategy_factory(executed[name])
                stand_ins[f"{_MEM_CACHE}.utils"].get_eviction_strategy = strategy
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    return executed


def sglang_cache_unavailable_reason() -> str | None:
    """Why :func:`load_sglang_cache` would fail, or ``None`` (for test skips)."""
    try:
        load_sglang_cache()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


# ----------------------------------------------------------------- Rust TreeCore
@dataclass(frozen=True)
class RustTreeCoreBindings:
    """The loaded ``mem_cache`` extension and where it came from."""

    path: Path
    module: ModuleType
    torch_version: str

    def new_core(self, page_size: int, eviction_policy: str = "lru") -> Any:
        """``RustUnifiedTreeCoreBinding`` with the full-attention component only, on CPU, no HiCache, no events."""
        params = self.module.TreeCoreInitParamsBinding(
            eviction_policy=eviction_policy, page_size=page_size, device="cpu"
        )
        return self.module.RustUnifiedTreeCoreBinding(params, [FULL])

    def key(self, tokens: Iterable[int]) -> array:
        """A binding key: an int64 ``array`` (a list is a ``TypeError``, ``array('i')`` a ``BufferError``)."""
        return array("q", tokens)

    def insert_params(self, tokens: Iterable[int], value: torch.Tensor, **optional: Any) -> Any:
        return self.module.InsertParamsBinding(key=self.key(tokens), value=value, **optional)

    def match_params(self, tokens: Iterable[int], extra_key: str | None = None) -> Any:
        return self.module.MatchParamsBinding(key=self.key(tokens), extra_key=extra_key)

    def dec_params(self, receipt: Any) -> Any:
        """The release receipt for an ``inc_lock_ref`` result (upstream's ``to_dec_params``)."""
        return self.module.DecLockRefParamsBinding(
            node_id=receipt.node_id,
            skipped_lock_components=list(receipt.skipped_lock_components),
            component_lock_uuids=dict(receipt.component_lock_uuids),
            component_host_lock_uuids=dict(receipt.component_host_lock_uuids),
        )


_rust_loaded: RustTreeCoreBindings | None = None


def locate_rust_tree_core() -> Path:
    """The extension file in the installed wheel, or :class:`UpstreamUnavailableError` naming what is missing."""
    _, allocator_folder, _ = locate_distribution()
    folder = allocator_folder.parent / _RUST_FOLDER
    candidates = [folder / f"{_RUST_LEAF}{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise UpstreamUnavailableError(
        f"the installed sglang has no Rust TreeCore for this interpreter: none of "
        f"{', '.join(c.name for c in candidates)} in {folder} (the wheel ships it for CPython 3.11 on x86_64 Linux)"
    )


def load_rust_tree_core() -> RustTreeCoreBindings:
    """Load (once per process) the Rust TreeCore extension of the installed ``sglang``.

    torch is imported first, as upstream's ``rust_tree_core/extension.py`` does, though
    the extension's RUNPATH (``$ORIGIN/../../../../torch/lib``) finds libtorch without it.
    """
    global _rust_loaded
    with _lock:
        if _rust_loaded is not None:
            return _rust_loaded
        path = locate_rust_tree_core()
        spec = importlib.util.spec_from_file_location(_RUST_MODULE, path)
        if spec is None or spec.loader is None:
            raise UpstreamUnavailableError(f"cannot build an import spec for {path}")
        try:  # an extension is dlopen()ed by module_from_spec: unresolved torch symbols fail there
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except (ImportError, OSError) as exc:
            raise UpstreamUnavailableError(
                f"the Rust TreeCore at {path} does not load against torch {torch.__version__} "
                f"({type(exc).__name__}: {exc}); sglang 0.5.23 pins torch 2.14.1 and supports 2.11-2.14"
            ) from exc
        _rust_loaded = RustTreeCoreBindings(path=path, module=module, torch_version=torch.__version__)
        return _rust_loaded


def rust_tree_core_unavailable_reason() -> str | None:
    """Why :func:`load_rust_tree_core` would fail, or ``None`` (for test skips)."""
    try:
        load_rust_tree_core()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


@dataclass
class RustEviction:
    """What one full-attention eviction walk did: tokens evicted, victim node ids in order, freed KV indices."""

    evicted: int = 0
    victims: list[int] = field(default_factory=list)
    freed: list[torch.Tensor] = field(default_factory=list)

    def absorb(self, step: Any) -> None:
        self.evicted += int(step.tracker.get(FULL, 0))
        self.freed.extend(step.new_device_frees.get(FULL, ()))
        self.freed.extend(freed_by_actions(step.cache_actions))


def freed_by_actions(actions: Sequence[tuple[Any, ...]]) -> list[torch.Tensor]:
    """KV indices a binding result's tagged ``cache_actions`` tell the caller to free.

    Upstream applies ``("free_device_kv", [tensors])`` with
    ``allocator.free_segment(t, start_pos=0)`` per tensor; FULL-only trees emit no other tag
    that frees device KV.
    """
    return [tensor for action in actions if action[0] == "free_device_kv" for tensor in action[1]]


def rust_evict_full(core: Any, num_tokens: int) -> RustEviction:
    """Run upstream's step-wise device eviction for FULL, as ``UnifiedRadixCache._evict_components`` does.

    ``evict_device_start`` -> (``evict_device_next_node`` -> ``evict_device_leaf``)* ->
    ``evict_device_end``; a ``None`` node with ``made_progress`` continues the walk.  The
    caller frees :attr:`RustEviction.freed` (upstream: ``free_segment(t, start_pos=0)``).
    """
    eviction = RustEviction()
    tracker = {FULL: 0}
    core.evict_device_start(FULL, num_tokens)
    try:
        while True:
            step = core.evict_device_next_node(FULL, tracker)
            eviction.absorb(step)
            tracker[FULL] = eviction.evicted
            if step.node_id is None:
                if not step.made_progress:
                    break
                continue
            eviction.victims.append(step.node_id)
            eviction.absorb(core.evict_device_leaf(step.node_id))
            tracker[FULL] = eviction.evicted
    finally:
        core.evict_device_end(FULL)
    return eviction

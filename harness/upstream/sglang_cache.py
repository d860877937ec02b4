"""Load upstream SGLang's prefix caches and SWA allocators on CPU, from the installed wheel or a source folder.

Three upstream pieces, none copied into this repository:

* the Python ``RadixCache`` (``mem_cache/radix_cache.py``) over upstream's own KV
  allocators (``TokenToKVPoolAllocator`` at page size 1, ``PagedTokenToKVPoolAllocator``
  above, as :func:`harness.upstream.loader.load_upstream` loads them);
* ``SWATokenToKVPoolAllocator`` and ``PureSWATokenToKVPoolAllocator``
  (``mem_cache/allocator/swa.py`` in 0.5.23), composing those same allocator classes;
* the Rust TreeCore binding (``mem_cache/rust_tree_core/mem_cache*.so``), the core of
  the default ``UnifiedRadixCache``, driven here for its full-attention component.

The Rust TreeCore loader is :mod:`harness.upstream.rust_core_loader`.

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

The files come from :func:`harness.upstream.loader.locate_sglang` (``POOLFUZZ_SGLANG_SRC`` or the
installed copy).  On a version other than 0.5.23 each file, and the Rust binding's surface
(:data:`_RUST_SURFACE`), is checked on its own: what moved refuses only the targets that need it
(:meth:`SglangCacheModules.require`), with a one-line reason (docs/compatibility.md).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch

from harness.upstream import sglang_cache_stubs
from harness.upstream.loader import FREE_PAGES, SOURCE_ENV, SUPPORTED_VERSION, UpstreamModules, load_upstream, locate_sglang
from harness.upstream.sources import FileModule, LoadedFiles, SourceFolder, UpstreamUnavailableError, check_classes, exec_package

_MEM_CACHE = "sglang.srt.mem_cache"
# Executed in this order: each file imports only stand-ins and the files above it (``_DEPENDS``).
_FILES = (
    ("unified_cache.component_type", "unified_cache/component_type.py"),
    ("evict_policy", "evict_policy.py"),
    ("cache_init_params", "cache_init_params.py"),
    ("base_prefix_cache", "base_prefix_cache.py"),
    ("radix_cache", "radix_cache.py"),
    ("base_swa_memory_pool", "base_swa_memory_pool.py"),
    ("allocator.swa", "allocator/swa.py"),
)
_DEPENDS: dict[str, tuple[str, ...]] = {
    "base_prefix_cache": ("unified_cache.component_type",),
    "radix_cache": ("unified_cache.component_type", "evict_policy", "cache_init_params", "base_prefix_cache"),
    "allocator.swa": ("base_swa_memory_pool",),
}
_ALLOCATOR_TARGETS: dict[str, tuple[str, ...]] = {
    "RadixCache": ("TokenKV", "PagedKV"),
    "RustTreeCore": ("TokenKV", "PagedKV"),
    "SWAKV": ("TokenKV", "PagedKV"),
    "PureSWAKV": ("TokenKV",),
}
"""The allocator targets each cache and SWA target runs over (or composes): the token allocator at page size 1,
the paged one above (``PureSWATokenToKVPoolAllocator`` is page size 1 only)."""

TARGET_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "RadixCache": (
        ("radix_cache", "RadixCache"),
        ("radix_cache", "RadixKey"),
        ("radix_cache", "CacheInitParams"),
        ("base_prefix_cache", "InsertParams"),
        ("base_prefix_cache", "MatchPrefixParams"),
        ("base_prefix_cache", "EvictParams"),
        ("base_prefix_cache", "DecLockRefParams"),
    ),
    "SWAKV": (("allocator.swa", "SWATokenToKVPoolAllocator"), ("base_swa_memory_pool", "BaseSWAKVPool")),
    "PureSWAKV": (("allocator.swa", "PureSWATokenToKVPoolAllocator"), ("base_swa_memory_pool", "BaseSWAKVPool")),
    "RustTreeCore": (),
}
"""Cache target -> the (file, class) pairs its driver reaches; the files' own dependencies come with them.

``base_prefix_cache.TreeLock`` is left out: only the wrapper's ``checkpoint`` / ``release_request``
build one, and the ``prefix_cache`` driver calls neither (0.5.21 has no ``TreeLock``)."""


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
class SglangCacheModules(LoadedFiles):
    """The loaded prefix-cache and SWA modules, with constructors that fill in CPU-only arguments.

    ``component_type``, ``base_prefix_cache``, ``radix_cache`` and ``swa`` are the files; reading one
    that did not load (or :meth:`module`, by name) raises :class:`UpstreamUnavailableError` with its reason.
    """

    kind: ClassVar[str] = "mem_cache"
    version: str
    root: Path
    allocators: UpstreamModules
    modules: dict[str, ModuleType]
    """Loaded files by their name under ``sglang.srt.mem_cache`` (``"radix_cache"``, ``"allocator.swa"``...)."""
    problems: dict[str, str]
    """Files that did not load -> the one-line reason (reading one of them raises it)."""
    signals: sglang_cache_stubs.InvariantSignals
    clock: LogicalClock
    source: SourceFolder | None = None
    swa_kv_pool: type | None = None

    component_type = FileModule("unified_cache.component_type")
    base_prefix_cache = FileModule("base_prefix_cache")
    radix_cache = FileModule("radix_cache")
    swa = FileModule("allocator.swa")

    @property
    def swa_kv_pool_class(self) -> type:
        """The SWA ``kvcache`` fake (:func:`~harness.upstream.sglang_cache_stubs.swa_kv_pool_class`) over upstream's base."""
        if self.swa_kv_pool is None:
            raise UpstreamUnavailableError(self.problems.get("base_swa_memory_pool", "no upstream BaseSWAKVPool"))
        return self.swa_kv_pool

    def target_problem(self, target: str) -> str | None:
        """Why cache target ``target`` (``"RadixCache"``, ``"SWAKV"``...) cannot run on this copy, or ``None``."""
        for allocator_target in _ALLOCATOR_TARGETS[target]:
            problem = self.allocators.target_problem(allocator_target)
            if problem is not None:
                return problem if allocator_target == "TokenKV" else f"{problem}; {target} runs over it above page size 1"
        if "paged" in self.allocators.problems:  # allocator/swa.py imports paged.py even at page size 1
            return self.allocators.problems["paged"]
        assert self.source is not None
        if target in ("SWAKV", "PureSWAKV"):  # the SWA drivers read each side's free list
            problem = check_classes(
                self.allocators.modules,
                (FREE_PAGES,),
                source=self.source,
                files={"base": self.allocators.root / "base.py"},
                checked_on=SUPPORTED_VERSION,
            )
            if problem is not None:
                return problem
        needs = TARGET_NEEDS[target]
        for name, _ in needs:
            if name in self.problems:
                return self.problems[name]
        return check_classes(
            self.modules, needs, source=self.source, files={name: self.root / path for name, path in _FILES}, checked_on=SUPPORTED_VERSION
        )

    def require(self, target: str) -> None:
        """Refuse ``target`` with its one-line reason (:class:`UpstreamUnavailableError`) when it cannot run."""
        problem = self.target_problem(target)
        if problem is not None:
            raise UpstreamUnavailableError(problem)

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
_loaded: dict[str | None, SglangCacheModules] = {}
"""Loaded modules by the value of ``POOLFUZZ_SGLANG_SRC`` they were loaded under (``None``: the installed copy)."""


def load_sglang_cache() -> SglangCacheModules:
    """Load (once per process and source) and return the prefix-cache and SWA modules.

    Raises :class:`UpstreamUnavailableError` (with the install command) when no ``sglang`` is
    found or its allocator base does not load.  A file that does not load on the version at hand
    is recorded, not raised: :meth:`SglangCacheModules.require` refuses the targets that need it.
    """
    key = os.environ.get(SOURCE_ENV) or None
    with _lock:
        if key in _loaded:
            return _loaded[key]
        allocators = load_upstream()
        source = locate_sglang()
        root = source.package / "srt/mem_cache"
        signals = sglang_cache_stubs.InvariantSignals()
        stand_ins = (
            sglang_cache_stubs.cache_stand_ins(
                kernel_file=source.site / "sglang/kernels/ops/memory/allocator.py",
                allocator_modules={name: allocators.modules[name] for name in ("base", "token", "paged") if name in allocators.modules},
                signals=signals,
            )
            if "base" in allocators.modules
            else None
        )
        if stand_ins is None:
            raise UpstreamUnavailableError(allocators.problems["base"])
        executed, problems = _exec_under(stand_ins, root, source)
        clock = LogicalClock()
        if "radix_cache" in executed:
            vars(executed["radix_cache"])["time"] = clock  # its only clock: `import time` at module level
        pool_base = getattr(executed.get("base_swa_memory_pool"), "BaseSWAKVPool", None)
        _loaded[key] = SglangCacheModules(
            version=source.version,
            root=root,
            allocators=allocators,
            modules=executed,
            problems=problems,
            signals=signals,
            clock=clock,
            source=source,
            swa_kv_pool=sglang_cache_stubs.swa_kv_pool_class(pool_base) if isinstance(pool_base, type) else None,
        )
        return _loaded[key]


def _exec_under(stand_ins: dict[str, ModuleType], root: Path, source: SourceFolder) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Execute :data:`_FILES` with ``stand_ins`` in ``sys.modules``; restore ``sys.modules`` after.

    Returns the loaded files and, for each that did not load, the one-line reason.  Once
    ``evict_policy`` runs, the stand-in ``get_eviction_strategy`` is bound to its strategies;
    a version lacking one of them refuses ``evict_policy`` (and so ``radix_cache``).
    """

    def bind_eviction_strategies(dotted: str, module: ModuleType) -> str | None:
        if dotted != f"{_MEM_CACHE}.evict_policy":
            return None
        try:
            strategy = sglang_cache_stubs.eviction_strategy_factory(module)
        except AttributeError as exc:
            return (
                f"srt/mem_cache/evict_policy.py has no {exc.name} (an eviction policy the stand-in "
                f"get_eviction_strategy maps, as 0.5.23 has it)"
            )
        vars(stand_ins[f"{_MEM_CACHE}.utils"])["get_eviction_strategy"] = strategy
        return None

    return exec_package(
        _MEM_CACHE,
        [(name, root / path) for name, path in _FILES],
        _DEPENDS,
        stand_ins=stand_ins,
        stand_ins_from="harness.upstream.sglang_cache_stubs",
        source=source,
        written_for=f"sglang=={SUPPORTED_VERSION}",
        after=bind_eviction_strategies,
    )


def sglang_cache_unavailable_reason(target: str | None = None) -> str | None:
    """Why :func:`load_sglang_cache` (or, given ``target``, that cache target) would fail, else ``None`` (test skips).

    Without ``target``, any file that did not load is a reason.
    """
    try:
        modules = load_sglang_cache()
    except UpstreamUnavailableError as exc:
        return str(exc)
    if target is not None:
        return modules.target_problem(target)
    problems = [modules.target_problem(name) for name in TARGET_NEEDS if name != "RustTreeCore"]
    return next((problem for problem in problems if problem is not None), None)

"""Load upstream SGLang's prefix caches and SWA allocators on CPU, from the installed wheel or a source folder.

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

The files come from :func:`harness.upstream.loader.locate_sglang` (``POOLFUZZ_SGLANG_SRC`` or the
installed copy).  On a version other than 0.5.23 each file, and the Rust binding's surface
(:data:`_RUST_SURFACE`), is checked on its own: what moved refuses only the targets that need it
(:meth:`SglangCacheModules.require`), with a one-line reason (docs/compatibility.md).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import os
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
from harness.upstream.loader import (
    FREE_PAGES,
    SOURCE_ENV,
    SourceFolder,
    UpstreamModules,
    UpstreamUnavailableError,
    check_classes,
    exec_files,
    load_upstream,
    locate_sglang,
)

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
    "RadixCache": ("TokenKV", "PagedKV"), "RustTreeCore": ("TokenKV", "PagedKV"), "SWAKV": ("TokenKV", "PagedKV"),
    "PureSWAKV": ("TokenKV",),
}
"""The allocator targets each cache and SWA target runs over (or composes): the token allocator at page size 1,
the paged one above (``PureSWATokenToKVPoolAllocator`` is page size 1 only)."""

TARGET_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "RadixCache": (
        ("radix_cache", "RadixCache"), ("radix_cache", "RadixKey"), ("radix_cache", "CacheInitParams"),
        ("base_prefix_cache", "InsertParams"), ("base_prefix_cache", "MatchPrefixParams"),
        ("base_prefix_cache", "EvictParams"), ("base_prefix_cache", "DecLockRefParams"),
    ),
    "SWAKV": (("allocator.swa", "SWATokenToKVPoolAllocator"), ("base_swa_memory_pool", "BaseSWAKVPool")),
    "PureSWAKV": (("allocator.swa", "PureSWATokenToKVPoolAllocator"), ("base_swa_memory_pool", "BaseSWAKVPool")),
    "RustTreeCore": (),
}
"""Cache target -> the (file, class) pairs its driver reaches; the files' own dependencies come with them.

``base_prefix_cache.TreeLock`` is left out: only the wrapper's ``checkpoint`` / ``release_request``
build one, and the ``prefix_cache`` driver calls neither (0.5.21 has no ``TreeLock``)."""
_RUST_FOLDER = "rust_tree_core"
_RUST_LEAF = "mem_cache"  # the extension's PyInit_ symbol fixes the last name component
_RUST_MODULE = f"harness.upstream._sglang_rust_tree_core.{_RUST_LEAF}"
_RUST_SURFACE: dict[str, tuple[str, ...]] = {
    "TreeCoreInitParamsBinding": ("eviction_policy", "page_size", "device"),
    "RustUnifiedTreeCoreBinding": (
        "insert", "match_prefix", "inc_lock_ref", "dec_lock_ref", "collect_full_device_indices", "is_full_device_evicted",
        "evict_device_start", "evict_device_next_node", "evict_device_leaf", "evict_device_end",
        "evictable_size", "protected_size", "total_size", "reset", "root_node_handle", "sanity_check",
    ),
    "InsertParamsBinding": ("key", "value", "prev_prefix_len", "inserted_len"),
    "MatchParamsBinding": ("key", "extra_key"),
    "DecLockRefParamsBinding": ("node_id", "skipped_lock_components", "component_lock_uuids", "component_host_lock_uuids"),
    "IncLockRefResultBinding": ("delta", "node_id", "skipped_lock_components", "component_lock_uuids", "component_host_lock_uuids"),
    "MatchResultBinding": ("last_device_node_id", "device_prefix_len"),
    "InsertResultBinding": ("prefix_len", "cache_actions", "last_device_node"),
    "EvictDeviceNextNodeResultBinding": ("node_id", "made_progress", "tracker", "new_device_frees", "cache_actions"),
    "EvictDeviceLeafResultBinding": ("tracker", "new_device_frees", "cache_actions"),
}
"""Every binding class, method and field :class:`RustTreeCoreBindings` and ``rust_core_adapter`` use (0.5.23's API).

PyO3 exposes fields and methods as class attributes, so a binding that renamed or dropped one is refused at
load, naming it, instead of failing mid-run (0.5.22's eviction results have no ``cache_actions``)."""

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
    modules: dict[str, ModuleType]
    """Loaded files by their name under ``sglang.srt.mem_cache`` (``"radix_cache"``, ``"allocator.swa"``...)."""
    problems: dict[str, str]
    """Files that did not load -> the one-line reason (reading one of them raises it)."""
    signals: sglang_cache_stubs.InvariantSignals
    clock: LogicalClock
    source: SourceFolder | None = None
    swa_kv_pool: type | None = None

    def module(self, name: str) -> ModuleType:
        """The loaded file ``name``, or :class:`UpstreamUnavailableError` with why it did not load."""
        try:
            return self.modules[name]
        except KeyError:
            raise UpstreamUnavailableError(self.problems.get(name, f"no upstream mem_cache module {name!r}")) from None

    @property
    def component_type(self) -> ModuleType:
        return self.module("unified_cache.component_type")

    @property
    def base_prefix_cache(self) -> ModuleType:
        return self.module("base_prefix_cache")

    @property
    def radix_cache(self) -> ModuleType:
        return self.module("radix_cache")

    @property
    def swa(self) -> ModuleType:
        return self.module("allocator.swa")

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
            problem = check_classes(self.allocators.modules, (FREE_PAGES,), source=self.source,
                                    files={"base": self.allocators.root / "base.py"})
            if problem is not None:
                return problem
        needs = TARGET_NEEDS[target]
        for name, _ in needs:
            if name in self.problems:
                return self.problems[name]
        return check_classes(self.modules, needs, source=self.source, files={name: self.root / path for name, path in _FILES})

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
        stand_ins = sglang_cache_stubs.cache_stand_ins(
            kernel_file=source.site / "sglang/kernels/ops/memory/allocator.py",
            allocator_modules={name: allocators.modules[name] for name in ("base", "token", "paged") if name in allocators.modules},
            signals=signals,
        ) if "base" in allocators.modules else None
        if stand_ins is None:
            raise UpstreamUnavailableError(allocators.problems["base"])
        executed, problems = _exec_under(stand_ins, root, source)
        clock = LogicalClock()
        if "radix_cache" in executed:
            executed["radix_cache"].time = clock  # its only clock: `import time` at module level
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


def _exec_under(
    stand_ins: dict[str, ModuleType], root: Path, source: SourceFolder
) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Execute :data:`_FILES` with ``stand_ins`` in ``sys.modules``; restore ``sys.modules`` after.

    Returns the loaded files and, for each that did not load, the one-line reason.  Once
    ``evict_policy`` runs, the stand-in ``get_eviction_strategy`` is bound to its strategies;
    a version lacking one of them refuses ``evict_policy`` (and so ``radix_cache``).
    """
    names = [*stand_ins, *(f"{_MEM_CACHE}.{name}" for name, _ in _FILES)]
    saved = {name: sys.modules[name] for name in names if name in sys.modules}
    sys.modules.update(stand_ins)

    def bind_eviction_strategies(dotted: str, module: ModuleType) -> str | None:
        if dotted != f"{_MEM_CACHE}.evict_policy":
            return None
        try:
            strategy = sglang_cache_stubs.eviction_strategy_factory(module)
        except AttributeError as exc:
            return (f"srt/mem_cache/evict_policy.py has no {exc.name} (an eviction policy the stand-in "
                    f"get_eviction_strategy maps, as 0.5.23 has it)")
        stand_ins[f"{_MEM_CACHE}.utils"].get_eviction_strategy = strategy
        return None

    try:
        loaded, failed = exec_files(
            [(f"{_MEM_CACHE}.{name}", root / path) for name, path in _FILES],
            {f"{_MEM_CACHE}.{name}": [f"{_MEM_CACHE}.{dep}" for dep in deps] for name, deps in _DEPENDS.items()},
            source=source,
            stand_ins="harness.upstream.sglang_cache_stubs",
            after=bind_eviction_strategies,
        )
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    prefix = len(_MEM_CACHE) + 1
    return ({name[prefix:]: module for name, module in loaded.items()},
            {name[prefix:]: why for name, why in failed.items()})


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
_rust_key: str | None = None
"""The ``POOLFUZZ_SGLANG_SRC`` value :data:`_rust_loaded` was loaded under (``None``: the installed copy)."""


def locate_rust_tree_core() -> Path:
    """The extension file of :func:`~harness.upstream.loader.locate_sglang`'s copy, or :class:`UpstreamUnavailableError`."""
    source = locate_sglang()
    folder = source.package / "srt/mem_cache" / _RUST_FOLDER
    candidates = [folder / f"{_RUST_LEAF}{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if not folder.is_dir():
        raise UpstreamUnavailableError(f"{source.label}: srt/mem_cache/ has no {_RUST_FOLDER}/ (no Rust TreeCore in that version)")
    raise UpstreamUnavailableError(
        f"{source.label} has no Rust TreeCore for this interpreter: none of "
        f"{', '.join(c.name for c in candidates)} in {folder} (the wheel ships it for CPython 3.11 on x86_64 Linux; "
        f"a source checkout builds it with cargo)"
    )


def pinned_torch(source: SourceFolder) -> str | None:
    """The ``torch==X`` the copy's wheel metadata pins (what its Rust extension was built against), or ``None``."""
    for metadata in sorted(source.site.glob(f"{source.distribution}-*.dist-info/METADATA")):
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            requirement = line.removeprefix("Requires-Dist:").strip()
            if line.startswith("Requires-Dist:") and requirement.startswith("torch=="):
                return requirement.removeprefix("torch==").split(";")[0].strip()
    return None


def rust_surface_missing(module: ModuleType) -> list[str]:
    """``Class`` or ``Class.member`` names of :data:`_RUST_SURFACE` that ``module`` (a loaded binding) lacks."""
    missing: list[str] = []
    for class_name, members in _RUST_SURFACE.items():
        cls = getattr(module, class_name, None)
        if cls is None:
            missing.append(class_name)
            continue
        missing.extend(f"{class_name}.{member}" for member in members if not hasattr(cls, member))
    return missing


def load_rust_tree_core() -> RustTreeCoreBindings:
    """Load (once per process and source) the Rust TreeCore extension of the ``sglang`` copy in use.

    torch is imported first, as upstream's ``rust_tree_core/extension.py`` does: the extension's
    RUNPATH (``$ORIGIN/../../../../torch/lib``) finds libtorch only in a site-packages layout,
    and an already loaded libtorch satisfies it anywhere else (an unzipped wheel, a checkout).
    """
    global _rust_loaded, _rust_key
    key = os.environ.get(SOURCE_ENV) or None
    with _lock:
        if _rust_loaded is not None and _rust_key == key:
            return _rust_loaded
        path = locate_rust_tree_core()
        spec = importlib.util.spec_from_file_location(_RUST_MODULE, path)
        if spec is None or spec.loader is None:
            raise UpstreamUnavailableError(f"cannot build an import spec for {path}")
        try:  # an extension is dlopen()ed by module_from_spec: unresolved torch symbols fail there
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except (ImportError, OSError) as exc:
            try:
                source: SourceFolder | None = locate_sglang()
            except UpstreamUnavailableError:
                source = None
            pin = pinned_torch(source) if source is not None else None
            built = f"sglang {source.version} pins torch {pin}" if source is not None and pin else \
                "sglang 0.5.23 pins torch 2.14.1 and supports 2.11-2.14"
            raise UpstreamUnavailableError(
                f"the Rust TreeCore at {path} does not load against torch {torch.__version__} "
                f"({type(exc).__name__}: {' '.join(str(exc).split())}); {built}"
            ) from exc
        missing = rust_surface_missing(module)
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            raise UpstreamUnavailableError(f"{locate_sglang().label}: the Rust TreeCore binding has no {shown} "
                                           f"(its Python API changed since 0.5.23)")
        _rust_loaded = RustTreeCoreBindings(path=path, module=module, torch_version=torch.__version__)
        _rust_key = key
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

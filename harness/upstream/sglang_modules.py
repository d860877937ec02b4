"""SGLang's loaded modules as each kind of target reads them, with the constructors their callers would make.

All three views read one loaded copy (:func:`poolfuzz.harness.upstream.sglang_files.sglang_copy`):

* :class:`UpstreamModules` (:func:`load_upstream`): the allocator files ``base``, ``token``,
  ``paged``, ``mamba``; a file that did not load is recorded, and reading it raises its reason;
* :class:`SglangCacheModules` (:func:`load_sglang_cache`): the prefix caches and SWA allocators,
  composing the allocator classes above;
* :class:`EngineModules` (:func:`load_engine`): the scheduler's memory path, all or nothing.

Reading any of them loads what it names, once a process; :func:`active` and :func:`engine_call`
open the copy's window (:meth:`~poolfuzz.harness.upstream.loading.LoadedCopy.active`) for code that runs upstream.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, ParamSpec, TypeVar

from poolfuzz.harness.upstream import sglang_fakes
from poolfuzz.harness.upstream.loading import LoadedCopy
from poolfuzz.harness.upstream.sglang_files import (
    INSTALL_HINT,
    MODULES,
    SUPPORTED_VERSION,
    load_files,
    paged_cpu_problem,
    require,
    sglang_copy,
    target_problem,
)
from poolfuzz.harness.upstream.sources import FileModule, LoadedFiles, SourceFolder, UpstreamUnavailableError

P = ParamSpec("P")
R = TypeVar("R")
V = TypeVar("V")

_ALLOCATOR_FILES = ("base", "token", "paged", "mamba")
_CACHE_FILES = (
    "component_type",
    "evict_policy",
    "cache_init_params",
    "base_prefix_cache",
    "radix_cache",
    "base_swa_memory_pool",
    "swa_allocator",
)


def _loaded(view: Callable[..., V], files: tuple[str, ...], folder: str, **fields: Any) -> V:
    """``view`` over ``files`` of the SGLang copy in use: the modules that loaded and why the others did not, the
    copy's version and source, ``folder`` (under the package) as its root, and the view's own ``fields``."""
    modules, problems = load_files(files)
    source = sglang_copy().source
    return view(version=source.version, root=source.package / folder, modules=modules, problems=problems, source=source, **fields)


@dataclass(frozen=True)
class UpstreamModules(LoadedFiles):
    """The upstream allocator modules that loaded, where they came from, and why the others did not."""

    kind: ClassVar[str] = "allocator"
    version: str
    root: Path
    modules: dict[str, ModuleType]
    problems: dict[str, str] = field(default_factory=dict)
    """Short file name (``"mamba"``) -> one-line reason it did not load."""
    source: SourceFolder | None = None

    base = FileModule("base")
    token = FileModule("token")
    paged = FileModule("paged")
    mamba = FileModule("mamba")

    target_problem = staticmethod(target_problem)
    """Why an SGLang target (``"TokenKV"``...) cannot run on this copy, or ``None`` (:func:`~poolfuzz.harness.upstream.sglang_files.target_problem`)."""
    require = staticmethod(require)
    paged_cpu_problem = staticmethod(paged_cpu_problem)


def load_upstream() -> UpstreamModules:
    """The allocator files of the SGLang copy in use (once a process and source).

    Raises :class:`UpstreamUnavailableError` with the install command when no copy is found; a file
    that does not load is recorded, and reading it from the result raises its reason.
    """
    return _loaded(UpstreamModules, _ALLOCATOR_FILES, "srt/mem_cache/allocator")


@dataclass(frozen=True)
class SglangCacheModules(LoadedFiles):
    """The loaded prefix-cache and SWA modules, with constructors that fill in CPU-only arguments."""

    kind: ClassVar[str] = "mem_cache"
    version: str
    root: Path
    allocators: UpstreamModules
    modules: dict[str, ModuleType]
    """Loaded files by short name (``"radix_cache"``, ``"swa_allocator"``...)."""
    problems: dict[str, str]
    signals: sglang_fakes.InvariantSignals
    clock: sglang_fakes.LogicalClock
    source: SourceFolder | None = None

    component_type = FileModule("component_type")
    base_prefix_cache = FileModule("base_prefix_cache")
    radix_cache = FileModule("radix_cache")
    swa = FileModule("swa_allocator")

    @property
    def swa_kv_pool_class(self) -> type:
        """The SWA ``kvcache`` fake (:func:`~poolfuzz.harness.upstream.sglang_fakes.swa_kv_pool_class`) over upstream's base."""
        base = self.module("base_swa_memory_pool").BaseSWAKVPool
        return sglang_fakes.swa_kv_pool_class(base)

    target_problem = staticmethod(target_problem)
    require = staticmethod(require)

    def radix_key(self, tokens: Iterable[int], extra_key: str | None = None) -> Any:
        """Upstream ``RadixKey`` over an int64 ``array`` (the only token container it accepts)."""
        return self.radix_cache.RadixKey(array("q", tokens), extra_key)

    def new_radix_cache(
        self, allocator: Any, *, page_size: int, eviction_policy: str = "lru", eviction_policy_config: dict[str, Any] | None = None
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
        with sglang_copy().active():
            return self.radix_cache.RadixCache(params)


def load_sglang_cache() -> SglangCacheModules:
    """The prefix-cache and SWA files of the SGLang copy in use, over its allocator files.

    Raises :class:`UpstreamUnavailableError` when no copy is found or its allocator base does not
    load; another file that does not load is recorded (:meth:`SglangCacheModules.require`).
    """
    allocators = load_upstream()
    if "base" in allocators.problems:
        raise UpstreamUnavailableError(allocators.problems["base"])
    return _loaded(
        SglangCacheModules, _CACHE_FILES, "srt/mem_cache", allocators=allocators, signals=sglang_fakes.SIGNALS, clock=sglang_fakes.CLOCK
    )


def unavailable_reason(target: str | None = None) -> str | None:
    """Why the allocator files (or, given ``target``, that SGLang target) cannot run, else ``None`` (test skips)."""
    try:
        if target is not None:
            return target_problem(target)
        return next(iter(load_upstream().problems.values()), None)
    except UpstreamUnavailableError as exc:
        return str(exc)


def sglang_cache_unavailable_reason(target: str | None = None) -> str | None:
    """Why the cache target ``target`` (or, without one, any of them but the Rust core) cannot run, else ``None``."""
    names = (target,) if target is not None else ("RadixCache", "SWAKV", "PureSWAKV")
    return next((p for p in map(unavailable_reason, names) if p is not None), None)


@dataclass(frozen=True)
class EngineModules:
    """The loaded modules of the scheduler's memory path, by short name (``m.schedule_batch``)."""

    version: str
    site: Path
    modules: dict[str, ModuleType]
    copy: LoadedCopy = field(repr=False)

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Every ``sglang`` module answered by a placeholder so far (for ``harness list`` and the docs)."""
        return self.copy.placeholders

    def __getattr__(self, name: str) -> ModuleType:
        try:
            return self.modules[name]
        except KeyError:
            raise AttributeError(name) from None


def load_engine() -> EngineModules:
    """The scheduler-path modules (all of :data:`~poolfuzz.harness.upstream.sglang_files.MODULES`), or one refusal.

    Raises :class:`UpstreamUnavailableError` with a one-line reason when ``sglang`` is missing,
    a file fails to execute, or a real ``sglang`` is already imported.
    """
    copy = sglang_copy()
    modules, problems = load_files(tuple(MODULES))
    if problems:
        reason = next(iter(problems.values()))
        raise UpstreamUnavailableError(f"{reason} (the engine target; {INSTALL_HINT}, plus msgspec)")
    return EngineModules(version=copy.source.version, site=copy.source.site, modules=modules, copy=copy)


def active(modules: EngineModules) -> AbstractContextManager[None]:
    """``modules``' window: the SGLang copy's modules importable under their ``sglang.*`` names for the block."""
    return modules.copy.active()


def engine_call(method: Callable[P, R]) -> Callable[P, R]:
    """Run ``method`` (a function that reaches upstream code) inside the SGLang copy's window."""
    import functools

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with sglang_copy().active():
            return method(*args, **kwargs)

    return call


__all__ = [
    "SUPPORTED_VERSION",
    "EngineModules",
    "SglangCacheModules",
    "UpstreamModules",
    "active",
    "engine_call",
    "load_engine",
    "load_sglang_cache",
    "load_upstream",
    "sglang_cache_unavailable_reason",
    "unavailable_reason",
]

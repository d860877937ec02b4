"""Load SGLang 0.5.23's scheduler memory path on CPU: the real files, from the installed wheel.

The ``engine`` target runs the code every SGLang request runs: ``mem_cache/allocation.py``,
``mem_cache/common.py``, ``ReqToTokenPool`` (``mem_cache/memory_pool.py``), the prefix caches
(the Python ``RadixCache`` and the default ``UnifiedRadixCache`` over its Rust or Python tree
core), ``Req`` / ``ScheduleBatch`` (``managers/schedule_batch.py``) and upstream's own runtime
checker (``managers/scheduler_components/invariant_checker.py``).  ``import sglang`` does not
work on a CPU box with a ``--no-deps`` install (``sglang/__init__.py`` pulls orjson, the model
configs, torchvision, the MoE layer stack; see engine-path.md section 0), so this module
installs a finder for the ``sglang`` names that

* executes the **real** installed file for every module under :data:`REAL_PREFIXES`, and
  for the few other modules the path needs at run time, the explicit stand-ins of
  :mod:`harness.upstream.engine_stand_ins` (runtime configuration, platform queries, a dozen
  helpers of ``utils/common.py``), each written from its documented behaviour;
* answers every other ``sglang`` module (model layers, kernels, HiCache storage, metrics,
  distributed groups) with a :class:`StandInModule` whose attributes are :class:`StandIn`
  placeholders.  They let a file *import* (base classes, decorators, type annotations,
  constants) and refuse to be *used*: once loading is over, calling one, reading its truth
  value or iterating it raises :class:`StandInReached`, naming the placeholder.  So a path
  the stand-ins do not cover fails loudly instead of running on a dummy.

The loaded modules are kept aside, not in ``sys.modules``: :func:`active` (and the
:func:`engine_call` decorator on the engine loop's methods) puts them back under their ``sglang.*``
names, with the finder, only while upstream code runs, because upstream imports some modules at
call time (``swa_reprefill_tail_tokens``, ``_rust_fallback_reason``) and a second copy of a module
would fork class identities.  Outside those calls nothing named ``sglang`` is left behind, so the
other upstream loaders and a later real ``import sglang`` see a clean process.  A process that
already imported a real ``sglang`` is refused (:class:`UpstreamUnavailableError`): there the real
modules should be used as they are.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.upstream.engine_placeholders import StandIn, StandInModule, StandInReached, loading
from harness.upstream.loader import INSTALL_HINT, SUPPORTED_VERSION, locate_sglang
from harness.upstream.sources import UpstreamUnavailableError, failing_upstream_file

REAL_PREFIXES: tuple[str, ...] = (
    "sglang.srt.mem_cache",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.schedule_policy",
    "sglang.srt.managers.scheduler_components.new_token_ratio_tracker",  # retract_decode asks it
    "sglang.srt.managers.scheduler_components.invariant_checker",
    "sglang.srt.managers.scheduler_components.pool_stats_observer",
    "sglang.srt.environ",
    "sglang.srt.utils.invariants",
    "sglang.kernels.ops.memory",
    "sglang.srt.dllm.mixin",  # Req's base class
    "sglang.srt.disaggregation.decode_schedule_batch_mixin",  # ScheduleBatch's base class
    "sglang.srt.model_executor.forward_batch_info",  # ForwardMode
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.sampling.watermarking",
    "sglang.srt.beam_search.batch_tail",  # filter_batch strips beam tails (none without beams)
    "sglang.srt.beam_search.fork",
    "sglang.srt.session.streaming_session",  # UnifiedRadixCache builds one (unified_radix_cache.py:294)
    "sglang.srt.rust_extensions",  # the Rust tree core's loader and its torch-version gate
    "sglang.srt.layers.attention.dsv4.unified_kv_gate",  # swa_reprefill_tail_tokens asks it (HIP only)
    # MambaPool's cache_params (memory_pool.py:58): the real BaseLinearStateParams / Mamba2CacheParams
    # (a hybrid-SSM shape builds them, harness.upstream.engine_mamba); it imports only environ and
    # distributed.utils at module level.
    "sglang.srt.configs.mamba_utils",
    # Mamba2StateShape.create's divide (mamba_utils.py:23); at module level it imports only torch.distributed's
    # collectives and runtime_context.get_resources (a placeholder, called only by the TCPStore helpers).
    "sglang.srt.distributed.utils",
)
"""Modules executed from the installed files, every submodule included (but :data:`NOT_LOADED`)."""

NOT_LOADED: tuple[str, ...] = (
    "sglang.srt.mem_cache.host_memory",  # host-memory sizing for HiCache (psutil); never reached without HiCache
)
"""Modules under :data:`REAL_PREFIXES` answered by placeholders: third-party imports the path never uses."""

ENGINE_MODULES: dict[str, str] = {
    "allocation": "sglang.srt.mem_cache.allocation",
    "common": "sglang.srt.mem_cache.common",
    "memory_pool": "sglang.srt.mem_cache.memory_pool",
    "base_prefix_cache": "sglang.srt.mem_cache.base_prefix_cache",
    "radix_cache": "sglang.srt.mem_cache.radix_cache",
    "unified_radix_cache": "sglang.srt.mem_cache.unified_radix_cache",
    "cache_init_params": "sglang.srt.mem_cache.cache_init_params",
    "component_type": "sglang.srt.mem_cache.unified_cache.component_type",
    "token": "sglang.srt.mem_cache.allocator.token",
    "paged": "sglang.srt.mem_cache.allocator.paged",
    "swa_allocator": "sglang.srt.mem_cache.allocator.swa",
    "base_swa_memory_pool": "sglang.srt.mem_cache.base_swa_memory_pool",
    "schedule_batch": "sglang.srt.managers.schedule_batch",
    "schedule_policy": "sglang.srt.managers.schedule_policy",
    "invariant_checker": "sglang.srt.managers.scheduler_components.invariant_checker",
    "pool_stats_observer": "sglang.srt.managers.scheduler_components.pool_stats_observer",
    "environ": "sglang.srt.environ",
}
"""The modules the engine driver uses, by short name."""


def _is_real(name: str) -> bool:
    if any(name == skipped or name.startswith(skipped + ".") for skipped in NOT_LOADED):
        return False
    return any(name == prefix or name.startswith(prefix + ".") for prefix in REAL_PREFIXES)


def _above_real(name: str) -> bool:
    return any(prefix.startswith(name + ".") for prefix in REAL_PREFIXES)


class _StandInLoader(importlib.abc.Loader):
    def __init__(self, factory: Callable[[str], ModuleType] | None) -> None:
        self._factory = factory

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = self._factory(spec.name) if self._factory else StandInModule(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]  # submodules resolve through the finder
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


class _EngineFinder(importlib.abc.MetaPathFinder):
    """Resolves ``sglang.*``: the real file, an explicit stand-in, or a placeholder module."""

    def __init__(self, site: Path, stand_ins: dict[str, Callable[[str], ModuleType]]) -> None:
        self._site = site
        self._stand_ins = stand_ins
        self.placeholders: list[str] = []
        self.imported: list[str] = []
        """Every ``sglang`` name resolved through the finder (the modules an :func:`active` window adds)."""

    def _namespace(self, name: str, folder: Path) -> importlib.machinery.ModuleSpec:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        return spec

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "sglang" and not name.startswith("sglang."):
            return None
        self.imported.append(name)
        if name in self._stand_ins:
            return importlib.machinery.ModuleSpec(name, _StandInLoader(self._stand_ins[name]), is_package=True)
        rel = Path(*name.split("."))
        folder = self._site / rel
        if _above_real(name) and not _is_real(name):
            # A package above the real modules: its heavy __init__ is skipped, and names it would
            # define answer as placeholders (``from sglang.srt.utils import is_hip``).
            return importlib.machinery.ModuleSpec(name, _StandInLoader(None), is_package=True)
        if _is_real(name):
            init = folder / "__init__.py"
            if init.is_file():
                return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
            if rel.with_suffix(".py").name and (self._site / rel.with_suffix(".py")).is_file():
                return importlib.util.spec_from_file_location(name, self._site / rel.with_suffix(".py"))
            if folder.is_dir():
                return self._namespace(name, folder)
            return None
        self.placeholders.append(name)
        return importlib.machinery.ModuleSpec(name, _StandInLoader(None), is_package=True)


@dataclass(frozen=True)
class EngineModules:
    """The loaded upstream modules of the scheduler's memory path."""

    version: str
    site: Path
    modules: dict[str, ModuleType]
    placeholders: tuple[str, ...]
    """Every ``sglang`` module answered by a placeholder (for ``harness list`` and the docs)."""
    namespace: dict[str, ModuleType] = field(default_factory=dict, repr=False)
    """Every ``sglang.*`` module of this load, out of ``sys.modules`` between :func:`active` calls."""
    finder: Any = field(default=None, repr=False)

    def __getattr__(self, name: str) -> ModuleType:
        try:
            return self.modules[name]
        except KeyError:
            raise AttributeError(name) from None


_lock = threading.Lock()
_loaded: EngineModules | None = None
_failure: str | None = None
_depth = 0
_foreign: dict[str, ModuleType] = {}


def _sglang_names() -> list[str]:
    return [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]


@contextlib.contextmanager
def active(modules: EngineModules) -> Iterator[None]:
    """Upstream's modules under their ``sglang.*`` names (and the finder installed) for the block.

    Reentrant.  On the outermost exit every ``sglang.*`` module is taken out again, modules upstream
    imported meanwhile included (they join the namespace), and whatever was there before is restored.
    """
    global _depth
    if _depth == 0:
        _foreign.clear()
        for name in modules.namespace:  # the other loaders leave no sglang name behind, but be exact
            if name in sys.modules:
                _foreign[name] = sys.modules[name]
        sys.modules.update(modules.namespace)
        sys.meta_path.insert(0, modules.finder)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            for name in modules.finder.imported:  # modules upstream imported inside the window
                if name in sys.modules:
                    modules.namespace[name] = sys.modules[name]
            modules.finder.imported.clear()
            for name in modules.namespace:
                sys.modules.pop(name, None)
            sys.meta_path.remove(modules.finder)
            sys.modules.update(_foreign)
            _foreign.clear()


def engine_call(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``method`` (an engine-loop method that reaches upstream code) inside :func:`active`."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with active(load_engine()):
            return method(*args, **kwargs)

    return call


def load_engine() -> EngineModules:
    """Load (once per process) and return the scheduler-path modules; see the module docstring.

    Raises :class:`UpstreamUnavailableError` with a one-line reason when ``sglang`` is missing,
    another version, a file fails to execute, or a real ``sglang`` is already imported.
    """
    global _loaded, _failure
    with _lock:
        if _loaded is not None:
            return _loaded
        if _failure is not None:
            raise UpstreamUnavailableError(_failure)
        try:
            _loaded = _load()
        except UpstreamUnavailableError as exc:
            _failure = str(exc)
            raise
        return _loaded


def _load() -> EngineModules:
    if importlib.util.find_spec("msgspec") is None:
        raise UpstreamUnavailableError(
            "the engine target needs msgspec (pip install msgspec): sglang's runtime_context and KV layout import it"
        )
    source = locate_sglang()  # POOLFUZZ_SGLANG_SRC's folder, else the installed distribution
    version = source.version
    existing = sys.modules.get("sglang")
    if existing is not None and not getattr(existing, "__poolfuzz_engine__", False):
        raise UpstreamUnavailableError(
            "a real sglang package is already imported in this process; the engine target loads "
            "sglang's files by path and would fork its classes"
        )
    from harness.upstream import engine_stand_ins

    site = source.site  # the folder holding sglang/: site-packages, an unzipped wheel, a checkout's python/
    finder = _EngineFinder(site, engine_stand_ins.stand_in_modules())
    foreign = {n: sys.modules.pop(n) for n in _sglang_names()}  # another loader's leftovers, if any
    sys.meta_path.insert(0, finder)
    loading.active = True
    try:
        modules = {short: importlib.import_module(name) for short, name in ENGINE_MODULES.items()}
    except (ImportError, AttributeError, TypeError, ValueError, RuntimeError) as exc:
        raise UpstreamUnavailableError(
            f"{source.label}: loading the scheduler path failed at {failing_upstream_file(exc, source.package) or 'import'} "
            f"({type(exc).__name__}: {' '.join(str(exc).split())}); "
            f"its stand-ins (harness.upstream.engine_stand_ins) were written for sglang=={SUPPORTED_VERSION} "
            f"({INSTALL_HINT}, plus msgspec)"
        ) from exc
    finally:
        loading.active = False
        sys.meta_path.remove(finder)
        namespace = {n: sys.modules.pop(n) for n in _sglang_names()}
        finder.imported.clear()
        sys.modules.update(foreign)
    namespace["sglang"].__poolfuzz_engine__ = True  # type: ignore[attr-defined]
    # Upstream logs every retraction and OOM abort as a warning: routine under the fuzzer, so only
    # its errors are shown.
    logging.getLogger("sglang").setLevel(logging.ERROR)
    return EngineModules(
        version=version,
        site=site,
        modules=modules,
        placeholders=tuple(sorted(set(finder.placeholders))),
        namespace=namespace,
        finder=finder,
    )


__all__ = [
    "ENGINE_MODULES",
    "NOT_LOADED",
    "REAL_PREFIXES",
    "EngineModules",
    "StandIn",
    "StandInModule",
    "StandInReached",
    "active",
    "engine_call",
    "load_engine",
]

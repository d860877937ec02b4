"""The one loader of upstream Python code: any distribution's real files behind an import finder.

SGLang's and vLLM's packages import hundreds of modules at their top and declare CUDA-only
dependencies, so ``import sglang`` does not work on a CPU box with a ``--no-deps`` install.  A
:class:`Distribution` declares, once, how poolfuzz loads one of them (SGLang and vLLM in
:mod:`poolfuzz.harness.upstream.sglang_files` and :mod:`poolfuzz.harness.upstream.vllm_files`; a plug-in may
declare its own engine's):

* **real files** for every module under its :attr:`~Distribution.real` prefixes, executed from the
  copy in use (the installed distribution, or the folder ``--sglang-src`` / ``--vllm-src`` names);
* **explicit stand-ins** (:attr:`~Distribution.stand_ins`) for the few other modules that run-time
  code calls into, each written from upstream's documented behaviour and citing the line that
  needs it;
* **placeholders** (:mod:`poolfuzz.harness.upstream.placeholders`) for everything else under the
  distribution's name: a file may *import* them, and *using* one raises
  :class:`~poolfuzz.harness.upstream.placeholders.StandInReached`, naming it, so a path poolfuzz does not
  cover fails loudly instead of running on a dummy.

One :class:`LoadedCopy` per distribution and copy holds every module it executed, so each upstream
class has **one identity per process**, whichever targets load it: the SWA allocator composes the
very ``TokenToKVPoolAllocator`` the ``token_kv`` target fuzzes and the engine schedules over.

**Present only while upstream runs.**  The loaded modules are kept aside, not in ``sys.modules``:
:meth:`LoadedCopy.active` (a window) installs the finder for the block, and the finder serves the
loaded modules back by name, so upstream's call-time imports (``from sglang.srt.mem_cache.common
import ...`` inside a method) find the same objects.  On the window's outermost exit every name the
window added to ``sys.modules`` is taken out again: a later real ``import sglang`` sees a clean
process.  A window costs two list operations when upstream imports nothing inside it.

**Per target.**  A target names the modules it drives (:meth:`LoadedCopy.load`); a module that fails
to execute on the copy at hand (another release) refuses only the targets that need it, with a
one-line reason naming the upstream file and line (:func:`poolfuzz.harness.upstream.sources.failing_upstream_file`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from poolfuzz.harness.upstream.placeholders import StandInModule, loading
from poolfuzz.harness.upstream.sources import SourceFolder, UpstreamUnavailableError, failing_upstream_file, locate_copy

__all__ = ["Distribution", "LoadedCopy", "StandInFactory", "copy_of", "deferred", "forget_copies"]

StandInFactory = Callable[[str], ModuleType]
"""Builds the stand-in module of a name (the factory gets the dotted name)."""
AfterExec = Callable[[ModuleType], None]
"""Runs once a real file has executed, before any other file imports it (an instrumentation point)."""


@dataclass(frozen=True)
class Distribution:
    """How poolfuzz loads one upstream Python distribution: which modules run from files, which are stood in for.

    ``real`` prefixes are executed from the copy's files, every submodule included but those under
    ``not_loaded``; ``stand_ins()`` maps module names to factories; every other module under
    ``name`` is a placeholder.  ``after_exec`` hooks run once a real module executed (named
    instrumentation, e.g. a logical clock in place of ``time``); each says in its docstring why.
    """

    name: str
    """The top-level package (``sglang``), also the distribution's name on the package index."""
    title: str
    """How messages name it (``SGLang``)."""
    supported: str
    """The version the stand-ins were written for; others are tried, not promised."""
    env: str
    """The environment variable naming a folder of its files (``POOLFUZZ_SGLANG_SRC``)."""
    probe: str
    """A sub-folder every copy has (``srt``), to recognise a copy's folder."""
    real: tuple[str, ...]
    stand_ins: Callable[[], Mapping[str, StandInFactory]]
    not_loaded: tuple[str, ...] = ()
    after_exec: Mapping[str, AfterExec] = field(default_factory=dict)
    quiet_logger: bool = True
    """Show only the errors of the distribution's logger: upstream logs routine events (a retraction) as warnings."""
    eager: bool = True
    """Execute the files with ``torch.compile`` returning the function it decorates (:func:`_torch_compile_eager`)."""

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps {self.name}=={self.supported}"

    def is_real(self, name: str) -> bool:
        if any(name == skipped or name.startswith(skipped + ".") for skipped in self.not_loaded):
            return False
        return any(name == prefix or name.startswith(prefix + ".") for prefix in self.real)

    def above_real(self, name: str) -> bool:
        """A package above the real modules (``sglang.srt``): its ``__init__`` is skipped, its names are placeholders."""
        return any(prefix.startswith(name + ".") for prefix in self.real)

    def locate(self) -> SourceFolder:
        """The copy to load: the folder ``env`` names when set, else the installed distribution."""
        return locate_copy(
            self.name, env=self.env, probe=self.probe, title=self.title, supported=self.supported, install_hint=self.install_hint
        )


def deferred(module: str, attribute: str) -> Callable[..., Any]:
    """``module.attribute`` (a dotted path inside the module), imported on its first call.

    A :class:`Distribution`'s stand-ins and hooks live in modules that import torch; declaring the distribution
    must not, so that a process that only reads the declaration (``poolfuzz fuzz``'s parent, which names the
    distribution a target runs) stays free of torch's two-second import.
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        target: Any = functools.reduce(getattr, attribute.split("."), importlib.import_module(module))
        return target(*args, **kwargs)

    call.__qualname__ = call.__name__ = f"{module}.{attribute}"
    return call


# ------------------------------------------------------------------ the finder
class _StandInLoader(importlib.abc.Loader):
    def __init__(self, factory: StandInFactory | None) -> None:
        self._factory = factory

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = self._factory(spec.name) if self._factory else StandInModule(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]  # submodules resolve through the finder
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


class _LoadedLoader(importlib.abc.Loader):
    """Serves a module this copy already executed, keeping its own spec (the import system overwrites it)."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec


class _AfterExecLoader(importlib.abc.Loader):
    """A file's own loader, then the distribution's ``after_exec`` hook for it."""

    def __init__(self, inner: importlib.abc.Loader, hook: AfterExec) -> None:
        self._inner = inner
        self._hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._hook(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Resolves the distribution's names: a module already loaded, the real file, a stand-in, or a placeholder."""

    def __init__(self, distribution: Distribution, site: Path, namespace: dict[str, ModuleType]) -> None:
        self._dist = distribution
        self._site = site
        self._stand_ins = distribution.stand_ins()
        self._namespace = namespace
        self.placeholders: set[str] = set()
        self.imported: list[str] = []
        """Names resolved since the window opened (they join the namespace when it closes)."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        top = self._dist.name
        if name != top and not name.startswith(top + "."):
            return None
        self.imported.append(name)
        loaded = self._namespace.get(name)
        if loaded is not None:
            return importlib.machinery.ModuleSpec(name, _LoadedLoader(loaded), is_package=hasattr(loaded, "__path__"))
        if name in self._stand_ins:
            return importlib.machinery.ModuleSpec(name, _StandInLoader(self._stand_ins[name]), is_package=True)
        if self._dist.is_real(name):
            return self._real_spec(name)
        if not self._dist.above_real(name):
            self.placeholders.add(name)
        return importlib.machinery.ModuleSpec(name, _StandInLoader(None), is_package=True)

    def _real_spec(self, name: str) -> importlib.machinery.ModuleSpec | None:
        rel = Path(*name.split("."))
        folder = self._site / rel
        spec: importlib.machinery.ModuleSpec | None
        if (folder / "__init__.py").is_file():
            spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        elif (self._site / rel.with_suffix(".py")).is_file():
            spec = importlib.util.spec_from_file_location(name, self._site / rel.with_suffix(".py"))
        elif folder.is_dir():
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            return spec
        else:
            return None
        hook = self._dist.after_exec.get(name)
        if spec is not None and spec.loader is not None and hook is not None:
            spec.loader = _AfterExecLoader(spec.loader, hook)
        return spec


# ------------------------------------------------------------------ one loaded copy
class LoadedCopy:
    """One copy of a distribution, loaded: its modules (one identity each), why others did not load, and its window."""

    def __init__(self, distribution: Distribution, source: SourceFolder) -> None:
        self.distribution = distribution
        self.source = source
        self.namespace: dict[str, ModuleType] = {}
        """Every module of this copy resolved so far, by dotted name, out of ``sys.modules`` between windows."""
        self.problems: dict[str, str] = {}
        """Dotted module name -> the one-line reason it did not load."""
        self._finder = _Finder(distribution, source.site, self.namespace)
        self._lock = threading.RLock()
        self._depth = 0
        self._foreign: dict[str, ModuleType] = {}

    @property
    def version(self) -> str:
        return self.source.version

    def __deepcopy__(self, memo: dict[int, object]) -> LoadedCopy:
        return self  # one per process and source: a copied wrapper shares its window

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Every module of the distribution answered by a placeholder so far (for ``harness list`` and the docs)."""
        return tuple(sorted(self._finder.placeholders))

    # -------------------------------------------------------------- the window
    def active(self) -> AbstractContextManager[None]:
        """The window in which upstream code runs: the finder installed, the copy's modules importable (reentrant)."""
        return _Window(self)

    def open(self) -> None:
        """Open a window (:meth:`active` as a pair of calls, for the hottest paths); :meth:`close` closes it."""
        self._lock.acquire()
        if self._depth == 0:
            top = self.distribution.name
            present = sys.modules.get(top)
            if present is not None and present is not self.namespace.get(top):
                # Another copy's (or a real import's) modules: set aside for the window, restored after.
                prefix = top + "."
                self._foreign = {n: m for n, m in sys.modules.items() if n == top or n.startswith(prefix)}
                for name in self._foreign:
                    del sys.modules[name]
            sys.meta_path.insert(0, self._finder)
        self._depth += 1

    def close(self) -> None:
        self._depth -= 1
        try:
            if self._depth == 0:
                if sys.meta_path[0] is self._finder:
                    del sys.meta_path[0]
                else:  # something inserted a finder of its own meanwhile
                    sys.meta_path.remove(self._finder)
                if self._finder.imported:
                    for name in self._finder.imported:
                        module = sys.modules.pop(name, None)
                        if module is not None:
                            self.namespace[name] = module
                    self._finder.imported.clear()
                if self._foreign:
                    sys.modules.update(self._foreign)
                    self._foreign = {}
        finally:
            self._lock.release()

    # -------------------------------------------------------------- loading
    def load(self, names: Iterable[str]) -> tuple[dict[str, ModuleType], dict[str, str]]:
        """Import each dotted name of ``names`` (once a process): what loaded and, for each that did not, why.

        A failure is recorded (not raised) with a one-line reason prefixed by the copy's label, so
        a target needing the module is refused with it while the others run.
        """
        loaded: dict[str, ModuleType] = {}
        problems: dict[str, str] = {}
        with self.active():
            for name in names:
                if name in self.problems:
                    problems[name] = self.problems[name]
                    continue
                module = self.namespace.get(name)
                if module is None:
                    loading.active = True
                    try:
                        with _torch_compile_eager() if self.distribution.eager else nullcontext():
                            module = importlib.import_module(name)
                    except Exception as exc:  # noqa: BLE001 - any failure of upstream's files refuses the module
                        self.problems[name] = problems[name] = self._reason(name, exc)
                        continue
                    finally:
                        loading.active = False
                loaded[name] = module
        if self.distribution.quiet_logger:
            logging.getLogger(self.distribution.name).setLevel(logging.ERROR)
        return loaded, problems

    def _reason(self, name: str, exc: BaseException) -> str:
        where = failing_upstream_file(exc, self.source.package) or self.source.relative(self.source.package / Path(*name.split(".")[1:]))
        missing = exc.name if isinstance(exc, ImportError) else None
        if missing and isinstance(exc, ModuleNotFoundError) and self.distribution.is_real(missing):
            folder, _, leaf = missing.partition(".")[2].rpartition(".")
            return f"{self.source.label}: {folder.replace('.', '/')}/ has no {leaf}.py"
        if missing and not (missing == self.distribution.name or missing.startswith(self.distribution.name + ".")):
            return (
                f"{self.source.label}: {where} imports {missing}, which is not installed "
                f"(pip install {missing.split('.')[0]}; it is one of {self.distribution.name}'s own dependencies)"
            )
        text = " ".join(str(exc).split())
        return (
            f"{self.source.label}: loading {name} failed at {where} ({type(exc).__name__}: {text}); "
            f"the stand-ins were written for {self.distribution.name}=={self.distribution.supported} "
            f"({self.distribution.install_hint})"
        )


@contextmanager
def _torch_compile_eager() -> Iterator[None]:
    """While upstream files execute, ``torch.compile`` leaves the function it decorates as written.

    ``torch.compile`` is transparent by contract (``disable=True`` runs the function eagerly, and SGLang passes it
    on NPUs: managers/overlap_utils.py:77).  Its decorators run at import, and the first one imports
    ``torch._dynamo``: about 2.5 s of CPU in every process that loads, say, overlap_utils.py, which the
    scheduler imports (scheduler.py:202) and the PD decode mixin too.  The functions decorated on the memory path belong to the forward (the
    fake model's side) and on a CPU box would otherwise compile through Inductor, which needs a C++ compiler.
    Only the decoration during the load is changed; ``torch.compile`` is restored afterwards.
    """
    import torch  # upstream's files import it anyway

    compile_ = torch.compile

    def eager(model: object = None, **options: object) -> object:
        return model if model is not None else (lambda function: function)

    torch.compile = eager  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.compile = compile_


class _Window:
    __slots__ = ("_copy",)

    def __init__(self, copy: LoadedCopy) -> None:
        self._copy = copy

    def __enter__(self) -> None:
        self._copy.open()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._copy.close()


_copies: dict[tuple[str, str | None], LoadedCopy] = {}
_failed: dict[tuple[str, str | None], str] = {}
_copies_lock = threading.Lock()


def copy_of(distribution: Distribution) -> LoadedCopy:
    """The loaded copy of ``distribution`` in use (once a process and source folder).

    Raises :class:`UpstreamUnavailableError` with the install command when no copy is found,
    and refuses a process where a real import of the distribution already happened: its modules
    would be a second copy of every class.
    """
    key = (distribution.name, os.environ.get(distribution.env) or None)
    with _copies_lock:
        if key in _copies:
            return _copies[key]
        if key in _failed:
            raise UpstreamUnavailableError(_failed[key])
        try:
            source = distribution.locate()
        except UpstreamUnavailableError as exc:
            _failed[key] = str(exc)
            raise
        existing = sys.modules.get(distribution.name)
        if existing is not None and not any(existing is c.namespace.get(distribution.name) for c in _copies.values()):
            raise UpstreamUnavailableError(
                f"a real {distribution.name} package is already imported in this process; poolfuzz loads "
                f"{distribution.name}'s files by path and would fork its classes"
            )
        _copies[key] = LoadedCopy(distribution, source)
        return _copies[key]


def forget_copies(name: str | None = None) -> None:
    """Drop the loaded copies (of ``name`` only, when given): the next :func:`copy_of` loads afresh (tests)."""
    with _copies_lock:
        for key in [k for k in (*_copies, *_failed) if name is None or k[0] == name]:
            _copies.pop(key, None)
            _failed.pop(key, None)

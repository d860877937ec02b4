"""Load upstream SGLang's allocator modules, and nothing else, from the installed distribution or a source folder.

``sglang/__init__.py`` imports hundreds of modules and the wheel declares CUDA-only
dependencies, so importing ``sglang.srt.mem_cache.allocator`` the normal way is not an
option on a CPU machine.  This module instead executes the four allocator files
(``base.py``, ``token.py``, ``paged.py``, ``mamba.py``) with
:func:`importlib.util.spec_from_file_location`.

**Where the files come from** (:func:`locate_sglang`): the folder named by
``POOLFUZZ_SGLANG_SRC`` (``poolfuzz --sglang-src PATH`` sets it) when set: a git checkout's
``python/`` folder, an unzipped wheel, any folder holding ``sglang/srt/``; else the
installed distribution (``pip install --no-deps sglang``).  The version is read from the
folder's own files (``sglang/_version.py``, ``sglang/version.py``), else from the
``sglang-*.dist-info`` next to them, else from a checkout's ``pyproject.toml``.

**Version tolerance.** The stand-ins (:mod:`harness.upstream.stubs`) were written for
:data:`SUPPORTED_VERSION`, but any version is *tried*: each file is executed on its own, and
a file that is missing, fails to execute (an import the stand-ins do not cover) or lacks the
class a target drives refuses only the targets that need it (:meth:`UpstreamModules.require`),
with a one-line reason naming that surface.  docs/compatibility.md records what loads where.

While the files execute, ``sys.modules`` holds minimal stand-ins for the helpers they import;
afterwards every name we inserted is removed again, so a later real ``import sglang`` is not
shadowed.  The loaded modules live on in :class:`UpstreamModules`.  No SGLang code is copied
into this repository.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
import threading
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from harness.judge.families import UnknownTargetError
from harness.upstream import stubs

SUPPORTED_VERSION = "0.5.23"
"""The version the stand-ins were written for and every finding was made on; others are tried, not promised."""
DISTRIBUTION = "sglang"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={SUPPORTED_VERSION}"
SOURCE_ENV = "POOLFUZZ_SGLANG_SRC"
"""Environment variable naming a folder of SGLang's files to load instead of the installed distribution."""

_ALLOCATOR = "sglang.srt.mem_cache.allocator"
# Loaded in this order: token and paged import base at module level.
_FILES = ("base", "token", "paged", "mamba")
_DEPENDS: dict[str, tuple[str, ...]] = {"base": (), "token": ("base",), "paged": ("base",), "mamba": ()}
_KERNEL_FILE = "sglang/kernels/ops/memory/allocator.py"

FREE_PAGES = ("base", "BaseTokenToKVPoolAllocator.get_all_free_pages")
"""What the KV and SWA drivers read a free list through (``TokenKV`` spells it out itself); 0.5.19's base has none."""
TARGET_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "TokenKV": (("token", "TokenToKVPoolAllocator"),),
    "PagedKV": (("paged", "PagedTokenToKVPoolAllocator"), FREE_PAGES),
    "MambaSlots": (("mamba", "MambaSlotAllocator"),),
}
"""Allocator target -> (file, class or ``Class.member``) pairs it drives; a file's own dependencies (:data:`_DEPENDS`)
come with it."""


class UpstreamUnavailableError(UnknownTargetError):
    """Upstream SGLang cannot be loaded: not installed, or the surface a target needs is missing or moved.

    A subclass of :class:`~harness.judge.families.UnknownTargetError`, so the CLI reports it as an
    unresolvable target (one line, no traceback).
    """


# ------------------------------------------------------------------ where are the files
@dataclass(frozen=True)
class SourceFolder:
    """One copy of a package's files: the folder that holds the package, its version, and how it was chosen."""

    distribution: str
    version: str
    site: Path
    """The folder holding ``sglang/`` (``vllm/``): site-packages, an unzipped wheel, a checkout's ``python/``."""
    origin: str
    """``"installed"`` or ``"ENV=PATH"``, for messages."""

    @property
    def package(self) -> Path:
        """The package folder itself (``site/sglang``)."""
        return self.site / self.distribution

    @property
    def label(self) -> str:
        """``sglang 0.5.22`` or ``sglang 0.5.22 (POOLFUZZ_SGLANG_SRC=/tmp/x)``: the prefix of every refusal."""
        where = "" if self.origin == "installed" else f" ({self.origin})"
        return f"{self.distribution} {self.version}{where}"

    def relative(self, path: Path) -> str:
        """``path`` relative to the package folder, for one-line reasons (``srt/mem_cache/allocator/swa.py``)."""
        try:
            return str(path.relative_to(self.package))
        except ValueError:
            return str(path)


_VERSION_LITERAL = re.compile(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", re.MULTILINE)


def folder_version(package: Path, distribution: str) -> str | None:
    """The version a package folder states about itself, without executing any of it.

    Tried in order: ``_version.py`` and ``version.py`` (a literal ``__version__ = "..."`` at
    the start of a line, as setuptools-scm writes it), the one ``DIST-*.dist-info/METADATA``
    next to the package (an unzipped wheel), a checkout's ``pyproject.toml`` (``project.version``,
    one or two folders up).  ``None`` when none of them says.
    """
    for name in ("_version.py", "version.py"):
        path = package / name
        if path.is_file():
            match = _VERSION_LITERAL.search(path.read_text(encoding="utf-8", errors="replace"))
            if match:
                return match.group(1)
    infos = sorted(package.parent.glob(f"{distribution}-*.dist-info/METADATA"))
    if len(infos) == 1:
        for line in infos[0].read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.removeprefix("Version:").strip()
    for project in (package.parent / "pyproject.toml", package.parent.parent / "pyproject.toml"):
        if project.is_file():
            try:
                version = tomllib.loads(project.read_text(encoding="utf-8")).get("project", {}).get("version")
            except (tomllib.TOMLDecodeError, UnicodeDecodeError):
                continue
            if isinstance(version, str):
                return version
    return None


def source_folder(path: str | os.PathLike[str], distribution: str, *, env: str, probe: str) -> SourceFolder:
    """The package copy at ``path``: a folder holding ``DIST/PROBE``, the package folder itself, or a checkout root.

    ``probe`` is a sub-folder every copy has (``srt`` for sglang, ``v1`` for vLLM); a checkout's
    root is accepted when its ``python/`` folder (SGLang's layout) or the root itself holds the package.
    Raises :class:`UpstreamUnavailableError` naming ``env`` when nothing fits.
    """
    given = Path(path).expanduser()
    for site in (given, given / "python", given.parent if given.name == distribution else None):
        if site is not None and (site / distribution / probe).is_dir():
            site = site.resolve()
            version = folder_version(site / distribution, distribution) or "(version unknown)"
            return SourceFolder(distribution, version, site, f"{env}={given}")
    raise UpstreamUnavailableError(
        f"{env}={given}: no {distribution}/{probe}/ there; point it at the folder that holds {distribution}/ "
        f"(a git checkout's python/ folder or an unzipped wheel)"
    )


def installed_version() -> str | None:
    """The installed ``sglang`` version, or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def locate_sglang() -> SourceFolder:
    """The SGLang files to load: ``POOLFUZZ_SGLANG_SRC``'s folder when set, else the installed distribution.

    The installed copy is refused when it is missing, or when its metadata and its own
    ``_version.py`` disagree (a half-overwritten install: which surface would be loaded is unknown).
    """
    given = os.environ.get(SOURCE_ENV)
    if given:
        return source_folder(given, DISTRIBUTION, env=SOURCE_ENV, probe="srt")
    version = installed_version()
    if version is None:
        raise UpstreamUnavailableError(
            f"upstream SGLang is not installed; the upstream targets need {DISTRIBUTION} (made and checked on "
            f"{SUPPORTED_VERSION}: {INSTALL_HINT}, without its CUDA dependencies), or {SOURCE_ENV}=PATH of its files"
        )
    package = Path(str(importlib.metadata.distribution(DISTRIBUTION).locate_file(DISTRIBUTION)))
    stated = folder_version(package, DISTRIBUTION)
    if stated is not None and stated != version:
        raise UpstreamUnavailableError(
            f"the installed {DISTRIBUTION}'s metadata says {version} but its files ({package}) say {stated}: "
            f"a mixed install; reinstall one version, e.g. {INSTALL_HINT} (--force-reinstall)"
        )
    return SourceFolder(DISTRIBUTION, version, package.parent, "installed")


def locate_distribution() -> tuple[str, Path, Path]:
    """The version, the allocator folder and the Triton kernel file of :func:`locate_sglang`'s copy."""
    source = locate_sglang()
    return source.version, source.package / "srt/mem_cache/allocator", source.site / _KERNEL_FILE


# ------------------------------------------------------------------ executing files
def _exec_file(
    name: str, path: Path, *, stand_ins: str = "harness.upstream.stubs", written_for: str = f"{DISTRIBUTION}=={SUPPORTED_VERSION}"
) -> ModuleType:
    """Execute ``path`` as module ``name`` (left in ``sys.modules`` for the files that import it; the caller cleans up).

    A failure is an :class:`UpstreamUnavailableError` naming the file and the exception: on
    another version than :data:`SUPPORTED_VERSION` that is usually an import the stand-ins
    (``stand_ins``) do not cover.
    """
    if not path.is_file():
        raise UpstreamUnavailableError(f"{path} is missing")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UpstreamUnavailableError(f"cannot build an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # token.py and paged.py import base by its dotted name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)  # a half-executed module must not satisfy the files that import it
        raise UpstreamUnavailableError(
            f"executing upstream {path} failed ({type(exc).__name__}: {_one_line(exc)}); "
            f"the stand-ins in {stand_ins} were written for {written_for}"
        ) from exc
    return module


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def failing_upstream_file(exc: BaseException, package: Path) -> str | None:
    """``srt/mem_cache/x.py:12``: the innermost traceback frame of ``exc`` inside ``package``, or ``None``.

    An ``ImportError`` raised while a chain of upstream files imports one another names the
    missing module, not the file that wanted it; this names that file (the surface that moved).
    """
    found = None
    tb = exc.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename)
        if path.is_relative_to(package):
            found = f"{path.relative_to(package)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def exec_files(
    files: Iterable[tuple[str, Path]],
    depends: Mapping[str, Iterable[str]],
    *,
    source: SourceFolder,
    stand_ins: str,
    after: Callable[[str, ModuleType], str | None] | None = None,
    written_for: str = f"{DISTRIBUTION}=={SUPPORTED_VERSION}",
) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Execute each ``(dotted name, path)`` in order; return what loaded and, per name that did not, why.

    A file whose dependency (``depends[name]``, dotted names) did not load is not executed;
    its reason is that dependency's.  ``after(name, module)``, when given, runs once a file has
    executed and may refuse it (a surface check), returning the reason.  Reasons are one line,
    prefixed with ``source.label``.  The caller owns ``sys.modules`` (stand-ins in, everything out
    afterwards).
    """
    loaded: dict[str, ModuleType] = {}
    problems: dict[str, str] = {}
    for name, path in files:
        broken = [dep for dep in depends.get(name, ()) if dep in problems]
        if broken:
            problems[name] = problems[broken[0]]
            continue
        if not path.is_file():
            problems[name] = f"{source.label}: {source.relative(path.parent)}/ has no {path.name}"
            continue
        try:
            module = _exec_file(name, path, stand_ins=stand_ins, written_for=written_for)
        except UpstreamUnavailableError as exc:
            problems[name] = f"{source.label}: {str(exc).replace(str(source.package) + '/', '')}"
            continue
        refused = after(name, module) if after is not None else None
        if refused is not None:
            sys.modules.pop(name, None)
            problems[name] = f"{source.label}: {refused}"
            continue
        loaded[name] = module
    return loaded, problems


def check_classes(
    modules: Mapping[str, ModuleType],
    needs: Iterable[tuple[str, str]],
    *,
    source: SourceFolder,
    files: Mapping[str, Path],
    checked_on: str = SUPPORTED_VERSION,
) -> str | None:
    """``None`` when every ``(module, name)`` of ``needs`` is there; else the one-line reason naming the first missing.

    ``name`` is a class (``"RadixCache"``) or a dotted member of one (``"BaseTokenToKVPoolAllocator.get_all_free_pages"``).
    A module that did not load is skipped: its own reason is reported by the caller.
    """
    for module_name, attr in needs:
        found: object = modules.get(module_name)
        if found is None:
            continue
        for part in attr.split("."):
            found = getattr(found, part, None)
            if found is None:
                where = source.relative(files[module_name]) if module_name in files else module_name
                return f"{source.label}: {where} has no {attr} ({checked_on} has it: renamed, moved or added since)"
    return None


@dataclass(frozen=True)
class UpstreamModules:
    """The upstream allocator modules that loaded, where they came from, and why the others did not.

    ``base``, ``token``, ``paged`` and ``mamba`` are the modules; reading one that did not load
    raises :class:`UpstreamUnavailableError` with its reason.
    """

    version: str
    root: Path
    modules: dict[str, ModuleType]
    problems: dict[str, str] = field(default_factory=dict)
    """Short file name (``"mamba"``) -> one-line reason it did not load."""
    source: SourceFolder | None = None

    def module(self, name: str) -> ModuleType:
        """The loaded module ``name`` (``"token"``...), or :class:`UpstreamUnavailableError` with the reason."""
        try:
            return self.modules[name]
        except KeyError:
            raise UpstreamUnavailableError(self.problems.get(name, f"no upstream allocator module {name!r}")) from None

    @property
    def base(self) -> ModuleType:
        return self.module("base")

    @property
    def token(self) -> ModuleType:
        return self.module("token")

    @property
    def paged(self) -> ModuleType:
        return self.module("paged")

    @property
    def mamba(self) -> ModuleType:
        return self.module("mamba")

    def target_problem(self, target: str) -> str | None:
        """Why allocator target ``target`` (``"TokenKV"``...) cannot run on this copy, or ``None``."""
        needs = TARGET_NEEDS[target]
        for module_name, _ in needs:
            if module_name in self.problems:
                return self.problems[module_name]
        assert self.source is not None
        files = {name: self.root / f"{name}.py" for name in _FILES}
        problem = check_classes(self.modules, needs, source=self.source, files=files)
        if problem is None and target == "PagedKV":
            problem = self.paged_cpu_problem()
        return problem

    def paged_cpu_problem(self) -> str | None:
        """Why the paged allocator cannot run here, or ``None``: it needs its torch path unless a GPU is present.

        0.5.22 added ``alloc_decode_naive`` and the ``use_triton_kernels`` switch between the torch
        path and the kernels; before it (``alloc_extend_naive`` existed, unused), ``alloc_extend``
        and ``alloc_decode`` always launch the Triton kernels, which do not run on CPU tensors here (triton's interpreter only
        serves their ``tl.sum`` when ``TRITON_INTERPRET=1`` was set before triton was imported).
        """
        paged = self.modules.get("paged")
        if paged is None or hasattr(paged, "alloc_decode_naive"):
            return None
        import torch

        if torch.cuda.is_available():
            return None  # runs with --device cuda (its Triton kernels compile there); not on CPU tensors
        assert self.source is not None
        return (f"{self.source.label}: srt/mem_cache/allocator/paged.py has no alloc_decode_naive (no torch path: "
                f"PagedTokenToKVPoolAllocator always launches its Triton kernels, which need a CUDA device; none here)")

    def require(self, target: str) -> None:
        """Refuse ``target`` with its one-line reason (:class:`UpstreamUnavailableError`) when it cannot run."""
        problem = self.target_problem(target)
        if problem is not None:
            raise UpstreamUnavailableError(problem)


_lock = threading.Lock()
_loaded: dict[str | None, UpstreamModules] = {}
"""Loaded modules by the value of ``POOLFUZZ_SGLANG_SRC`` they were loaded under (``None``: the installed copy)."""


def unavailable_reason(target: str | None = None) -> str | None:
    """Why :func:`load_upstream` (or, given ``target``, that allocator target) would fail, else ``None`` (test skips).

    Without ``target``, any allocator file that did not load is a reason.
    """
    try:
        modules = load_upstream()
    except UpstreamUnavailableError as exc:
        return str(exc)
    if target is not None:
        return modules.target_problem(target)
    return next(iter(modules.problems.values()), None)


def load_upstream() -> UpstreamModules:
    """Load (once per process and source) and return the upstream allocator modules.

    Raises :class:`UpstreamUnavailableError` with the install command when no SGLang copy is
    found.  A file that does not load is recorded, not raised: reading it from the result
    raises, with the reason (:meth:`UpstreamModules.require` checks a target's files at once).
    """
    key = os.environ.get(SOURCE_ENV) or None
    with _lock:
        if key in _loaded:
            return _loaded[key]
        source = locate_sglang()
        folder = source.package / "srt/mem_cache/allocator"
        inserted = stubs.stub_modules(kernel_file=source.site / _KERNEL_FILE)
        names = [*inserted, *(f"{_ALLOCATOR}.{name}" for name in _FILES)]
        saved = {name: sys.modules[name] for name in names if name in sys.modules}
        sys.modules.update(inserted)
        try:
            loaded, problems = exec_files(
                [(f"{_ALLOCATOR}.{name}", folder / f"{name}.py") for name in _FILES],
                {f"{_ALLOCATOR}.{name}": [f"{_ALLOCATOR}.{dep}" for dep in deps] for name, deps in _DEPENDS.items()},
                source=source,
                stand_ins="harness.upstream.stubs",
            )
        finally:
            for name in names:
                sys.modules.pop(name, None)
            sys.modules.update(saved)
        short = len(_ALLOCATOR) + 1
        _loaded[key] = UpstreamModules(
            version=source.version,
            root=folder,
            modules={name[short:]: module for name, module in loaded.items()},
            problems={name[short:]: why for name, why in problems.items()},
            source=source,
        )
        return _loaded[key]

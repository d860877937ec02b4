"""Finding and executing an upstream distribution's files without importing the distribution.

SGLang's and vLLM's packages import hundreds of modules and declare CUDA-only
dependencies, so the loaders (:mod:`harness.upstream.loader` for SGLang's allocators,
:mod:`~harness.upstream.sglang_cache`, :mod:`~harness.upstream.vllm_loader`) execute
the few files a target drives, one at a time, with stand-ins for the helpers they
import.  What they share lives here: a :class:`SourceFolder` (which copy, which
version, chosen how: :func:`locate_copy`), reading a folder's version without executing
it, executing files in dependency order under stand-ins with one-line reasons for those
that fail (:func:`exec_package`), checking that the classes a target drives are there,
and reading a loaded file off the result (:class:`LoadedFiles`, :class:`FileModule`).
Every refusal is an :class:`UpstreamUnavailableError`, which the CLI prints as one line
(:func:`refusal` reads it for a test skip).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar, overload

from harness.judge.families import UnknownTargetError

__all__ = [
    "FileModule",
    "LoadedFiles",
    "SourceFolder",
    "UpstreamUnavailableError",
    "check_classes",
    "distribution_version",
    "exec_files",
    "exec_package",
    "failing_upstream_file",
    "folder_version",
    "locate_copy",
    "refusal",
    "source_folder",
]


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


def distribution_version(distribution: str) -> str | None:
    """The installed ``distribution``'s version (its metadata), or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def locate_copy(
    distribution: str,
    *,
    env: str,
    probe: str,
    installed: Callable[[], str | None],
    title: str,
    needed_by: str,
    supported: str,
    install_hint: str,
) -> SourceFolder:
    """The copy of ``distribution`` to load: ``env``'s folder when set (:func:`source_folder`), else the installed one.

    ``installed()`` is the installed version (asked only when ``env`` is unset).  The installed copy
    is refused when it is missing (naming ``title``, the targets that ``needed_by`` it, the
    ``supported`` version and ``install_hint``), or when its metadata and its own files
    (:func:`folder_version`) disagree: a half-overwritten install, whose surface is unknown.
    """
    given = os.environ.get(env)
    if given:
        return source_folder(given, distribution, env=env, probe=probe)
    version = installed()
    if version is None:
        raise UpstreamUnavailableError(
            f"upstream {title} is not installed; {needed_by} need {distribution} (made and checked on "
            f"{supported}: {install_hint}, without its CUDA dependencies), or {env}=PATH of its files"
        )
    package = Path(str(importlib.metadata.distribution(distribution).locate_file(distribution)))
    stated = folder_version(package, distribution)
    if stated is not None and stated != version:
        raise UpstreamUnavailableError(
            f"the installed {distribution}'s metadata says {version} but its files ({package}) say {stated}: "
            f"a mixed install; reinstall one version, e.g. {install_hint} (--force-reinstall)"
        )
    return SourceFolder(distribution, version, package.parent, "installed")


def refusal(load: Callable[[], object]) -> str | None:
    """Why ``load()`` is refused (its :class:`UpstreamUnavailableError`'s message), or ``None`` when it returns."""
    try:
        load()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ executing files
def _exec_file(name: str, path: Path, *, stand_ins: str, written_for: str) -> ModuleType:
    """Execute ``path`` as module ``name`` (left in ``sys.modules`` for the files that import it; the caller cleans up).

    A failure is an :class:`UpstreamUnavailableError` naming the file and the exception: on
    another version than the stand-ins were ``written_for`` that is usually an import they
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
    written_for: str,
    after: Callable[[str, ModuleType], str | None] | None = None,
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


def exec_package(
    package: str,
    files: Iterable[tuple[str, Path]],
    depends: Mapping[str, Iterable[str]],
    *,
    stand_ins: Mapping[str, ModuleType],
    stand_ins_from: str,
    source: SourceFolder,
    written_for: str,
    after: Callable[[str, ModuleType], str | None] | None = None,
) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """:func:`exec_files` for files of the dotted ``package``, with ``stand_ins`` in ``sys.modules`` meanwhile.

    ``files`` and ``depends`` name the files by their name under ``package`` (``"token"``,
    ``"allocator.swa"``), and so do the results; ``after`` sees the full dotted name.
    ``stand_ins_from`` (the module that made them) and ``written_for`` are for the reasons.
    Afterwards every stand-in and every file's name is removed from ``sys.modules`` and what
    those names held before is put back, so a later real import is not shadowed.
    """
    dotted = [(f"{package}.{name}", path) for name, path in files]
    names = [*stand_ins, *(name for name, _ in dotted)]
    saved = {name: sys.modules[name] for name in names if name in sys.modules}
    sys.modules.update(stand_ins)
    try:
        loaded, problems = exec_files(
            dotted,
            {f"{package}.{name}": [f"{package}.{dep}" for dep in deps] for name, deps in depends.items()},
            source=source,
            stand_ins=stand_ins_from,
            written_for=written_for,
            after=after,
        )
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    short = len(package) + 1
    return {name[short:]: module for name, module in loaded.items()}, {name[short:]: why for name, why in problems.items()}


def check_classes(
    modules: Mapping[str, ModuleType],
    needs: Iterable[tuple[str, str]],
    *,
    source: SourceFolder,
    files: Mapping[str, Path],
    checked_on: str,
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


# ------------------------------------------------------------------ reading what loaded
class LoadedFiles:
    """What a loader's result shares: its files that loaded, by name, why the others did not, and reading one.

    The result (a frozen dataclass) declares ``modules`` and ``problems`` as its fields and
    ``kind``, the word naming its files in the reason for a name it never tried.
    """

    kind: ClassVar[str] = ""
    modules: dict[str, ModuleType]
    problems: dict[str, str]

    def module(self, name: str) -> ModuleType:
        """The loaded file ``name``, or :class:`UpstreamUnavailableError` with why it did not load."""
        try:
            return self.modules[name]
        except KeyError:
            raise UpstreamUnavailableError(self.problems.get(name, f"no upstream {self.kind} module {name!r}")) from None


class FileModule:
    """A read-only attribute of a :class:`LoadedFiles` that is one of its files: ``base = FileModule("base")``."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> FileModule: ...

    @overload
    def __get__(self, instance: LoadedFiles, owner: type) -> ModuleType: ...

    def __get__(self, instance: LoadedFiles | None, owner: type) -> FileModule | ModuleType:
        return self if instance is None else instance.module(self.name)

"""Where an upstream distribution's files are, which version they are, and what a target needs of them.

The loader (:mod:`poolfuzz.harness.upstream.loading`) executes a copy's files; this module finds the copy
without executing anything: a :class:`SourceFolder` (which copy, which version, chosen how:
:func:`locate_copy`), reading a folder's version from its files, naming the upstream file and line
where loading failed, checking that the classes a target drives are there (:func:`check_classes`),
and reading a loaded module off a target's result (:class:`LoadedFiles`, :class:`FileModule`).
Every refusal is an :class:`UpstreamUnavailableError`, which the CLI prints as one line
(:func:`refusal` reads it for a test skip).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar, overload

from poolfuzz.harness.judge.families import UnknownTargetError

__all__ = [
    "FileModule",
    "LoadedFiles",
    "SourceFolder",
    "UpstreamUnavailableError",
    "check_classes",
    "distribution_version",
    "failing_upstream_file",
    "folder_version",
    "locate_copy",
    "refusal",
    "source_folder",
]


class UpstreamUnavailableError(UnknownTargetError):
    """Upstream SGLang cannot be loaded: not installed, or the surface a target needs is missing or moved.

    A subclass of :class:`~poolfuzz.harness.judge.families.UnknownTargetError`, so the CLI reports it as an
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


def locate_copy(distribution: str, *, env: str, probe: str, title: str, supported: str, install_hint: str) -> SourceFolder:
    """The copy of ``distribution`` to load: ``env``'s folder when set (:func:`source_folder`), else the installed one.

    The installed copy is refused when it is missing (naming ``title``, the ``supported`` version
    and ``install_hint``), or when its metadata and its own files (:func:`folder_version`)
    disagree: a half-overwritten install, whose surface is unknown.
    """
    given = os.environ.get(env)
    if given:
        return source_folder(given, distribution, env=env, probe=probe)
    version = distribution_version(distribution)
    if version is None:
        raise UpstreamUnavailableError(
            f"upstream {title} is not installed; its targets need {distribution} (made and checked on "
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


# ------------------------------------------------------------------ what failed where
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


def check_classes(
    modules: Mapping[str, ModuleType], needs: Iterable[tuple[str, str]], *, source: SourceFolder, files: Mapping[str, Path], checked_on: str
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

"""Load upstream SGLang's allocator modules, and nothing else, from the installed distribution.

``sglang/__init__.py`` imports hundreds of modules and the wheel declares CUDA-only
dependencies, so importing ``sglang.srt.mem_cache.allocator`` the normal way is not an
option on a CPU machine.  This module instead executes the four allocator files
(``base.py``, ``token.py``, ``paged.py``, ``mamba.py``) of an installed
``sglang==0.5.23`` (``pip install --no-deps``) with :func:`importlib.util.spec_from_file_location`.

While they execute, ``sys.modules`` holds minimal stand-ins for the helpers they import
(:mod:`harness.upstream.stubs`); afterwards every name we inserted is removed again, so a
later real ``import sglang`` is not shadowed.  The loaded modules live on in
:class:`UpstreamModules`.  No SGLang code is copied into this repository.

The version is pinned: the allocator API changed three times between 0.5.17 and 0.5.23,
so any other version is refused with :class:`UpstreamUnavailableError`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from harness.judge.families import UnknownTargetError
from harness.upstream import stubs

SUPPORTED_VERSION = "0.5.23"
DISTRIBUTION = "sglang"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={SUPPORTED_VERSION}"

_ALLOCATOR = "sglang.srt.mem_cache.allocator"
# Loaded in this order: token and paged import base at module level.
_FILES = ("base", "token", "paged", "mamba")
_KERNEL_FILE = "sglang/kernels/ops/memory/allocator.py"


class UpstreamUnavailableError(UnknownTargetError):
    """Upstream SGLang cannot be loaded: not installed, another version, or its files are missing.

    A subclass of :class:`~harness.judge.families.UnknownTargetError`, so the CLI reports it as an
    unresolvable target (one line, no traceback).
    """


@dataclass(frozen=True)
class UpstreamModules:
    """The loaded upstream allocator modules and where they came from."""

    version: str
    root: Path
    base: ModuleType
    token: ModuleType
    paged: ModuleType
    mamba: ModuleType


_lock = threading.Lock()
_loaded: UpstreamModules | None = None


def installed_version() -> str | None:
    """The installed ``sglang`` version, or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def unavailable_reason() -> str | None:
    """Why :func:`load_upstream` would fail, or ``None`` when it can succeed (used for test skips)."""
    try:
        load_upstream()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


def locate_distribution() -> tuple[str, Path, Path]:
    """The installed version, the allocator folder and the Triton kernel file, or a clear error."""
    version = installed_version()
    if version is None:
        raise UpstreamUnavailableError(
            f"upstream SGLang is not installed; the upstream targets need {DISTRIBUTION}=={SUPPORTED_VERSION} "
            f"(install it without its CUDA dependencies: {INSTALL_HINT})"
        )
    if version != SUPPORTED_VERSION:
        raise UpstreamUnavailableError(
            f"upstream SGLang {version} is installed, but the upstream targets support exactly "
            f"{SUPPORTED_VERSION} (its allocator API changes between releases); run: {INSTALL_HINT}"
        )
    dist = importlib.metadata.distribution(DISTRIBUTION)
    folder = Path(str(dist.locate_file(_ALLOCATOR.replace(".", "/"))))
    missing = [name for name in _FILES if not (folder / f"{name}.py").is_file()]
    if missing:
        raise UpstreamUnavailableError(
            f"{DISTRIBUTION} {version} is installed but {folder} lacks {', '.join(m + '.py' for m in missing)}; "
            f"reinstall it: pip install --force-reinstall {INSTALL_HINT.removeprefix('pip install ')}"
        )
    return version, folder, Path(str(dist.locate_file(_KERNEL_FILE)))


def _exec_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UpstreamUnavailableError(f"cannot build an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # token.py and paged.py import base by its dotted name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UpstreamUnavailableError(
            f"executing upstream {path} failed ({type(exc).__name__}: {exc}); "
            f"the stubs in harness.upstream.stubs match {DISTRIBUTION}=={SUPPORTED_VERSION} only"
        ) from exc
    return module


def load_upstream() -> UpstreamModules:
    """Load (once per process) and return the upstream allocator modules.

    Raises :class:`UpstreamUnavailableError` with the install command when ``sglang`` is
    missing or is not version :data:`SUPPORTED_VERSION`.
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        version, folder, kernel_file = locate_distribution()
        inserted = stubs.stub_modules(kernel_file=kernel_file)
        names = [*inserted, *(f"{_ALLOCATOR}.{name}" for name in _FILES)]
        saved = {name: sys.modules[name] for name in names if name in sys.modules}
        sys.modules.update(inserted)
        try:
            modules = {name: _exec_file(f"{_ALLOCATOR}.{name}", folder / f"{name}.py") for name in _FILES}
        finally:
            for name in names:
                sys.modules.pop(name, None)
            sys.modules.update(saved)
        _loaded = UpstreamModules(version=version, root=folder, **modules)
        return _loaded

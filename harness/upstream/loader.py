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
into this repository.  Finding a copy's folder and version and executing its files one at a
time are shared with the other upstream loaders: :mod:`harness.upstream.sources`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from harness.upstream import sources, stubs
from harness.upstream.sources import FileModule, LoadedFiles, SourceFolder, UpstreamUnavailableError, check_classes

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


def installed_version() -> str | None:
    """The installed ``sglang`` version, or ``None`` when it is not installed."""
    return sources.distribution_version(DISTRIBUTION)


def locate_sglang() -> SourceFolder:
    """The SGLang files to load: ``POOLFUZZ_SGLANG_SRC``'s folder when set, else the installed distribution.

    The installed copy is refused when it is missing, or when its metadata and its own
    ``_version.py`` disagree (a half-overwritten install: which surface would be loaded is unknown).
    """
    return sources.locate_copy(
        DISTRIBUTION,
        env=SOURCE_ENV,
        probe="srt",
        installed=installed_version,
        title="SGLang",
        needed_by="the upstream targets",
        supported=SUPPORTED_VERSION,
        install_hint=INSTALL_HINT,
    )


def locate_distribution() -> tuple[str, Path, Path]:
    """The version, the allocator folder and the Triton kernel file of :func:`locate_sglang`'s copy."""
    source = locate_sglang()
    return source.version, source.package / "srt/mem_cache/allocator", source.site / _KERNEL_FILE


@dataclass(frozen=True)
class UpstreamModules(LoadedFiles):
    """The upstream allocator modules that loaded, where they came from, and why the others did not.

    ``base``, ``token``, ``paged`` and ``mamba`` are the modules; reading one that did not load
    (or :meth:`module`, by name) raises :class:`UpstreamUnavailableError` with its reason.
    """

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

    def target_problem(self, target: str) -> str | None:
        """Why allocator target ``target`` (``"TokenKV"``...) cannot run on this copy, or ``None``."""
        needs = TARGET_NEEDS[target]
        for module_name, _ in needs:
            if module_name in self.problems:
                return self.problems[module_name]
        assert self.source is not None
        files = {name: self.root / f"{name}.py" for name in _FILES}
        problem = check_classes(self.modules, needs, source=self.source, files=files, checked_on=SUPPORTED_VERSION)
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
        return (
            f"{self.source.label}: srt/mem_cache/allocator/paged.py has no alloc_decode_naive (no torch path: "
            f"PagedTokenToKVPoolAllocator always launches its Triton kernels, which need a CUDA device; none here)"
        )

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
        loaded, problems = sources.exec_package(
            _ALLOCATOR,
            [(name, folder / f"{name}.py") for name in _FILES],
            _DEPENDS,
            stand_ins=stubs.stub_modules(kernel_file=source.site / _KERNEL_FILE),
            stand_ins_from="harness.upstream.stubs",
            source=source,
            written_for=f"{DISTRIBUTION}=={SUPPORTED_VERSION}",
        )
        _loaded[key] = UpstreamModules(version=source.version, root=folder, modules=loaded, problems=problems, source=source)
        return _loaded[key]

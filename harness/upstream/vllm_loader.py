"""Load vLLM's v1 block pool, and nothing else, from the installed distribution or a source folder.

``vllm/v1/core/kv_cache_utils.py`` (``KVCacheBlock``, ``FreeKVCacheBlockQueue``,
block-hash helpers) and ``vllm/v1/core/block_pool.py`` (``BlockPool``,
``BlockHashToBlockMap``) are executed with :func:`importlib.util.spec_from_file_location`
while ``sys.modules`` holds the stand-ins of :mod:`harness.upstream.vllm_stubs`;
afterwards every name inserted is removed again, so a later real ``import vllm`` is not
shadowed.  Neither file needs torch.  No vLLM code is copied into this repository.

The files come from ``POOLFUZZ_VLLM_SRC`` (``poolfuzz --vllm-src PATH``: a folder holding
``vllm/v1/``, e.g. an unzipped wheel or a checkout) when set, else from the installed
distribution.  The stand-ins were written for :data:`SUPPORTED_VERSION` (the block pool gained
partial-block entries, reuse watchers and cross-pool frees within the 0.3x series); another
version is tried, and refused with a one-line reason naming the file, import or class that
moved (docs/compatibility.md).  Install the supported one without its CUDA dependencies with
:data:`INSTALL_HINT`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.upstream import sources, vllm_stubs
from harness.upstream.sources import SourceFolder, UpstreamUnavailableError, check_classes

SUPPORTED_VERSION = "0.33.0"
DISTRIBUTION = "vllm"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={SUPPORTED_VERSION}"

SOURCE_ENV = "POOLFUZZ_VLLM_SRC"
"""Environment variable naming a folder of vLLM's files to load instead of the installed distribution."""

_CORE = "vllm.v1.core"
# Loaded in this order: block_pool imports kv_cache_utils.
_FILES = ("kv_cache_utils", "block_pool")
_STAND_INS = "harness.upstream.vllm_stubs"

TARGET_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "VllmBlockPool": (("block_pool", "BlockPool"), ("kv_cache_utils", "KVCacheBlock"),
                      ("kv_cache_utils", "FreeKVCacheBlockQueue")),
}
"""vLLM target -> the (file, class) pairs it drives."""


@dataclass(frozen=True)
class VllmModules:
    """The loaded ``kv_cache_utils`` and ``block_pool`` modules and where they came from."""

    version: str
    root: Path
    kv_cache_utils: ModuleType
    block_pool: ModuleType
    source: SourceFolder | None = None

    def require(self, target: str) -> None:
        """Refuse ``target`` when a class it drives is missing from the loaded files (renamed or moved)."""
        assert self.source is not None
        modules = {"kv_cache_utils": self.kv_cache_utils, "block_pool": self.block_pool}
        problem = check_classes(modules, TARGET_NEEDS[target], source=self.source, checked_on=SUPPORTED_VERSION,
                                files={name: self.root / f"{name}.py" for name in _FILES})
        if problem is not None:
            raise UpstreamUnavailableError(problem)

    def new_block_pool(
        self, num_gpu_blocks: int, *, enable_caching: bool = True, hash_block_size: int = 16
    ) -> Any:
        """``BlockPool(num_gpu_blocks, enable_caching, hash_block_size)``, KV events and metrics off.

        Block 0 becomes the null block at construction, so ``num_gpu_blocks - 1`` are free.
        """
        return self.block_pool.BlockPool(num_gpu_blocks, enable_caching, hash_block_size)

    def request(self, hashes: list[bytes]) -> vllm_stubs.RequestStandIn:
        """The request ``cache_full_blocks`` takes, carrying ``hashes`` as its block hashes."""
        return vllm_stubs.RequestStandIn(block_hashes=list(hashes))


_lock = threading.Lock()
_loaded: dict[str | None, VllmModules] = {}
_failed: dict[str | None, str] = {}
"""Loaded modules (or the reason they did not load) by the ``POOLFUZZ_VLLM_SRC`` value in force (``None``: installed)."""


def installed_version() -> str | None:
    """The installed ``vllm`` version, or ``None`` when it is not installed."""
    return sources.distribution_version(DISTRIBUTION)


def locate_vllm() -> SourceFolder:
    """The vLLM files to load: ``POOLFUZZ_VLLM_SRC``'s folder when set, else the installed distribution.

    The installed copy is refused when missing, or when its metadata and its own ``_version.py``
    disagree (a mixed install).
    """
    return sources.locate_copy(DISTRIBUTION, env=SOURCE_ENV, probe="v1", installed=installed_version, title="vLLM",
                               needed_by="the block-pool targets", supported=SUPPORTED_VERSION, install_hint=INSTALL_HINT)


def locate_distribution() -> tuple[str, Path]:
    """The version and the ``v1/core`` folder of :func:`locate_vllm`'s copy."""
    source = locate_vllm()
    return source.version, source.package / "v1/core"


def load_vllm() -> VllmModules:
    """Load (once per process and source) and return vLLM's block-pool modules.

    Raises :class:`UpstreamUnavailableError` with the install command when ``vllm`` is missing,
    and with a one-line reason naming the file or import when the version at hand does not load
    under the stand-ins.
    """
    key = os.environ.get(SOURCE_ENV) or None
    with _lock:
        if key in _loaded:
            return _loaded[key]
        if key in _failed:
            raise UpstreamUnavailableError(_failed[key])
        source = locate_vllm()
        folder = source.package / "v1/core"
        files = [(name, folder / f"{name}.py") for name in _FILES]
        loaded, problems = sources.exec_package(_CORE, files, {"block_pool": ("kv_cache_utils",)},
                                                stand_ins=vllm_stubs.vllm_stand_ins(), stand_ins_from=_STAND_INS, source=source,
                                                written_for=f"{DISTRIBUTION}=={SUPPORTED_VERSION}")
        if problems:
            reason = next(iter(problems.values()))
            _failed[key] = reason
            raise UpstreamUnavailableError(reason)
        _loaded[key] = VllmModules(version=source.version, root=folder, source=source, **loaded)
        return _loaded[key]


def vllm_unavailable_reason() -> str | None:
    """Why :func:`load_vllm` would fail, or ``None`` when it can succeed (used for test skips)."""
    return sources.refusal(load_vllm)

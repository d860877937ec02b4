"""Load vLLM 0.33.0's v1 block pool, and nothing else, from the installed distribution.

``vllm/v1/core/kv_cache_utils.py`` (``KVCacheBlock``, ``FreeKVCacheBlockQueue``,
block-hash helpers) and ``vllm/v1/core/block_pool.py`` (``BlockPool``,
``BlockHashToBlockMap``) are executed with :func:`importlib.util.spec_from_file_location`
while ``sys.modules`` holds the stand-ins of :mod:`harness.upstream.vllm_stubs`;
afterwards every name inserted is removed again, so a later real ``import vllm`` is not
shadowed.  Neither file needs torch.  No vLLM code is copied into this repository.

The version is pinned to :data:`SUPPORTED_VERSION` (the block pool gained partial-block
entries, reuse watchers and cross-pool frees within the 0.3x series); install it without
its CUDA dependencies with :data:`INSTALL_HINT`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.upstream import vllm_stubs
from harness.upstream.loader import UpstreamUnavailableError

SUPPORTED_VERSION = "0.33.0"
DISTRIBUTION = "vllm"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={SUPPORTED_VERSION}"

_CORE = "vllm.v1.core"
# Loaded in this order: block_pool imports kv_cache_utils.
_FILES = ("kv_cache_utils", "block_pool")


@dataclass(frozen=True)
class VllmModules:
    """The loaded ``kv_cache_utils`` and ``block_pool`` modules and where they came from."""

    version: str
    root: Path
    kv_cache_utils: ModuleType
    block_pool: ModuleType

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
_loaded: VllmModules | None = None


def installed_version() -> str | None:
    """The installed ``vllm`` version, or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def locate_distribution() -> tuple[str, Path]:
    """The installed version and its ``v1/core`` folder, or a clear :class:`UpstreamUnavailableError`."""
    version = installed_version()
    if version is None:
        raise UpstreamUnavailableError(
            f"upstream vLLM is not installed; the block-pool targets need {DISTRIBUTION}=={SUPPORTED_VERSION} "
            f"(install it without its CUDA dependencies: {INSTALL_HINT})"
        )
    if version != SUPPORTED_VERSION:
        raise UpstreamUnavailableError(
            f"upstream vLLM {version} is installed, but the block-pool targets support exactly "
            f"{SUPPORTED_VERSION} (its block pool changes between releases); run: {INSTALL_HINT}"
        )
    folder = Path(str(importlib.metadata.distribution(DISTRIBUTION).locate_file(_CORE.replace(".", "/"))))
    missing = [name for name in _FILES if not (folder / f"{name}.py").is_file()]
    if missing:
        raise UpstreamUnavailableError(
            f"{DISTRIBUTION} {version} is installed but {folder} lacks {', '.join(m + '.py' for m in missing)}; "
            f"reinstall it: pip install --force-reinstall {INSTALL_HINT.removeprefix('pip install ')}"
        )
    return version, folder


def _exec_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UpstreamUnavailableError(f"cannot build an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # block_pool imports kv_cache_utils by its dotted name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UpstreamUnavailableError(
            f"executing upstream {path} failed ({type(exc).__name__}: {exc}); "
            f"the stand-ins in harness.upstream.vllm_stubs match {DISTRIBUTION}=={SUPPORTED_VERSION} only"
        ) from exc
    return module


def load_vllm() -> VllmModules:
    """Load (once per process) and return vLLM's block-pool modules.

    Raises :class:`UpstreamUnavailableError` with the install command when ``vllm`` is
    missing or is not version :data:`SUPPORTED_VERSION`.
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        version, folder = locate_distribution()
        stand_ins = vllm_stubs.vllm_stand_ins()
        names = [*stand_ins, *(f"{_CORE}.{name}" for name in _FILES)]
        saved = {name: sys.modules[name] for name in names if name in sys.modules}
        sys.modules.update(stand_ins)
        try:
            modules = {name: _exec_file(f"{_CORE}.{name}", folder / f"{name}.py") for name in _FILES}
        finally:
            for name in names:
                sys.modules.pop(name, None)
            sys.modules.update(saved)
        _loaded = VllmModules(version=version, root=folder, **modules)
        return _loaded


def vllm_unavailable_reason() -> str | None:
    """Why :func:`load_vllm` would fail, or ``None`` when it can succeed (used for test skips)."""
    try:
        load_vllm()
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None

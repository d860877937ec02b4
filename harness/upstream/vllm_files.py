"""vLLM as poolfuzz loads it: the v1 block pool from its files, everything else stood in for or refused.

``vllm/v1/core/kv_cache_utils.py`` (``KVCacheBlock``, ``FreeKVCacheBlockQueue``, block-hash
helpers) and ``vllm/v1/core/block_pool.py`` (``BlockPool``, ``BlockHashToBlockMap``) run from the
copy in use through the one loader (:mod:`poolfuzz.harness.upstream.loading`), with the explicit stand-ins of
:mod:`poolfuzz.harness.upstream.vllm_stand_ins`; neither file needs torch.  The files come from
``POOLFUZZ_VLLM_SRC`` (``poolfuzz --vllm-src PATH``: a folder holding ``vllm/v1/``) when set, else
the installed distribution.  The stand-ins were written for :data:`SUPPORTED_VERSION`; another
version is tried, and refused with a one-line reason naming the file, import or class that moved
(docs/compatibility.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from poolfuzz.harness.upstream import vllm_stand_ins
from poolfuzz.harness.upstream.loading import Distribution, LoadedCopy, copy_of
from poolfuzz.harness.upstream.sources import SourceFolder, UpstreamUnavailableError, check_classes, distribution_version, refusal

SUPPORTED_VERSION = "0.33.0"
DISTRIBUTION = "vllm"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={SUPPORTED_VERSION}"
SOURCE_ENV = "POOLFUZZ_VLLM_SRC"
"""Environment variable naming a folder of vLLM's files to load instead of the installed distribution."""

REAL_PREFIXES = (
    "vllm.v1.core",  # the block pool, KV cache manager, coordinator, single-type managers, the schedulers (sched/)
    "vllm.v1.request",  # Request, RequestStatus: the scheduler's own request object
    "vllm.v1.kv_cache_interface",  # the KV cache specs and KVCacheConfig the manager is built from
    "vllm.v1.kv_cache_spec_registry",  # the spec -> single-type manager table (single_type_kv_cache_manager.py:42)
    "vllm.v1.kv_cache_layout",  # imported by kv_cache_interface.py:23
    "vllm.v1.outputs",  # ModelRunnerOutput, the fake model's result
    "vllm.v1.engine",  # EngineCoreOutput(s), FinishReason: what update_from_output returns (its __init__ only)
    "vllm.v1.hisparse.block_pool",  # a base the single-type managers import (single_type_kv_cache_manager.py:21)
    "vllm.v1.metrics.stats",  # PrefixCacheStats, SchedulerStats (stats off: built, never published)
    "vllm.utils.math_utils",  # cdiv, round_up, round_down
    # gc_untrack, untracked_list, untrack_long_lists: 0.34.0's block_pool.py:16, request.py:18, sched/output.py:10
    # and single_type_kv_cache_manager.py:10 import them (0.33.0 has the file and no caller on this path)
    "vllm.utils.gc_utils",
    # TokenBuffer: 0.34.0's request.py builds its token lists with it (v1/token_buffer.py, which imports as_list from
    # utils/collection_utils.py); 0.33.0 has no token_buffer.py and no caller of collection_utils on this path
    "vllm.v1.token_buffer",
    "vllm.utils.collection_utils",
)
"""The modules run from vLLM's files: the v1 scheduler's whole memory path (docs/engine-vllm.md)."""

VLLM = Distribution(
    name=DISTRIBUTION,
    title="vLLM",
    supported=SUPPORTED_VERSION,
    env=SOURCE_ENV,
    probe="v1",
    real=REAL_PREFIXES,
    stand_ins=vllm_stand_ins.stand_in_modules,
)

_CORE = "vllm.v1.core"
_FILES = ("kv_cache_utils", "block_pool")

TARGET_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "VllmBlockPool": (("block_pool", "BlockPool"), ("kv_cache_utils", "KVCacheBlock"), ("kv_cache_utils", "FreeKVCacheBlockQueue"))
}
"""vLLM target -> the (file, class) pairs it drives."""


@dataclass(frozen=True)
class VllmModules:
    """The loaded ``kv_cache_utils`` and ``block_pool`` modules and where they came from."""

    version: str
    root: Path
    kv_cache_utils: ModuleType
    block_pool: ModuleType
    source: SourceFolder
    copy: LoadedCopy

    def require(self, target: str) -> None:
        """Refuse ``target`` when a class it drives is missing from the loaded files (renamed or moved)."""
        modules = {"kv_cache_utils": self.kv_cache_utils, "block_pool": self.block_pool}
        files = {name: self.root / f"{name}.py" for name in _FILES}
        problem = check_classes(modules, TARGET_NEEDS[target], source=self.source, checked_on=SUPPORTED_VERSION, files=files)
        if problem is not None:
            raise UpstreamUnavailableError(problem)

    def new_block_pool(self, num_gpu_blocks: int, *, enable_caching: bool = True, hash_block_size: int = 16) -> Any:
        """``BlockPool(num_gpu_blocks, enable_caching, hash_block_size)``, KV events and metrics off.

        Block 0 becomes the null block at construction, so ``num_gpu_blocks - 1`` are free.
        """
        with self.copy.active():
            return self.block_pool.BlockPool(num_gpu_blocks, enable_caching, hash_block_size)

    def request(self, hashes: list[bytes]) -> vllm_stand_ins.RequestStandIn:
        """The request ``cache_full_blocks`` takes, carrying ``hashes`` as its block hashes."""
        return vllm_stand_ins.RequestStandIn(block_hashes=list(hashes))


def installed_version() -> str | None:
    """The installed ``vllm`` version, or ``None`` when it is not installed."""
    return distribution_version(DISTRIBUTION)


def locate_vllm() -> SourceFolder:
    """The vLLM files to load: ``POOLFUZZ_VLLM_SRC``'s folder when set, else the installed distribution."""
    return VLLM.locate()


def load_vllm() -> VllmModules:
    """vLLM's block-pool modules from the copy in use (once a process and source), or one refusal.

    Raises :class:`UpstreamUnavailableError` with the install command when ``vllm`` is missing,
    and with a one-line reason naming the file or import when the version at hand does not load.
    """
    copy = copy_of(VLLM)
    loaded, problems = copy.load(f"{_CORE}.{name}" for name in _FILES)
    if problems:
        raise UpstreamUnavailableError(next(iter(problems.values())))
    return VllmModules(
        version=copy.source.version,
        root=copy.source.package / "v1/core",
        source=copy.source,
        copy=copy,
        **{name: loaded[f"{_CORE}.{name}"] for name in _FILES},
    )


SCHEDULER_MODULES = (
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.sched.async_scheduler",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.outputs",
    "vllm.v1.request",
)
"""What the ``VllmEngine`` target drives: the v1 schedulers and what it builds them from."""


def load_vllm_scheduler() -> dict[str, ModuleType]:
    """The v1 scheduler path's modules from the copy in use, or one refusal naming the first module that failed."""
    loaded, problems = copy_of(VLLM).load(SCHEDULER_MODULES)
    if problems:
        raise UpstreamUnavailableError(next(iter(problems.values())))
    return loaded


def vllm_unavailable_reason() -> str | None:
    """Why :func:`load_vllm` would fail, or ``None`` when it can succeed (used for test skips)."""
    return refusal(load_vllm)

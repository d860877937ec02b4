"""Fuzz upstream SGLang's and vLLM's own allocators and caches (``sglang==0.5.23``, ``vllm==0.33.0``) on CPU without their packages.

Targets (``--target FAMILY=SPEC``; ``docs/upstream-findings.md`` lists what they found):

* ``token_kv=harness.upstream:TokenKV``      -- ``TokenToKVPoolAllocator``
* ``paged_kv=harness.upstream:PagedKV``      -- ``PagedTokenToKVPoolAllocator`` (torch naive path)
* ``mamba_slots=harness.upstream:MambaSlots`` -- ``MambaSlotAllocator``
* ``block_pool=harness.upstream:VllmBlockPool`` -- vLLM 0.33.0's ``BlockPool`` (loaded by ``vllm_loader``)
* ``prefix_cache=harness.upstream:RadixCache`` -- the Python ``RadixCache``
* ``prefix_cache=harness.upstream:RustTreeCore`` -- the wheel's Rust TreeCore (full attention)
* ``swa_kv=harness.upstream:SWAKV`` -- ``SWATokenToKVPoolAllocator``
* ``pure_swa_kv=harness.upstream:PureSWAKV`` -- ``PureSWATokenToKVPoolAllocator``
* ``engine=harness.upstream:Engine`` -- the scheduler's memory path (``allocation.py``, ``common.py``,
  ``ReqToTokenPool``, ``RadixCache``/``UnifiedRadixCache``, ``Req``/``ScheduleBatch``, the runtime
  invariant checker)
* ``vllm_engine=harness.upstream:VllmEngine`` -- vLLM 0.33.0's v1 ``Scheduler`` / ``AsyncScheduler`` over its
  ``KVCacheManager`` and ``BlockPool``, with a fake model (``harness/kits/vllm_engine/``)

Every one loads through the one loader, :mod:`harness.upstream.loading` (declared by
:mod:`~harness.upstream.sglang_files` and :mod:`~harness.upstream.vllm_files`), so each upstream class has
one identity per process; the Rust core's ``.so`` is the one special case (:mod:`~harness.upstream.rust_core_loader`).

Resolving one of these names loads upstream first, so a missing or different
``sglang`` fails at target resolution with :class:`UpstreamUnavailableError`, whose
message is the install command, instead of deep inside a fuzz run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from harness.judge.families import FAMILIES
from harness.upstream import sglang_files, vllm_files
from harness.upstream.sglang_files import INSTALL_HINT, SUPPORTED_VERSION, installed_version
from harness.upstream.sglang_modules import UpstreamModules, load_upstream, unavailable_reason
from harness.upstream.sources import UpstreamUnavailableError

TARGETS: dict[str, tuple[str, ...]] = {name: fam.upstream for name, fam in FAMILIES.items() if fam.upstream}
"""Family name -> the target specs of its upstream wrappers (every one: ``prefix_cache`` has the Python and Rust caches)."""


def _load_rust_tree_core() -> None:
    from harness.upstream import rust_core_loader

    rust_core_loader.load_rust_tree_core()


_WRAPPERS: dict[str, tuple[str, Callable[[], object] | None]] = {
    "TokenKV": ("harness.kits.kv.upstream:TokenKV", None),
    "PagedKV": ("harness.kits.kv.upstream:PagedKV", None),
    "MambaSlots": ("harness.kits.mamba.upstream:MambaSlots", None),
    "VllmBlockPool": ("harness.kits.block_pool.upstream:VllmBlockPool", None),
    "RadixCache": ("harness.kits.prefix_cache.upstream:RadixCache", None),
    "RustTreeCore": ("harness.kits.prefix_cache.upstream_rust:RustTreeCore", _load_rust_tree_core),
    "SWAKV": ("harness.kits.swa.upstream:SWAKV", None),
    "PureSWAKV": ("harness.kits.swa.upstream:PureSWAKV", None),
    "Engine": ("harness.kits.engine.driver:build_engine", None),
    "VllmEngine": ("harness.kits.vllm_engine.target:build_vllm_engine", None),
}
"""Each ``harness.upstream:NAME`` target: the ``module:attr`` it resolves to, and, for the Rust core, the ``.so``
loader to run besides the one loader (:mod:`harness.upstream.loading`)."""

__all__ = [
    "INSTALL_HINT",
    "SUPPORTED_VERSION",
    "TARGETS",
    "UpstreamModules",
    "UpstreamUnavailableError",
    "installed_version",
    "load_upstream",
    "unavailable_reason",
    *_WRAPPERS,
]


def require_target(name: str) -> None:
    """Refuse ``harness.upstream:NAME`` with its one-line reason when the copy in use cannot run it.

    Another SGLang (or vLLM) version refuses only the targets whose files, imports or classes moved.
    """
    if name in sglang_files.TARGETS:
        if name == "Engine":
            from harness.upstream.sglang_modules import load_engine

            load_engine()  # the engine needs its whole path: one refusal naming the first module that failed
        else:
            sglang_files.require(name)
    elif name == "VllmEngine":
        vllm_files.load_vllm_scheduler()
    elif name in vllm_files.TARGET_NEEDS:
        vllm_files.load_vllm().require(name)


def __getattr__(name: str) -> Any:
    """The wrapper classes, after checking that upstream loads (PEP 562)."""
    if name not in _WRAPPERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    spec, load = _WRAPPERS[name]
    require_target(name)  # another version: refuse this target only, naming the surface that moved
    if load is not None:
        load()
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)

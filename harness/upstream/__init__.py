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
  invariant checker), loaded by :mod:`harness.upstream.engine_loader`

Resolving one of these names loads upstream first, so a missing or different
``sglang`` fails at target resolution with :class:`UpstreamUnavailableError`, whose
message is the install command, instead of deep inside a fuzz run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from harness.judge.families import FAMILIES
from harness.upstream.loader import INSTALL_HINT, SUPPORTED_VERSION, UpstreamModules, installed_version, load_upstream, unavailable_reason
from harness.upstream.sources import UpstreamUnavailableError

TARGETS: dict[str, str] = {name: fam.upstream[0] for name, fam in FAMILIES.items() if fam.upstream}
"""Family name -> target spec of its upstream wrapper."""


def _load_sglang_cache() -> None:
    from harness.upstream import sglang_cache

    sglang_cache.load_sglang_cache()


def _load_rust_tree_core() -> None:
    from harness.upstream import rust_core_loader, sglang_cache

    sglang_cache.load_sglang_cache()
    rust_core_loader.load_rust_tree_core()


def _load_vllm() -> None:
    from harness.upstream import vllm_loader

    vllm_loader.load_vllm()


def _load_engine() -> None:
    from harness.upstream.engine_loader import load_engine

    load_engine()


_WRAPPERS: dict[str, tuple[str, Callable[[], object]]] = {
    "TokenKV": ("harness.kits.kv.upstream:TokenKV", load_upstream),
    "PagedKV": ("harness.kits.kv.upstream:PagedKV", load_upstream),
    "MambaSlots": ("harness.kits.mamba.upstream:MambaSlots", load_upstream),
    "VllmBlockPool": ("harness.kits.block_pool.upstream:VllmBlockPool", _load_vllm),
    "RadixCache": ("harness.kits.prefix_cache.upstream:RadixCache", _load_sglang_cache),
    "RustTreeCore": ("harness.kits.prefix_cache.upstream_rust:RustTreeCore", _load_rust_tree_core),
    "SWAKV": ("harness.kits.swa.upstream:SWAKV", _load_sglang_cache),
    "PureSWAKV": ("harness.kits.swa.upstream:PureSWAKV", _load_sglang_cache),
    "Engine": ("harness.kits.engine.driver:build_engine", _load_engine),
}
"""Each ``harness.upstream:NAME`` target: the ``module:attr`` it resolves to, and what loads upstream first
(SGLang's allocators; its prefix-cache and SWA modules, plus the wheel's Rust core; vLLM; the scheduler path)."""

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
    """Refuse ``harness.upstream:NAME`` with its one-line reason when the copy in use lacks a surface it needs.

    Called at target resolution, after the target's loader ran, so another SGLang (or vLLM)
    version refuses only the targets whose files, imports or classes moved.  Names without a
    per-target check (``Engine``: its loader refuses as a whole) pass.
    """
    from harness.upstream import loader, sglang_cache, vllm_loader

    if name in loader.TARGET_NEEDS:
        loader.load_upstream().require(name)
        return

    if name in sglang_cache.TARGET_NEEDS:
        sglang_cache.load_sglang_cache().require(name)
    elif name in vllm_loader.TARGET_NEEDS:
        vllm_loader.load_vllm().require(name)


def __getattr__(name: str) -> Any:
    """The wrapper classes, after checking that upstream loads (PEP 562)."""
    if name not in _WRAPPERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    spec, load = _WRAPPERS[name]
    load()
    require_target(name)  # another version: refuse this target only, naming the surface that moved
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)

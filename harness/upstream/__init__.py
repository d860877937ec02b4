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
from typing import Any

from harness.judge.families import FAMILIES
from harness.upstream.loader import (
    INSTALL_HINT,
    SUPPORTED_VERSION,
    UpstreamModules,
    UpstreamUnavailableError,
    installed_version,
    load_upstream,
    unavailable_reason,
)

TARGETS: dict[str, str] = {name: fam.upstream[0] for name, fam in FAMILIES.items() if fam.upstream}
"""Family name -> target spec of its upstream wrapper."""

_ADAPTERS = ("TokenKV", "PagedKV", "MambaSlots")
_VLLM_ADAPTERS = ("VllmBlockPool",)
"""vLLM wrappers: resolving one loads ``vllm`` (:mod:`harness.upstream.vllm_loader`), not SGLang."""
_CACHE_ADAPTERS = ("RadixCache", "RustTreeCore", "SWAKV", "PureSWAKV")
"""Prefix-cache and SWA wrappers (``harness.upstream.sglang_cache`` loads upstream)."""
_CACHE_MODULES = {"RadixCache": "radix_adapters", "RustTreeCore": "rust_core_adapter",
                  "SWAKV": "swa_adapters", "PureSWAKV": "swa_adapters"}

__all__ = [
    "INSTALL_HINT",
    "SUPPORTED_VERSION",
    "TARGETS",
    "UpstreamModules",
    "UpstreamUnavailableError",
    "installed_version",
    "load_upstream",
    "unavailable_reason",
    *_ADAPTERS,
    *_VLLM_ADAPTERS,
    *_CACHE_ADAPTERS,
    "Engine",
]


def __getattr__(name: str) -> Any:
    """The wrapper classes, after checking that upstream loads (PEP 562)."""
    if name in _ADAPTERS:
        load_upstream()
        from harness.upstream import adapters

        return getattr(adapters, name)
    if name in _CACHE_ADAPTERS:
        from harness.upstream import sglang_cache

        sglang_cache.load_sglang_cache()
        if name == "RustTreeCore":
            sglang_cache.load_rust_tree_core()
        return getattr(importlib.import_module(f"harness.upstream.{_CACHE_MODULES[name]}"), name)
    if name == "Engine":
        from harness.judge.drivers.engine import build_engine
        from harness.upstream.engine_loader import load_engine

        load_engine()
        return build_engine
    if name in _VLLM_ADAPTERS:
        from harness.upstream import vllm_adapters, vllm_loader

        vllm_loader.load_vllm()
        return getattr(vllm_adapters, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

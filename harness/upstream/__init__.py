"""Fuzz upstream SGLang's and vLLM's own allocators and caches (``sglang==0.5.23``, ``vllm==0.33.0``) on CPU without their packages.

Targets (``--target FAMILY=SPEC``; ``docs/upstream-findings.md`` lists what they found):

* ``token_kv=poolfuzz.harness.upstream:TokenKV``      -- ``TokenToKVPoolAllocator``
* ``paged_kv=poolfuzz.harness.upstream:PagedKV``      -- ``PagedTokenToKVPoolAllocator`` (torch naive path)
* ``mamba_slots=poolfuzz.harness.upstream:MambaSlots`` -- ``MambaSlotAllocator``
* ``block_pool=poolfuzz.harness.upstream:VllmBlockPool`` -- vLLM 0.33.0's ``BlockPool`` (loaded by ``vllm_loader``)
* ``prefix_cache=poolfuzz.harness.upstream:RadixCache`` -- the Python ``RadixCache``
* ``prefix_cache=poolfuzz.harness.upstream:RustTreeCore`` -- the wheel's Rust TreeCore (full attention)
* ``swa_kv=poolfuzz.harness.upstream:SWAKV`` -- ``SWATokenToKVPoolAllocator``
* ``pure_swa_kv=poolfuzz.harness.upstream:PureSWAKV`` -- ``PureSWATokenToKVPoolAllocator``
* ``engine=poolfuzz.harness.upstream:Engine`` -- the scheduler's memory path (``allocation.py``, ``common.py``,
  ``ReqToTokenPool``, ``RadixCache``/``UnifiedRadixCache``, ``Req``/``ScheduleBatch``, the runtime
  invariant checker)
* ``vllm_engine=poolfuzz.harness.upstream:VllmEngine`` -- vLLM 0.33.0's v1 ``Scheduler`` / ``AsyncScheduler`` over its
  ``KVCacheManager`` and ``BlockPool``, with a fake model (``harness/kits/vllm_engine/``)

Every one loads through the one loader, :mod:`poolfuzz.harness.upstream.loading` (declared by
:mod:`~poolfuzz.harness.upstream.sglang_files` and :mod:`~poolfuzz.harness.upstream.vllm_files`), so each upstream class has
one identity per process; the Rust core's ``.so`` is the one special case (:mod:`~poolfuzz.harness.upstream.rust_core_loader`).

Resolving one of these names loads upstream first, so a missing or different
``sglang`` fails at target resolution with :class:`UpstreamUnavailableError`, whose
message is the install command, instead of deep inside a fuzz run.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poolfuzz.harness.judge.families import FAMILIES
from poolfuzz.harness.upstream import sglang_files, vllm_files
from poolfuzz.harness.upstream.loading import Distribution
from poolfuzz.harness.upstream.sglang_files import INSTALL_HINT, SGLANG, SUPPORTED_VERSION, installed_version
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError
from poolfuzz.harness.upstream.vllm_files import VLLM

if TYPE_CHECKING:
    from poolfuzz.harness.upstream.sglang_modules import UpstreamModules, load_upstream, unavailable_reason

TARGETS: dict[str, tuple[str, ...]] = {name: fam.upstream for name, fam in FAMILIES.items() if fam.upstream}
"""Family name -> the target specs of its upstream wrappers (every one: ``prefix_cache`` has the Python and Rust caches)."""


@dataclass(frozen=True)
class UpstreamTarget:
    """One ``poolfuzz.harness.upstream:NAME`` target: the ``module:attr`` it resolves to, whose code it runs, and how the
    copy in use is checked for it (a one-line :class:`UpstreamUnavailableError` naming what moved, else nothing)."""

    spec: str
    distribution: Distribution
    require: Callable[[], object]


def _sglang(name: str) -> Callable[[], object]:
    return functools.partial(sglang_files.require, name)


def _vllm_block_pool() -> None:
    vllm_files.load_vllm().require("VllmBlockPool")


def _rust_tree_core() -> None:
    from poolfuzz.harness.upstream import rust_core_loader

    sglang_files.require("RustTreeCore")
    rust_core_loader.load_rust_tree_core()  # the .so: the one binary special case


def _sglang_engine() -> None:
    from poolfuzz.harness.upstream.sglang_modules import load_engine

    load_engine()  # the engine needs its whole path: one refusal naming the first module that failed


_WRAPPERS: dict[str, UpstreamTarget] = {
    "TokenKV": UpstreamTarget("poolfuzz.harness.kits.kv.upstream:TokenKV", SGLANG, _sglang("TokenKV")),
    "PagedKV": UpstreamTarget("poolfuzz.harness.kits.kv.upstream:PagedKV", SGLANG, _sglang("PagedKV")),
    "MambaSlots": UpstreamTarget("poolfuzz.harness.kits.mamba.upstream:MambaSlots", SGLANG, _sglang("MambaSlots")),
    "RadixCache": UpstreamTarget("poolfuzz.harness.kits.prefix_cache.upstream:RadixCache", SGLANG, _sglang("RadixCache")),
    "RustTreeCore": UpstreamTarget("poolfuzz.harness.kits.prefix_cache.upstream_rust:RustTreeCore", SGLANG, _rust_tree_core),
    "SWAKV": UpstreamTarget("poolfuzz.harness.kits.swa.upstream:SWAKV", SGLANG, _sglang("SWAKV")),
    "PureSWAKV": UpstreamTarget("poolfuzz.harness.kits.swa.upstream:PureSWAKV", SGLANG, _sglang("PureSWAKV")),
    "Engine": UpstreamTarget("poolfuzz.harness.kits.engine.driver:build_engine", SGLANG, _sglang_engine),
    "VllmBlockPool": UpstreamTarget("poolfuzz.harness.kits.block_pool.upstream:VllmBlockPool", VLLM, _vllm_block_pool),
    "VllmEngine": UpstreamTarget("poolfuzz.harness.kits.vllm_engine.target:build_vllm_engine", VLLM, vllm_files.load_vllm_scheduler),
}
"""Every ``poolfuzz.harness.upstream:NAME`` target (each loads through the one loader, :mod:`poolfuzz.harness.upstream.loading`)."""


def distribution_of(name: str) -> Distribution | None:
    """The distribution whose code ``poolfuzz.harness.upstream:NAME`` runs, or ``None`` for a name that is no target."""
    target = _WRAPPERS.get(name)
    return None if target is None else target.distribution


__all__ = [
    "INSTALL_HINT",
    "SUPPORTED_VERSION",
    "TARGETS",
    "UpstreamModules",
    "UpstreamTarget",
    "UpstreamUnavailableError",
    "distribution_of",
    "installed_version",
    "load_upstream",
    "unavailable_reason",
    *_WRAPPERS,
]


def require_target(name: str) -> None:
    """Refuse ``poolfuzz.harness.upstream:NAME`` with its one-line reason when the copy in use cannot run it.

    Another SGLang (or vLLM) version refuses only the targets whose files, imports or classes moved.
    """
    _WRAPPERS[name].require()


_FROM_SGLANG_MODULES = ("UpstreamModules", "load_upstream", "unavailable_reason")
"""Names served from :mod:`~poolfuzz.harness.upstream.sglang_modules` on first use: it imports torch, and reading
this package's declarations (``poolfuzz fuzz``'s parent does) must not."""


def __getattr__(name: str) -> Any:
    """The wrapper classes, after checking that upstream loads, and the loader's entry points (PEP 562)."""
    if name in _FROM_SGLANG_MODULES:
        return getattr(importlib.import_module("poolfuzz.harness.upstream.sglang_modules"), name)
    if name not in _WRAPPERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    target = _WRAPPERS[name]
    target.require()  # another version: refuse this target only, naming the surface that moved
    module, _, attr = target.spec.partition(":")
    return getattr(importlib.import_module(module), attr)

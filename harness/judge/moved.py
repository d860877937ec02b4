"""Modules that moved, for target specs written before they did.

A trace names its implementation as ``module:attr`` (``implementation`` in the file), and a
corpus outlives a release: when the family kits moved into ``harness/kits/`` (December 2026)
every canary and the two harness-built defaults (``block_pool``, ``scheduler``) changed module.
:func:`poolfuzz.harness.judge.families.resolve` reads an old name through this table, so a saved
counterexample still replays; anything new is written under the new names.
"""

from __future__ import annotations

MOVED: dict[str, str] = {
    "poolfuzz.harness.judge.drivers.rows": "poolfuzz.harness.kits.rows.driver",
    "poolfuzz.harness.canaries.rows": "poolfuzz.harness.kits.rows.canaries",
    "poolfuzz.harness.judge.drivers.mamba": "poolfuzz.harness.kits.mamba.driver",
    "poolfuzz.harness.judge.drivers.mamba_state": "poolfuzz.harness.kits.mamba.state",
    "poolfuzz.harness.judge.drivers.hybrid": "poolfuzz.harness.kits.mamba.hybrid",
    "poolfuzz.harness.canaries.mamba": "poolfuzz.harness.kits.mamba.canaries",
    "poolfuzz.harness.judge.drivers.kv": "poolfuzz.harness.kits.kv.driver",
    "poolfuzz.harness.judge.drivers.kv_misuse": "poolfuzz.harness.kits.kv.misuse",
    "poolfuzz.harness.judge.drivers.kv_batches": "poolfuzz.harness.kits.kv.batches",
    "poolfuzz.harness.judge.drivers.page_kernel": "poolfuzz.harness.kits.kv.page_kernel",
    "poolfuzz.harness.judge.drivers.paged_kv": "poolfuzz.harness.kits.kv.paged",
    "poolfuzz.harness.canaries.kv": "poolfuzz.harness.kits.kv.canaries",
    "poolfuzz.harness.judge.drivers.swa": "poolfuzz.harness.kits.swa.driver",
    "poolfuzz.harness.judge.drivers.swa_batches": "poolfuzz.harness.kits.swa.batches",
    "poolfuzz.harness.judge.drivers.swa_checks": "poolfuzz.harness.kits.swa.checks",
    "poolfuzz.harness.judge.drivers.swa_contract": "poolfuzz.harness.kits.swa.contract",
    "poolfuzz.harness.judge.drivers.swa_misuse": "poolfuzz.harness.kits.swa.misuse",
    "poolfuzz.harness.judge.drivers.pure_swa": "poolfuzz.harness.kits.swa.pure",
    "poolfuzz.harness.canaries.swa": "poolfuzz.harness.kits.swa.canaries",
    "poolfuzz.harness.judge.drivers.scheduler": "poolfuzz.harness.kits.scheduler.driver",
    "poolfuzz.harness.judge.drivers.scheduler_base": "poolfuzz.harness.kits.scheduler.base",
    "poolfuzz.harness.judge.drivers.scheduler_cache": "poolfuzz.harness.kits.scheduler.cache",
    "poolfuzz.harness.judge.drivers.scheduler_kv": "poolfuzz.harness.kits.scheduler.kv",
    "poolfuzz.harness.judge.drivers.scheduler_swa": "poolfuzz.harness.kits.scheduler.swa",
    "poolfuzz.harness.canaries.scheduler": "poolfuzz.harness.kits.scheduler.canaries",
    "poolfuzz.harness.judge.drivers.prefix_cache": "poolfuzz.harness.kits.prefix_cache.driver",
    "poolfuzz.harness.judge.drivers.prefix_cache_calls": "poolfuzz.harness.kits.prefix_cache.calls",
    "poolfuzz.harness.judge.drivers.prefix_cache_misuse": "poolfuzz.harness.kits.prefix_cache.misuse",
    "poolfuzz.harness.canaries.prefix_cache": "poolfuzz.harness.kits.prefix_cache.canaries",
    "poolfuzz.harness.judge.drivers.block_pool": "poolfuzz.harness.kits.block_pool.driver",
    "poolfuzz.harness.judge.drivers.block_pool_misuse": "poolfuzz.harness.kits.block_pool.misuse",
    "poolfuzz.harness.canaries.block_pool": "poolfuzz.harness.kits.block_pool.canaries",
    "poolfuzz.harness.judge.drivers.engine": "poolfuzz.harness.kits.engine.driver",
    "poolfuzz.harness.canaries.engine": "poolfuzz.harness.kits.engine.canaries",
    # The upstream wrappers and their caller contracts joined their kits (December 2026); traces name the
    # wrappers as ``poolfuzz.harness.upstream:NAME``, which did not move.
    "poolfuzz.harness.upstream.adapters": "poolfuzz.harness.kits.kv.upstream",
    "poolfuzz.harness.upstream.swa_adapters": "poolfuzz.harness.kits.swa.upstream",
    "poolfuzz.harness.upstream.vllm_adapters": "poolfuzz.harness.kits.block_pool.upstream",
    "poolfuzz.harness.upstream.radix_adapters": "poolfuzz.harness.kits.prefix_cache.upstream",
    "poolfuzz.harness.upstream.rust_core_adapter": "poolfuzz.harness.kits.prefix_cache.upstream_rust",
    "poolfuzz.harness.upstream.contracts.token_kv": "poolfuzz.harness.kits.kv.contracts.token_kv",
    "poolfuzz.harness.upstream.contracts.paged_kv": "poolfuzz.harness.kits.kv.contracts.paged_kv",
    "poolfuzz.harness.upstream.contracts.mamba_slots": "poolfuzz.harness.kits.mamba.contracts.mamba_slots",
    "poolfuzz.harness.upstream.contracts.swa_kv": "poolfuzz.harness.kits.swa.contracts.swa_kv",
    "poolfuzz.harness.upstream.contracts.pure_swa_kv": "poolfuzz.harness.kits.swa.contracts.pure_swa_kv",
    "poolfuzz.harness.upstream.contracts.radix_cache": "poolfuzz.harness.kits.prefix_cache.contracts.radix_cache",
    "poolfuzz.harness.upstream.contracts.rust_tree_core": "poolfuzz.harness.kits.prefix_cache.contracts.rust_tree_core",
    "poolfuzz.harness.upstream.contracts.block_pool": "poolfuzz.harness.kits.block_pool.contracts.block_pool",
    "poolfuzz.harness.upstream.contracts.engine": "poolfuzz.harness.kits.engine.contracts.engine",
}
"""Old module name to new, for every module a trace's ``implementation`` could name."""


LEGACY_PACKAGES = ("harness", "pools", "strategies")
"""The top-level names poolfuzz installed before it owned one, ``poolfuzz`` (December 2026)."""


def current_module(name: str) -> str:
    """``name``, or where it lives now if it moved."""
    return MOVED.get(name, name)


def legacy_module(name: str) -> str | None:
    """Where ``name`` lives now if a trace wrote it before the package became ``poolfuzz.*``, else ``None``.

    Traces saved before December 2026 name our modules ``pools:ReqToTokenPool`` or
    ``harness.upstream:SglangTokenAllocator``.  :func:`poolfuzz.harness.judge.families.resolve` tries a
    name as written first (a user's own ``pools.py`` keeps its name) and falls back to this one.
    """
    if name.partition(".")[0] not in LEGACY_PACKAGES:
        return None
    return current_module("poolfuzz." + name)

"""Modules that moved, for target specs written before they did.

A trace names its implementation as ``module:attr`` (``implementation`` in the file), and a
corpus outlives a release: when the family kits moved into ``harness/kits/`` (December 2026)
every canary and the two harness-built defaults (``block_pool``, ``scheduler``) changed module.
:func:`harness.judge.families.resolve` reads an old name through this table, so a saved
counterexample still replays; anything new is written under the new names.
"""

from __future__ import annotations

MOVED: dict[str, str] = {
    "harness.judge.drivers.rows": "harness.kits.rows.driver",
    "harness.canaries.rows": "harness.kits.rows.canaries",
    "harness.judge.drivers.mamba": "harness.kits.mamba.driver",
    "harness.judge.drivers.mamba_state": "harness.kits.mamba.state",
    "harness.judge.drivers.hybrid": "harness.kits.mamba.hybrid",
    "harness.canaries.mamba": "harness.kits.mamba.canaries",
    "harness.judge.drivers.kv": "harness.kits.kv.driver",
    "harness.judge.drivers.kv_misuse": "harness.kits.kv.misuse",
    "harness.judge.drivers.kv_batches": "harness.kits.kv.batches",
    "harness.judge.drivers.page_kernel": "harness.kits.kv.page_kernel",
    "harness.judge.drivers.paged_kv": "harness.kits.kv.paged",
    "harness.canaries.kv": "harness.kits.kv.canaries",
    "harness.judge.drivers.swa": "harness.kits.swa.driver",
    "harness.judge.drivers.swa_batches": "harness.kits.swa.batches",
    "harness.judge.drivers.swa_checks": "harness.kits.swa.checks",
    "harness.judge.drivers.swa_contract": "harness.kits.swa.contract",
    "harness.judge.drivers.swa_misuse": "harness.kits.swa.misuse",
    "harness.judge.drivers.pure_swa": "harness.kits.swa.pure",
    "harness.canaries.swa": "harness.kits.swa.canaries",
    "harness.judge.drivers.scheduler": "harness.kits.scheduler.driver",
    "harness.judge.drivers.scheduler_base": "harness.kits.scheduler.base",
    "harness.judge.drivers.scheduler_cache": "harness.kits.scheduler.cache",
    "harness.judge.drivers.scheduler_kv": "harness.kits.scheduler.kv",
    "harness.judge.drivers.scheduler_swa": "harness.kits.scheduler.swa",
    "harness.canaries.scheduler": "harness.kits.scheduler.canaries",
    "harness.judge.drivers.prefix_cache": "harness.kits.prefix_cache.driver",
    "harness.judge.drivers.prefix_cache_calls": "harness.kits.prefix_cache.calls",
    "harness.judge.drivers.prefix_cache_misuse": "harness.kits.prefix_cache.misuse",
    "harness.canaries.prefix_cache": "harness.kits.prefix_cache.canaries",
    "harness.judge.drivers.block_pool": "harness.kits.block_pool.driver",
    "harness.judge.drivers.block_pool_misuse": "harness.kits.block_pool.misuse",
    "harness.canaries.block_pool": "harness.kits.block_pool.canaries",
    "harness.judge.drivers.engine": "harness.kits.engine.driver",
    "harness.canaries.engine": "harness.kits.engine.canaries",
    # The upstream wrappers and their caller contracts joined their kits (December 2026); traces name the
    # wrappers as ``harness.upstream:NAME``, which did not move.
    "harness.upstream.adapters": "harness.kits.kv.upstream",
    "harness.upstream.swa_adapters": "harness.kits.swa.upstream",
    "harness.upstream.vllm_adapters": "harness.kits.block_pool.upstream",
    "harness.upstream.radix_adapters": "harness.kits.prefix_cache.upstream",
    "harness.upstream.rust_core_adapter": "harness.kits.prefix_cache.upstream_rust",
    "harness.upstream.contracts.token_kv": "harness.kits.kv.contracts.token_kv",
    "harness.upstream.contracts.paged_kv": "harness.kits.kv.contracts.paged_kv",
    "harness.upstream.contracts.mamba_slots": "harness.kits.mamba.contracts.mamba_slots",
    "harness.upstream.contracts.swa_kv": "harness.kits.swa.contracts.swa_kv",
    "harness.upstream.contracts.pure_swa_kv": "harness.kits.swa.contracts.pure_swa_kv",
    "harness.upstream.contracts.radix_cache": "harness.kits.prefix_cache.contracts.radix_cache",
    "harness.upstream.contracts.rust_tree_core": "harness.kits.prefix_cache.contracts.rust_tree_core",
    "harness.upstream.contracts.block_pool": "harness.kits.block_pool.contracts.block_pool",
    "harness.upstream.contracts.engine": "harness.kits.engine.contracts.engine",
}
"""Old module name to new, for every module a trace's ``implementation`` could name."""


def current_module(name: str) -> str:
    """``name``, or where it lives now if it moved."""
    return MOVED.get(name, name)

"""Upstream SGLang 0.5.23's prefix caches and SWA allocators as poolfuzz targets, and the three-way differential.

The targets (``poolfuzz.harness.upstream:RadixCache``, ``RustTreeCore``, ``SWAKV``, ``PureSWAKV``)
must build from their family's config and satisfy the family protocol; the differential
(:mod:`poolfuzz.harness.upstream.cache_differential`) must find the Python ``RadixCache``, the
Rust TreeCore and our cache in agreement on the policies they share, must name the one
divergence it knows (FIFO/FILO after a split: the legacy Python cache against the default core and ours), and must
catch a planted difference.
Everything skips, with the reason, when ``sglang==0.5.23`` or the Rust TreeCore is not
loadable here.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from poolfuzz.harness.judge.families import load_factory, validates_input
from poolfuzz.harness.machines.base import PoolMachine
from poolfuzz.harness.machines.run import run_machine
from poolfuzz.harness.machines.settings import pinned_settings
from poolfuzz.harness.machines.table import make_machine
from poolfuzz.harness.upstream import rust_core_loader, sglang_modules
from poolfuzz.harness.upstream.cache_differential import (
    OP_WEIGHTS,
    SUBJECTS,
    Disagreement,
    Op,
    RecordingAllocator,
    random_ops,
    run_sequence,
)
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError
from poolfuzz.pools.protocols import PrefixCache, SWAKVAllocator
from poolfuzz.pools.radix_cache import RadixCache as OurRadixCache

CACHE_MISSING = sglang_modules.sglang_cache_unavailable_reason()
RUST_MISSING = CACHE_MISSING or rust_core_loader.rust_tree_core_unavailable_reason()
needs_cache = pytest.mark.skipif(CACHE_MISSING is not None, reason=f"upstream SGLang unavailable: {CACHE_MISSING}")
needs_rust = pytest.mark.skipif(RUST_MISSING is not None, reason=f"Rust TreeCore unavailable: {RUST_MISSING}")

RECENCY = ("lru", "mru")
"""The policies on which all three caches agree (FIFO/FILO: the legacy Python cache ages a split differently)."""


def _target(name: str) -> Any:
    return load_factory(f"poolfuzz.harness.upstream:{name}")


def _satisfies(pool: Any, protocol: type) -> bool:
    """``isinstance`` without narrowing ``pool`` to the protocol (the targets have more members)."""
    return isinstance(pool, protocol)


# ------------------------------------------------------------------ targets
def _holding_two_pages(name: str, page_size: int) -> tuple[Any, Any]:
    """Target ``name`` (a prefix cache that trusts its input) built on 8 pages, with 2 pages of slots inserted
    under keys ``0..2 * page_size - 1``: the cache, and the slots inserted."""
    factory = _target(name)
    cache = factory(size=8 * page_size, page_size=page_size, eviction_policy="lru", device="cpu")
    assert _satisfies(cache, PrefixCache) and not validates_input(factory)
    value = cache.allocator.alloc(2 * page_size)
    assert cache.insert(list(range(2 * page_size)), value) == 0
    return cache, value


@needs_cache
@pytest.mark.parametrize("page_size", [1, 4])
def test_upstream_radix_cache_is_a_prefix_cache_built_from_the_family_config(page_size: int) -> None:
    cache, value = _holding_two_pages("RadixCache", page_size)
    matched = cache.match_prefix(list(range(page_size)) + [99])
    assert (matched.prefix_len, matched.indices.tolist()) == (page_size, value[:page_size].tolist())
    assert cache.inc_lock_ref(matched.last_node) == -page_size
    assert cache.evict(100) == page_size  # the locked upper half stays
    assert cache.dec_lock_ref(matched.last_node) == page_size
    assert cache.evict(100) == page_size and cache.allocator.available_size() == 8 * page_size
    cache.sanity_check()


@needs_rust
@pytest.mark.parametrize("page_size", [1, 4])
def test_rust_tree_core_target_runs_the_same_calls_and_its_own_sanity_check(page_size: int) -> None:
    cache, _ = _holding_two_pages("RustTreeCore", page_size)
    again = cache.allocator.alloc(2 * page_size)
    assert cache.insert(list(range(2 * page_size)), again) == 2 * page_size
    assert cache.last_insert_frees == again.tolist()  # the core names the caller's duplicates
    cache.allocator.free(again)
    matched = cache.match_prefix(list(range(page_size)) + [99])
    assert cache.inc_lock_ref(matched.last_node) == -page_size
    cache.sanity_check()
    assert cache.evict(100) == page_size
    assert cache.dec_lock_ref(matched.last_node) == page_size
    assert cache.evict(100) == page_size and cache.allocator.available_size() == 8 * page_size
    cache.sanity_check()


@needs_rust
def test_a_rust_core_that_does_not_load_is_an_unavailable_target_naming_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "mem_cache.cpython-311-x86_64-linux-gnu.so"
    broken.write_bytes(b"not an ELF file")
    monkeypatch.setattr(rust_core_loader, "_rust_loaded", None)
    monkeypatch.setattr(rust_core_loader, "locate_rust_tree_core", lambda: broken)
    reason = rust_core_loader.rust_tree_core_unavailable_reason()
    assert reason is not None and torch.__version__ in reason and str(broken) in reason
    with pytest.raises(UpstreamUnavailableError):
        _target("RustTreeCore")(size=8, page_size=1)


@needs_cache
@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("SWAKV", {"size": 16, "size_swa": 8, "page_size": 1}),
        ("SWAKV", {"size": 16, "size_swa": 8, "page_size": 4}),
        ("PureSWAKV", {"size_swa": 8}),
    ],
)
def test_swa_targets_are_swa_allocators_built_from_the_family_config(name: str, config: dict[str, Any]) -> None:
    factory = _target(name)
    pool = factory(**config, device="cpu", need_sort=False)
    assert _satisfies(pool, SWAKVAllocator) and not validates_input(factory)
    assert int(pool.full_to_swa_index_mapping[-1]) == -1
    assert pool.available_size() == min(pool.full_available_size(), pool.swa_available_size())


# ------------------------------------------------------------ differential
@needs_rust
@pytest.mark.parametrize("page_size", [1, 2, 4])
@pytest.mark.parametrize("policy", RECENCY)
def test_python_rust_and_our_cache_answer_seeded_sequences_alike(page_size: int, policy: str) -> None:
    rng = random.Random(page_size * 10 + len(policy))
    for _ in range(2):
        assert run_sequence(random_ops(rng, 100, page_size=page_size), page_size=page_size, eviction_policy=policy) > 0


@needs_rust
@given(
    ops=st.lists(
        st.builds(
            Op, st.sampled_from(list(OP_WEIGHTS)), st.lists(st.integers(1, 3), max_size=9).map(tuple), st.integers(0, 8), st.integers(0, 7)
        ),
        max_size=40,
    ),
    page_size=st.sampled_from([1, 2]),
    policy=st.sampled_from(RECENCY),
)
@pinned_settings(max_examples=15, deadline=None)
def test_python_rust_and_our_cache_agree_on_drawn_sequences(ops: list[Op], page_size: int, policy: str) -> None:
    run_sequence(ops, page_size=page_size, eviction_policy=policy)


FIFO_AFTER_A_SPLIT = [Op("insert", (1, 1)), Op("insert", (2,)), Op("match", (1, 3)), Op("evict", amount=2)]
"""A match splits [1, 1]; evicting 2 takes the lower [1], then the upper [1] (Rust, ours) or [2] (legacy Python)."""


@needs_rust
def test_the_legacy_python_cache_ages_a_split_node_at_the_split_unlike_the_default_core_and_ours() -> None:
    """FIFO after a split: the Rust core and ours keep the child's creation (SGLang 0.5.23's default
    ``UnifiedTreeCore._split_node``, unified_tree_core.py:1476); the legacy ``RadixCache`` stamps the split."""
    run_sequence(FIFO_AFTER_A_SPLIT, page_size=1, eviction_policy="fifo", subjects={"ours": SUBJECTS["ours"], "rust": SUBJECTS["rust"]})
    with pytest.raises(Disagreement, match="indices freed") as found:
        run_sequence(FIFO_AFTER_A_SPLIT, page_size=1, eviction_policy="fifo")
    assert found.value.answers == {"ours": [2, 1], "python": [2, 3], "rust": [2, 1]}


@needs_cache
def test_the_legacy_radix_cache_target_selects_the_models_legacy_split_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The withdrawn finding 4 trace passes on the legacy target only because it declares its split rule."""
    from poolfuzz.harness.kits.prefix_cache.upstream import RadixCacheOver
    from poolfuzz.harness.traces.replay import replay_trace
    from poolfuzz.harness.traces.schema import load_trace

    trace = load_trace(Path(__file__).resolve().parents[1] / "corpus" / "prefix_cache" / "prefix_cache-99d8e670a8f7dc52.json")
    assert replay_trace(trace, target="poolfuzz.harness.upstream:RadixCache").outcome == "pass"
    monkeypatch.setattr(RadixCacheOver, "poolfuzz_split_ages", "inherit")
    wrong = replay_trace(trace, target="poolfuzz.harness.upstream:RadixCache")
    assert (wrong.outcome, wrong.invariant) == ("violation", "eviction-order"), wrong.describe()


@needs_cache
def test_the_differential_catches_a_cache_that_evicts_in_another_order() -> None:
    def mru_posing_as_lru(allocator: RecordingAllocator, **kwargs: Any) -> OurRadixCache:
        return OurRadixCache(allocator, **{**kwargs, "eviction_policy": "mru"})

    ops = [Op("insert", (1,)), Op("insert", (2,)), Op("evict", amount=1)]
    with pytest.raises(Disagreement, match="indices freed"):
        run_sequence(ops, page_size=1, subjects={"python": SUBJECTS["python"], "broken": mru_posing_as_lru})


# ---------------------------------------------------------------- machines
def _recency_only(machine: type[PoolMachine]) -> type[PoolMachine]:
    """The prefix-cache machine with LRU/MRU configs only (kept for speed; every policy is fuzzed by the CLI runs)."""
    from poolfuzz.harness.kits.prefix_cache.moves import prefix_cache_table

    return type(f"{machine.__name__}-recency", (machine,), {"table": prefix_cache_table(policies=RECENCY)})


@needs_rust
@pytest.mark.parametrize("name", ["RadixCache", "RustTreeCore"])
def test_the_prefix_cache_machine_finds_nothing_on_upstream_caches_with_recency_policies(name: str) -> None:
    machine = _recency_only(make_machine("prefix_cache", f"poolfuzz.harness.upstream:{name}"))
    run_machine(machine, settings=pinned_settings(max_examples=6, stateful_step_count=30))


@needs_cache
@pytest.mark.parametrize(("family_name", "name"), [("swa_kv", "SWAKV"), ("pure_swa_kv", "PureSWAKV")])
def test_the_swa_machines_find_nothing_on_upstream_away_from_the_known_finding(family_name: str, name: str) -> None:
    from poolfuzz.harness.upstream.findings import machine_avoiding_known_findings

    machine = machine_avoiding_known_findings(family_name, f"poolfuzz.harness.upstream:{name}")
    run_machine(machine, settings=pinned_settings(max_examples=6, stateful_step_count=30))

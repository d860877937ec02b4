"""The ``block_pool`` family: its model states vLLM v1's contract, its driver judges our pool clean,
and every planted bug (canary) trips the invariant it names on a short scripted trace.

The machine itself runs in ``tests/test_machines.py`` (parametrised over the registry)
and the canaries under hypothesis in ``tests/test_canaries.py``; here the traces are
fixed, so each failure names exactly the step and invariant it is about.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from poolfuzz.harness.bench.workloads import workload_for
from poolfuzz.harness.judge.families import family, load_factory
from poolfuzz.harness.judge.invariants import INVARIANTS, InvariantViolation
from poolfuzz.harness.kits.block_pool.canaries import CANARIES
from poolfuzz.harness.kits.block_pool.driver import BlockPoolDriver
from poolfuzz.harness.kits.block_pool.model import BlockPoolModel, chain_hashes
from poolfuzz.pools import BlockPool
from poolfuzz.pools.protocols import BlockPoolLike

OURS = "poolfuzz.harness.kits.block_pool.driver:build_block_pool"
Steps = list[tuple[str, dict[str, Any]]]


def driver(spec: str = OURS, *, num_gpu_blocks: int = 6, enable_caching: bool = True, check_misuse: bool = True) -> BlockPoolDriver:
    config = {"num_gpu_blocks": num_gpu_blocks, "enable_caching": enable_caching, "device": "cpu"}
    return BlockPoolDriver(load_factory(spec), config, implementation=spec, check_misuse=check_misuse)


def run(steps: Steps, spec: str = OURS, **config: Any) -> InvariantViolation | None:
    """Replay ``steps`` through a fresh driver (audits included); the violation, or ``None`` when clean."""
    judge = driver(spec, **config)
    try:
        for op, args in steps:
            judge.step(op, **args)
        judge.teardown()
    except InvariantViolation as violation:
        return violation
    return None


# A request caches two blocks and finishes; a second one hits both (free, cached) and needs two more.
CACHED_AND_REVIVED: Steps = [
    ("admit", {"tokens": [1, 2]}),
    ("allocate", {"handle": 0, "num_blocks": 2}),
    ("cache", {"handle": 0, "num_full": 2}),
    ("free", {"handle": 0}),
    ("admit", {"tokens": [1, 2, 0, 0]}),
    ("allocate", {"handle": 1, "num_blocks": 2}),
]


# ------------------------------------------------------------------ model
def test_chained_hashes_are_shared_exactly_by_common_prefixes() -> None:
    first, second = chain_hashes([1, 2, 0]), chain_hashes([1, 2, 1])
    assert first[:2] == second[:2] and first[2] != second[2]
    assert chain_hashes([0]) != chain_hashes([0, 0])[1]


def test_model_frees_unhashed_blocks_to_the_front_and_hashed_ones_to_the_tail_in_call_order() -> None:
    model = BlockPoolModel(7, True)
    blocks = model.allocate(4)
    model.cache(blocks, [11, 12, 13, 14], 2, 4)
    assert model.free(list(reversed(blocks))) == [2, 1, 4, 3]
    assert model.queue == [2, 1, 5, 6, 4, 3]
    assert model.allocate(5) == [2, 1, 5, 6, 4] and model.cached == {13: [3]}


def test_model_leaves_an_evicted_free_block_in_place_and_keeps_a_held_one_held() -> None:
    """vLLM 0.33.0 ``evict_blocks`` drops hashes and moves nothing (block_pool.py:851-867, :769)."""
    model = BlockPoolModel(5, True)
    blocks = model.allocate(2)
    model.cache(blocks, [21, 22], 0, 2)
    model.free([blocks[1]])
    assert model.queue == [3, 4, 2]
    assert model.evict([1, 2]) == [2]
    assert model.queue == [3, 4, 2] and model.ref[1] == 1 and not model.hash_of


def test_model_unpins_to_the_tail_hashed_or_not_and_spends_watchers_on_reuse() -> None:
    """vLLM 0.33.0 ``unpin_blocks`` appends every block reaching 0 (block_pool.py:748-767)."""
    model = BlockPoolModel(5, True)
    plain, hashed = model.allocate(2)
    model.cache([plain, hashed], [31, 32], 1, 2)
    assert model.unpin([plain, hashed]) == [plain, hashed]
    assert model.queue == [3, 4, plain, hashed] and model.hash_of == {hashed: 32}
    assert model.reused(model.queue[:3]) == [plain] and list(model.watched) == [hashed]
    assert model.reset_watchers() == [hashed] and not model.watched


def test_model_names_the_contract_breaches() -> None:
    model = BlockPoolModel(4, True)
    held = model.allocate(1)
    assert model.touch_breach([0, held[0]]) is None and model.touch_breach([2]) == 2
    assert model.free_breach([held[0], 0, 0]) is None and model.free_breach([held[0], held[0]]) == held[0]
    assert model.cache_breach([held[0], 2], 0, 2) == "block 2 is free"
    assert BlockPoolModel(4, False).cache_breach([1], 0, 1) == "prefix caching is disabled"
    assert model.reset() is False and BlockPoolModel(4, True).reset() is True


# ------------------------------------------------------------ our pool
def test_our_pool_satisfies_the_protocol() -> None:
    assert isinstance(BlockPool(3), BlockPoolLike)


def test_a_prefix_hit_revives_cached_free_blocks_and_allocation_reuses_the_oldest_cached_last() -> None:
    judge = driver(num_gpu_blocks=6)
    for op, args in CACHED_AND_REVIVED:
        judge.step(op, **args)
    assert judge.model.requests[1].table == [1, 2, 3, 4]
    assert judge.pool.free_block_ids() == [5] == judge.model.queue
    judge.step("free", handle=1)
    assert judge.pool.free_block_ids() == [4, 3, 5, 2, 1]  # uncached first; cached last, the deeper one first
    judge.teardown()


def test_a_sliding_window_frees_its_oldest_blocks_last_first_and_leaves_null_blocks() -> None:
    judge = driver(num_gpu_blocks=6)
    judge.step("admit", tokens=[0, 1, 2])
    judge.step("allocate", handle=0, num_blocks=3)
    assert judge.step("slide", handle=0, num_skipped=2) == [2, 1]
    assert judge.model.requests[0].table == [0, 0, 3]
    judge.step("cache", handle=0, num_full=3)
    judge.step("free", handle=0)
    assert judge.pool.free_block_ids() == [2, 1, 4, 5, 3]
    judge.teardown()


def test_an_allocation_beyond_the_free_count_is_misuse_or_the_callers_to_refuse() -> None:
    judge = driver(num_gpu_blocks=3)
    handle = judge.step("admit", tokens=[])
    judge.step("allocate", handle=handle, num_blocks=3)  # InsufficientBlocksError expected and raised
    quiet = driver(num_gpu_blocks=3, check_misuse=False)
    quiet.step("admit", tokens=[])
    assert quiet.step("allocate", handle=0, num_blocks=3) == []
    assert quiet.events == ["allocation left to the caller's free-count check"]
    judge.teardown()
    quiet.teardown()


@pytest.mark.parametrize(
    "steps",
    [
        [("admit", {"tokens": [0]}), ("allocate", {"handle": 0, "num_blocks": 1}), ("free", {"handle": 0}), ("free", {"handle": 0})],
        [("touch", {"block_ids": [1]})],
        [
            ("admit", {"tokens": [0]}),
            ("allocate", {"handle": 0, "num_blocks": 1}),
            ("cache", {"handle": 0, "num_full": 1}),
            ("cache", {"handle": 0, "num_full": 1}),
            ("touch", {"block_ids": [1]}),
            ("free", {"handle": 0}),
            ("free", {"handle": 1}),
            ("free_blocks", {"block_ids": [1]}),
            ("evict", {"block_ids": [-1, 9]}),
        ],
    ],
    ids=["double-free", "touch-free-uncached", "mixed"],
)
def test_our_pool_rejects_each_misuse_with_its_typed_error_and_changes_nothing(steps: Steps) -> None:
    assert run(steps, num_gpu_blocks=4) is None


def test_the_bench_walk_runs_clean_on_our_pool() -> None:
    fam = family("block_pool")
    judge = BlockPoolDriver(load_factory(fam.default), fam.bench_kwargs)
    rng, workload = random.Random(0), workload_for("block_pool")
    for _ in range(300):
        op, args = workload(judge, rng)
        judge.step(op, **args)
    judge.teardown()
    assert judge.cache_pressure > 0


# -------------------------------------------------------------- canaries
CANARY_TRACES: dict[str, tuple[Steps, dict[str, Any]]] = {
    "duplicate-free-queued-twice": (CACHED_AND_REVIVED[:4] + [("touch", {"block_ids": [1, 1]}), ("free", {"handle": 1})], {}),
    "hashed-block-freed-to-front": (CACHED_AND_REVIVED[:4] + [("admit", {"tokens": []}), ("allocate", {"handle": 1, "num_blocks": 1})], {}),
    "null-block-handed-out": ([("admit", {"tokens": []}), ("allocate", {"handle": 0, "num_blocks": 1})], {}),
    "touch-leaves-block-queued": (CACHED_AND_REVIVED[:5], {}),
    "reused-block-keeps-hash": (CACHED_AND_REVIVED[:4] + [("admit", {"tokens": [2]}), ("allocate", {"handle": 1, "num_blocks": 5})], {}),
}


def test_every_block_pool_canary_has_a_trace_here() -> None:
    assert set(CANARY_TRACES) == set(CANARIES)


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_each_canary_trips_its_invariant_on_a_short_trace_that_passes_on_our_pool(name: str) -> None:
    steps, config = CANARY_TRACES[name]
    assert run(steps, **config) is None
    caught = run(steps, CANARIES[name].spec, **config)
    assert caught is not None and caught.invariant_id == CANARIES[name].invariant, caught


def test_the_new_invariants_are_catalogued_and_each_is_some_canarys_catch() -> None:
    new = {"ref-count", "free-queue-order", "cache-map"}
    assert new <= set(INVARIANTS) and new <= set(family("block_pool").invariants)
    assert new <= {canary.invariant for canary in CANARIES.values()}

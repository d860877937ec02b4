"""vLLM 0.33.0's v1 ``BlockPool`` under the ``block_pool`` family: the adapter, the queue order, the contract breaches.

Everything skips when ``vllm==0.33.0`` is not installed (``pip install --no-deps vllm==0.33.0``).
The machine runs whole: the one finding it had (an evicted free block left among the cached
ones) rested on an order rule vLLM never states and is withdrawn; its traces, in
``corpus/block_pool/``, now pass on upstream and on our pool.  The breaches at the end are
calls outside the contract, shown on upstream directly (the fuzzer never makes them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.judge.families import family, load_factory, validates_input
from poolfuzz.harness.machines import make_machine, pinned_settings, run_machine
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.harness.upstream.vllm_files import vllm_unavailable_reason
from poolfuzz.pools import BlockPool
from poolfuzz.pools.protocols import BlockPoolLike

MISSING = vllm_unavailable_reason()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"upstream vLLM unavailable: {MISSING}")

SPEC = "poolfuzz.harness.upstream:VllmBlockPool"
TRACES = [
    path
    for path in sorted((Path(__file__).resolve().parents[1] / "corpus" / "block_pool").glob("block_pool-*.json"))
    if "withdrawn vLLM finding 1" in path.read_text()
]
"""The traces of the withdrawn finding 1, now regression traces of the vLLM target."""


def both(num_gpu_blocks: int = 5) -> tuple[Any, BlockPool]:
    """Upstream's pool and ours, same size, caching on."""
    return load_factory(SPEC)(num_gpu_blocks, True), BlockPool(num_gpu_blocks, True)


def lifecycle(pool: Any) -> None:
    """Two requests cache a prefix, finish, and a third hits it and allocates more."""
    first = pool.get_new_blocks(2)
    pool.cache_full_blocks(first, [11, 12])
    shared = pool.get_cached_block(11)
    pool.touch([shared])
    pool.free_blocks(list(reversed(first)))
    pool.free_blocks([shared])
    hit = [pool.get_cached_block(11), pool.get_cached_block(12)]
    pool.touch(hit)
    more = pool.get_new_blocks(2)
    pool.cache_full_blocks(hit + more, [11, 12, 13, 14], 2, 4)


def state(pool: Any) -> tuple[Any, ...]:
    return (
        pool.free_block_ids(),
        pool.cached_block_ids(),
        pool.ref_counts(),
        pool.get_num_free_blocks(),
        [block.block_hash for block in pool.blocks],
    )


def test_the_target_resolves_to_a_valid_calls_only_adapter_and_leaves_no_vllm_module_behind() -> None:
    factory = load_factory(SPEC)
    assert SPEC in family("block_pool").upstream and not validates_input(factory)
    assert isinstance(factory(3, True), BlockPoolLike)
    assert not [name for name in sys.modules if name == "vllm" or name.startswith("vllm.")]


def test_upstream_and_our_pool_agree_on_a_request_lifecycle() -> None:
    upstream, ours = both()
    lifecycle(upstream)
    lifecycle(ours)
    assert state(upstream) == state(ours)
    assert upstream.reset_prefix_cache() is ours.reset_prefix_cache() is False


def test_upstream_and_our_pool_leave_an_evicted_free_block_in_place() -> None:
    """Withdrawn finding 1: vLLM's ``evict_blocks`` drops the hash and moves nothing (block_pool.py:851-867,
    ``_maybe_evict_cached_block`` :769); vLLM states no order between hashed and unhashed free blocks."""
    upstream, ours = both(4)
    for pool in (upstream, ours):
        for block_hash in (21, 22):
            blocks = pool.get_new_blocks(1)
            pool.cache_full_blocks(blocks, [block_hash])
            pool.free_blocks(blocks)
        pool.evict_blocks({2})
    assert upstream.free_block_ids() == ours.free_block_ids() == [3, 1, 2]
    assert upstream.blocks[2].block_hash is None and ours.blocks[2].block_hash is None


def test_upstream_and_our_pool_unpin_to_the_tail_and_fire_the_watcher_on_reuse() -> None:
    """``unpin_blocks`` (block_pool.py:748-767), as vLLM's HiSparse coordinator calls it (hisparse/coordinator.py:368)."""
    upstream, ours = both(4)
    fired: dict[str, list[int]] = {"upstream": [], "ours": []}
    for name, pool in (("upstream", upstream), ("ours", ours)):
        seen = fired[name]

        def on_reuse(block: Any, seen: list[int] = seen) -> None:
            seen.append(block.block_id)

        plain, hashed = pool.get_new_blocks(2)
        pool.cache_full_blocks([hashed], [5])
        pool.unpin_blocks([plain], on_reuse)
        pool.unpin_blocks([hashed], on_reuse)
        assert pool.free_block_ids() == [3, 1, 2]
        pool.get_new_blocks(2)
    assert fired == {"upstream": [1], "ours": [1]}
    assert state(upstream) == state(ours)


def test_the_machine_finds_nothing_on_upstream() -> None:
    run_machine(make_machine("block_pool", SPEC), settings=pinned_settings(max_examples=40))


@pytest.mark.parametrize("path", TRACES, ids=lambda path: path.stem)
def test_the_withdrawn_findings_traces_pass_on_upstream_and_on_our_pool(path: Path) -> None:
    trace = load_trace(path)
    assert trace.implementation == SPEC and trace.expect == {"outcome": "pass"}
    on_upstream = replay_trace(trace)
    assert on_upstream.outcome == "pass", on_upstream.describe()
    ours = replay_trace(trace, target=family("block_pool").default)
    assert ours.outcome == "pass", ours.describe()


# ------------------------------------------------ contract breaches, on upstream directly
def test_a_double_free_drives_upstreams_ref_count_negative_silently() -> None:
    """vLLM #42571: the second release is accepted, ref_cnt reaches -1, the block stays queued once."""
    upstream, _ = both(3)
    block = upstream.get_new_blocks(1)
    upstream.free_blocks(block + block)
    assert upstream.ref_counts()[1] == -1 and upstream.free_block_ids() == [1, 2]
    with pytest.raises(AssertionError):
        upstream.get_new_blocks(2)


def test_after_a_double_free_a_touch_leaves_the_block_queued_and_it_gets_a_second_owner() -> None:
    upstream, _ = both(3)
    block = upstream.get_new_blocks(1)
    upstream.cache_full_blocks(block, [9])
    upstream.free_blocks(block)
    upstream.free_blocks(block)
    upstream.touch(block)  # a prefix hit: ref_cnt -1 -> 0, and the block is not taken off the queue
    assert upstream.ref_counts()[1] == 0 and 1 in upstream.free_block_ids()
    assert 1 in [b.block_id for b in upstream.get_new_blocks(2)]  # handed out while the hit still reads it


def test_a_negative_block_id_slips_past_evict_blocks_assertion_and_evicts_the_last_block() -> None:
    upstream, _ = both(4)
    blocks = upstream.get_new_blocks(3)
    upstream.cache_full_blocks(blocks, [1, 2, 3])
    upstream.evict_blocks([-1])
    assert upstream.cached_block_ids() == {1: [1], 2: [2]}


def test_touching_a_free_uncached_block_takes_it_without_an_allocation() -> None:
    upstream, _ = both(3)
    upstream.touch([upstream.blocks[1]])
    assert upstream.ref_counts()[1] == 1 and upstream.free_block_ids() == [2]


def test_caching_a_free_block_leaves_a_hashed_block_at_the_front() -> None:
    upstream, _ = both(3)
    upstream.cache_full_blocks([upstream.blocks[1]], [7])
    assert upstream.free_block_ids() == [1, 2] and upstream.cached_block_ids() == {7: [1]}


def test_over_asking_raises_a_value_error_and_recaching_asserts() -> None:
    upstream, _ = both(3)
    with pytest.raises(ValueError):
        upstream.get_new_blocks(3)
    blocks = upstream.get_new_blocks(1)
    upstream.cache_full_blocks(blocks, [5])
    with pytest.raises(AssertionError):
        upstream.cache_full_blocks(blocks, [5])

"""Unit tests of ``poolfuzz.pools.block_pool``: vLLM-v1 block pool order, caching and misuse.

Every test ends with :func:`assert_consistent`, the pool invariants of
``reference/prefix-cache-and-peers.md`` section 2, recomputed from the blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from poolfuzz.pools import (
    BadBatchError,
    BadSizeError,
    BlockPool,
    BlockStateError,
    DoubleFreeError,
    ForeignIndexError,
    FreeKVCacheBlockQueue,
    InsufficientBlocksError,
    KVCacheBlock,
    PoolError,
)


def assert_consistent(pool: BlockPool) -> None:
    """Free count, queue membership, ref counts, null block and hash map all agree."""
    queue = pool.free_block_queue.get_all_free_blocks()
    assert pool.get_num_free_blocks() == len(queue) == len({id(b) for b in queue})
    assert pool.null_block.is_null and all(block is not pool.null_block for block in queue)
    queued = {b.block_id for b in queue}
    for block in pool.blocks[1:]:
        assert block.ref_cnt >= 0
        assert (block.block_id in queued) == (block.ref_cnt == 0)
    by_block = {bid: h for h, ids in pool.cached_block_ids().items() for bid in ids}
    assert by_block == {b.block_id: b.block_hash for b in pool.blocks if b.block_hash is not None}


def snapshot(pool: BlockPool) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    return (
        pool.free_block_ids(),
        pool.cached_block_ids(),
        pool.ref_counts(),
        [b.block_hash for b in pool.blocks],
        pool.get_num_free_blocks(),
    )


def assert_rejected_unchanged(pool: BlockPool, error: type[PoolError], call: Callable[[], Any]) -> PoolError:
    before = snapshot(pool)
    with pytest.raises(error) as info:
        call()
    assert snapshot(pool) == before
    return info.value


def ids(blocks: list[KVCacheBlock]) -> list[int]:
    return [b.block_id for b in blocks]


@pytest.fixture
def pool() -> Iterator[BlockPool]:
    """Null block 0 plus usable blocks 1..6, checked for consistency after the test."""
    made = BlockPool(7)
    yield made
    assert_consistent(made)


def cached(pool: BlockPool, hashes: list[int]) -> list[KVCacheBlock]:
    """Fresh blocks, held once, cached under ``hashes``."""
    blocks = pool.get_new_blocks(len(hashes))
    pool.cache_full_blocks(blocks, hashes)
    return blocks


# ------------------------------------------------------------ null block
def test_the_null_block_is_never_handed_out(pool: BlockPool) -> None:
    assert pool.null_block is pool.blocks[0] and pool.null_block.is_null
    assert pool.get_num_free_blocks() == 6 and pool.free_block_ids() == [1, 2, 3, 4, 5, 6]
    assert ids(pool.get_new_blocks(6)) == [1, 2, 3, 4, 5, 6]
    assert pool.get_usage() == 1.0


def test_asking_for_more_blocks_than_are_free_raises_a_value_error_and_takes_nothing(pool: BlockPool) -> None:
    pool.get_new_blocks(4)
    error = assert_rejected_unchanged(pool, InsufficientBlocksError, lambda: pool.get_new_blocks(3))
    assert isinstance(error, InsufficientBlocksError) and (error.requested, error.available) == (3, 2)
    assert isinstance(error, ValueError)
    assert pool.get_new_blocks(0) == []


def test_the_null_block_is_skipped_by_touch_free_and_cache(pool: BlockPool) -> None:
    block = pool.get_new_blocks(1)[0]
    table = [pool.null_block, block]
    pool.touch(table)
    pool.cache_full_blocks(table, [10, 11])
    pool.free_blocks(table)
    pool.free_blocks(table)
    assert pool.null_block.ref_cnt == 0 and pool.null_block.block_hash is None
    assert pool.cached_block_ids() == {11: [block.block_id]}


# --------------------------------------------------------- reuse order
def test_unhashed_frees_go_to_the_front_in_call_order_and_are_reused_first(pool: BlockPool) -> None:
    a, b, c = pool.get_new_blocks(3)
    pool.free_blocks([c, a])
    assert pool.free_block_ids() == [3, 1, 4, 5, 6]
    assert ids(pool.get_new_blocks(2)) == [3, 1]


def test_hashed_frees_go_to_the_tail_in_call_order_and_are_evicted_last(pool: BlockPool) -> None:
    h1, h2 = cached(pool, [101, 102])
    plain = pool.get_new_blocks(1)[0]
    pool.free_blocks([h2, h1, plain])
    assert pool.free_block_ids() == [3, 4, 5, 6, 2, 1]
    assert ids(pool.get_new_blocks(5)) == [3, 4, 5, 6, 2]
    assert pool.get_cached_block(101) is h1 and pool.get_cached_block(102) is None


def test_with_caching_off_every_free_goes_to_the_front_and_caching_is_refused() -> None:
    pool = BlockPool(4, enable_caching=False)
    a, b = pool.get_new_blocks(2)
    assert_rejected_unchanged(pool, BlockStateError, lambda: pool.cache_full_blocks([a], [7]))
    pool.free_blocks([b, a])
    assert pool.free_block_ids() == [2, 1, 3]
    assert_consistent(pool)


# ------------------------------------------------------- prefix caching
def test_touch_takes_a_cached_free_block_off_the_queue(pool: BlockPool) -> None:
    (block,) = cached(pool, [42])
    pool.free_blocks([block])
    assert pool.get_cached_block(42) is block and block.block_id in pool.free_block_ids()
    pool.touch([block, block])
    assert block.ref_cnt == 2 and block.block_id not in pool.free_block_ids()
    assert pool.get_num_free_blocks() == 5


def test_reallocating_a_cached_block_drops_its_hash(pool: BlockPool) -> None:
    (block,) = cached(pool, [42])
    pool.free_blocks([block])
    again = pool.get_new_blocks(6)
    assert again[-1] is block and block.ref_cnt == 1
    assert block.block_hash is None and pool.get_cached_block(42) is None and pool.cached_block_ids() == {}


def test_cache_full_blocks_caches_only_the_newly_full_range(pool: BlockPool) -> None:
    table = pool.get_new_blocks(4)
    pool.cache_full_blocks(table, [1, 2, 3], num_cached_blocks=0, num_full_blocks=2)
    pool.cache_full_blocks(table, [1, 2, 3], num_cached_blocks=2, num_full_blocks=3)
    pool.cache_full_blocks(table, [1, 2, 3], num_cached_blocks=3, num_full_blocks=3)
    assert pool.cached_block_ids() == {1: [1], 2: [2], 3: [3]} and table[3].block_hash is None


def test_blocks_sharing_a_hash_are_all_cached_and_the_first_answers(pool: BlockPool) -> None:
    first, second = cached(pool, [9, 9])
    assert pool.get_cached_block(9) is first and pool.cached_block_ids() == {9: [1, 2]}
    pool.evict_blocks([first.block_id])
    assert pool.get_cached_block(9) is second


def test_caching_a_free_a_cached_or_a_repeated_block_is_refused(pool: BlockPool) -> None:
    held, spare = pool.get_new_blocks(2)
    pool.free_blocks([spare])
    assert_rejected_unchanged(pool, BlockStateError, lambda: pool.cache_full_blocks([held, spare], [1, 2]))
    assert_rejected_unchanged(pool, BadBatchError, lambda: pool.cache_full_blocks([held, held], [1, 2]))
    assert_rejected_unchanged(pool, BadBatchError, lambda: pool.cache_full_blocks([held], []))
    assert_rejected_unchanged(pool, BadBatchError, lambda: pool.cache_full_blocks([held], ["x"]))  # type: ignore[list-item]
    assert_rejected_unchanged(pool, BadSizeError, lambda: pool.cache_full_blocks([held], [1], num_full_blocks=2))
    pool.cache_full_blocks([held], [1])
    error = assert_rejected_unchanged(pool, BlockStateError, lambda: pool.cache_full_blocks([held], [5]))
    assert isinstance(error, BlockStateError) and error.block_id == held.block_id


def test_evicting_a_held_block_keeps_it_held_and_its_later_free_goes_to_the_front(pool: BlockPool) -> None:
    (block,) = cached(pool, [42])
    pool.evict_blocks({block.block_id, 0, 5})
    assert block.ref_cnt == 1 and pool.get_cached_block(42) is None
    pool.free_blocks([block])
    assert pool.free_block_ids()[0] == block.block_id


def test_evicting_a_free_cached_block_keeps_its_place_in_the_queue_as_vllm_does(pool: BlockPool) -> None:
    a, b = cached(pool, [1, 2])
    pool.free_blocks([a, b])
    assert pool.free_block_ids() == [3, 4, 5, 6, 1, 2]
    pool.evict_blocks([b.block_id])
    assert pool.free_block_ids() == [3, 4, 5, 6, 1, 2] and pool.cached_block_ids() == {1: [1]}
    assert b.block_hash is None


def test_unpinned_blocks_join_the_tail_hashed_or_not_and_fire_their_watcher_when_reused(pool: BlockPool) -> None:
    reused: list[int] = []
    plain, hashed = pool.get_new_blocks(2)
    pool.cache_full_blocks([hashed], [7])
    pool.touch([plain])
    pool.unpin_blocks([plain, hashed], lambda block: reused.append(block.block_id))
    assert pool.free_block_ids() == [3, 4, 5, 6, 2] and plain.ref_cnt == 1  # plain is still held once
    pool.unpin_blocks([plain], lambda block: reused.append(block.block_id))
    assert pool.free_block_ids() == [3, 4, 5, 6, 2, 1] and plain.block_hash is None
    assert_consistent(pool)
    pool.get_new_blocks(5)
    assert reused == [2] and hashed.block_hash is None
    pool.get_new_blocks(1)
    assert reused == [2, 1]


def test_unpinning_a_block_more_often_than_it_is_held_or_the_null_block_is_refused(pool: BlockPool) -> None:
    (block,) = pool.get_new_blocks(1)
    assert_rejected_unchanged(pool, DoubleFreeError, lambda: pool.unpin_blocks([block, block], print))
    assert_rejected_unchanged(pool, BlockStateError, lambda: pool.unpin_blocks([pool.null_block], print))


def test_evicting_a_foreign_block_id_is_refused(pool: BlockPool) -> None:
    cached(pool, [1])
    error = assert_rejected_unchanged(pool, ForeignIndexError, lambda: pool.evict_blocks([1, 7]))
    assert isinstance(error, ForeignIndexError) and error.indices == [7]


def test_reset_prefix_cache_succeeds_only_when_just_the_null_block_is_used(pool: BlockPool) -> None:
    blocks = cached(pool, [1, 2])
    before = snapshot(pool)
    assert pool.reset_prefix_cache() is False and snapshot(pool) == before
    pool.free_blocks(blocks)
    assert pool.reset_prefix_cache() is True
    assert pool.cached_block_ids() == {} and all(b.block_hash is None for b in pool.blocks)
    assert pool.get_num_free_blocks() == 6


# --------------------------------------------------------------- misuse
def test_a_block_held_once_and_freed_twice_in_one_call_is_rejected_and_changes_nothing(pool: BlockPool) -> None:
    """vLLM #42571: upstream drives ref_cnt to -1 and queues the block twice."""
    a, b = pool.get_new_blocks(2)
    error = assert_rejected_unchanged(pool, DoubleFreeError, lambda: pool.free_blocks([a, b, a]))
    assert isinstance(error, DoubleFreeError) and error.indices == [a.block_id]


def test_freeing_an_already_free_block_is_rejected_and_changes_nothing(pool: BlockPool) -> None:
    a, b = pool.get_new_blocks(2)
    pool.free_blocks([a])
    assert_rejected_unchanged(pool, DoubleFreeError, lambda: pool.free_blocks([b, a]))
    assert b.ref_cnt == 1


def test_a_block_held_twice_may_be_named_twice_in_one_free(pool: BlockPool) -> None:
    (block,) = cached(pool, [3])
    pool.touch([block])
    pool.free_blocks(iter([block, block]))
    assert block.ref_cnt == 0 and pool.free_block_ids()[-1] == block.block_id


def test_blocks_of_another_pool_or_not_blocks_at_all_are_rejected(pool: BlockPool) -> None:
    other = BlockPool(7).get_new_blocks(1)
    mine = pool.get_new_blocks(1)
    for call in (pool.free_blocks, pool.touch):
        assert_rejected_unchanged(pool, ForeignIndexError, functools.partial(call, mine + other))
        assert_rejected_unchanged(pool, BadBatchError, functools.partial(call, [*mine, 1]))  # type: ignore[list-item]


def test_touching_a_free_block_that_is_not_cached_is_rejected(pool: BlockPool) -> None:
    held = pool.get_new_blocks(1)
    free = pool.blocks[4]
    error = assert_rejected_unchanged(pool, BlockStateError, lambda: pool.touch(held + [free]))
    assert isinstance(error, BlockStateError) and (error.block_id, error.ref_cnt) == (4, 0)


def test_bad_sizes_are_rejected() -> None:
    for size in (0, -1, True):
        with pytest.raises(BadSizeError):
            BlockPool(size)
    pool = BlockPool(2)
    assert pool.get_usage() == 0.0 and BlockPool(1).get_usage() == 0.0
    assert_rejected_unchanged(pool, BadSizeError, lambda: pool.get_new_blocks(-1))


# ---------------------------------------------------------------- queue
class CountingBlock(KVCacheBlock):
    """A block that counts every write to its queue links (class-wide)."""

    __slots__ = ()
    link_writes = 0

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("prev_free_block", "next_free_block"):
            type(self).link_writes += 1
        super().__setattr__(name, value)


def link_writes_per_operation(length: int) -> dict[str, int]:
    queue = FreeKVCacheBlockQueue([CountingBlock(i) for i in range(length)])
    middle = queue.get_all_free_blocks()[length // 2]
    newcomer = CountingBlock(length)
    counts: dict[str, int] = {}
    for name, operation in (
        ("remove", lambda: queue.remove(middle)),
        ("append", lambda: queue.append(middle)),
        ("popleft", queue.popleft),
        ("appendleft", lambda: queue.appendleft(newcomer)),
    ):
        CountingBlock.link_writes = 0
        operation()
        counts[name] = CountingBlock.link_writes
    assert len(queue) == length and len(queue.get_all_free_blocks()) == length
    return counts


def test_queue_operations_rewrite_a_constant_number_of_links_whatever_the_length() -> None:
    assert link_writes_per_operation(8) == link_writes_per_operation(4096)
    assert max(link_writes_per_operation(8).values()) <= 4


def test_an_empty_queue_refuses_popleft_and_keeps_its_sentinels_linked() -> None:
    queue = FreeKVCacheBlockQueue([])
    with pytest.raises(InsufficientBlocksError):
        queue.popleft()
    queue.prepend_n([KVCacheBlock(1), KVCacheBlock(2)])
    queue.appendleft(KVCacheBlock(0))
    assert [b.block_id for b in queue.popleft_n(3)] == [0, 1, 2] and queue.get_all_free_blocks() == []
    assert queue.fake_free_list_head.next_free_block is queue.fake_free_list_tail

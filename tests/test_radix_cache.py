"""Unit tests of ``poolfuzz.pools.radix_cache``: the prefix cache over the token and paged KV allocators.

Every test runs on each device of ``tests.conftest.DEVICES`` (CUDA skips without a
GPU) and, where page geometry matters, at page sizes 1 and 4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from poolfuzz.pools import errors
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.radix_cache import RadixCache, TreeNode
from tests.conftest import DEVICES

Allocator = TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[1, 4], ids=["ps1", "ps4"])
def ps(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def make(device: str, ps: int, num_pages: int = 32, policy: str = "lru") -> tuple[Allocator, RadixCache]:
    alloc: Allocator = TokenToKVPoolAllocator(num_pages, device) if ps == 1 else PagedTokenToKVPoolAllocator(num_pages * ps, ps, device)
    return alloc, RadixCache(alloc, eviction_policy=policy)


@pytest.fixture
def pool(device: str, ps: int) -> tuple[Allocator, RadixCache]:
    return make(device, ps)


def ints(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t.tolist()]


def take(alloc: Allocator, n: int) -> torch.Tensor:
    """``n`` fresh slots (whole pages, so ``n`` is rounded up to a page)."""
    out = alloc.alloc(-(-n // alloc.page_size) * alloc.page_size)
    assert out is not None, "the test pool is too small"
    return out


def seq(ps: int, pages: int, first: int = 100) -> list[int]:
    return list(range(first, first + pages * ps))


def cache_new(alloc: Allocator, cache: RadixCache, key: list[int]) -> torch.Tensor:
    """Insert ``key`` with fresh indices and free the duplicates, as a caller must."""
    value = take(alloc, len(key))
    prefix = cache.insert(key, value)
    if prefix:
        alloc.free(value[:prefix])
    return value


def state(cache: RadixCache) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    nodes = [(n.id, n.key, ints(n.value), n.lock_ref, n.parent.id if n.parent else None) for n in cache.nodes()]
    return cache.evictable_size(), cache.protected_size(), cache.total_size(), nodes, [n.id for n in cache.evictable_leaves()]


# ------------------------------------------------------------------ match / insert
def test_a_match_on_an_empty_cache_is_the_root_and_nothing(pool: tuple[Allocator, RadixCache]) -> None:
    _, cache = pool
    result = cache.match_prefix([1, 2, 3, 4, 5])
    assert result.prefix_len == 0 and result.last_node is cache.root and ints(result.indices) == []


def test_insert_then_match_returns_the_longest_page_aligned_prefix_and_splits_there(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    key = seq(ps, 3)
    value = cache_new(alloc, cache, key)
    result = cache.match_prefix(key[: 2 * ps] + [7] * ps)
    assert result.prefix_len == 2 * ps
    assert ints(result.indices) == ints(value[: 2 * ps])
    assert result.last_node.key == tuple(key[: 2 * ps]) and len(list(cache.nodes())) == 2
    assert ints(cache.path_indices(result.last_node)) == ints(value[: 2 * ps])
    cache.sanity_check()


def test_keys_and_values_are_truncated_to_whole_pages(device: str) -> None:
    alloc, cache = make(device, 4)
    value = take(alloc, 8)[:6]
    assert cache.insert(seq(4, 1) + [1, 2], value) == 0
    assert cache.total_size() == 4 and cache.match_prefix(seq(4, 1) + [1, 2]).prefix_len == 4
    cache.sanity_check()


def test_a_split_falls_on_a_page_boundary_when_keys_diverge_mid_page(device: str) -> None:
    alloc, cache = make(device, 4)
    key = seq(4, 2)
    cache_new(alloc, cache, key)
    result = cache.match_prefix(key[:6] + [0, 0])
    assert result.prefix_len == 4
    assert sorted(len(n.key) for n in cache.nodes()) == [4, 4]
    cache.sanity_check()


def test_insert_returns_the_cached_prefix_whose_duplicates_the_caller_frees(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 2))
    value = take(alloc, 3 * ps)
    assert cache.insert(seq(ps, 3), value) == 2 * ps
    alloc.free(value[: 2 * ps])
    assert cache.total_size() == 3 * ps
    assert alloc.available_size() + cache.total_size() == alloc.size
    cache.sanity_check()


def test_reinserting_the_same_indices_under_the_same_key_changes_nothing(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    value = cache_new(alloc, cache, seq(ps, 2))
    before = state(cache)
    assert cache.insert(seq(ps, 2), value.clone()) == 2 * ps
    assert state(cache) == before


def test_a_value_whose_length_differs_from_its_key_is_rejected_and_changes_nothing(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 1))
    before = state(cache)
    with pytest.raises(errors.KeyValueMismatchError) as err:
        cache.insert(seq(ps, 2, first=500), take(alloc, ps))
    assert (err.value.key_len, err.value.value_len) == (2 * ps, ps)
    assert state(cache) == before


@pytest.mark.parametrize("bad", ["held elsewhere", "page twice", "page 0"])
def test_new_indices_that_cannot_be_owned_are_rejected_and_change_nothing(pool: tuple[Allocator, RadixCache], ps: int, bad: str) -> None:
    alloc, cache = pool
    held = cache_new(alloc, cache, seq(ps, 1))
    fresh = take(alloc, ps)
    value = {"held elsewhere": held, "page twice": torch.cat([fresh, fresh]), "page 0": torch.arange(ps, device=fresh.device)}[bad]
    before = state(cache)
    with pytest.raises((errors.AlreadyCachedError, errors.ReservedIndexError)):
        cache.insert(seq(ps, len(value) // ps, first=900), value)
    assert state(cache) == before


def test_indices_that_are_not_whole_pages_are_rejected(device: str) -> None:
    alloc, cache = make(device, 4)
    value = take(alloc, 8)
    with pytest.raises(errors.KeyValueMismatchError):
        cache.insert(seq(4, 1), value[2:6])
    assert cache.total_size() == 0


# ------------------------------------------------------------------ locks
def test_locking_moves_the_path_to_protected_and_unlocking_moves_it_back(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 2))
    cache_new(alloc, cache, seq(ps, 1) + [0] * ps)
    leaf = cache.match_prefix(seq(ps, 2)).last_node
    assert cache.inc_lock_ref(leaf) == -2 * ps
    assert (cache.evictable_size(), cache.protected_size(), cache.total_size()) == (ps, 2 * ps, 3 * ps)
    assert cache.inc_lock_ref(leaf) == 0
    assert cache.dec_lock_ref(leaf) == 0
    assert cache.dec_lock_ref(leaf) == 2 * ps
    assert (cache.evictable_size(), cache.protected_size()) == (3 * ps, 0)
    cache.sanity_check()


def test_double_unlock_is_rejected_and_changes_nothing(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 2))
    leaf = cache.match_prefix(seq(ps, 2)).last_node
    cache.inc_lock_ref(leaf)
    cache.dec_lock_ref(leaf)
    before = state(cache)
    with pytest.raises(errors.LockStateError) as err:
        cache.dec_lock_ref(leaf)
    assert (err.value.node_id, err.value.lock_ref) == (leaf.id, 0)
    assert state(cache) == before


def test_the_root_lock_never_moves(pool: tuple[Allocator, RadixCache]) -> None:
    _, cache = pool
    assert cache.inc_lock_ref(cache.root) == 0 and cache.dec_lock_ref(cache.root) == 0 and cache.dec_lock_ref(cache.root) == 0
    assert cache.root.lock_ref == 1
    cache.sanity_check()


@pytest.mark.parametrize("how", ["evicted", "reset", "foreign"])
def test_a_node_that_left_the_tree_cannot_be_locked_or_unlocked(pool: tuple[Allocator, RadixCache], ps: int, how: str) -> None:
    alloc, cache = pool
    other = RadixCache(alloc)
    target = other if how == "foreign" else cache
    cache_new(alloc, target, seq(ps, 1))
    node = target.match_prefix(seq(ps, 1)).last_node
    if how == "evicted":
        cache.evict(ps)
    elif how == "reset":
        cache.reset()
    before = state(cache)
    for call in (cache.inc_lock_ref, cache.dec_lock_ref):
        with pytest.raises(errors.LockStateError):
            call(node)
    assert state(cache) == before


def test_node_ids_resolve_while_the_node_lives(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 1))
    (node,) = cache.nodes()
    assert cache.node(node.id) is node and cache.node(cache.root.id) is cache.root
    cache.evict(ps)
    with pytest.raises(errors.TreeNodeError):
        cache.node(node.id)


# ------------------------------------------------------------------ eviction
def test_evict_spares_locked_paths_and_frees_through_the_allocator(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 2))
    cache_new(alloc, cache, seq(ps, 2, first=500))
    locked = cache.match_prefix(seq(ps, 2)).last_node
    cache.inc_lock_ref(locked)
    assert cache.evict(100 * ps) == 2 * ps
    assert cache.match_prefix(seq(ps, 2)).prefix_len == 2 * ps
    assert cache.match_prefix(seq(ps, 2, first=500)).prefix_len == 0
    assert alloc.available_size() + cache.total_size() == alloc.size
    cache.sanity_check()


def test_evict_takes_whole_leaves_then_the_parents_they_expose(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 3))
    cache.match_prefix(seq(ps, 1))  # split: a 1-page parent over a 2-page leaf
    assert cache.evict(1) == 2 * ps
    assert cache.evict(1) == ps
    assert cache.total_size() == 0 and alloc.available_size() == alloc.size
    cache.sanity_check()


def test_evict_of_zero_frees_nothing_and_a_negative_count_is_rejected(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 1))
    assert cache.evict(0) == 0
    with pytest.raises(errors.BadSizeError):
        cache.evict(-1)
    assert cache.total_size() == ps


@pytest.mark.parametrize(("policy", "order"), [("lru", [2, 3, 1]), ("mru", [1, 3, 2]), ("fifo", [1, 2, 3]), ("filo", [3, 2, 1])])
def test_each_policy_evicts_leaves_in_its_order(device: str, ps: int, policy: str, order: list[int]) -> None:
    alloc, cache = make(device, ps, policy=policy)
    for first in (1, 2, 3):
        cache_new(alloc, cache, [first] * ps)
    cache.match_prefix([1] * ps)
    evicted = []
    for _ in order:
        left = {n.key[0] for n in cache.nodes()}
        cache.evict(1)
        evicted += sorted(left - {n.key[0] for n in cache.nodes()})
    assert evicted == order


def test_an_unknown_eviction_policy_is_rejected(device: str) -> None:
    with pytest.raises(errors.UnknownEvictionPolicyError):
        RadixCache(TokenToKVPoolAllocator(4, device), eviction_policy="random")


def test_an_allocator_refusal_during_evict_keeps_the_leaf_cached_and_queued(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    value = cache_new(alloc, cache, seq(ps, 1))
    alloc.free(value)  # a caller bug: the tree's KV freed behind its back
    with pytest.raises(errors.DoubleFreeError):
        cache.evict(1)
    assert [n.key for n in cache.evictable_leaves()] == [tuple(seq(ps, 1))]
    cache.sanity_check()


# ------------------------------------------------------------------ reset and audit
def test_reset_forgets_every_node_and_old_ids_never_resolve(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 2))
    old_ids = [n.id for n in cache.nodes()] + [cache.root.id]
    cache.reset()
    assert (cache.evictable_size(), cache.protected_size(), cache.total_size()) == (0, 0, 0)
    assert list(cache.nodes()) == [] and cache.root.lock_ref == 1 and cache.root.id not in old_ids
    for node_id in old_ids:
        with pytest.raises(errors.TreeNodeError):
            cache.node(node_id)
    cache.sanity_check()


CORRUPTIONS: dict[str, Callable[[RadixCache], object]] = {
    "evictable count": lambda c: setattr(c, "_evictable_size", c.evictable_size() + 1),
    "negative lock_ref": lambda c: setattr(next(iter(c.nodes())), "lock_ref", -1),
    "value shorter than key": lambda c: setattr(next(iter(c.nodes())), "value", next(iter(c.nodes())).value[:-1]),
    "held-page table": lambda c: c._held_pages.fill_(False),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_sanity_check_catches_a_corrupted_tree(pool: tuple[Allocator, RadixCache], ps: int, corruption: str) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 2))
    cache.sanity_check()
    CORRUPTIONS[corruption](cache)
    with pytest.raises(errors.TreeInvariantError):
        cache.sanity_check()


# ------------------------------------------------------------------ request release
@dataclass
class Request:
    """A scheduler's view of one request: committed tokens, its row, its lock, its protected prefix."""

    tokens: list[int]
    row: torch.Tensor
    lock: TreeNode
    protected: int


def admit(alloc: Allocator, cache: RadixCache, tokens: list[int], allocated: int) -> Request:
    """Match, lock, and allocate the rest of ``allocated`` slots, as the scheduler does."""
    match = cache.match_prefix(tokens)
    cache.inc_lock_ref(match.last_node)
    row = torch.cat([match.indices, take(alloc, allocated - match.prefix_len)])[:allocated]
    return Request(tokens, row, match.last_node, match.prefix_len)


def assert_no_leak(alloc: Allocator, cache: RadixCache, live: list[Request]) -> None:
    ps = alloc.page_size
    uncached = sum(-(-len(r.row) // ps) * ps - r.protected for r in live)
    assert alloc.available_size() + cache.evictable_size() + cache.protected_size() + uncached == alloc.size
    cache.sanity_check()


def test_checkpoint_and_release_keep_the_leak_equation(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    prompt = seq(ps, 2) + [7] * (ps // 2)
    first = admit(alloc, cache, prompt, len(prompt) + 1)
    twin = admit(alloc, cache, prompt, len(prompt))  # same prompt, scheduled before anything was cached
    assert_no_leak(alloc, cache, [first, twin])
    done = cache.checkpoint(first.tokens, first.row, first.lock, first.protected)
    first.lock, first.protected = done.last_node, done.cache_protected_len
    assert done.cache_protected_len == 2 * ps and first.lock.lock_ref == 1
    assert_no_leak(alloc, cache, [first, twin])
    twin_done = cache.release_request(twin.tokens, twin.row, twin.lock, twin.protected)
    assert (twin_done.prefix_len, twin_done.num_duplicates_freed) == (2 * ps, 2 * ps)
    assert_no_leak(alloc, cache, [first])
    follower = admit(alloc, cache, prompt[: 2 * ps] + [9] * ps, 3 * ps)
    assert follower.protected == 2 * ps
    cache.release_request(first.tokens + [5], first.row, first.lock, first.protected)
    assert_no_leak(alloc, cache, [follower])
    cache.release_request(follower.tokens, follower.row, follower.lock, follower.protected, cache=False)
    assert_no_leak(alloc, cache, [])
    assert cache.protected_size() == 0
    cache.evict(alloc.size)
    assert alloc.available_size() == alloc.size


def test_checkpoint_rewrites_the_row_to_the_tree_indices(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 1))
    own = Request(seq(ps, 2), take(alloc, 2 * ps), cache.root, 0)  # computed the cached page itself
    row = own.row.to(torch.int32)
    done = cache.checkpoint(own.tokens, row, own.lock, own.protected)
    assert ints(row) == ints(cache.path_indices(done.last_node))
    assert done.num_duplicates_freed == ps and done.last_node.lock_ref == 1


def test_a_stale_protected_length_never_double_frees(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    req = admit(alloc, cache, seq(ps, 2), 2 * ps)
    done = cache.checkpoint(req.tokens, req.row, req.lock, req.protected)
    free_before = alloc.available_size()
    again = cache.checkpoint(req.tokens, req.row, cache.root, 0)  # re-inserts the indices the tree already holds
    assert again.num_duplicates_freed == 0 and alloc.available_size() == free_before
    for lock in (done.last_node, again.last_node):
        cache.dec_lock_ref(lock)
    assert_no_leak(alloc, cache, [])


def test_a_row_that_contradicts_the_locked_path_is_rejected_and_changes_nothing(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    cache_new(alloc, cache, seq(ps, 1))
    req = admit(alloc, cache, seq(ps, 2), 2 * ps)
    wrong_row = torch.cat([take(alloc, ps), req.row[ps:]])
    before, free_before = state(cache), alloc.available_size()
    with pytest.raises(errors.BadBatchError):
        cache.release_request(req.tokens, wrong_row, req.lock, req.protected)
    with pytest.raises(errors.BadSizeError):
        cache.release_request(req.tokens, req.row, req.lock, req.protected + 2 * ps)
    assert state(cache) == before and alloc.available_size() == free_before


def test_prompt_len_splits_the_cached_path_so_output_is_evicted_first(pool: tuple[Allocator, RadixCache], ps: int) -> None:
    alloc, cache = pool
    req = admit(alloc, cache, seq(ps, 3), 3 * ps)
    cache.release_request(req.tokens, req.row, req.lock, req.protected, prompt_len=ps)
    assert cache.evict(1) == 2 * ps
    assert cache.match_prefix(seq(ps, 3)).prefix_len == ps


def test_a_match_ending_inside_a_node_refreshes_the_half_it_splits_off(device: str, ps: int) -> None:
    alloc, cache = make(device, ps)
    cache_new(alloc, cache, [1] * ps + [2] * ps)
    cache_new(alloc, cache, [3] * ps)
    cache.match_prefix([1] * ps + [9] * ps)  # upstream stamps the node it visits before splitting it
    cache.evict(1)
    assert {n.key for n in cache.nodes()} == {(1,) * ps, (2,) * ps}

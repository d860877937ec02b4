"""Upstream prefix caches, SWA allocators and vLLM's block pool load on CPU and answer a smoke test.

Each group skips, naming the reason, when its wheel is missing (``pip install --no-deps
sglang==0.5.23`` / ``vllm==0.33.0``) or the Rust TreeCore cannot load.  Beyond "it
loads", a few tests pin upstream hazards the adapters must expect (an unlock that
underflows silently, a decode failure that keeps a page): they document upstream's
behaviour, not ours.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest
import torch

from poolfuzz.harness.kits.swa.upstream import SWAKV, PureSWAKV
from poolfuzz.harness.upstream import sources, vllm_files
from poolfuzz.harness.upstream.rust_core_loader import (
    RustTreeCoreBindings,
    freed_by_actions,
    load_rust_tree_core,
    rust_evict_full,
    rust_tree_core_unavailable_reason,
)
from poolfuzz.harness.upstream.sglang_modules import SglangCacheModules, load_sglang_cache, sglang_cache_unavailable_reason
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError
from poolfuzz.harness.upstream.vllm_stand_ins import block_hashes

CACHE_MISSING = sglang_cache_unavailable_reason()
RUST_MISSING = rust_tree_core_unavailable_reason() if CACHE_MISSING is None else CACHE_MISSING
VLLM_MISSING = vllm_files.vllm_unavailable_reason()
needs_cache = pytest.mark.skipif(CACHE_MISSING is not None, reason=f"upstream SGLang unavailable: {CACHE_MISSING}")
needs_rust = pytest.mark.skipif(RUST_MISSING is not None, reason=f"Rust TreeCore unavailable: {RUST_MISSING}")
needs_vllm = pytest.mark.skipif(VLLM_MISSING is not None, reason=f"upstream vLLM unavailable: {VLLM_MISSING}")


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


class RecordingAllocator:
    """The three members ``RadixCache`` uses from its allocator; records what it frees, in order."""

    device = torch.device("cpu")

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.freed: list[list[int]] = []

    def free_segment(self, indices: torch.Tensor, *, start_pos: int) -> None:
        self.freed.append(indices.tolist())


@pytest.fixture(scope="module")
def cache() -> SglangCacheModules:
    return load_sglang_cache()


@pytest.fixture(scope="module")
def rust() -> RustTreeCoreBindings:
    return load_rust_tree_core()


# ------------------------------------------------------------------ versions
@pytest.mark.parametrize("installed", [None, pytest.param("0.32.0", marks=needs_vllm)])  # another version: the
# refusal reads the installed copy's own files, so it needs one
def test_a_missing_or_other_vllm_is_refused_with_the_install_command(installed: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "distribution_version", lambda distribution: installed)
    with pytest.raises(UpstreamUnavailableError, match=vllm_files.SUPPORTED_VERSION) as refused:
        vllm_files.locate_vllm()
    assert vllm_files.INSTALL_HINT in str(refused.value)


@needs_cache
@needs_vllm
def test_loading_leaves_no_sglang_or_vllm_module_behind(cache: SglangCacheModules) -> None:
    vllm_files.load_vllm()
    leftovers = [name for name in sys.modules if name.split(".")[0] in ("sglang", "vllm")]
    assert leftovers == []


# ------------------------------------------------------------- RadixCache
def _insert(cache: SglangCacheModules, tree: Any, tokens: list[int], value: torch.Tensor) -> Any:
    return tree.insert(cache.base_prefix_cache.InsertParams(key=cache.radix_key(tokens), value=value))


def _match(cache: SglangCacheModules, tree: Any, tokens: list[int]) -> Any:
    return tree.match_prefix(cache.base_prefix_cache.MatchPrefixParams(key=cache.radix_key(tokens)))


@needs_cache
def test_radix_cache_over_the_token_allocator_gives_every_index_back_on_eviction(cache: SglangCacheModules) -> None:
    allocator = cache.allocators.token.TokenToKVPoolAllocator(16, torch.float16, "cpu", None, False)
    tree = cache.new_radix_cache(allocator, page_size=1)
    first, second = allocator.alloc(4), allocator.alloc(4)
    _insert(cache, tree, [1, 2, 3, 4], first)
    duplicate = _insert(cache, tree, [1, 2, 7, 8], second)
    allocator.free(second[: duplicate.prefix_len])  # the caller frees the already-cached part

    matched = _match(cache, tree, [1, 2, 7, 9])
    assert matched.device_prefix_len == 3
    assert tree.path_device_indices(matched.last_device_node).tolist() == [*first[:2].tolist(), second[2].item()]
    assert (tree.evictable_size(), tree.protected_size(), tree.total_size()) == (6, 0, 6)

    evicted = tree.evict(cache.base_prefix_cache.EvictParams(num_tokens=100))
    assert evicted.num_tokens_evicted == 6
    assert allocator.available_size() == 16


@needs_cache
def test_radix_cache_over_the_paged_allocator_keeps_only_whole_pages(cache: SglangCacheModules) -> None:
    allocator = cache.allocators.paged.PagedTokenToKVPoolAllocator(32, 4, torch.float16, "cpu", None, False)
    tree = cache.new_radix_cache(allocator, page_size=4)
    indices = allocator.alloc(8)
    inserted = _insert(cache, tree, [1, 2, 3, 4, 5, 6, 7], indices[:7])
    assert inserted.prefix_len == 0 and tree.total_size() == 4  # the partial page is not cached
    allocator.free(indices[4:])  # the caller owns the tail page
    assert _match(cache, tree, [1, 2, 3, 4, 5]).device_prefix_len == 4
    tree.evict(cache.base_prefix_cache.EvictParams(num_tokens=1))
    assert allocator.available_size() == 32


@needs_cache
def test_radix_cache_unlocking_twice_lets_the_next_lock_holder_lose_its_node(cache: SglangCacheModules) -> None:
    """Upstream hazard (prefix-cache-and-peers.md 1.2): ``dec_lock_ref`` has no underflow guard.

    The second unlock leaves ``lock_ref == -1`` with the sizes unchanged; the next lock
    only brings it to 0, so eviction frees a node a request holds.
    """
    allocator = RecordingAllocator(page_size=1)
    tree = cache.new_radix_cache(allocator, page_size=1)
    node = _insert(cache, tree, [5, 6], ints(10, 11)).last_device_node
    tree.inc_lock_ref(node)
    tree.dec_lock_ref(node)
    tree.dec_lock_ref(node)
    assert (node.lock_ref, tree.evictable_size(), tree.protected_size()) == (-1, 2, 0)
    tree.inc_lock_ref(node)
    tree.evict(cache.base_prefix_cache.EvictParams(num_tokens=2))
    assert allocator.freed == [[10, 11]]


# ------------------------------------------------------------ Rust TreeCore
@needs_rust
@pytest.mark.parametrize("page_size", [1, 4])
def test_rust_core_inserts_matches_locks_and_evicts_by_node_handle(rust: RustTreeCoreBindings, page_size: int) -> None:
    core = rust.new_core(page_size)
    tokens = list(range(1, 2 * page_size + 1))
    first = core.insert(rust.insert_params(tokens, torch.arange(100, 100 + len(tokens))))
    again = core.insert(rust.insert_params(tokens, torch.arange(200, 200 + len(tokens))))
    assert isinstance(first.last_device_node, int) and again.prefix_len == len(tokens)
    assert [t.tolist() for t in freed_by_actions(again.cache_actions)] == [list(range(200, 200 + len(tokens)))]

    matched = core.match_prefix(rust.match_params([*tokens[:page_size], -1]))
    assert matched.device_prefix_len == page_size
    receipt = core.inc_lock_ref(matched.last_device_node_id, [])
    assert (receipt.delta, core.protected_size(), core.evictable_size()) == (page_size, page_size, page_size)
    core.sanity_check([], [])

    eviction = rust_evict_full(core, 100)
    assert eviction.evicted == page_size
    assert [t.tolist() for t in eviction.freed] == [list(range(100 + page_size, 100 + 2 * page_size))]
    core.dec_lock_ref(matched.last_device_node_id, rust.dec_params(receipt), False)
    assert rust_evict_full(core, 100).evicted == page_size and core.total_size() == (0, 0)
    core.sanity_check([], [])


@needs_rust
def test_rust_core_refuses_a_second_unlock_and_then_refuses_everything(rust: RustTreeCoreBindings) -> None:
    """A double unlock panics in Rust (RuntimeError); the core's mutex is poisoned for good."""
    core = rust.new_core(1)
    node = core.insert(rust.insert_params([1, 2], ints(7, 8))).last_device_node
    receipt = core.inc_lock_ref(node, [])
    core.dec_lock_ref(node, rust.dec_params(receipt), False)
    with pytest.raises(RuntimeError, match="panicked"):
        core.dec_lock_ref(node, rust.dec_params(receipt), False)
    with pytest.raises(RuntimeError, match="poisoned"):
        core.total_size()


@needs_rust
def test_rust_core_names_an_unknown_node_handle_with_key_error_and_stays_usable(rust: RustTreeCoreBindings) -> None:
    core = rust.new_core(1)
    with pytest.raises(KeyError):
        core.inc_lock_ref(12345, [])
    assert core.total_size() == (0, 0)


@needs_rust
@pytest.mark.parametrize("page_size", [1, 2])
def test_rust_core_and_python_radix_cache_evict_in_the_same_order(
    cache: SglangCacheModules, rust: RustTreeCoreBindings, page_size: int
) -> None:
    """Under the logical clock both LRU orders are functions of the operation sequence, and agree."""
    rng = random.Random(page_size)
    allocator = RecordingAllocator(page_size)
    tree, core = cache.new_radix_cache(allocator, page_size=page_size), rust.new_core(page_size)
    next_index = 1
    for _ in range(120):
        tokens = [rng.randint(1, 3) for _ in range(rng.randint(1, 8))]
        operation = rng.choice(["insert", "insert", "match", "evict"])
        if operation == "insert":
            value = torch.arange(next_index, next_index + len(tokens))
            next_index += len(tokens)
            inserted = core.insert(rust.insert_params(tokens, value))
            assert _insert(cache, tree, tokens, value).prefix_len == inserted.prefix_len
        elif operation == "match":
            matched = core.match_prefix(rust.match_params(tokens))
            assert _match(cache, tree, tokens).device_prefix_len == matched.device_prefix_len
        else:
            num_tokens = rng.randint(1, 6)
            allocator.freed.clear()
            tree.evict(cache.base_prefix_cache.EvictParams(num_tokens=num_tokens))
            assert [t.tolist() for t in rust_evict_full(core, num_tokens).freed] == allocator.freed
        assert tree.evictable_size() == core.evictable_size()


# ------------------------------------------------------------ SWA allocators
@needs_cache
def test_swa_allocator_at_page_size_one_pairs_and_releases_both_pools(cache: SglangCacheModules) -> None:
    swa = SWAKV(16, 8, 1).inner
    full = swa.alloc(3)
    assert swa.full_to_swa_index_mapping[full].tolist() == swa.translate_loc_from_full_to_swa(full).tolist()
    assert (swa.full_available_size(), swa.swa_available_size()) == (13, 5)
    swa.free_swa(full[:1])
    assert swa.full_to_swa_index_mapping[full[0]].item() == 0 and swa.swa_available_size() == 6
    swa.free_full(full[:1])
    swa.free(full[1:])
    assert (swa.full_available_size(), swa.swa_available_size()) == (16, 8)
    assert cache.signals.drain() == []


@needs_cache
def test_swa_allocator_paged_extends_decodes_and_allocates_a_swa_tail(cache: SglangCacheModules) -> None:
    swa = SWAKV(32, 16, 4).inner
    extended = swa.alloc_extend(ints(0), ints(0), ints(5), ints(5), ints(-1), 5)
    decoded = swa.alloc_decode(ints(6), ints(6), extended[-1:])
    tail = swa.alloc_extend_swa_tail(ints(0), ints(0), ints(9), ints(9), ints(-1), 9, 3)
    assert (swa.full_available_size(), swa.swa_available_size()) == (12, 4)
    assert swa.full_to_swa_index_mapping[tail[:-3]].tolist() == [0] * 6
    swa.free_group_begin()
    swa.free(torch.cat((extended, decoded)))
    swa.free(tail)
    assert swa.full_available_size() == 12  # deferred until the group ends
    swa.free_group_end()
    assert (swa.full_available_size(), swa.swa_available_size()) == (32, 16)


@needs_cache
def test_swa_double_free_is_flagged_by_upstreams_own_peer_mapped_check(cache: SglangCacheModules) -> None:
    """Upstream puts the padding slot 0 in the SWA free list; its (default-off) ``swa.peer_mapped`` check names it."""
    swa = SWAKV(8, 8, 1).inner
    full = swa.alloc(4)
    swa.free(full[:1])
    swa.free(full[:1])
    assert 0 in swa.swa_attn_allocator.free_pages.tolist()
    assert [hit.name for hit in cache.signals.drain()] == ["swa.peer_mapped"]


@needs_cache
def test_swa_decode_that_fails_on_the_swa_side_keeps_the_full_page(cache: SglangCacheModules) -> None:
    """Upstream hazard: ``alloc_decode`` allocates full first and returns None without giving it back."""
    swa = SWAKV(32, 4, 4).inner
    prefix = swa.alloc_extend(ints(0), ints(0), ints(4), ints(4), ints(-1), 4)
    assert swa.alloc_decode(ints(5), ints(5), prefix[-1:]) is None
    assert (swa.full_available_size(), swa.swa_available_size()) == (24, 0)


@needs_cache
def test_pure_swa_allocator_is_one_pool_with_an_identity_mapping(cache: SglangCacheModules) -> None:
    swa = PureSWAKV(8).inner
    slots = swa.alloc(3)
    assert swa.translate_loc_from_full_to_swa(slots).tolist() == slots.tolist()
    swa.free(slots)
    assert swa.available_size() == swa.full_available_size() == swa.swa_available_size() == 8


# ------------------------------------------------------------ vLLM BlockPool
@needs_vllm
def test_vllm_block_pool_reuses_unhashed_blocks_first_and_hashed_ones_in_lru_order() -> None:
    vllm = vllm_files.load_vllm()
    pool = vllm.new_block_pool(8, hash_block_size=4)
    assert pool.get_num_free_blocks() == 7 and pool.null_block.block_id == 0
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(vllm.request(block_hashes([11, 12, 13])), blocks, 0, 2, 4, 0)
    assert pool.get_cached_block(block_hashes([12])[0], [0]) == [blocks[1]]

    pool.free_blocks(list(reversed(blocks)))
    free_order = [block.block_id for block in pool.free_block_queue.get_all_free_blocks()]
    assert free_order == [3, 4, 5, 6, 7, 2, 1]  # unhashed 3 to the front, hashed ones to the tail

    pool.touch([blocks[0]])
    assert blocks[0].ref_cnt == 1 and pool.get_num_free_blocks() == 6
    pool.free_blocks([blocks[0]])
    pool.evict_blocks({blocks[1].block_id})
    assert pool.get_cached_block(block_hashes([12])[0], [0]) is None
    assert pool.reset_prefix_cache()


@needs_vllm
def test_vllm_block_pool_freeing_a_block_twice_drives_its_ref_count_negative_silently() -> None:
    """Upstream hazard (vllm #42571): ``free_blocks`` does not guard ``ref_cnt``."""
    pool = vllm_files.load_vllm().new_block_pool(4, hash_block_size=4)
    (block,) = pool.get_new_blocks(1)
    pool.free_blocks([block])
    pool.free_blocks([block])
    assert block.ref_cnt == -1 and pool.get_num_free_blocks() == 3

"""Prefix-cache canaries: ``RadixCache`` with one historical bug put back each, and one release-path variant.

Each pool canary is a factory with the family's constructor (``size``,
``page_size``, ``eviction_policy``, ``device``) over a ``RadixCache`` subclass
that differs in exactly the lines that carried the bug; the last canary keeps
the production cache and plants the bug in the driver's release path, as the
scheduler canaries do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.kits.prefix_cache.driver import Holder, PrefixCacheDriver
from poolfuzz.pools.prefix_cache import build_prefix_cache, kv_allocator_for
from poolfuzz.pools.radix_cache import MatchResult, RadixCache, TokenIds, TreeNode
from poolfuzz.pools.radix_tree import common_prefix_len


class KeyLengthSizes(RadixCache):
    """Sizes count the key as given, not the value the tree keeps (SGLang PR #10637).

    At page size > 1 a key with a partial last page is truncated to whole pages,
    but the new leaf is counted with the partial page's tokens too: ``evictable``
    and ``total`` exceed the indices held.  Caught by ``cache-accounting``.
    """

    def insert(self, key: TokenIds, value: torch.Tensor) -> int:
        total = self.total_size()
        prefix = super().insert(key, value)
        if self.total_size() > total:
            partial = len(self._tokens(key)) % self.page_size
            self._evictable_size += partial
            self._total_size += partial
        return prefix


class UnguardedUnlock(RadixCache):
    """``dec_lock_ref`` as upstream: no underflow guard, no check that the node is still in the tree.

    A second unlock leaves ``lock_ref == -1``; the next lock of that path brings
    it to 0 without protecting it, so eviction may free KV a request reads
    (prefix-cache reference 1.2, SGLang PR #29291).  Caught by ``lock-balance``.
    """

    def dec_lock_ref(self, node: TreeNode) -> int:
        delta = 0
        walk: TreeNode | None = node
        while walk is not None and walk is not self.root:
            if walk.lock_ref == 1:
                delta += self._move_size(walk, to_protected=False)
            walk.lock_ref -= 1
            self._tree.refresh_leaf(walk)
            walk = walk.parent
        return delta


class InsertForgetsSplitDuplicates(RadixCache):
    """``insert`` reports only the whole nodes it walked, forgetting the part of the node it split.

    The caller frees ``value[protected:reported]`` as its duplicates, so the
    indices for the split part stay allocated and owned by nobody: a leak that
    SGLang's idle checker reports.  Caught by ``kv-accounting``.
    """

    def insert(self, key: TokenIds, value: torch.Tensor) -> int:
        walk = self._tree.descend(self._aligned(self._tokens(key)))
        prefix = super().insert(key, value)
        return prefix - walk.inside_len if walk.inside is not None else prefix


class EvictsLockedLeaves(RadixCache):
    """``evict`` takes the oldest leaf whether or not a request holds it locked.

    The request's KV goes back to the allocator while it still reads it
    (SGLang #27147's symptom; what ``lock_ref > 0`` exists to prevent).
    Caught by ``evict-spares-locked``.
    """

    def evict(self, num_tokens: int) -> int:
        if num_tokens < 0:
            return super().evict(num_tokens)  # the size check is not the bug
        freed = 0
        while freed < num_tokens:
            leaves = sorted((n for n in self.nodes() if not n.children), key=self._tree.priority)
            if not leaves:
                break
            victim, n = leaves[0], len(leaves[0].value)
            self.allocator.free(victim.value)
            if victim.lock_ref:
                self._protected_size -= n
                victim.lock_ref = 0
            else:
                self._evictable_size -= n
            self._tree.remove_leaf(victim)
            self._held_pages[self._pages(victim.value)] = False
            self._total_size -= n
            freed += n
        return freed


class RecachedPagesCountedTwice(RadixCache):
    """New values may name pages the tree already holds under another key (SGLang #35270).

    The page is then held by two nodes and counted twice in ``evictable_size()``
    (and freed twice on eviction).  Caught by ``cache-accounting``.
    """

    def _check_new_values(self, value: torch.Tensor) -> None:
        held, self._held_pages = self._held_pages, torch.zeros_like(self._held_pages)
        try:
            super()._check_new_values(value)
        finally:
            self._held_pages = held


class PartialPageMatch(RadixCache):
    """``match_prefix`` reuses the part of a page that matches, not only whole pages.

    Past the last whole page, the tokens the key shares with a cached page are
    returned too, with that page's indices: KV another prefix wrote, whose later
    slots the request then overwrites (SGLang PR #28692 matched unaligned keys;
    #35635 shows a partial page can only be reused through a private copy).
    Caught by ``match-returns-inserted``.
    """

    def match_prefix(self, key: TokenIds) -> MatchResult:
        result = super().match_prefix(key)
        tokens, start = self._tokens(key), result.prefix_len
        best = max(((common_prefix_len(c.key[: self.page_size], tokens[start : start + self.page_size]), c)
                    for c in result.last_node.children.values()), default=(0, None), key=lambda pair: pair[0])
        shared, child = best
        if child is None or not 0 < shared < self.page_size:
            return result
        indices = torch.cat([result.indices, child.value[:shared]])
        return MatchResult(indices, result.last_node, start + shared)


class ReleaseFreesCachedPrefix(PrefixCacheDriver):
    """``finish`` frees the request's whole row, the part the tree now owns included.

    ``release_kv_cache`` frees from ``cache_protected_len``: the row's first
    indices are the tree's after a checkpoint.  Freeing from 0 hands cached KV
    back to the allocator while the tree still serves it (mini-sglang PR #142
    freed pages a request's table still mapped).  Caught by ``kv-accounting``.
    """

    def release_free_start(self, holder: Holder) -> int:
        return 0


def _factory(cache_class: type[RadixCache]) -> Callable[..., RadixCache]:
    def build(size: int, page_size: int, eviction_policy: str = "lru", device: str | torch.device = "cpu") -> RadixCache:
        return cache_class(kv_allocator_for(size, page_size, device), eviction_policy=eviction_policy)

    build.__name__ = build.__qualname__ = f"build_{cache_class.__name__}"
    build.__doc__ = cache_class.__doc__
    return build


build_key_length_sizes = _factory(KeyLengthSizes)
build_unguarded_unlock = _factory(UnguardedUnlock)
build_insert_forgets_split_duplicates = _factory(InsertForgetsSplitDuplicates)
build_evicts_locked_leaves = _factory(EvictsLockedLeaves)
build_recached_pages_counted_twice = _factory(RecachedPagesCountedTwice)
build_partial_page_match = _factory(PartialPageMatch)
production_prefix_cache = build_prefix_cache
"""The production cache, named here for the driver-variant canary (its bug is in the driver)."""

_HERE = __name__  # the module the specs below name

CANARIES: dict[str, Canary] = {
    "evictable-counts-key-length": Canary(
        "prefix_cache", f"{_HERE}:build_key_length_sizes",
        "sizes count the key before page truncation, not the value the tree keeps",
        "SGLang PR #10637", "cache-accounting",
    ),
    "double-unlock-goes-negative": Canary(
        "prefix_cache", f"{_HERE}:build_unguarded_unlock",
        "dec_lock_ref without an underflow guard: a second unlock leaves lock_ref == -1",
        "prefix-cache reference 1.2 (upstream dec_lock_ref), SGLang PR #29291", "lock-balance",
    ),
    "insert-leaks-split-duplicates": Canary(
        "prefix_cache", f"{_HERE}:build_insert_forgets_split_duplicates",
        "insert reports only whole matched nodes: the caller never frees the split part's duplicates",
        "SGLang release_kv_cache duplicate free; idle leak checker", "kv-accounting",
    ),
    "evict-takes-locked-leaf": Canary(
        "prefix_cache", f"{_HERE}:build_evicts_locked_leaves",
        "evict takes the oldest leaf whether or not it is locked",
        "SGLang #27147 (lock_ref race), PR #38045", "evict-spares-locked",
    ),
    "shared-page-counted-twice": Canary(
        "prefix_cache", f"{_HERE}:build_recached_pages_counted_twice",
        "a page the tree holds is cached again under another key and counted twice",
        "SGLang #35270", "cache-accounting",
    ),
    "match-reuses-partial-page": Canary(
        "prefix_cache", f"{_HERE}:build_partial_page_match",
        "match_prefix returns the shared part of a page past the last whole one",
        "SGLang PR #28692, #35635", "match-returns-inserted",
    ),
    "release-frees-cached-prefix": Canary(
        "prefix_cache", f"{_HERE}:production_prefix_cache",
        "finish frees the request's row from 0, the tree's cached part included",
        "SGLang release_kv_cache (frees from cache_protected_len); mini-sglang PR #142", "kv-accounting",
        driver=f"{_HERE}:ReleaseFreesCachedPrefix",
    ),
}

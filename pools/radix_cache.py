"""Radix-tree prefix cache over a KV allocator, with SGLang 0.5.23 ``RadixCache`` semantics.

The tree, its counts, locks and eviction are :class:`~poolfuzz.pools.radix_cache_base.RadixCacheBase`
(see :mod:`poolfuzz.pools.radix_cache_base` for the contract and the deliberate differences
from upstream).  :class:`RadixCache` adds what a scheduler does with it for one
request, ``BasePrefixCache.checkpoint`` and ``common.release_kv_cache`` upstream:

* ``checkpoint`` caches a running request's committed tokens, frees the row's
  duplicates of what was already cached, rewrites the row to the tree's indices
  and moves the request's lock to the new last node;
* ``release_request`` checkpoints (with ``cache``) and then frees the uncached
  tail and drops the lock; the row itself is the caller's.

Both check everything first and free before they touch the tree, so a refused
call leaves the cache as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poolfuzz.pools.errors import AlreadyCachedError, BadBatchError, BadSizeError, LockStateError
from poolfuzz.pools.radix_cache_base import FreeingAllocator, MatchResult, RadixCacheBase, TokenIds, is_int_vector
from poolfuzz.pools.radix_tree import Key, TreeNode

__all__ = ["FreeingAllocator", "MatchResult", "RadixCache", "RequestCacheResult", "TokenIds", "TreeNode"]


@dataclass(frozen=True)
class RequestCacheResult:
    """What ``checkpoint`` / ``release_request`` did for one request.

    ``last_node`` ends the request's cached path (locked for the request after
    ``checkpoint``, unlocked after ``release_request``); ``cache_protected_len``
    is the row prefix the tree now owns; ``prefix_len`` is what was already
    cached; the two counts are KV indices handed to ``allocator.free``.
    """

    last_node: TreeNode
    cache_protected_len: int
    prefix_len: int
    num_duplicates_freed: int
    num_tail_freed: int


class RadixCache(RadixCacheBase):
    """Prefix cache whose evictions free through ``allocator.free``, with the per-request paths.

    ``page_size`` defaults to the allocator's and must be a multiple of it;
    ``eviction_policy`` is ``"lru"`` (default), ``"mru"``, ``"fifo"`` or ``"filo"``;
    ``device`` defaults to the allocator's.
    """

    def checkpoint(
        self, token_ids: TokenIds, kv_indices: torch.Tensor, lock_node: TreeNode, cache_protected_len: int,
        *, prompt_len: int | None = None,
    ) -> RequestCacheResult:
        """Cache a running request's committed tokens and move its lock (``BasePrefixCache.checkpoint``).

        ``token_ids``: the tokens whose KV is committed.  ``kv_indices``: the
        request's ``req_to_token`` row, at least that long (a view is rewritten in
        place).  ``lock_node``: the node the request holds locked, whose path is
        exactly ``token_ids[:cache_protected_len]`` and ``kv_indices[:cache_protected_len]``.
        The page-aligned tokens are inserted; the row's own indices for the part
        that was already cached past ``cache_protected_len`` are freed in one
        ``allocator.free`` (an index the tree itself holds at that position is
        skipped, so re-inserting a request never double-frees) and rewritten to the
        tree's; the lock moves to the new last node.  ``prompt_len`` splits the path
        at that page-aligned boundary, as upstream does so output KV is evicted
        before the prompt.
        """
        return self._settle(token_ids, kv_indices, lock_node, cache_protected_len, prompt_len, cache=True, release=False)

    def release_request(
        self, token_ids: TokenIds, kv_indices: torch.Tensor, lock_node: TreeNode, cache_protected_len: int,
        *, cache: bool = True, prompt_len: int | None = None,
    ) -> RequestCacheResult:
        """Give a finished request's KV back (``common.release_kv_cache``); arguments as ``checkpoint``.

        With ``cache`` it checkpoints first.  It then frees the uncached tail the
        way upstream does, in two ``allocator.free`` calls: ``[protected,
        len(token_ids))`` and the over-allocated ``[ceil_align(len(token_ids)),
        len(kv_indices))``, and drops the request's lock.  Freeing the row itself is
        the caller's (``ReqToTokenPool.free``).
        """
        return self._settle(token_ids, kv_indices, lock_node, cache_protected_len, prompt_len, cache=cache, release=True)

    # ================================================================ helpers
    def _held_any(self, indices: torch.Tensor) -> bool:
        """Whether the tree holds the page of any of ``indices`` (out-of-range ones are the allocator's to reject)."""
        if indices.numel() == 0:
            return False
        top = self._num_alloc_pages
        pages = torch.div(indices, self._alloc_page_size, rounding_mode="floor")
        return bool((self._held_pages[pages.clamp(0, top)] & (pages >= 1) & (pages <= top)).any())

    def _check_request(self, tokens: Key, kv_indices: torch.Tensor, lock_node: TreeNode, cpl: int) -> None:
        """The row covers the tokens, and the protected prefix is exactly the locked path,
        token for token and index for index.  O(cache_protected_len)."""
        if not is_int_vector(kv_indices) or len(kv_indices) < len(tokens):
            raise BadBatchError(self.pool_name, f"kv_indices must be a 1-D integer tensor of at least {len(tokens)} indices")
        if isinstance(cpl, bool) or not isinstance(cpl, int) or cpl < 0 or cpl % self.page_size or cpl > len(tokens):
            raise BadSizeError(self.pool_name, "cache_protected_len", cpl, f"must be a multiple of {self.page_size} in [0, {len(tokens)}]")  # type: ignore[arg-type]
        self._require_attached(lock_node, "release")
        if lock_node is not self.root and lock_node.lock_ref < 1:
            raise LockStateError(self.pool_name, lock_node.id, lock_node.lock_ref, "the request's lock node is not locked")
        path = self._tree.path_to(lock_node)
        path_tokens = tuple(t for n in path for t in n.key)
        path_values = self._cat([n.value for n in path])
        if path_tokens != tokens[:cpl] or not torch.equal(path_values, kv_indices[:cpl].to(self.device, torch.int64)):
            raise BadBatchError(self.pool_name, f"the first {cpl} tokens and indices of the request are not the locked path of node {lock_node.id}")

    def _settle(
        self, token_ids: TokenIds, kv_indices: torch.Tensor, lock_node: TreeNode, cpl: int,
        prompt_len: int | None, *, cache: bool, release: bool,
    ) -> RequestCacheResult:
        """Every check first, the frees next (the allocator validates before it changes
        anything), the tree last: a refused call leaves the tree as it was."""
        tokens = self._tokens(token_ids)
        self._check_request(tokens, kv_indices, lock_node, cpl)
        kv = kv_indices.to(self.device, torch.int64)
        key = self._aligned(tokens) if cache else tokens[:cpl]
        value = kv[: len(key)]
        walk = self._tree.descend(key)
        assert walk.matched >= cpl, "the locked path is a prefix of the key"
        self._check_new_values(value[walk.matched :])
        inside = [walk.inside.value[: walk.inside_len]] if walk.inside is not None else []
        tree_prefix = self._cat([n.value for n in walk.path] + inside)
        own = value[cpl : walk.matched]
        duplicates = own[own != tree_prefix[cpl:]]
        over = -(-len(tokens) // self._alloc_page_size) * self._alloc_page_size
        tail = [kv[len(key) : len(tokens)], kv[over:]] if release else []
        for what, piece in [("duplicates", duplicates)] + [("uncached tail", p) for p in tail]:
            if self._held_any(piece):
                raise AlreadyCachedError(self.pool_name, piece.tolist(), f"are the request's {what} but the tree holds them")
        for piece in [duplicates, *tail]:
            if piece.numel():
                self.allocator.free(piece)
        last = self._apply_insert(key, value, walk)[1] if cache else lock_node
        prompt_key = self._aligned(tokens[:prompt_len]) if cache and prompt_len is not None else ()
        if 0 < len(prompt_key) < len(key):
            prompt_walk = self._tree.descend(prompt_key)
            self._tree.touch(prompt_walk)
            self._tree.split(prompt_walk)
        if cache:
            self._tree.touch(self._tree.descend(key))  # upstream re-matches the key to find the new last node
        kv_indices[cpl : walk.matched] = tree_prefix[cpl:].to(kv_indices.device, kv_indices.dtype)
        self.dec_lock_ref(lock_node)
        if not release:
            self.inc_lock_ref(last)
        return RequestCacheResult(last, len(key), walk.matched, int(duplicates.numel()), sum(int(p.numel()) for p in tail))

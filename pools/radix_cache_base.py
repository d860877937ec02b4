"""The radix cache itself: match, insert, locks, eviction and counts, with SGLang 0.5.23 ``RadixCache`` semantics.

* Keys are token ids, truncated to a multiple of ``page_size`` on insert and
  match; nodes split only at page boundaries (the tree is :mod:`poolfuzz.pools.radix_tree`).
* A node's ``value`` holds one int64 KV index per key token, on the pool's
  device.  Every size counts KV indices held, never key length (SGLang PR
  #10637), and no allocator page is held by two nodes (SGLang #35270).
* ``match_prefix`` returns the longest cached page-aligned prefix and its last
  node, splitting a node when the match ends inside it; it frees nothing.
* ``insert`` returns the length already cached; the caller's indices for that
  prefix are duplicates and the caller's to free, as upstream.
* A lock pins a node and its ancestors: the first ``inc_lock_ref`` of a node
  moves its size from evictable to protected, the last ``dec_lock_ref`` moves it
  back.  The root is always locked (``lock_ref == 1``) and its lock never moves.
* ``evict`` frees unlocked leaves through ``allocator.free``, one call per leaf,
  in policy order; a parent left childless and unlocked becomes a candidate.

:class:`RadixCacheBase` is all of :class:`poolfuzz.pools.radix_cache.RadixCache` but the
per-request paths (``checkpoint`` / ``release_request``), which that module adds.

Differences from upstream, all deliberate: a logical clock instead of wall time
(see :mod:`poolfuzz.pools.radix_tree`; the eviction order is upstream's, made
reproducible), and typed :class:`~poolfuzz.pools.errors.PoolError` raised before any
change for unlocking an unlocked node (upstream reaches
``lock_ref == -1`` and lets eviction free KV a request still reads), locking a
node no longer in the tree (SGLang PR #29291), a value whose length differs
from its key, and new values naming pages the tree already holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol

import torch

from poolfuzz.pools.errors import (
    AlreadyCachedError,
    BadBatchError,
    BadSizeError,
    ForeignIndexError,
    KeyValueMismatchError,
    LockStateError,
    ReservedIndexError,
    TreeInvariantError,
    TreeNodeError,
    UnknownEvictionPolicyError,
)
from poolfuzz.pools.radix_tree import EVICTION_POLICIES, Key, RadixTree, TreeNode, Walk

__all__ = ["FreeingAllocator", "MatchResult", "RadixCacheBase", "TokenIds", "TreeNode", "is_int_vector"]

TokenIds = Sequence[int] | torch.Tensor


class FreeingAllocator(Protocol):
    """What the cache needs of a KV allocator: its geometry and its free path."""

    size: int
    page_size: int

    def free(self, indices: torch.Tensor) -> None: ...


@dataclass(frozen=True)
class MatchResult:
    """``indices`` of the longest cached prefix (``prefix_len`` of them); ``last_node`` ends it."""

    indices: torch.Tensor
    last_node: TreeNode
    prefix_len: int


def is_int_vector(t: object) -> bool:
    """A 1-D integer tensor (not bool): the shape of a cached value and of a request's KV row."""
    return isinstance(t, torch.Tensor) and t.dim() == 1 and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool


class RadixCacheBase:
    """Prefix cache whose evictions free through ``allocator.free``; :class:`~poolfuzz.pools.radix_cache.RadixCache` adds the request paths.

    ``page_size`` defaults to the allocator's and must be a multiple of it;
    ``eviction_policy`` is ``"lru"`` (default), ``"mru"``, ``"fifo"`` or ``"filo"``;
    ``device`` defaults to the allocator's.
    """

    pool_name = "RadixCache"

    def __init__(
        self,
        allocator: FreeingAllocator,
        *,
        page_size: int | None = None,
        eviction_policy: str = "lru",
        device: str | torch.device | None = None,
    ) -> None:
        alloc_page_size = int(allocator.page_size)
        self.page_size = alloc_page_size if page_size is None else page_size
        if self.page_size < 1 or self.page_size % alloc_page_size:
            raise BadSizeError(self.pool_name, "page_size", self.page_size, f"must be a multiple of the allocator's {alloc_page_size}")
        policy = eviction_policy.lower()
        if policy not in EVICTION_POLICIES:
            raise UnknownEvictionPolicyError(self.pool_name, eviction_policy, sorted(EVICTION_POLICIES))
        self.allocator = allocator
        self.eviction_policy = policy
        self.device = torch.device(device if device is not None else getattr(allocator, "device", "cpu"))
        self._alloc_page_size = alloc_page_size
        self._num_alloc_pages = int(allocator.size) // alloc_page_size
        self._empty = torch.empty(0, dtype=torch.int64, device=self.device)
        self._tree = RadixTree(self.page_size, policy, self._empty)
        self._clear_counts()

    # ------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every node without freeing its KV (the caller clears the allocator, as
        upstream ``flush_cache`` does).  Ids keep counting, so old ids never resolve."""
        self._tree.reset()
        self._clear_counts()

    def _clear_counts(self) -> None:
        self._evictable_size = self._protected_size = self._total_size = 0
        self._held_pages = torch.zeros(self._num_alloc_pages + 1, dtype=torch.bool, device=self.device)

    @property
    def root(self) -> TreeNode:
        return self._tree.root

    def evictable_size(self) -> int:
        return self._evictable_size

    def protected_size(self) -> int:
        return self._protected_size

    def total_size(self) -> int:
        return self._total_size

    def node(self, node_id: int) -> TreeNode:
        """The live node with this id (the root included)."""
        found = self._tree.node(node_id)
        if found is None:
            raise TreeNodeError(self.pool_name, node_id, "no such node in the tree (evicted, reset or never created)")
        return found

    def nodes(self) -> Iterator[TreeNode]:
        """Live non-root nodes in id order."""
        return self._tree.nodes()

    def evictable_leaves(self) -> list[TreeNode]:
        """Unlocked leaves in the order ``evict`` would take them now."""
        return self._tree.evictable_leaves()

    def path_indices(self, node: TreeNode) -> torch.Tensor:
        """KV indices from the root down to ``node``."""
        self._require_attached(node, "path_indices")
        return self._cat([n.value for n in self._tree.path_to(node)])

    # ------------------------------------------------------------ match / insert
    def match_prefix(self, key: TokenIds) -> MatchResult:
        """The longest cached prefix of ``key`` truncated to whole pages; frees nothing."""
        tokens = self._aligned(self._tokens(key))
        walk = self._tree.descend(tokens)
        self._tree.touch(walk)
        path = self._tree.split(walk)
        return MatchResult(self._cat([n.value for n in path]), path[-1] if path else self.root, walk.matched)

    def insert(self, key: TokenIds, value: torch.Tensor) -> int:
        """Cache ``key -> value`` (both truncated to whole pages); return the length that
        was already cached, whose ``value`` indices are duplicates the caller frees."""
        tokens = self._tokens(key)
        if not is_int_vector(value):
            raise BadBatchError(self.pool_name, f"value must be a 1-D integer tensor, got {value!r}")
        if len(value) != len(tokens):
            raise KeyValueMismatchError(self.pool_name, len(tokens), len(value))
        tokens = self._aligned(tokens)
        value = value[: len(tokens)].to(self.device, torch.int64)
        walk = self._tree.descend(tokens)
        self._check_new_values(value[walk.matched :])
        return self._apply_insert(tokens, value, walk)[0]

    # ------------------------------------------------------------ locks
    def inc_lock_ref(self, node: TreeNode) -> int:
        """Lock ``node`` and its ancestors; return the change in ``evictable_size()`` (<= 0)."""
        self._require_attached(node, "lock")
        delta = 0
        while node is not self.root:
            if node.lock_ref == 0:
                delta -= self._move_size(node, to_protected=True)
            node.lock_ref += 1
            self._tree.refresh_leaf(node)
            node = self._tree.parent(node)
        return delta

    def dec_lock_ref(self, node: TreeNode) -> int:
        """Drop one lock of ``node`` and its ancestors; return the change in ``evictable_size()`` (>= 0)."""
        self._require_attached(node, "unlock")
        if node is not self.root and node.lock_ref < 1:
            raise LockStateError(self.pool_name, node.id, node.lock_ref, "unlock of a node that is not locked")
        delta = 0
        while node is not self.root:
            assert node.lock_ref >= 1, f"ancestor {node.id} holds fewer locks than its descendant"
            node.lock_ref -= 1
            if node.lock_ref == 0:
                delta += self._move_size(node, to_protected=False)
            self._tree.refresh_leaf(node)
            node = self._tree.parent(node)
        return delta

    # ------------------------------------------------------------ eviction
    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves in policy order until ``num_tokens`` are freed or none is
        left; return the number freed (whole leaves, so it may exceed ``num_tokens``)."""
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            raise BadSizeError(self.pool_name, "num_tokens", num_tokens, "must be an int >= 0")  # type: ignore[arg-type]
        freed = 0
        while freed < num_tokens and (victim := self._tree.pop_victim()) is not None:
            try:
                self.allocator.free(victim.value)  # validates before it changes anything
            except Exception:
                self._tree.requeue(victim)
                raise
            self._tree.remove_leaf(victim)
            self._held_pages[self._pages(victim.value)] = False
            self._evictable_size -= len(victim.value)
            self._total_size -= len(victim.value)
            freed += len(victim.value)
        return freed

    # ------------------------------------------------------------ audit
    def sanity_check(self) -> None:
        """Recompute every link and count from the tree and raise :class:`TreeInvariantError`
        naming the first that differs from what is maintained.  O(tree + pool)."""
        root, ps, fail = self.root, self.page_size, self._invariant_failed
        if root.lock_ref != 1 or root.key:
            fail("root lock_ref and key", (1, ()), (root.lock_ref, root.key))
        seen: set[int] = {root.id}
        leaves: set[int] = set()
        values: list[torch.Tensor] = []
        sizes = {"evictable_size": 0, "protected_size": 0, "total_size": 0}
        stack = [root]
        while stack:
            node = stack.pop()
            for child_key, child in node.children.items():
                if child.parent is not node or child_key != self._tree.child_key(child.key, 0):
                    fail(
                        f"node {child.id} is linked under its first page",
                        (node.id, child_key),
                        (child.parent and child.parent.id, child.key[:ps]),
                    )
                n = len(child.key)
                if n == 0 or n % ps or len(child.value) != n:
                    fail(f"node {child.id} key length (whole pages) equals value length", n, len(child.value))
                if child.lock_ref < 0 or (node is not root and child.lock_ref > node.lock_ref):
                    fail(f"node {child.id} lock_ref within [0, parent's]", node.lock_ref, child.lock_ref)
                sizes["protected_size" if child.lock_ref else "evictable_size"] += n
                sizes["total_size"] += n
                if not child.children and child.lock_ref == 0:
                    leaves.add(child.id)
                seen.add(child.id)
                values.append(child.value)
                stack.append(child)
        for name, recomputed in sizes.items():
            if recomputed != getattr(self, f"_{name}"):
                fail(name, recomputed, getattr(self, f"_{name}"))
        if seen != self._tree.registered_ids():
            fail("node registry", sorted(seen), sorted(self._tree.registered_ids()))
        queued = {n.id for n in self._tree.evictable_leaves()}
        if leaves != queued:
            fail("evictable leaves", sorted(leaves), sorted(queued))
        counts = torch.bincount(self._pages(self._cat(values)), minlength=self._num_alloc_pages + 1)
        if bool((counts > 1).any()):
            fail("no page held twice", [], (counts > 1).nonzero().flatten().tolist())
        if not torch.equal(counts > 0, self._held_pages):
            fail("held-page table", (counts > 0).nonzero().flatten().tolist(), self._held_pages.nonzero().flatten().tolist())

    # ================================================================ helpers
    def _invariant_failed(self, invariant: str, expected: object, actual: object) -> NoReturn:
        raise TreeInvariantError(self.pool_name, invariant, expected, actual)

    def _tokens(self, key: TokenIds) -> Key:
        return tuple(key.tolist()) if isinstance(key, torch.Tensor) else tuple(key)

    def _aligned(self, tokens: Key) -> Key:
        return tokens[: len(tokens) - len(tokens) % self.page_size]

    def _cat(self, values: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(values) if values else self._empty

    def _pages(self, value: torch.Tensor) -> torch.Tensor:
        """The allocator page of each whole page of a page-structured ``value``."""
        return torch.div(value[:: self._alloc_page_size], self._alloc_page_size, rounding_mode="floor")

    def _require_attached(self, node: TreeNode, action: str) -> None:
        if not self._tree.is_attached(node):
            raise LockStateError(
                self.pool_name, node.id, node.lock_ref, f"{action} of a node that is not in this tree (evicted, reset or foreign)"
            )

    def _move_size(self, node: TreeNode, *, to_protected: bool) -> int:
        n = len(node.value)
        sign = 1 if to_protected else -1
        self._protected_size += sign * n
        self._evictable_size -= sign * n
        return n

    def _apply_insert(self, tokens: Key, value: torch.Tensor, walk: Walk) -> tuple[int, TreeNode]:
        self._tree.touch(walk)
        path = self._tree.split(walk)
        parent = path[-1] if path else self.root
        if walk.matched == len(tokens):
            return walk.matched, parent
        leaf = self._tree.add_leaf(parent, tokens[walk.matched :], value[walk.matched :].clone())
        self._held_pages[self._pages(leaf.value)] = True
        self._evictable_size += len(leaf.value)
        self._total_size += len(leaf.value)
        return walk.matched, leaf

    def _check_new_values(self, value: torch.Tensor) -> None:
        """Reject values that are not whole allocator pages, name page 0 or pages outside
        the pool, or name a page twice or one the tree holds.  One host read."""
        if value.numel() == 0:
            return
        aps, top = self._alloc_page_size, self._num_alloc_pages
        rows = value.reshape(-1, aps)
        firsts = rows[:, 0]
        pages = torch.div(firsts, aps, rounding_mode="floor")
        not_pages = (firsts % aps != 0) | (rows != firsts[:, None] + torch.arange(aps, device=value.device)).any(1)
        ordered = torch.sort(pages).values
        held = self._held_pages[pages.clamp(0, top)]
        flags = torch.stack(
            [not_pages.any(), ((pages < 0) | (pages > top)).any(), (pages == 0).any(), (ordered[1:] == ordered[:-1]).any(), held.any()]
        ).tolist()
        if flags[0]:
            raise KeyValueMismatchError(self.pool_name, len(value), len(value), f"the new indices are not whole pages of {aps}")
        if flags[1]:
            raise ForeignIndexError(self.pool_name, value[(value < 0) | (value >= (top + 1) * aps)].tolist(), aps, (top + 1) * aps - 1)
        if flags[2]:
            raise ReservedIndexError(self.pool_name, int(value.min()), "KV index (page 0)")
        if flags[3]:
            raise AlreadyCachedError(self.pool_name, value.tolist(), "name one page twice")
        if flags[4]:
            raise AlreadyCachedError(self.pool_name, value[held.repeat_interleave(aps)].tolist(), "are held by the tree under another key")

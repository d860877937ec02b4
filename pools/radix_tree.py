"""The radix tree under :class:`poolfuzz.pools.radix_cache.RadixCache`: nodes, page-aligned
walks and splits, and the queue of evictable leaves.

It knows nothing of allocators, sizes or validation; the cache does.  Keys are
token-id tuples whose length is a multiple of ``page_size``; a node's children
are keyed by their first page (their first token at page size 1), so a walk
costs O(key length) and never scans the tree.

Recency and age come from a logical clock that ticks where upstream reads
``time.monotonic()``: once per match or insert (every node it visits gets that
stamp) and once per node created (a new leaf, the upper half of a split), so
eviction order is a pure function of the operations and equals upstream's.  The
upper half of a split keeps the creation of the node it was split from, as the
release's default cache does (``UnifiedTreeCore._split_node``,
``unified_tree_core.py:1476``; the Rust core agrees), so a read that splits a node
never makes the shared prefix look newly inserted to FIFO/FILO;
ties cannot occur between leaves, and would fall to the node id.  The evictable leaves
(unlocked, childless, not the root) are kept incrementally, with a heap whose
stale entries are skipped on pop and compacted when they outnumber live ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch

Key = tuple[int, ...]


class TreeNode:
    """One radix-tree edge: ``key`` tokens and their ``value`` KV indices (same length).

    ``id`` is stable for the node's life and never reused by its tree, so traces
    can name nodes; a split gives the new upper half a new id.
    """

    __slots__ = ("id", "key", "value", "parent", "children", "lock_ref", "last_access", "created", "heap_version")

    def __init__(self, node_id: int, key: Key, value: torch.Tensor, parent: TreeNode | None, stamp: int) -> None:
        self.id = node_id
        self.key = key
        self.value = value
        self.parent = parent
        self.children: dict[object, TreeNode] = {}
        self.lock_ref = 0
        self.last_access = stamp
        self.created = stamp
        self.heap_version = -1

    def __repr__(self) -> str:
        return f"TreeNode(id={self.id}, len={len(self.key)}, lock_ref={self.lock_ref}, children={len(self.children)})"


Priority = Callable[[TreeNode], tuple[int, int]]

EVICTION_POLICIES: dict[str, Priority] = {
    "lru": lambda node: (node.last_access, node.id),
    "mru": lambda node: (-node.last_access, node.id),
    "fifo": lambda node: (node.created, node.id),
    "filo": lambda node: (-node.created, node.id),
}
_RECENCY_POLICIES = frozenset({"lru", "mru"})


class Walk(NamedTuple):
    """Where a read-only walk down a key stopped."""

    path: list[TreeNode]  # fully matched nodes, root excluded
    matched: int  # page-aligned matched length
    inside: TreeNode | None  # the node the match ends inside of (it needs a split) ...
    inside_len: int  # ... after this many of its tokens


def common_prefix_len(a: Key, b: Key) -> int:
    """Length of the common prefix, comparing slices in C rather than token by token."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixTree:
    """Structure only: the cache keeps sizes and ``lock_ref`` and calls ``refresh_leaf``
    whenever a node's lock or children change."""

    def __init__(self, page_size: int, eviction_policy: str, empty_value: torch.Tensor) -> None:
        self.page_size = page_size
        self.eviction_policy = eviction_policy
        self.priority = EVICTION_POLICIES[eviction_policy]
        self._empty_value = empty_value
        self._next_id = 0
        self.reset()

    def reset(self) -> None:
        self._clock = 0
        self.root = TreeNode(self._new_id(), (), self._empty_value, None, 0)
        self.root.lock_ref = 1
        self._nodes: dict[int, TreeNode] = {self.root.id: self.root}
        self._evictable: set[TreeNode] = set()
        self._heap: list[tuple[tuple[int, int], int, TreeNode]] = []
        self._pushes = 0

    # ------------------------------------------------------------ lookups
    def node(self, node_id: int) -> TreeNode | None:
        return self._nodes.get(node_id)

    def nodes(self) -> Iterator[TreeNode]:
        """Live non-root nodes in id order."""
        return (n for n in self._nodes.values() if n is not self.root)

    def registered_ids(self) -> set[int]:
        return set(self._nodes)

    def evictable_leaves(self) -> list[TreeNode]:
        """Unlocked leaves in the order eviction would take them now."""
        return sorted(self._evictable, key=self.priority)

    def is_evictable_leaf(self, node: TreeNode) -> bool:
        return node in self._evictable

    def child_key(self, key: Key, pos: int) -> object:
        return key[pos] if self.page_size == 1 else key[pos : pos + self.page_size]

    def parent(self, node: TreeNode) -> TreeNode:
        assert node.parent is not None, f"node {node.id} has no parent"
        return node.parent

    def path_to(self, node: TreeNode) -> list[TreeNode]:
        """Nodes from below the root down to ``node`` (empty for the root)."""
        path = []
        while node is not self.root:
            path.append(node)
            node = self.parent(node)
        return path[::-1]

    def is_attached(self, node: TreeNode) -> bool:
        """Whether ``node`` is reachable from this tree's root (not evicted, reset or foreign)."""
        while node is not self.root:
            parent = node.parent
            if parent is None or parent.children.get(self.child_key(node.key, 0)) is not node:
                return False
            node = parent
        return True

    def descend(self, key: Key) -> Walk:
        """Read-only walk down a page-aligned ``key``."""
        node, pos = self.root, 0
        path: list[TreeNode] = []
        while pos < len(key):
            child = node.children.get(self.child_key(key, pos))
            if child is None:
                break
            n = common_prefix_len(child.key, key[pos : pos + len(child.key)])
            n -= n % self.page_size
            assert n > 0, "a child found by its first page shares at least that page"
            pos += n
            if n < len(child.key):
                return Walk(path, pos, child, n)
            path.append(child)
            node = child
        return Walk(path, pos, None, 0)

    # ------------------------------------------------------------ changes
    def tick(self) -> int:
        self._clock += 1
        return self._clock

    def split(self, walk: Walk) -> list[TreeNode]:
        """Split the node ``walk`` ends inside of at a page boundary; return the full path
        to the match end.  The new upper half inherits the lock count and the creation
        stamp of the node it was split from (SGLang 0.5.23's default ``UnifiedTreeCore``:
        ``new_node.creation_time = child.creation_time``); it is accessed now."""
        if walk.inside is None:
            return walk.path
        child, n = walk.inside, walk.inside_len
        parent = self.parent(child)
        upper = TreeNode(self._new_id(), child.key[:n], child.value[:n].clone(), parent, self.tick())
        upper.lock_ref = child.lock_ref
        upper.created = child.created
        child.key, child.value, child.parent = child.key[n:], child.value[n:].clone(), upper
        upper.children[self.child_key(child.key, 0)] = child
        parent.children[self.child_key(upper.key, 0)] = upper
        self._nodes[upper.id] = upper
        return [*walk.path, upper]

    def touch(self, walk: Walk) -> None:
        """Stamp the root and every node ``walk`` visited with one new tick, the node it
        ends inside of included (upstream stamps it before splitting it)."""
        stamp = self.tick()
        self.root.last_access = stamp
        visited = [*walk.path, walk.inside] if walk.inside is not None else walk.path
        for node in visited:
            node.last_access = stamp
            if node in self._evictable and self.eviction_policy in _RECENCY_POLICIES:
                self._push(node)

    def add_leaf(self, parent: TreeNode, key: Key, value: torch.Tensor) -> TreeNode:
        leaf = TreeNode(self._new_id(), key, value, parent, self.tick())
        parent.children[self.child_key(key, 0)] = leaf
        self._nodes[leaf.id] = leaf
        self.refresh_leaf(parent)
        self.refresh_leaf(leaf)
        return leaf

    def remove_leaf(self, leaf: TreeNode) -> None:
        assert not leaf.children and leaf.lock_ref == 0, f"node {leaf.id} is not an evictable leaf"
        parent = self.parent(leaf)
        del parent.children[self.child_key(leaf.key, 0)]
        del self._nodes[leaf.id]
        self._evictable.discard(leaf)
        leaf.parent = None
        self.refresh_leaf(parent)

    def refresh_leaf(self, node: TreeNode) -> None:
        """Queue ``node`` if it just became an evictable leaf; unqueue it if it stopped."""
        if node is not self.root and node.lock_ref == 0 and not node.children:
            if node not in self._evictable:
                self._evictable.add(node)
                self._push(node)
        else:
            self._evictable.discard(node)

    def pop_victim(self) -> TreeNode | None:
        """The evictable leaf of lowest priority, taken off the queue (``requeue`` undoes it)."""
        while self._heap:
            _, version, node = heapq.heappop(self._heap)
            if node.heap_version == version and node in self._evictable:
                return node
        return None

    def requeue(self, node: TreeNode) -> None:
        self._push(node)

    # ------------------------------------------------------------ internals
    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _push(self, node: TreeNode) -> None:
        """Queue ``node`` at its current priority; its older entries go stale."""
        self._pushes += 1
        node.heap_version = self._pushes
        heapq.heappush(self._heap, (self.priority(node), node.heap_version, node))
        if len(self._heap) > 2 * len(self._evictable) + 64:
            self._heap = [(self.priority(n), n.heap_version, n) for n in self._evictable]
            heapq.heapify(self._heap)

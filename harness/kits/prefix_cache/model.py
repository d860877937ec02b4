"""Shadow model of a radix prefix cache over a paged KV allocator (the ``prefix_cache`` family).

Written from the contract, not from :mod:`poolfuzz.pools.radix_cache`: plain dicts keyed by
token prefixes, no tree objects and no torch.

* ``pages`` maps every cached page-aligned prefix to the KV indices inserted for
  its last page; the set is closed under page-prefixes, so a match is the longest
  run of cached page-prefixes and its indices are theirs, concatenated.
* ``nodes`` holds the node boundaries: where an insert ended or branched and where
  a match ended inside a node (a split), each with a serial (its identity: nodes
  never merge, a split keeps the lower half's), a ``created`` and a
  ``last_access`` stamp.  A node spans from the nearest boundary above it.
* ``locks`` counts, per cached page-prefix, the holders whose locked prefix
  extends it; protected tokens are the cached pages whose count is positive.
* ``free`` is the allocator's free pages.

The clock ticks as the contract documents (SGLang's ``time.monotonic()`` reads,
made logical): once per match or insert, stamping every node the walk visits,
the node it ends inside included; then once per node created (the upper half of
a split, a new leaf).  Eviction takes unlocked childless nodes by policy,
``lru`` / ``mru`` on ``last_access`` and ``fifo`` / ``filo`` on ``created``.

How old the upper half of a split is (``split_ages``, :data:`SPLIT_AGES`) is the one
place SGLang 0.5.23's two trees differ:

* ``"inherit"`` (the default): it keeps the ``created`` of the node it was split
  from, as the release's default cache does.  ``UnifiedRadixCache``'s
  ``UnifiedTreeCore._split_node`` sets ``new_node.creation_time = child.creation_time``
  (``mem_cache/unified_cache/unified_tree_core.py:1467``, ``:1476``), and the Rust core
  that backs it by default agrees.
* ``"fresh"``: it is created at the split, as the legacy ``RadixCache._split_node``
  does (``mem_cache/radix_cache.py:677-700``: ``TreeNode()`` stamps
  ``creation_time = time.monotonic()`` at ``:260`` and the split never copies the
  child's).  A target declares it with ``poolfuzz_split_ages = "fresh"``
  (``poolfuzz.harness.upstream:RadixCache``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from poolfuzz.harness.judge.pages import ceil_div, distinct_pages

Key = tuple[int, ...]

POLICIES = ("lru", "mru", "fifo", "filo")
SPLIT_AGES = ("inherit", "fresh")
"""How old a split's upper half is: its child's ``created`` (UnifiedTreeCore, the default), or the split's tick (legacy RadixCache)."""


@dataclass
class Boundary:
    """A node of the cache, named by the prefix it ends at."""

    serial: int
    created: int
    last_access: int


class Match(NamedTuple):
    prefix_len: int
    indices: list[int]
    split: bool
    """The match ended inside a node, which the cache must split there."""


class Insert(NamedTuple):
    prefix_len: int
    """Tokens already cached: the caller's indices for them are duplicates to free."""
    split: bool
    added: int
    """Tokens the tree took from the value."""


class Eviction(NamedTuple):
    freed_tokens: int
    freed_pages: list[int]
    victims: list[Key]
    """Node boundaries removed, in eviction order."""


@dataclass
class PrefixCacheModel:
    """The cache's contract over allocator pages ``1..num_pages`` of ``page_size`` tokens each."""

    num_pages: int
    page_size: int
    policy: str
    split_ages: str = "inherit"
    pages: dict[Key, tuple[int, ...]] = field(default_factory=dict)
    children: dict[Key, set[Key]] = field(default_factory=dict)
    nodes: dict[Key, Boundary] = field(default_factory=dict)
    locks: Counter[Key] = field(default_factory=Counter)
    free: set[int] = field(default_factory=set)
    clock: int = 0
    root_serial: int = 0
    _serials: int = 0

    def __post_init__(self) -> None:
        assert self.policy in POLICIES, f"model: unknown eviction policy {self.policy!r}"
        assert self.split_ages in SPLIT_AGES, f"model: unknown split age rule {self.split_ages!r}"
        self.clear()

    # ------------------------------------------------------------ state
    def clear(self) -> None:
        """A reset cache over a cleared allocator; node identities never repeat."""
        self.pages, self.children, self.nodes = {}, {(): set()}, {}
        self.locks = Counter()
        self.free = set(range(1, self.num_pages + 1))
        self.clock = 0
        self.root_serial = self._new_serial()

    def aligned(self, tokens: Key) -> Key:
        return tokens[: len(tokens) - len(tokens) % self.page_size]

    def ceil_aligned(self, length: int) -> int:
        return ceil_div(length, self.page_size) * self.page_size

    def page_of(self, index: int) -> int:
        return index // self.page_size

    def pages_of(self, indices: list[int]) -> list[int]:
        """The distinct pages of ``indices``, in order."""
        return distinct_pages(indices, self.page_size)

    @property
    def total(self) -> int:
        return len(self.pages) * self.page_size

    @property
    def protected(self) -> int:
        return sum(1 for prefix in self.pages if self.locks[prefix] > 0) * self.page_size

    @property
    def evictable(self) -> int:
        return self.total - self.protected

    def held_pages(self) -> set[int]:
        return {self.page_of(indices[0]) for indices in self.pages.values()}

    def serial_at(self, prefix: Key) -> int | None:
        """Identity of the node ending at ``prefix`` (the root's for ``()``), ``None`` if there is none."""
        if not prefix:
            return self.root_serial
        node = self.nodes.get(prefix)
        return node.serial if node is not None else None

    # ------------------------------------------------------------ allocator
    def take(self, pages: list[int]) -> None:
        assert set(pages) <= self.free, f"model: taking pages {sorted(set(pages) - self.free)} that are not free"
        self.free -= set(pages)

    def release(self, indices: list[int]) -> None:
        """Indices a caller frees: their pages go back to the allocator."""
        pages = set(self.pages_of(indices))
        assert not pages & self.free, f"model: freeing pages {sorted(pages & self.free)} twice"
        assert not pages & self.held_pages(), "model: freeing pages the tree holds"
        self.free |= pages

    # ------------------------------------------------------------ match / insert
    def cached_len(self, key: Key) -> int:
        """The longest cached page-aligned prefix of ``key``."""
        ps, matched = self.page_size, 0
        while matched + ps <= len(key) and key[: matched + ps] in self.pages:
            matched += ps
        return matched

    def indices(self, key: Key, length: int) -> list[int]:
        return [i for end in range(self.page_size, length + 1, self.page_size) for i in self.pages[key[:end]]]

    def _node_around(self, prefix: Key) -> Key:
        """The boundary of the node that covers cached ``prefix`` (``prefix`` itself if it is one)."""
        while prefix and prefix not in self.nodes:
            (prefix,) = self.children[prefix]  # inside a node there is exactly one way down
        return prefix

    def _walk(self, key: Key) -> tuple[int, Key | None]:
        """Stamp what a walk down ``key`` visits; return the matched length and the node it ends inside."""
        matched = self.cached_len(key)
        self.clock += 1
        inside = None if matched == 0 or key[:matched] in self.nodes else self._node_around(key[:matched])
        for end in range(self.page_size, matched + 1, self.page_size):
            if key[:end] in self.nodes:
                self.nodes[key[:end]].last_access = self.clock
        if inside is not None:
            self.nodes[inside].last_access = self.clock
            inherited = self.nodes[inside].created if self.split_ages == "inherit" else None
            self._new_node(key[:matched], created=inherited)  # the upper half of the split
        return matched, inside

    def match(self, tokens: Key) -> Match:
        key = self.aligned(tokens)
        matched, inside = self._walk(key)
        return Match(matched, self.indices(key, matched), inside is not None)

    def insert(self, tokens: Key, value: list[int]) -> Insert:
        """``insert(tokens, value)`` with ``len(value) == len(tokens)``; both truncated to whole pages."""
        key = self.aligned(tokens)
        matched, inside = self._walk(key)
        for end in range(matched + self.page_size, len(key) + 1, self.page_size):
            prefix = key[:end]
            self.pages[prefix] = tuple(value[end - self.page_size : end])
            self.children.setdefault(prefix[: -self.page_size], set()).add(prefix)
            self.children[prefix] = set()
        if matched < len(key):
            self._new_node(key)
        return Insert(matched, inside is not None, len(key) - matched)

    def _new_node(self, prefix: Key, *, created: int | None = None) -> None:
        """A node ending at ``prefix``, last accessed now; created now unless ``created`` is given."""
        self.clock += 1
        self.nodes[prefix] = Boundary(self._new_serial(), self.clock if created is None else created, self.clock)

    def _new_serial(self) -> int:
        self._serials += 1
        return self._serials

    # ------------------------------------------------------------ locks
    def lock(self, prefix: Key) -> int:
        """Lock cached ``prefix`` (a boundary or ``()``); return the change in evictable tokens (<= 0)."""
        newly = 0
        for end in range(self.page_size, len(prefix) + 1, self.page_size):
            newly += self.locks[prefix[:end]] == 0
            self.locks[prefix[:end]] += 1
        return -newly * self.page_size

    def unlock(self, prefix: Key) -> int:
        """Drop one lock of ``prefix``; return the change in evictable tokens (>= 0)."""
        released = 0
        for end in range(self.page_size, len(prefix) + 1, self.page_size):
            assert self.locks[prefix[:end]] > 0, f"model: unlocking {prefix[:end]}, which nobody holds"
            self.locks[prefix[:end]] -= 1
            released += self.locks[prefix[:end]] == 0
        return released * self.page_size

    # ------------------------------------------------------------ eviction
    def _parent(self, prefix: Key) -> Key:
        up = prefix[: -self.page_size]
        while up and up not in self.nodes:
            up = up[: -self.page_size]
        return up

    def _priority(self, prefix: Key) -> tuple[int, int]:
        node = self.nodes[prefix]
        stamp = node.last_access if self.policy in ("lru", "mru") else node.created
        return (-stamp if self.policy in ("mru", "filo") else stamp, node.serial)

    def evictable_leaves(self) -> list[Key]:
        """Unlocked childless nodes in the order eviction takes them now."""
        leaves = [p for p in self.nodes if not self.children[p] and self.locks[p] == 0]
        return sorted(leaves, key=self._priority)

    def illegal_victims(self, pages: set[int]) -> list[int]:
        """The pages of ``pages`` no eviction may free now: not held by the tree, on a locked path, or
        with a cached extension that is not freed with them (so the tree would lose prefix-closure)."""
        prefix_of = {self.page_of(indices[0]): prefix for prefix, indices in self.pages.items()}
        bad = []
        for page in pages:
            prefix = prefix_of.get(page)
            if (
                prefix is None
                or self.locks[prefix] > 0
                or any(self.page_of(self.pages[child][0]) not in pages for child in self.children[prefix])
            ):
                bad.append(page)
        return sorted(bad)

    def evict(self, num_tokens: int) -> Eviction:
        """Remove whole leaves in policy order until ``num_tokens`` are freed or none is left."""
        freed: list[int] = []
        victims: list[Key] = []
        while len(freed) * self.page_size < num_tokens and (leaves := self.evictable_leaves()):
            victim = leaves[0]
            parent = self._parent(victim)
            for end in range(len(victim), len(parent), -self.page_size):
                prefix = victim[:end]
                freed.append(self.page_of(self.pages.pop(prefix)[0]))
                del self.children[prefix]
                self.locks.pop(prefix, None)
            self.children[parent].discard(victim[: len(parent) + self.page_size])
            del self.nodes[victim]
            victims.append(victim)
        self.free |= set(freed)
        return Eviction(len(freed) * self.page_size, freed, victims)

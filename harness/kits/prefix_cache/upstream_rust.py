"""The Rust TreeCore shipped in SGLang 0.5.23's wheel behind :class:`poolfuzz.pools.radix_cache.RadixCache`'s API.

``RustUnifiedTreeCoreBinding`` (``mem_cache/rust_tree_core/mem_cache*.so``) is the core
of 0.5.23's default ``UnifiedRadixCache``; it is driven here for its full-attention
component alone, on CPU, at any page size, through the calls ``UnifiedRadixCache``
makes: ``insert`` (with ``prev_prefix_len``; the duplicates to free come back as
``free_device_kv`` cache actions), ``match_prefix`` plus ``collect_full_device_indices``,
``inc_lock_ref`` / ``dec_lock_ref`` with the lock receipt, and the step-wise device
eviction (:func:`poolfuzz.harness.upstream.rust_core_loader.rust_evict_full`), whose freed values go
to the allocator one ``free_segment(value, start_pos=0)`` each, as upstream does.

Node handles are :class:`RustNode` (the core's integer node id).  The core keeps lock
receipts per holder; this wrapper keeps them per node, last in first out, so
``dec_lock_ref(node)`` hands the core the receipt of a lock taken on that node.
:meth:`sanity_check` is the core's own (``sanity_check([], [])``: no write-through or
load-back in flight).  A panic inside the core poisons its mutex: every later call
raises ``RuntimeError``, so the first one ends the instance (the harness issues no
misuse, and misuse is what panics).

:meth:`checkpoint` / :meth:`release_request` issue ``UnifiedRadixCache.checkpoint_into_tree``'s
FULL-only sequence of core calls (insert with ``prev_prefix_len = cache_protected_len``,
the prompt-boundary insert, the row rewrite, the lock move), then ``release_kv_cache``'s
frees; ``UnifiedRadixCache`` itself needs the scheduler's component objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from poolfuzz.harness.kits.prefix_cache.upstream import (
    TokenIds,
    UpstreamCacheOver,
    UpstreamMatch,
    UpstreamRequestResult,
    token_list,
    upstream_kv_allocator,
)
from poolfuzz.harness.upstream.rust_core_loader import RustTreeCoreBindings, freed_by_actions, load_rust_tree_core, rust_evict_full
from poolfuzz.pools.errors import TreeInvariantError, TreeNodeError


@dataclass(frozen=True)
class RustNode:
    """A node handle of the Rust core: its id (ids are never reused, not even across ``reset``)."""

    id: int


class TreeCoreOver(UpstreamCacheOver):
    """The wheel's ``RustUnifiedTreeCoreBinding`` (FULL component) over any ``allocator``, with our cache's constructor."""

    upstream_class: ClassVar[str] = "RustUnifiedTreeCoreBinding"
    pool_name = "upstream Rust TreeCore"

    def _attach(self) -> None:
        self.rust: RustTreeCoreBindings = load_rust_tree_core()
        self.core = self.rust.new_core(self.page_size, self.eviction_policy)
        self._receipts: dict[int, list[Any]] = {}
        self.last_insert_frees: list[int] = []
        """What the last :meth:`insert` told its caller to free (``free_device_kv``), for the differential."""

    # ------------------------------------------------------------ state
    def reset(self) -> None:
        self.core.reset()
        self._receipts.clear()

    @property
    def root(self) -> RustNode:
        return RustNode(int(self.core.root_node_handle(None)))

    def evictable_size(self) -> int:
        return int(self.core.evictable_size())

    def protected_size(self) -> int:
        return int(self.core.protected_size())

    def total_size(self) -> int:
        return int(self.core.total_size()[0])

    def node(self, node_id: int) -> RustNode:
        try:
            evicted = self.core.is_full_device_evicted(node_id)
        except KeyError:
            evicted = True
        if evicted and node_id != self.root.id:
            raise TreeNodeError(self.pool_name, node_id, "no such node in the tree")
        return RustNode(node_id)

    def path_indices(self, node: RustNode) -> torch.Tensor:
        return self.core.collect_full_device_indices(node.id, self.root.id)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ match / insert
    def match_prefix(self, key: TokenIds) -> UpstreamMatch:
        result = self.core.match_prefix(self.rust.match_params(token_list(key)))
        node = RustNode(int(result.last_device_node_id))
        return UpstreamMatch(self.path_indices(node), node, int(result.device_prefix_len))

    def _insert(self, tokens: list[int], value: torch.Tensor, prev_prefix_len: int) -> Any:
        """``prev_prefix_len`` doubles as ``inserted_len`` (hit counts), as the Python wrapper's request does."""
        params = self.rust.insert_params(tokens, value, prev_prefix_len=prev_prefix_len, inserted_len=prev_prefix_len)
        # Pumped as UnifiedRadixCache.insert does (unified_radix_cache.py:672-683): each step's actions, then
        # end_insert's; the result itself carries none.
        step = self.core.begin_insert(params)
        actions = list(step.actions)
        while step.result is None:
            step = self.core.resume_insert()
            actions += step.actions
        result = step.result
        actions += [*result.cache_actions, *self.core.end_insert()]
        frees = freed_by_actions(actions)
        self.last_insert_frees = [int(i) for t in frees for i in t.tolist()]
        return result, frees

    def insert(self, key: TokenIds, value: torch.Tensor) -> int:
        """``prefix_len``; the duplicates are the caller's to free (the core's ``free_device_kv``
        action names the same ``value[:prefix_len]``, kept in :attr:`last_insert_frees`)."""
        result, _ = self._insert(token_list(key), value.to(self.device, torch.int64), 0)
        return int(result.prefix_len)

    # ------------------------------------------------------------ locks
    def inc_lock_ref(self, node: RustNode) -> int:
        receipt = self.core.inc_lock_ref(node.id, [])
        self._receipts.setdefault(node.id, []).append(receipt)
        return -int(receipt.delta)

    def dec_lock_ref(self, node: RustNode) -> int:
        """Release the latest lock taken on ``node``; the core returns nothing, so the
        delta is read off ``evictable_size()``."""
        before = self.evictable_size()
        held = self._receipts.get(node.id, [])
        if not held:
            raise TreeNodeError(self.pool_name, node.id, "no lock receipt held for this node")
        receipt = held.pop()
        self.core.dec_lock_ref(node.id, self.rust.dec_params(receipt), False)
        return self.evictable_size() - before

    # ------------------------------------------------------------ eviction
    def evict(self, num_tokens: int) -> int:
        eviction = rust_evict_full(self.core, num_tokens)
        for value in eviction.freed:
            self._shim.free_segment(value, start_pos=0)
        return eviction.evicted

    # ------------------------------------------------------------ request paths
    def checkpoint(
        self, token_ids: TokenIds, kv_indices: torch.Tensor, lock_node: RustNode, cache_protected_len: int, *, prompt_len: int | None = None
    ) -> UpstreamRequestResult:
        tokens, cpl, ps = token_list(token_ids), cache_protected_len, self.page_size
        aligned = len(tokens) - len(tokens) % ps
        values = kv_indices[:aligned].to(self.device, torch.int64, copy=True)
        result, frees = self._insert(tokens[:aligned], values, cpl)
        for value in frees:
            self._shim.free_segment(value, start_pos=0)
        prompt = (len(tokens) if prompt_len is None else prompt_len) // ps * ps
        if 0 < prompt < aligned:
            self._insert(tokens[:prompt], values[:prompt], prompt)
        new_last = RustNode(int(result.last_device_node))
        new_indices = self.path_indices(new_last)
        kv_indices[cpl : len(new_indices)] = new_indices[cpl:].to(kv_indices.device, kv_indices.dtype)
        self._release_lock(lock_node)
        self.inc_lock_ref(new_last)
        duplicates = sum(int(t.numel()) for t in frees)
        return UpstreamRequestResult(new_last, len(new_indices), int(result.prefix_len), duplicates, 0)

    def _tail_freer(self) -> Any:
        """The allocator behind the shim: ``UnifiedRadixCache``'s frees go to the allocator, the core holds none."""
        return self._shim

    def _release_lock(self, node: RustNode) -> None:
        """Release the lock held on ``node``: any node but the root, and the root only if a receipt is held."""
        if node.id != self.root.id or self._receipts.get(node.id):
            self.dec_lock_ref(node)

    # ------------------------------------------------------------ audit
    def sanity_check(self) -> None:
        """The core's own ``sanity_check`` ("tree-structure, leaf-set, LRU, size" invariants)."""
        try:
            self.core.sanity_check([], [])
        except Exception as failure:  # its failure type is not documented
            raise TreeInvariantError(self.pool_name, "Rust sanity_check", "passes", f"{type(failure).__name__}: {failure}") from failure


class RustTreeCore(TreeCoreOver):
    """``prefix_cache``: the Rust TreeCore over upstream's KV allocator, built as
    ``poolfuzz.pools.prefix_cache.build_prefix_cache(size, page_size, eviction_policy, device)`` builds ours."""

    poolfuzz_contract: ClassVar[str] = "poolfuzz.harness.kits.prefix_cache.contracts.rust_tree_core:CONTRACT"

    def __init__(self, size: int, page_size: int, eviction_policy: str = "lru", device: str | torch.device = "cpu") -> None:
        super().__init__(upstream_kv_allocator(size, page_size, device), eviction_policy=eviction_policy)

"""Upstream SGLang 0.5.23's Python ``RadixCache`` behind :class:`poolfuzz.pools.radix_cache.RadixCache`'s API.

The wrapper builds upstream's own ``RadixCache`` (loaded by
:func:`poolfuzz.harness.upstream.sglang_modules.load_sglang_cache`, the logical clock in place of
``time.monotonic()``) and translates only the call shapes: our token sequences and
tensors become upstream's parameter objects (``RadixKey`` over ``array('q')``,
``MatchPrefixParams``, ``InsertParams``, ``EvictParams``) and its results
(``MatchResult``, ``InsertResult``, ``IncLockRefResult``/``DecLockRefResult``,
``EvictResult``) become ours.  Nothing is validated or repaired here, and
``poolfuzz_check_misuse = False``: the harness issues valid calls only, so whatever it
reports is reachable by a caller that keeps the contract.

Node handles are upstream's ``TreeNode`` objects themselves (``id``, ``lock_ref``,
``value``, ``parent``, ``children``); ``node.key`` is upstream's ``RadixKey``.

The request paths run upstream code where 0.5.23 has it: :meth:`checkpoint` calls
upstream ``RadixCache.checkpoint`` on a stand-in request and request-row pool (the
request's row is the caller's tensor, rewritten in place as upstream rewrites its
``req_to_token`` row).  ``release_kv_cache`` lives in ``mem_cache/common.py``, whose
imports reach far beyond the cache, so :meth:`release_request` issues the same
sequence of upstream calls it makes for one request: ``checkpoint``, one
``free_segment`` of the uncached tail ``[cache_protected_len, len(tokens))``, the
unlock, then the over-allocated part ``[ceil_align(len(tokens), page_size), len(row))``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import torch

from poolfuzz.harness.kits.kv.upstream import PagedKV, TokenKV, UpstreamKV
from poolfuzz.harness.upstream.sglang_files import SGLANG, SUPPORTED_VERSION
from poolfuzz.harness.upstream.sglang_modules import SglangCacheModules, load_sglang_cache
from poolfuzz.harness.upstream.wrapper import runs_upstream
from poolfuzz.pools.errors import TreeInvariantError, TreeNodeError

TokenIds = Sequence[int] | torch.Tensor


def token_list(key: TokenIds) -> list[int]:
    return [int(t) for t in (key.tolist() if isinstance(key, torch.Tensor) else key)]


@dataclass(frozen=True)
class UpstreamMatch:
    """:class:`poolfuzz.pools.radix_cache.MatchResult`'s shape: the path's ``indices``, its ``last_node``, ``prefix_len``."""

    indices: torch.Tensor
    last_node: Any
    prefix_len: int


@dataclass(frozen=True)
class UpstreamRequestResult:
    """:class:`poolfuzz.pools.radix_cache.RequestCacheResult`'s shape, read off upstream's request after the call."""

    last_node: Any
    cache_protected_len: int
    prefix_len: int
    num_duplicates_freed: int
    num_tail_freed: int


@dataclass
class FreeSegmentShim:
    """What upstream's caches need of an allocator (``device``, ``page_size``, ``free_segment``)
    over any allocator with ``free``, counting what each ``free_segment`` released.

    An upstream allocator wrapper (:class:`poolfuzz.harness.kits.kv.upstream.TokenKV` /
    :class:`~poolfuzz.harness.kits.kv.upstream.PagedKV`) gets upstream's own ``free_segment``.
    """

    allocator: Any
    device: torch.device
    page_size: int
    released: list[int] = field(default_factory=list)

    def free_segment(self, indices: torch.Tensor, *, start_pos: int) -> None:
        self.released.append(int(indices.numel()))
        if isinstance(self.allocator, UpstreamKV):
            self.allocator.inner.free_segment(indices, start_pos=start_pos)
        elif indices.numel():
            self.allocator.free(indices)


class _RequestRows:
    """Upstream's request-row pool as ``checkpoint`` uses it: one row, the caller's tensor."""

    def __init__(self, row: torch.Tensor) -> None:
        self.req_to_token = row.unsqueeze(0)  # a view: writes land in the caller's row

    def write(self, where: tuple[int, slice], values: torch.Tensor) -> None:
        self.req_to_token[where] = values.to(self.req_to_token.dtype)


class UpstreamCacheOver:
    """What the upstream prefix-cache wrappers share: our cache's constructor over any ``allocator``.

    ``allocator`` is any KV allocator with ``page_size``, ``size`` and ``free``, reached
    through :class:`FreeSegmentShim` (upstream's own ``free_segment`` for an upstream allocator).
    Upstream does not validate its input, so these get valid calls only.
    """

    poolfuzz_check_misuse: ClassVar[bool] = False
    upstream_class: ClassVar[str] = ""
    upstream_version: ClassVar[str] = SUPPORTED_VERSION
    pool_name = ""

    def __init__(
        self, allocator: Any, *, page_size: int | None = None, eviction_policy: str = "lru", device: str | torch.device | None = None
    ) -> None:
        self.allocator = allocator
        self.page_size = int(allocator.page_size) if page_size is None else page_size
        self.eviction_policy = eviction_policy.lower()
        self.device = torch.device(device if device is not None else getattr(allocator, "device", "cpu"))
        self._shim = FreeSegmentShim(allocator, self.device, int(allocator.page_size))
        self._attach()

    def _attach(self) -> None:
        """Build the upstream object over ``self._shim`` once the shared fields are set."""
        raise NotImplementedError

    def __repr__(self) -> str:
        name = self.pool_name.removeprefix("upstream ")
        return f"<upstream sglang=={self.upstream_version} {name} page_size={self.page_size} {self.eviction_policy}>"

    def checkpoint(
        self, token_ids: TokenIds, kv_indices: torch.Tensor, lock_node: Any, cache_protected_len: int, *, prompt_len: int | None = None
    ) -> UpstreamRequestResult:
        """Cache the request's tokens so far and move its lock to the new last node (each wrapper's own calls)."""
        raise NotImplementedError

    def _tail_freer(self) -> Any:
        """What :meth:`release_request` frees the request's tail through (``free_segment``)."""
        raise NotImplementedError

    def _release_lock(self, node: Any) -> None:
        """The unlock of :meth:`release_request`, between the two frees."""
        raise NotImplementedError

    def release_request(
        self,
        token_ids: TokenIds,
        kv_indices: torch.Tensor,
        lock_node: Any,
        cache_protected_len: int,
        *,
        cache: bool = True,
        prompt_len: int | None = None,
    ) -> UpstreamRequestResult:
        """``release_kv_cache``'s calls for one request: :meth:`checkpoint` (when ``cache``), one ``free_segment``
        of the uncached tail ``[cache_protected_len, len(tokens))``, :meth:`_release_lock`, then one of the
        over-allocated part ``[ceil_align(len(tokens), page_size), len(row))`` (the module docstring)."""
        tokens = token_list(token_ids)
        cpl, node, prefix_len, duplicates = cache_protected_len, lock_node, cache_protected_len, 0
        if cache:
            done = self.checkpoint(tokens, kv_indices, lock_node, cache_protected_len, prompt_len=prompt_len)
            cpl, node, prefix_len, duplicates = done.cache_protected_len, done.last_node, done.prefix_len, done.num_duplicates_freed
        ps = int(self.allocator.page_size)
        over = -(-len(tokens) // ps) * ps
        freer = self._tail_freer()
        tail = [kv_indices[cpl : len(tokens)], kv_indices[over:]]
        freer.free_segment(tail[0], start_pos=cpl)
        self._release_lock(node)
        if over < len(kv_indices):
            freer.free_segment(tail[1], start_pos=over)
        return UpstreamRequestResult(node, cpl, prefix_len, duplicates, sum(int(t.numel()) for t in tail))


@runs_upstream(SGLANG)
class RadixCacheOver(UpstreamCacheOver):
    """Upstream ``RadixCache(CacheInitParams(...))`` over any ``allocator``, with our cache's constructor."""

    upstream_class: ClassVar[str] = "RadixCache"
    pool_name = "upstream RadixCache"
    poolfuzz_split_ages: ClassVar[str] = "fresh"
    """The legacy tree stamps a split's upper half as created at the split (``radix_cache.py:677-700``, ``TreeNode()``
    at ``:260``); the default ``UnifiedTreeCore`` keeps the child's (``unified_tree_core.py:1476``).  The model
    (:data:`poolfuzz.harness.kits.prefix_cache.model.SPLIT_AGES`) follows whichever rule the target declares."""

    def _attach(self) -> None:
        self.mods: SglangCacheModules = load_sglang_cache()
        self.inner = self.mods.new_radix_cache(self._shim, page_size=self.page_size, eviction_policy=self.eviction_policy)

    # ------------------------------------------------------------ state
    def reset(self) -> None:
        self.inner.reset()

    @property
    def root(self) -> Any:
        return self.inner.root_node

    def evictable_size(self) -> int:
        return int(self.inner.evictable_size())

    def protected_size(self) -> int:
        return int(self.inner.protected_size())

    def total_size(self) -> int:
        return int(self.inner.total_size())

    def _walk(self) -> Iterator[Any]:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def nodes(self) -> Iterator[Any]:
        """Live non-root nodes in id order."""
        return iter(sorted(self._walk(), key=lambda n: n.id))

    def node(self, node_id: int) -> Any:
        if node_id == self.root.id:
            return self.root
        for found in self._walk():
            if found.id == node_id:
                return found
        raise TreeNodeError(self.pool_name, node_id, "no such node in the tree")

    def evictable_leaves(self) -> list[Any]:
        """Upstream's evictable-leaf set in the order its ``evict`` pops them."""
        priority = self.inner.eviction_strategy.get_priority
        return sorted(self.inner.evictable_leaves, key=lambda n: (priority(n), n.last_access_time))

    def path_indices(self, node: Any) -> torch.Tensor:
        return self.inner.path_device_indices(node)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ match / insert
    def match_prefix(self, key: TokenIds) -> UpstreamMatch:
        params = self.mods.base_prefix_cache.MatchPrefixParams(key=self.mods.radix_key(token_list(key)))
        result = self.inner.match_prefix(params)
        node = result.last_device_node
        return UpstreamMatch(self.path_indices(node), node, int(result.device_prefix_len))

    def insert(self, key: TokenIds, value: torch.Tensor) -> int:
        params = self.mods.base_prefix_cache.InsertParams(
            key=self.mods.radix_key(token_list(key)), value=value.to(self.device, torch.int64)
        )
        return int(self.inner.insert(params).prefix_len)

    # ------------------------------------------------------------ locks
    def inc_lock_ref(self, node: Any) -> int:
        return int(self.inner.inc_lock_ref(node).delta)

    def dec_lock_ref(self, node: Any) -> int:
        return int(self.inner.dec_lock_ref(node).delta)

    # ------------------------------------------------------------ eviction
    def evict(self, num_tokens: int) -> int:
        params = self.mods.base_prefix_cache.EvictParams(num_tokens=num_tokens)
        return int(self.inner.evict(params).num_tokens_evicted)

    # ------------------------------------------------------------ request paths
    def _request(self, tokens: list[int], row: torch.Tensor, lock_node: Any, cpl: int, prompt_len: int | None) -> Any:
        self.inner.req_to_token_pool = _RequestRows(row)
        kv = SimpleNamespace(req_pool_idx=0, cache_protected_len=cpl, cache_inserted_len=cpl, swa_evict_floor=0)
        lock = self.mods.base_prefix_cache.TreeLock(lock_node, self.mods.base_prefix_cache.DecLockRefParams())
        return SimpleNamespace(
            kv=kv,
            full_untruncated_fill_ids=self.mods.radix_key(tokens).token_ids,
            extra_key=None,
            cache_salt=None,
            priority=None,
            origin_input_ids=tokens[: len(tokens) if prompt_len is None else prompt_len],
            lock=lock,
            last_node=lock_node,
        )

    def checkpoint(
        self, token_ids: TokenIds, kv_indices: torch.Tensor, lock_node: Any, cache_protected_len: int, *, prompt_len: int | None = None
    ) -> UpstreamRequestResult:
        """Upstream ``RadixCache.checkpoint(req, up_to=len(token_ids))`` for a stand-in request."""
        tokens = token_list(token_ids)
        req = self._request(tokens, kv_indices, lock_node, cache_protected_len, prompt_len)
        self._shim.released.clear()
        self.inner.checkpoint(req, up_to=len(tokens))
        duplicates = self._shim.released[0] if self._shim.released else 0
        return UpstreamRequestResult(req.last_node, int(req.kv.cache_protected_len), cache_protected_len + duplicates, duplicates, 0)

    def _tail_freer(self) -> Any:
        """The allocator upstream's cache holds (``token_to_kv_pool_allocator``), as ``release_kv_cache`` frees."""
        return self.inner.token_to_kv_pool_allocator

    def _release_lock(self, node: Any) -> None:
        """Upstream ``dec_lock_ref`` on the request's last node, as ``release_kv_cache`` unlocks it."""
        self.inner.dec_lock_ref(node)

    # ------------------------------------------------------------ audit
    def sanity_check(self) -> None:
        """0.5.23 has no ``sanity_check`` (PR #38045 proposes one): recompute upstream's own
        counters and leaf set from its tree and raise :class:`TreeInvariantError` on a difference."""
        evictable = protected = total = 0
        leaves = set()
        for node in self._walk():
            if node.parent is None or node.parent.children.get(node.key.child_key(self.page_size)) is not node:
                raise TreeInvariantError(self.pool_name, f"node {node.id} linked under its first page", True, False)
            if len(node.key) != len(node.value):
                raise TreeInvariantError(self.pool_name, f"node {node.id} key length equals value length", len(node.key), len(node.value))
            if node.lock_ref > 0:
                protected += len(node.key)
            else:
                evictable += len(node.key)
            total += len(node.value)
            if node.lock_ref == 0 and not node.children:
                leaves.add(node.id)
        for name, recomputed, kept in (
            ("evictable_size", evictable, self.evictable_size()),
            ("protected_size", protected, self.protected_size()),
            ("total_size", evictable + protected, total),
        ):
            if recomputed != kept:
                raise TreeInvariantError(self.pool_name, name, recomputed, kept)
        queued = {n.id for n in self.inner.evictable_leaves}
        if queued != leaves:
            raise TreeInvariantError(self.pool_name, "evictable leaves", sorted(leaves), sorted(queued))


def upstream_kv_allocator(size: int, page_size: int, device: str | torch.device = "cpu") -> TokenKV | PagedKV:
    """Upstream's own KV allocator for ``size`` slots: the token allocator at page size 1, the paged one above."""
    return TokenKV(size, device) if page_size == 1 else PagedKV(size, page_size, device)


@runs_upstream(SGLANG)
class RadixCache(RadixCacheOver):
    """``prefix_cache``: upstream ``RadixCache`` over upstream's KV allocator, built as
    ``poolfuzz.pools.prefix_cache.build_prefix_cache(size, page_size, eviction_policy, device)`` builds ours."""

    poolfuzz_contract: ClassVar[str] = "poolfuzz.harness.kits.prefix_cache.contracts.radix_cache:CONTRACT"

    def __init__(self, size: int, page_size: int, eviction_policy: str = "lru", device: str | torch.device = "cpu") -> None:
        super().__init__(upstream_kv_allocator(size, page_size, device), eviction_policy=eviction_policy)

"""Misuse of a radix prefix cache beyond second unlocks and recached pages, and two corners (a mixin).

* ``insert_malformed``: values that are not whole allocator pages, name a page past
  the pool or page 0, name one page twice, or are not an integer tensor.
* ``release_malformed``: ``release_request`` of a live request with one argument
  broken (a short KV row, a protected length off the page grid or past the tokens,
  a lock node nobody locked, a protected prefix that is not the locked path, an
  uncached tail naming a page the tree holds).  Checked before anything is freed.
* ``node_lookup``: ``node(id)`` of a live holder's node, and of an id never handed out.
* ``cache_over``: a second cache over this allocator with another page size or
  an unknown eviction policy.
* ``rematch``: one cached prefix matched many times in a row, so the eviction
  heap's stale entries pile up and it compacts.

Calls beyond :class:`poolfuzz.pools.protocols.PrefixCache` (``release_request``, ``node``,
``evictable_leaves``) are made only where the target has them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from poolfuzz.harness.judge.driver import SKIPPED, operation
from poolfuzz.harness.judge.invariants import check
from poolfuzz.pools.errors import (
    AlreadyCachedError,
    BadBatchError,
    BadSizeError,
    ForeignIndexError,
    KeyValueMismatchError,
    LockStateError,
    PoolError,
    ReservedIndexError,
    TreeNodeError,
    UnknownEvictionPolicyError,
)

INSERT_MISUSE: dict[str, type[PoolError]] = {
    "indices that are not whole pages": KeyValueMismatchError,
    "a page past the pool": ForeignIndexError,
    "page 0": ReservedIndexError,
    "one page named twice": AlreadyCachedError,
    "a float tensor": BadBatchError,
}
RELEASE_MISUSE: dict[str, type[PoolError]] = {
    "a KV row shorter than the tokens": BadBatchError,
    "a protected length off the page grid": BadSizeError,
    "a protected length past the tokens": BadSizeError,
    "a lock node nobody locked": LockStateError,
    "a protected prefix that is not the locked path": BadBatchError,
    "an uncached tail naming a page the tree holds": AlreadyCachedError,
}
UNSHARED = 9
"""A token no prompt uses: a key of it is never cached, so every value of it is new."""


class PrefixCacheMisuse:
    """Operations for :class:`~poolfuzz.harness.kits.prefix_cache.driver.PrefixCacheDriver` (``pool``, ``kv``, ``model``,
    ``holders``, ``ps``, ``size``)."""

    pool: Any
    kv: Any
    model: Any
    holders: dict[int, Any]
    ps: int
    size: int
    check_misuse: bool
    _tensor: Callable[[list[int]], torch.Tensor]
    _misuse: Callable[..., None]
    _settle: Callable[[], None]
    _match: Callable[..., Any]
    event: Callable[[str], None]

    def _reject(self, call: Callable[[], Any], error: type[PoolError], what: str) -> None:
        self._misuse(call, error, what, lambda: None)

    @operation
    def insert_malformed(self, kind: str) -> Any:
        """``insert`` of a two-page key nobody cached with values of :data:`INSERT_MISUSE` ``kind``."""
        if kind not in INSERT_MISUSE or not self.check_misuse:
            return SKIPPED
        ps, top = self.ps, self.size // self.ps
        key = [UNSHARED] * (2 * ps)
        pages = {
            "indices that are not whole pages": [1, 2],
            "a page past the pool": [1, top + 1],
            "page 0": [0, 1],
            "one page named twice": [1, 1],
            "a float tensor": [1, 2],
        }[kind]
        slots = [p * ps + o for p in pages for o in range(ps)]
        if kind == "indices that are not whole pages":
            if ps == 1:
                return SKIPPED  # every index is a whole page of one slot
            slots = [s + 1 for s in slots]
        value = self._tensor(slots).to(torch.float32) if kind == "a float tensor" else self._tensor(slots)
        self._reject(lambda: self.pool.insert(key, value), INSERT_MISUSE[kind], f"insert of values with {kind}")
        self.event(f"misuse: insert of values with {kind}")
        return None

    def release_args(self, handle: int, kind: str) -> tuple[list[int], torch.Tensor, Any, int] | None:
        """``(tokens, kv_indices, lock_node, cache_protected_len)`` of a live request, broken as ``kind`` says."""
        held = self.holders.get(handle)
        if held is None or not held.live or not held.request:
            return None
        tokens, row, node, cpl = list(held.tokens), list(held.row), held.node, held.cpl
        if kind == "a KV row shorter than the tokens":
            row = row[: len(tokens) - 1] if tokens else None  # type: ignore[assignment]
        elif kind == "a protected length off the page grid":
            cpl = cpl + 1 if self.ps > 1 and cpl + 1 <= len(tokens) else None  # type: ignore[assignment]
        elif kind == "a protected length past the tokens":
            cpl = -(-(len(tokens) + 1) // self.ps) * self.ps
        elif kind == "a lock node nobody locked":
            idle = [n for n in self.pool.nodes() if n.lock_ref == 0]
            node = idle[0] if idle else None
        elif kind == "a protected prefix that is not the locked path":
            if cpl == 0:
                return None
            tokens[0] = UNSHARED
        elif kind == "an uncached tail naming a page the tree holds":
            held_pages, last = sorted(self.model.held_pages()), len(tokens) - 1
            if not held_pages or last < cpl:
                return None
            row[last] = held_pages[0] * self.ps + last % self.ps
        if row is None or cpl is None or node is None:
            return None
        return tokens, self._tensor(row), node, cpl

    @operation
    def release_malformed(self, handle: int, kind: str) -> Any:
        """``release_request`` of a live request with one argument broken (:data:`RELEASE_MISUSE`): nothing freed."""
        release: Callable[..., Any] | None = getattr(self.pool, "release_request", None)
        args = self.release_args(handle, kind) if kind in RELEASE_MISUSE and release is not None else None
        if release is None or args is None or not self.check_misuse:
            return SKIPPED
        tokens, row, node, cpl = args
        self._reject(
            lambda: release(tokens, row, node, cpl, cache=False), RELEASE_MISUSE[kind], f"release_request(request {handle}) with {kind}"
        )
        self.event(f"misuse: release_request with {kind}")
        return None

    @operation
    def node_lookup(self, handle: int | None) -> Any:
        """``node(id)`` of a holder's lock node (that very node), or with ``None`` of an id never handed out."""
        lookup = getattr(self.pool, "node", None)
        held = self.holders.get(handle) if handle is not None else None
        if lookup is None or (handle is not None and (held is None or not held.live)):
            return SKIPPED
        if held is None:
            if not self.check_misuse:
                return SKIPPED
            self._reject(lambda: lookup(10**9), TreeNodeError, "node() of an id never handed out")
            self.event("misuse: node() of an id never handed out")
            return None
        found = lookup(held.node.id)  # an adapter may wrap each answer anew: compare ids
        check(
            getattr(found, "id", None) == held.node.id,
            "lock-balance",
            f"node({held.node.id}) is not the node holder {handle} locked",
            found=repr(found),
            locked=repr(held.node),
        )
        return None

    @operation
    def cache_over(self, page_size: int, eviction_policy: str) -> Any:
        """A second cache over this allocator: a page size not a multiple of its, or an unknown policy, must raise."""
        if not self.check_misuse or page_size >= 1 and page_size % self.ps == 0 and eviction_policy == "lru":
            return SKIPPED
        error = BadSizeError if page_size < 1 or page_size % self.ps else UnknownEvictionPolicyError
        self._reject(
            lambda: type(self.pool)(self.kv, page_size=page_size, eviction_policy=eviction_policy),
            error,
            f"a cache of page size {page_size}, policy {eviction_policy!r} over the allocator",
        )
        self.event(
            "misuse: a cache over the allocator with " + ("another page size" if error is BadSizeError else "an unknown eviction policy")
        )
        return None

    @operation
    def rematch(self, prompt: list[int], times: int) -> Any:
        """``match_prefix`` of one cached prompt ``times`` times in a row, each checked."""
        if not self.model.match(tuple(prompt)).prefix_len:
            return SKIPPED
        for _ in range(max(1, min(times, 200))):
            self._match(tuple(prompt), f"match_prefix({prompt}) again")
        self.event("corner: one prefix matched many times in a row")
        self._settle()
        return None

"""Driver for the ``prefix_cache`` family: a radix prefix cache and its KV allocator, driven as a scheduler does.

The target is built from one config (``poolfuzz.pools.prefix_cache.build_prefix_cache``:
``size``, ``page_size``, ``eviction_policy``) and only its documented surface
(:class:`poolfuzz.pools.protocols.PrefixCache`) is called, so an upstream cache behind an
adapter with the same API is judged the same way.  The operations replay what
SGLang 0.5.23's scheduler does with ``RadixCache``:

* ``request``: match at most ``len - 1`` tokens (one is always computed), lock
  the match, take the uncached tail (whole pages) from the allocator, evicting
  first when it is short; a refusal rolls the lock back.
* ``extend``: more tokens for a live request, a page at a time.
* ``checkpoint``: ``BasePrefixCache.checkpoint``: insert the committed tokens,
  free the row's duplicates (``insert`` reports how much was cached), take the
  tree's indices by re-matching, move the lock to the new last node.
* ``finish``: ``release_kv_cache``: checkpoint (or not, for an abort), free the
  row from ``cache_protected_len`` on, unlock.
* ``lock`` / ``unlock``: a bare lock on a prefix (a waiting request's match).
* ``insert``, ``match``, ``evict``, ``reset`` (with the allocator cleared, as
  ``flush_cache`` does); misuse while ``check_misuse``: a second ``unlock``,
  ``insert_mismatched`` (value length differs from the key), ``recache`` (pages
  the tree holds, cached again under a new key).

Each step ends with the cheap accounting checks, in the order that names the
cause: ``cache-accounting``, then ``lock-balance``, then SGLang's leak equation
(``kv-accounting``), then what ``insert`` reported (``match-returns-inserted``).
An accepted misuse is first judged by what it broke (``lock-balance`` for a
negative lock, ``cache-accounting`` for a page counted twice).
"""

from __future__ import annotations

from poolfuzz.harness.judge.driver import SKIPPED, ConstructorKwargs, operation
from poolfuzz.harness.judge.invariants import InvariantViolation, check
from poolfuzz.harness.kits.prefix_cache.calls import Holder, PrefixCacheCalls
from poolfuzz.harness.kits.prefix_cache.misuse import PrefixCacheMisuse
from poolfuzz.harness.kits.prefix_cache.ops import PrefixCacheOps
from poolfuzz.pools.errors import (
    AlreadyCachedError,
    BadSizeError,
    KeyValueMismatchError,
    LockStateError,
    PoolError,
    UnknownEvictionPolicyError,
)
from poolfuzz.pools.radix_tree import EVICTION_POLICIES

__all__ = ["Holder", "PrefixCacheDriver"]


class PrefixCacheDriver(PrefixCacheCalls, PrefixCacheMisuse):
    family = "prefix_cache"
    ops = PrefixCacheOps

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """``page_size`` >= 1 and ``size`` a non-negative multiple of it (the allocator's), a known policy."""
        ps, size, policy = config.get("page_size"), config.get("size"), config.get("eviction_policy", "lru")
        errors: list[type[PoolError]] = []
        if not isinstance(ps, int) or isinstance(ps, bool) or ps < 1 or not isinstance(size, int) or size < 0 or size % ps:
            errors.append(BadSizeError)
        if not isinstance(policy, str) or policy.lower() not in EVICTION_POLICIES:
            errors.append(UnknownEvictionPolicyError)
        return tuple(errors)

    # ------------------------------------------------------------ policy
    def release_free_start(self, holder: Holder) -> int:
        """Where ``finish`` starts freeing the row: ``cache_protected_len`` (a canary variant plants 0)."""
        return holder.cpl

    # ------------------------------------------------------------ handles
    def handles(self, *, live: bool = True, request: bool | None = None) -> list[int]:
        return [h for h, held in self.holders.items() if held.live == live and (request is None or held.request == request)]

    def unlocked_handles(self) -> list[int]:
        """Released holders a second ``unlock`` of which any pool must refuse: their node left the
        tree, or no live holder keeps its path locked (not the root, whose unlock is a no-op)."""
        return [h for h, held in self.holders.items() if not held.live and self._second_unlock_detectable(held)]

    def _second_unlock_detectable(self, held: Holder) -> bool:
        if self.model.serial_at(held.locked) != held.serial:
            return True
        return bool(held.locked) and self.model.locks[held.locked] == 0

    def _live(self, handle: int, *, request: bool) -> Holder | None:
        held = self.holders.get(handle)
        return held if held is not None and held.live and held.request == request else None

    def _add(self, holder: Holder) -> int:
        handle = len(self.holders)
        self.holders[handle] = holder
        return handle

    def _cache_request(self, held: Holder, what: str) -> tuple[int, int]:
        """``checkpoint``: insert, free the row's duplicates, take the tree's indices, move the lock.
        Returns (reported, expected) cached lengths, judged after the accounting."""
        tokens = tuple(held.tokens)
        aligned = len(self.model.aligned(tokens))
        value = held.row[: len(tokens)]
        expected = self.model.insert(tokens, value)
        reported = self._insert(tokens, value, f"insert for {what}")
        self._free(held.row[held.cpl : max(held.cpl, reported)], f"free of the duplicates for {what}")
        self.model.release(held.row[held.cpl : expected.prefix_len])
        if expected.prefix_len > held.cpl:
            self.event("checkpoint freed duplicates")
        if expected.split:
            self.event("insert split a node")
        result, match = self._match(tokens[:aligned], f"match_prefix after insert for {what}")
        held.row[:aligned] = match.indices
        self._lock(result.last_node, tokens[:aligned], f"inc_lock_ref of the new last node for {what}")
        self._unlock(held.node, held.locked, f"dec_lock_ref of the old last node for {what}")
        held.node, held.locked, held.serial, held.cpl = (
            result.last_node,
            tokens[:aligned],
            self.model.serial_at(tokens[:aligned]),
            aligned,
        )
        return reported, expected.prefix_len

    # --------------------------------------------------------- operations
    @operation
    def request(self, prompt: list[int]) -> int | None:
        """Admit a request for ``prompt``; its handle, or ``None`` when the KV is short."""
        tokens = tuple(prompt)
        probe = tokens[: max(len(tokens) - 1, 0)]
        what = f"request({list(prompt)})"
        result, match = self._match(probe, f"match_prefix for {what}")
        locked = probe[: match.prefix_len]
        self._lock(result.last_node, locked, f"inc_lock_ref for {what}")
        own = self._alloc(self.model.ceil_aligned(len(tokens)) - match.prefix_len, f"alloc for {what}")
        if own is None:
            self._unlock(result.last_node, locked, f"dec_lock_ref rolling back {what}")
            self._settle()
            return None
        self.event("request hit the cache" if match.prefix_len else "request missed the cache")
        handle = self._add(
            Holder(
                list(tokens), match.indices + own, result.last_node, locked, self.model.serial_at(locked), match.prefix_len, request=True
            )
        )
        self._settle()
        return handle

    @operation
    def extend(self, handle: int, tokens: list[int]) -> None:
        """Generated ``tokens`` for a live request: new pages as its length crosses page boundaries."""
        held = self._live(handle, request=True)
        if held is None:
            return SKIPPED  # type: ignore[return-value]
        need = self.model.ceil_aligned(len(held.tokens) + len(tokens)) - len(held.row)
        own = self._alloc(need, f"alloc for extend(request {handle}, {len(tokens)} tokens)")
        if own is not None:
            if need:
                self.event("extend opened a page")
            held.tokens += tokens
            held.row += own
        self._settle()

    @operation
    def checkpoint(self, handle: int) -> None:
        held = self._live(handle, request=True)
        if held is None:
            return SKIPPED  # type: ignore[return-value]
        reported, expected = self._cache_request(held, f"checkpoint(request {handle})")
        self._settle()
        self._check_insert_report(reported, expected, f"checkpoint(request {handle})")

    @operation
    def settle(self, handle: int, prompt_len: int, release: bool = False, cache: bool = True) -> None:
        """The cache's own per-request call, with the request's prompt length: ``checkpoint(...,
        prompt_len=)`` (upstream ``RadixCache.checkpoint(req, up_to)``) or, with ``release``,
        ``release_request(..., cache=)`` (``release_kv_cache``; without ``cache`` an abort, which caches
        nothing and so splits nothing); ``prompt_len`` is clipped to the request's tokens.

        Upstream splits the inserted path at the prompt's page-aligned end so a request's output
        KV is evicted before its prompt (``radix_cache.py`` ``_split_node`` from
        ``cache_unfinished_req``): the prompt path is touched, and split there when the end falls
        inside a node, then the whole key is touched.  ``checkpoint`` above moves a request through
        the cache's primitives and never exercises this split, so its ages (which node eviction takes
        first) are judged here, by the drain audits' policy-order evictions.
        """
        held = self._live(handle, request=True)
        call = getattr(self.pool, "release_request" if release else "checkpoint", None)
        if held is None or call is None or prompt_len < 0:
            return SKIPPED  # type: ignore[return-value]
        tokens = tuple(held.tokens)
        cache = cache or not release
        key = self.model.aligned(tokens) if cache else tuple(held.locked)
        prompt_len = min(prompt_len, len(tokens))
        what = (
            f"{'release_request' if release else 'checkpoint'}(request {handle}, prompt_len={prompt_len}{'' if cache else ', cache=False'})"
        )
        row = self._tensor(held.row)
        cached = held.cpl
        if cache:
            cached = self.model.insert(tokens, held.row[: len(tokens)]).prefix_len
            prompt_key = self.model.aligned(tokens[:prompt_len])
            if 0 < len(prompt_key) < len(key):
                self.model.match(prompt_key)  # touch the prompt's path; split where it ends inside a node
                self.event("checkpoint split at the prompt's end")
            self.model.match(key)  # re-matched to find the new last node, which touches the key's path
        extra = {"cache": cache} if release else {}
        result = self.expect_accepted(lambda: call(list(tokens), row, held.node, held.cpl, prompt_len=prompt_len, **extra), what)
        self.model.release(held.row[held.cpl : cached])
        check(
            int(result.prefix_len) == cached and int(result.cache_protected_len) == len(key),
            "match-returns-inserted",
            f"{what} reported what it cached wrongly",
            prefix_len=int(result.prefix_len),
            expected=cached,
            cache_protected_len=int(result.cache_protected_len),
            key=len(key),
        )
        if cache:
            held.row[: len(key)] = self.model.indices(key, len(key))
        check(
            [int(i) for i in row[: len(key)].tolist()] == held.row[: len(key)],
            "match-returns-inserted",
            f"{what} left the request's row other than the tree's indices",
            row=row[: len(key)].tolist(),
            expected=held.row[: len(key)],
        )
        self.model.unlock(held.locked)
        if release:
            self.model.release(held.row[len(key) : len(tokens)])
            held.live = False
        else:
            self.model.lock(key)
            held.node, held.locked, held.serial, held.cpl = result.last_node, key, self.model.serial_at(key), len(key)
        self._settle()

    @operation
    def finish(self, handle: int, cache: bool = True) -> None:
        """Release a request (``release_kv_cache``): cache it first unless ``cache`` is false (an abort)."""
        held = self._live(handle, request=True)
        if held is None:
            return SKIPPED  # type: ignore[return-value]
        what = f"finish(request {handle}, cache={cache})"
        report = self._cache_request(held, what) if cache else None
        self.event("finish cached the request" if cache else "finish without caching")
        self._free(held.row[self.release_free_start(held) :], f"free of the uncached tail for {what}")
        self.model.release(held.row[held.cpl :])
        self._unlock(held.node, held.locked, f"dec_lock_ref for {what}")
        held.live = False
        self._settle()
        if report is not None:
            self._check_insert_report(*report, what)

    @operation
    def lock(self, prompt: list[int]) -> int:
        """Match ``prompt`` and lock the match, as for a waiting request; a handle for ``unlock``."""
        tokens = tuple(prompt)
        result, match = self._match(tokens, f"match_prefix for lock({list(prompt)})")
        locked = self.model.aligned(tokens)[: match.prefix_len]
        self._lock(result.last_node, locked, f"inc_lock_ref for lock({list(prompt)})")
        handle = self._add(
            Holder(list(tokens), [], result.last_node, locked, self.model.serial_at(locked), match.prefix_len, request=False)
        )
        self._settle()
        return handle

    @operation
    def unlock(self, handle: int) -> None:
        """Drop a bare lock; on a handle already unlocked (a finished request, a dropped one) it is misuse."""
        found = self.holders.get(handle)
        if found is None or (found.live and found.request):
            return SKIPPED  # type: ignore[return-value]
        held = found
        what = f"dec_lock_ref of {'request' if held.request else 'lock'} {handle}"
        if held.live:
            self._unlock(held.node, held.locked, what)
            held.live = False
            self._settle()
            return None
        if not self.check_misuse or not self._second_unlock_detectable(held):
            return SKIPPED  # type: ignore[return-value]  # the root, or a lock another holder owns: no pool can tell
        same_node = self.model.serial_at(held.locked) == held.serial
        self.event("second unlock" if same_node else "unlock of a node no longer in the tree")
        broken = (
            "the lock count of a path nobody holds went below zero"
            if same_node
            else "an unlock of a node no longer in the tree walked a detached parent chain (SGLang PR #29291)"
        )

        def accepted() -> None:
            raise InvariantViolation(
                "lock-balance",
                f"{what} (a second unlock) was accepted: {broken}",
                locked_len=len(held.locked),
                lock_count=self.model.locks[held.locked],
            )

        self._misuse(lambda: self.pool.dec_lock_ref(held.node), LockStateError, what, accepted)
        return None

    @operation
    def insert(self, prompt: list[int]) -> None:
        """Cache ``prompt`` computed outside any request: fresh KV, insert, free the duplicates and the partial page."""
        tokens = tuple(prompt)
        what = f"insert({list(prompt)})"
        value = self._alloc(self.model.ceil_aligned(len(tokens)), f"alloc for {what}")
        if value is None:
            self._settle()
            return
        aligned = len(self.model.aligned(tokens))
        expected = self.model.insert(tokens, value[: len(tokens)])
        reported = self._insert(tokens, value[: len(tokens)], what)
        self._free(value[:reported] + value[aligned:], f"free of the duplicates and partial page of {what}")
        self.model.release(value[: expected.prefix_len] + value[aligned:])
        if expected.split:
            self.event("insert split a node")
        if tokens and not expected.added:
            self.event("insert found the whole key cached")
        if aligned < len(tokens):
            self.event("insert left a partial page uncached")
        self._settle()
        self._check_insert_report(reported, expected.prefix_len, what)

    @operation
    def match(self, prompt: list[int]) -> None:
        _, match = self._match(tuple(prompt), f"match_prefix({list(prompt)})")
        self.event("match hit" if match.prefix_len else "match missed")
        self._settle()

    @operation
    def evict(self, num_tokens: int) -> None:
        if num_tokens < 0:
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(lambda: self.pool.evict(num_tokens), BadSizeError, f"evict({num_tokens})")
            return None
        self._evict(num_tokens, f"evict({num_tokens})")
        self._settle()
        return None

    @operation
    def reset(self) -> None:
        """``flush_cache``: the tree forgets everything, the allocator is cleared, live requests are dropped."""
        if any(h.live for h in self.holders.values()):
            self.event("reset with live holders")
        self.expect_accepted(self.pool.reset, "reset()")
        self.expect_accepted(self.kv.clear, "allocator.clear()")
        self.model.clear()
        for held in self.holders.values():
            held.live = False
        self._settle()

    @operation
    def insert_mismatched(self, prompt: list[int], extra: int) -> None:
        """Misuse: a value ``extra`` indices longer (or shorter) than the key."""
        length = len(prompt) + extra
        if not self.check_misuse or extra == 0 or length < 0:
            return SKIPPED  # type: ignore[return-value]
        value = self._tensor([self.ps + i for i in range(length)])
        self._misuse(
            lambda: self.pool.insert(list(prompt), value),
            KeyValueMismatchError,
            f"insert of {len(prompt)} tokens with {length} indices",
            lambda: None,
        )
        return None

    @operation
    def recache(self, prompt: list[int]) -> None:
        """Misuse: cache a new key (``prompt`` cut to as many uncached pages as the tree holds) with
        KV pages the tree already holds under another key."""
        key = self.model.aligned(tuple(prompt))
        cached = self.model.cached_len(key)
        held = sorted(self.model.held_pages())
        pages = min((len(key) - cached) // self.ps, len(held))
        if not self.check_misuse or pages == 0:
            return SKIPPED  # type: ignore[return-value]
        key = key[: cached + pages * self.ps]
        value = self.model.indices(key, cached) + [p * self.ps + o for p in held[:pages] for o in range(self.ps)]
        what = f"insert({list(key)}) with pages the tree holds"
        self.event("pages cached again under a new key")

        def accepted() -> None:
            total = self.pool.total_size()
            check(
                total == self.model.total,
                "cache-accounting",
                f"{what} was accepted: held pages counted twice",
                total=total,
                held=self.model.total,
            )

        self._misuse(lambda: self.pool.insert(list(key), self._tensor(value)), AlreadyCachedError, what, accepted)
        return None

"""The checked calls under the ``prefix_cache`` driver: each pool call with what it must do.

:class:`PrefixCacheCalls` owns the target (a cache whose ``allocator`` is its KV
allocator) and the model, and wraps every call of the documented surface
(:class:`poolfuzz.pools.protocols.PrefixCache`) with its checks: a match against the
prefixes inserted, a lock against the counts per path, an allocation against
the model's free pages (evicting first when short, as SGLang's
``evict_from_tree_cache`` does), an eviction against the policy's unlocked
leaves.  :meth:`PrefixCacheCalls._settle` is the per-step accounting and
:meth:`PrefixCacheCalls.audit` the full one.  The operations are in
:mod:`poolfuzz.harness.kits.prefix_cache.driver`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from poolfuzz.harness.judge.driver import ConfigLike, Driver
from poolfuzz.harness.judge.invariants import InvariantViolation, check, check_unique
from poolfuzz.harness.kits.prefix_cache.config import PrefixCacheConfig
from poolfuzz.harness.kits.prefix_cache.model import Key, Match, PrefixCacheModel
from poolfuzz.pools.errors import PoolError


def _ints(tensor: torch.Tensor) -> list[int]:
    return [int(v) for v in tensor.tolist()]


@dataclass
class Holder:
    """One lock on the cache: a request (``request``, with a KV row) or a bare lock on a prefix.

    ``row`` holds ``ceil_align(len(tokens))`` KV indices (empty for a bare lock);
    ``row[:cpl]`` are the tree's, locked through ``node``, which ends ``locked``
    (model identity ``serial``).
    """

    tokens: list[int]
    row: list[int]
    node: Any
    locked: Key
    serial: int | None
    cpl: int
    request: bool
    live: bool = True


class PrefixCacheCalls(Driver):
    """Base of :class:`~poolfuzz.harness.kits.prefix_cache.driver.PrefixCacheDriver`: the checked pool calls."""

    config: PrefixCacheConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.ps = self.config.page_size
        self.size = self.config.size
        self.device = torch.device(self.config.device)
        self.kv = self.pool.allocator
        policy = self.config.eviction_policy.lower()
        # How old a split's upper half is: the release's default rule unless the target declares the legacy one.
        split_ages = str(getattr(self.pool, "poolfuzz_split_ages", "inherit"))
        self.model = PrefixCacheModel(self.size // self.ps, self.ps, policy, split_ages=split_ages)
        self.holders: dict[int, Holder] = {}

    # ------------------------------------------------------------ pool calls
    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.device)

    def _free_pages(self) -> frozenset[int] | None:
        """The allocator's free pages, where it lets us look (``get_all_free_pages``)."""
        look = getattr(self.kv, "get_all_free_pages", None)
        return frozenset(_ints(look())) if look is not None else None

    def _match(self, tokens: Key, what: str) -> tuple[Any, Match]:
        expected = self.model.match(tokens)
        result = self.expect_accepted(lambda: self.pool.match_prefix(list(tokens)), what)
        got_len, got = result.prefix_len, _ints(result.indices)
        check(
            got_len == expected.prefix_len and got == expected.indices,
            "match-returns-inserted",
            f"{what} returned a prefix other than the one inserted",
            prefix_len=got_len,
            indices=got,
            expected_len=expected.prefix_len,
            expected_indices=expected.indices,
            page_size=self.ps,
        )
        if expected.split:
            self.event("match split a node")
        return result, expected

    def _lock(self, node: Any, prefix: Key, what: str) -> None:
        expected = self.model.lock(prefix)
        delta = self.expect_accepted(lambda: self.pool.inc_lock_ref(node), what)
        check(delta == expected, "lock-balance", f"{what} moved the wrong number of tokens to protected", delta=delta, expected=expected)

    def _unlock(self, node: Any, prefix: Key, what: str) -> None:
        expected = self.model.unlock(prefix)
        delta = self.expect_accepted(lambda: self.pool.dec_lock_ref(node), what)
        check(
            delta == expected, "lock-balance", f"{what} moved the wrong number of tokens back to evictable", delta=delta, expected=expected
        )

    def _free(self, indices: list[int], what: str) -> None:
        if indices:
            tensor = self._tensor(indices)
            self.expect_accepted(lambda: self.kv.free(tensor), what)

    def _kv_state(self) -> Hashable:
        return self.kv.available_size(), self._free_pages()

    def _alloc(self, need: int, what: str) -> list[int] | None:
        """``need`` fresh slots (whole pages), evicting first when the allocator is short, as SGLang's
        ``evict_from_tree_cache`` does; ``None`` (nothing consumed) when still short."""
        if need == 0:
            return []
        if need > len(self.model.free) * self.ps:
            self._evict(need, f"evict({need}) before {what}")
        available = len(self.model.free) * self.ps
        if need > available:
            self.expect_refused(
                lambda: self.kv.alloc(need), what, state=self._kv_state, crash_id="empty-pool-guard", need=need, available=available
            )
            self.event("allocation refused: KV short after eviction")
            return None
        out = self.expect_accepted(lambda: self.kv.alloc(need), what)
        check(out is not None, "empty-pool-guard", f"{what} refused with {available} slots free", need=need)
        indices = _ints(out)
        check(len(indices) == need, "empty-pool-guard", f"{what} returned {len(indices)} slots", need=need)
        check_unique(indices, "no-double-allocation", f"slots returned by {what}")
        pages = self.model.pages_of(indices)
        check(
            indices == [p * self.ps + o for p in pages for o in range(self.ps)],
            "page-layout",
            f"{what} returned slots that are not whole pages",
            slots=indices,
            page_size=self.ps,
        )
        check(0 not in pages, "reserved-never-handed-out", f"{what} handed out page 0")
        held = sorted(set(pages) - self.model.free)
        check(
            not held,
            "no-double-allocation",
            f"{what} handed out pages the tree or a live request holds",
            pages=held,
            tree=sorted(set(held) & self.model.held_pages()),
        )
        self.model.take(pages)
        return indices

    def _evict(self, num_tokens: int, what: str) -> None:
        """``evict(num_tokens)``.  What no eviction may do (free locked, live or uncached KV, a parent
        before its children, or change the locks) is ``evict-spares-locked``; a legal eviction of other
        leaves than the policy takes first, or of more or fewer, is ``eviction-order``."""
        protected, free_before = self.pool.protected_size(), self._free_pages()
        evictable = self.model.evictable
        freed = self.expect_accepted(lambda: self.pool.evict(num_tokens), what)
        check(
            self.pool.protected_size() == protected,
            "evict-spares-locked",
            f"{what} changed protected_size()",
            before=protected,
            after=self.pool.protected_size(),
        )
        check(
            0 <= int(freed) <= evictable,
            "evict-spares-locked",
            f"{what} reported freeing {freed} tokens with {evictable} evictable",
            freed=freed,
            evictable=evictable,
        )
        free_after = self._free_pages()
        released = free_after - free_before if free_before is not None and free_after is not None else None
        if released is not None:
            illegal = self.model.illegal_victims(set(released))
            check(
                not illegal, "evict-spares-locked", f"{what} released pages no eviction may free", pages=illegal, released=sorted(released)
            )
            check(
                freed == len(released) * self.ps,
                "evict-spares-locked",
                f"{what} reported other than it freed",
                reported=freed,
                released=sorted(released),
            )
        plan = self.model.evict(num_tokens)
        check(
            freed == plan.freed_tokens,
            "eviction-order",
            f"{what} freed {freed} tokens; the unlocked leaves in policy order free {plan.freed_tokens}",
            victims=[list(v) for v in plan.victims],
            policy=self.model.policy,
            split_ages=self.model.split_ages,
        )
        if released is not None:
            check(
                released == set(plan.freed_pages),
                "eviction-order",
                f"{what} evicted other leaves than the policy's first",
                released=sorted(released),
                expected=sorted(plan.freed_pages),
                victims=[list(v) for v in plan.victims],
                policy=self.model.policy,
                split_ages=self.model.split_ages,
            )
        if any(len(v) < len(u) and u[: len(v)] == v for i, u in enumerate(plan.victims) for v in plan.victims[i:]):
            self.event("evict took a parent its victims exposed")
        if plan.freed_tokens < num_tokens and self.model.total:
            self.event("evict stopped short: every leaf locked")

    def _insert(self, tokens: Key, value: list[int], what: str) -> int:
        """``insert(tokens, value)``; the reported cached length, checked only to be usable."""
        tensor = self._tensor(value)
        reported = self.expect_accepted(lambda: self.pool.insert(list(tokens), tensor), what)
        aligned = len(self.model.aligned(tokens))
        check(
            isinstance(reported, int) and 0 <= reported <= aligned,
            "match-returns-inserted",
            f"{what} reported a cached length outside [0, {aligned}]",
            reported=reported,
        )
        return int(reported)

    def _check_insert_report(self, reported: int, expected: int, what: str) -> None:
        check(
            reported == expected,
            "match-returns-inserted",
            f"{what}: insert reported the wrong cached length",
            reported=reported,
            expected=expected,
        )

    def _settle(self) -> None:
        """The per-step accounting checks (O(live requests)), most specific first."""
        evictable, protected, total = self.pool.evictable_size(), self.pool.protected_size(), self.pool.total_size()
        check(
            evictable + protected == total and total == self.model.total,
            "cache-accounting",
            "cache sizes disagree with the indices the tree holds",
            evictable=evictable,
            protected=protected,
            total=total,
            held=self.model.total,
        )
        check(
            protected == self.model.protected,
            "lock-balance",
            "protected_size() is not the locked paths",
            protected=protected,
            locked=self.model.protected,
        )
        available = self.kv.available_size()
        uncached = sum(len(h.row) - h.cpl for h in self.holders.values() if h.live and h.request)
        check(
            available + evictable + protected + uncached == self.size,
            "kv-accounting",
            "available + evictable + protected + uncached != total (a leak or an over-free)",
            available=available,
            evictable=evictable,
            protected=protected,
            uncached=uncached,
            total=self.size,
        )
        check(
            available == len(self.model.free) * self.ps,
            "kv-accounting",
            "available_size() disagrees with the model",
            available=available,
            expected=len(self.model.free) * self.ps,
        )

    def _misuse(self, call: Callable[[], Any], error: type[PoolError], what: str, accepted: Callable[[], None]) -> None:
        """A call the contract forbids: ``error`` and nothing changed.  If the pool accepts it,
        ``accepted`` first judges what the call broke; otherwise it is ``misuse-rejected``."""
        before = self.observe()
        try:
            call()
        except error:
            pass
        except Exception as other:
            raise InvariantViolation(
                "misuse-rejected", f"{what} raised {type(other).__name__}, expected {error.__name__}", error=str(other)
            ) from other
        else:
            accepted()
            raise InvariantViolation("misuse-rejected", f"{what} was accepted; expected {error.__name__}")
        after = self.observe()
        check(before == after, "misuse-rejected", f"{what} raised but changed the pool", before=before, after=after)

    # ------------------------------------------------------------- audits
    def observe(self) -> Hashable:
        return (self.pool.evictable_size(), self.pool.protected_size(), self.pool.total_size(), self._kv_state())

    def audit(self) -> None:
        self._settle()
        free = self._free_pages()
        if free is not None:
            check(
                free == self.model.free,
                "kv-accounting",
                "the allocator's free pages differ from the model",
                missing=sorted(self.model.free - free),
                extra=sorted(free - self.model.free),
            )
        leaves = getattr(self.pool, "evictable_leaves", None)  # a query beyond the protocol, where the pool has it
        if leaves is not None:
            found = leaves()
            check(
                len(found) == len(self.model.evictable_leaves()) and all(n.lock_ref == 0 for n in found),
                "evict-spares-locked",
                "evictable_leaves() differs from the unlocked leaves cached",
                found=len(found),
                expected=len(self.model.evictable_leaves()),
            )
        sanity = getattr(self.pool, "sanity_check", None)
        if sanity is not None:
            try:
                sanity()
            except Exception as exc:
                raise InvariantViolation("cache-accounting", f"sanity_check failed: {type(exc).__name__}: {exc}") from exc

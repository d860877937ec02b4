"""The prefix cache's part of a scheduler step (``scheduler`` family, ``prefix_cache`` on).

What SGLang 0.5.23's scheduler does with its ``RadixCache``, one request at a time:

* admission matches ``tokens[:prompt - 1]`` (at least one token is computed, as
  ``Req.init_next_round_input`` does), locks the matched node, writes the cached
  indices into ``req_to_token[row, :prefix]`` and extends only the rest;
* a KV allocation the free pages cannot serve first evicts the shortfall
  (``evict_to_free_tokens``), and is refused only if that is not enough.  Upstream
  sizes the shortfall from a demand over-estimated by a page per request; here it
  is the exact page demand, so an eviction that falls one page short is seen;
* a request still prefilling after a chunk is checkpointed (``cache_unfinished_req``);
* finish releases with insertion (``release_kv_cache(checkpoint=True)``), retract
  and abort without (``checkpoint=False``, as ``ScheduleBatch.release_req`` does for
  a retract); either way the cache frees the uncached tail and drops the lock, the
  scheduler frees the row.

Checks, each the cheapest place it can run:

* after every step, SGLang's leak equation ``available + evictable + protected +
  uncached == total`` (``kv-accounting``), ``protected_size()`` against the locks live
  requests hold (``lock-balance``), and ``evictable + protected == total_size()`` ==
  what the model caches (``cache-accounting``);
* per call: a match returns what was inserted for that prefix and a release or
  checkpoint reports the cached length the model predicts (``match-returns-inserted``),
  and frees exactly the duplicates and tail it must (``kv-accounting``); an eviction
  frees only unlocked cached pages, leaves the cache prefix-closed and stops short
  only when nothing evictable is left (``evict-spares-locked``);
* at audit: every row's cached part is its lock node's path, the cache's pages are the
  model's, and ``RadixCache.sanity_check`` passes.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.scheduler.base import SchedulerDriverBase
from poolfuzz.harness.kits.scheduler.cache_model import PrefixCacheModel
from poolfuzz.harness.kits.scheduler.model import ReqState, Settlement
from poolfuzz.pools.radix_tree import TreeNode


class CacheBook:
    """The driver's view of its ``RadixCache``: the lock node each live request holds, and the checks."""

    def __init__(self, driver: SchedulerDriverBase) -> None:
        self.driver = driver
        self.tree: Any = driver.pool.tree_cache
        self.locks: dict[int, TreeNode] = {}

    @property
    def model(self) -> PrefixCacheModel:
        assert self.driver.model.cache is not None, "a cache book needs a cache model"
        return self.driver.model.cache

    def forget(self) -> None:
        self.locks.clear()

    def sizes(self) -> tuple[int, int, int]:
        return self.tree.evictable_size(), self.tree.protected_size(), self.tree.total_size()

    def held_slots(self) -> list[int]:
        """Every KV index the cache's nodes hold."""
        return [int(i) for node in self.tree.nodes() for i in node.value.tolist()]

    # ------------------------------------------------------------ steps
    def match_and_lock(self, states: list[ReqState]) -> list[int]:
        """Match each admitted request's prompt, lock what matched and write it into its row; the prefixes."""
        d, prefixes = self.driver, []
        for state in states:
            key = state.tokens[: max(0, state.target - 1)]
            expected = self.model.match(key)
            found = d.expect_accepted(partial(self.tree.match_prefix, key), f"match_prefix(request {state.handle})")
            indices = found.indices.tolist()
            check(found.prefix_len == expected and indices == self.model.slots(state.tokens, expected),
                  "match-returns-inserted", "match_prefix at admission returned other than was cached",
                  handle=state.handle, prefix_len=found.prefix_len, expected=expected)
            protected = self.model.protected_tokens()
            d.model.attach_prefix(state.handle, expected)
            delta = d.expect_accepted(partial(self.tree.inc_lock_ref, found.last_node), f"inc_lock_ref(request {state.handle})")
            check(delta == protected - self.model.protected_tokens(), "lock-balance",
                  "inc_lock_ref moved other than the newly locked tokens", delta=delta,
                  expected=protected - self.model.protected_tokens())
            self.locks[state.handle] = found.last_node
            if expected:
                d.expect_accepted(partial(d.rows.write, (state.row, slice(0, expected)), found.indices.to(torch.int32)),
                                  "write(cached prefix)")
                d.event("cache hit at admission")
                if -delta < expected:
                    d.event("cache hit on pages another live request holds")
            prefixes.append(expected)
        return prefixes

    def evict_for(self, need_pages: int) -> None:
        """Evict the shortfall before an allocation of ``need_pages`` the free pages cannot serve."""
        d, ps = self.driver, self.driver.ps
        shortfall = need_pages * ps - d.full.available_size()
        if shortfall <= 0:
            return  # the pool has room the model does not see: the audit names the difference
        before = set(d.free_pages())
        freed = d.expect_accepted(lambda: self.tree.evict(shortfall), f"evict({shortfall})")
        victims = set(d.free_pages()) - before
        problems = d.model.evict(victims)
        check(not problems, "evict-spares-locked", f"evict({shortfall}) freed pages it must spare", **problems)
        check(freed == len(victims) * ps, "evict-spares-locked", f"evict({shortfall}) reported other than it freed",
              reported=freed, freed=sorted(victims))
        check(freed >= shortfall or self.model.evictable_tokens() == 0, "evict-spares-locked",
              f"evict({shortfall}) stopped short with unlocked pages cached", freed=freed,
              evictable=self.model.evictable_tokens())
        if victims:
            d.event("eviction before refusal")
        if need_pages > len(d.model.free_pages):
            d.event("KV short after eviction")

    def checkpoint(self, states: list[ReqState]) -> None:
        """Cache what each chunked request has computed so far and move its lock (``cache_unfinished_req``)."""
        d = self.driver
        for state in states:
            view = d.rows.req_to_token[state.row, : state.length]  # rewritten in place where it duplicates the cache
            tokens, lock, cached = state.tokens[: state.length], self.locks[state.handle], state.cached
            result = d.expect_accepted(partial(self.tree.checkpoint, tokens, view, lock, cached, prompt_len=state.target),
                                       f"checkpoint(request {state.handle})")
            self._compare(result, d.model.settle(state.handle, insert=True, release=False), f"checkpoint(request {state.handle})")
            self.locks[state.handle] = result.last_node
            if result.num_duplicates_freed:
                d.event("checkpoint freed duplicates")

    def release(self, state: ReqState, kv_slots: torch.Tensor, *, insert: bool) -> None:
        """``release_request`` for a finished (``insert``), retracted or aborted request; the row is the caller's."""
        d, handle = self.driver, state.handle
        tokens, lock, cached = state.tokens[: state.length], self.locks.pop(handle), state.cached
        prompt = state.target if insert else None
        what = f"release_request(request {handle}, cache={insert})"
        result = d.expect_accepted(
            lambda: self.tree.release_request(tokens, kv_slots, lock, cached, cache=insert, prompt_len=prompt), what)
        self._compare(result, d.model.settle(handle, insert=insert, release=True), what)
        if result.num_duplicates_freed:
            d.event("release freed duplicates")
        if insert and result.cache_protected_len > result.prefix_len:
            d.event("finish inserted into the cache")

    def _compare(self, result: Any, expected: Settlement, what: str) -> None:
        check(result.prefix_len == expected.prefix_len, "match-returns-inserted",
              f"{what} found other than the model's cached length", prefix_len=result.prefix_len,
              expected=expected.prefix_len)
        actual = (result.cache_protected_len, result.num_duplicates_freed, result.num_tail_freed)
        wanted = (expected.cache_protected_len, expected.duplicates_freed, expected.tail_freed)
        check(actual == wanted, "kv-accounting", f"{what} protected or freed other than the contract says",
              protected_duplicates_tail=actual, expected=wanted)

    # ------------------------------------------------------------ checks
    def check_ledger(self) -> None:
        """The leak equation, the lock balance and the cache's own sizes; O(live requests) besides ``total_size``."""
        d, model = self.driver, self.model
        ps = d.ps
        available, (evictable, protected, total) = d.full.available_size(), self.sizes()
        uncached, capacity = d.model.uncached_tokens(), d.model.num_pages * ps
        check(available + evictable + protected + uncached == capacity, "kv-accounting",
              "available + evictable + protected + uncached != total KV slots", available=available,
              evictable=evictable, protected=protected, uncached=uncached, total=capacity)
        check(protected == model.protected_tokens(), "lock-balance",
              "protected_size() is not the tokens the live requests lock", protected=protected,
              locked=model.protected_tokens())
        check(evictable + protected == total == model.total_tokens(), "cache-accounting",
              "evictable + protected, total_size() and the cached tokens disagree", evictable=evictable,
              protected=protected, total=total, cached=model.total_tokens())

    def audit(self) -> None:
        """Each row's cached part is its locked path; the cache holds exactly the model's pages."""
        d = self.driver
        for handle, state in d.model.live.items():
            node = self.locks[handle]
            path = d.expect_accepted(partial(self.tree.path_indices, node), f"path_indices(lock of request {handle})",
                                     crash_id="lock-balance")
            check(path.tolist() == state.slots[: state.cached] and (node is self.tree.root or node.lock_ref >= 1),
                  "lock-balance", "a request's cached prefix is not the path of the node it locks",
                  handle=handle, cached=state.cached, lock_ref=node.lock_ref)
        pages = sorted({slot // d.ps for slot in self.held_slots()})
        check(pages == sorted(self.model.held_pages()), "cache-accounting", "the cache holds other pages than cached",
              pool=pages, model=sorted(self.model.held_pages()))
        d.expect_accepted(self.tree.sanity_check, "RadixCache.sanity_check()", crash_id="cache-accounting")

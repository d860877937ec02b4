"""Scheduler canaries: the scheduler's own bookkeeping, or the pools it composes, with one bug put back.

The ``scheduler`` family's pools are the production ones; ``retract-frees-from-ceil``
changes how the scheduler (the driver) calls them, so it is a driver variant, bound
with :attr:`poolfuzz.harness.machines.base.PoolMachine.driver_class`.  The others
are target factories (``--target scheduler=module:attr``) that build the scheduler's
pools with one component swapped for a broken subclass, so
``python -m poolfuzz.harness.canaries.seeding`` can seed their traces into the corpus.  Each
lives on the path the scheduler uses it by: the prefix cache's release path, the
release without insertion that retract and abort take, and the SWA allocator's
out-of-window release.
"""

from __future__ import annotations

from typing import Any

import torch

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.kits.scheduler.driver import SchedulerDriver, SchedulerPools, build_scheduler_pools
from poolfuzz.pools.radix_cache import RadixCache, RequestCacheResult, TokenIds
from poolfuzz.pools.radix_tree import TreeNode
from poolfuzz.pools.swa import SWATokenToKVPoolAllocator


class CeilRetractScheduler(SchedulerDriver):
    """``retract`` frees the request's KV from ``ceil(keep / ps) * ps`` (SGLang #4977).

    The tokens ``floor(keep/ps)*ps .. keep`` are dropped from the request but
    their page is never freed: at page size > 1 every mid-page retract leaks
    one page.  Caught by ``scheduler-conservation``.
    """

    def retract_free_start(self, keep: int) -> int:
        return -(-keep // self.ps) * self.ps


class _AfterRelease(RadixCache):
    """Production's ``release_request``, then :meth:`after_release` on what it returned: the base of the two
    release-path canaries, whose planted bug is one step more after a correct release."""

    def release_request(
        self,
        token_ids: TokenIds,
        kv_indices: torch.Tensor,
        lock_node: TreeNode,
        cache_protected_len: int,
        *,
        cache: bool = True,
        prompt_len: int | None = None,
    ) -> RequestCacheResult:
        result = super().release_request(token_ids, kv_indices, lock_node, cache_protected_len, cache=cache, prompt_len=prompt_len)
        self.after_release(result, kv_indices, lock_node, cache=cache)
        return result

    def after_release(self, result: RequestCacheResult, kv_indices: torch.Tensor, lock_node: TreeNode, *, cache: bool) -> None:
        """The planted step; production takes none."""


class CachedPartFreeingCache(_AfterRelease):
    """A release path that also frees the part of the row it has just handed to the cache.

    After inserting a finished request, ``kv_indices[prefix_len:cache_protected_len]``
    belong to the tree; freeing them too (treating the whole row past the old
    prefix as the request's own) leaves pages both cached and free: the next
    allocation hands cached KV to another request.  The leak equation then counts
    them twice (``kv-accounting``).
    """

    def after_release(self, result: RequestCacheResult, kv_indices: torch.Tensor, lock_node: TreeNode, *, cache: bool) -> None:
        if result.cache_protected_len > result.prefix_len:
            self.allocator.free(kv_indices[result.prefix_len : result.cache_protected_len].to(torch.int64))


class LockKeepingCache(_AfterRelease):
    """A release without insertion (retract, abort) that forgets to drop the request's lock.

    The path stays protected after its holder left: never evictable, so the pool
    shrinks by the matched prefix for good.  The leak equation still balances (the
    pages are cached, counted as protected); ``protected_size()`` exceeds what live
    requests lock (``lock-balance``).
    """

    def after_release(self, result: RequestCacheResult, kv_indices: torch.Tensor, lock_node: TreeNode, *, cache: bool) -> None:
        if not cache and lock_node is not self.root:
            self.inc_lock_ref(lock_node)  # the lock super() dropped, taken back: net, it never moved


class WindowKeepingSWA(SWATokenToKVPoolAllocator):
    """Out-of-window tokens never give their SWA slots back: ``free_swa`` validates and releases nothing.

    To the scheduler's accounting this is a scheduler that never releases its
    window: the SWA pool fills with tokens no query reads until requests are
    refused with the full side half empty.  Caught by the SWA side's count
    equation (``scheduler-conservation``).
    """

    def free_swa(self, free_index: torch.Tensor) -> None:
        if free_index.numel():
            self._touched_slots(free_index)


def cached_part_freeing_pools(**config: Any) -> SchedulerPools:
    return build_scheduler_pools(**config, cache_type=CachedPartFreeingCache)


def lock_keeping_pools(**config: Any) -> SchedulerPools:
    return build_scheduler_pools(**config, cache_type=LockKeepingCache)


def window_keeping_pools(**config: Any) -> SchedulerPools:
    return build_scheduler_pools(**config, swa_type=WindowKeepingSWA)


_HERE = __name__  # the module the specs below name
CANARIES: dict[str, Canary] = {
    "retract-frees-from-ceil": Canary(
        "scheduler",
        "poolfuzz.harness.kits.scheduler.driver:build_scheduler_pools",
        "retract frees KV from ceil(keep/ps)*ps instead of the floor, leaking the partial page",
        "SGLang #4977",
        "scheduler-conservation",
        driver=f"{_HERE}:CeilRetractScheduler",
    ),
    "release-frees-cached-part": Canary(
        "scheduler",
        f"{_HERE}:cached_part_freeing_pools",
        "the prefix cache's release path frees the row's newly cached pages too: pages both cached and free",
        "SGLang 0.5.23 release_kv_cache contract; the leak its invariant_checker.py exists to catch",
        "kv-accounting",
    ),
    "retract-keeps-lock": Canary(
        "scheduler",
        f"{_HERE}:lock_keeping_pools",
        "a release without insertion (retract, abort) leaves the request's cache lock: protected forever",
        "SGLang 0.5.23 release_kv_cache(is_insert=False) must dec_lock_ref the request's last node",
        "lock-balance",
    ),
    "swa-window-never-released": Canary(
        "scheduler",
        f"{_HERE}:window_keeping_pools",
        "tokens that left the sliding window never give their SWA slots back: the SWA side leaks",
        "SGLang 0.5.23 free_swa_out_of_window_slots; the SWA leak check of invariant_checker.py",
        "scheduler-conservation",
    ),
}

"""The calls the legacy ``RadixCache``'s callers make in SGLang 0.5.23 (target ``poolfuzz.harness.upstream:RadixCache``).

0.5.23 builds the legacy tree as ``PureSWARadixCache`` and ``FlexKVRadixCache``
(``mem_cache/registry.py:98``, ``:130``) and as the scheduler's simulated waiting-queue tree
(``schedule_policy.py:211``); every other shape gets ``UnifiedRadixCache``.  The scheduler
reaches it through ``BasePrefixCache``: a request is matched with at most ``len - 1``
tokens (``match_kv_cache`` from ``Req.init_next_round_input``), waiting requests are matched
in full every round, its prefix indices are read off the path (``prefix_device_indices`` ->
``path_device_indices``), and its last node is locked at admission (``lock`` ->
``inc_lock_ref``) or for the length of an admission check (``_lock_node``).  Allocation
evicts first when the allocator is short (``evict_to_free_tokens`` -> ``evict_for_alloc`` ->
``evict``).  ``checkpoint_kv_cache`` and ``release_kv_cache`` call ``RadixCache.checkpoint``
(insert, free the duplicates, re-match, move the lock: unlock, lock), and the release then
frees the row from ``cache_protected_len`` on and unlocks.  ``reset`` comes only from
``flush_cache`` on a fully idle scheduler, or on the simulated tree, which holds no locks.
The driver's allocator calls (``alloc``/``free``/``clear``) go to the upstream allocator
behind the cache (its own contract), not to the tree; the audits read the three sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, NotCalled
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.judge.view import DriverView

if TYPE_CHECKING:
    from poolfuzz.harness.kits.prefix_cache.calls import Holder
from poolfuzz.harness.kits.prefix_cache.ops import PrefixCacheOps
from poolfuzz.harness.upstream import callers

# ------------------------------------------------------------------ match and lock
MATCH_CALL = Cite("srt/mem_cache/common.py", 233, "match_result = tree_cache.match_prefix(", note="match_kv_cache")
SIMULATED_MATCH = Cite(
    "srt/managers/schedule_policy.py", 366, "match_result = self.waiting_queue_radix_tree.match_prefix(", note="the simulated legacy tree"
)
PATH_INDICES = Cite(
    "srt/mem_cache/base_prefix_cache.py", 566, "path = self.path_device_indices(req.last_node)", note="prefix_device_indices"
)
LOCK = Cite("srt/mem_cache/base_prefix_cache.py", 552, "return TreeLock(node, self.inc_lock_ref(node).to_dec_params())")
UNLOCK = Cite("srt/mem_cache/base_prefix_cache.py", 556, "self.dec_lock_ref(lock.node, lock.receipt)")

# ------------------------------------------------------------------ eviction before allocation
EVICT_DEFAULT = Cite("srt/mem_cache/base_prefix_cache.py", 538, "return self.evict(params)", note="evict_for_alloc")
EVICT_AGAIN = Cite(
    "srt/mem_cache/common.py", 312, "EvictParams(num_tokens=max(shortfall, allocator.page_size))", note="_evict_until_allocatable"
)
EVICT_NEED = Cite(
    "srt/mem_cache/storage/flexkv/flexkv_radix_cache.py",
    334,
    "self.evict(EvictParams(num_tokens=uncached_len))",
    note="a legacy subclass evicts the whole need when short (uncached_len > 0, :329)",
)

# ------------------------------------------------------------------ checkpoint and release
CP_INSERT = Cite(
    "srt/mem_cache/radix_cache.py",
    476,
    "result = self.insert(",
    note="RadixCache._insert_cache from checkpoint; the duplicates [cache_protected_len, prefix_len) are freed",
)
CP_MATCH = Cite("srt/mem_cache/radix_cache.py", 524, "match_result = self.match_prefix(MatchPrefixParams(key=radix_key))")
CP_PATH = Cite("srt/mem_cache/radix_cache.py", 526, "new_indices = self.path_device_indices(new_last_node)")
CP_UNLOCK = Cite("srt/mem_cache/radix_cache.py", 541, "self.unlock(req.lock)")
CP_LOCK = Cite("srt/mem_cache/radix_cache.py", 542, "req.lock = self.lock(new_last_node)")
SIMULATED_INSERT = Cite(
    "srt/managers/schedule_policy.py",
    386,
    "self.waiting_queue_radix_tree.insert(",
    note="a whole key inserted outside any request, nothing locked",
)

# ------------------------------------------------------------------ reset
FLUSH_IDLE = replace(callers.FULLY_IDLE, note="flush_cache: no running, chunked or waiting request, so no request holds a lock or a row")
SIMULATED_RESET = Cite(
    "srt/managers/schedule_policy.py", 350, "self.waiting_queue_radix_tree.reset()", note="the simulated tree, which no one locks"
)

CHECKPOINT_CALLS = ("insert", "match_prefix", "path_device_indices", "inc_lock_ref", "dec_lock_ref")


class TreeContractView(DriverView):
    """The prefix-cache driver as its contract's predicates see it: the requests and locks it holds."""

    __slots__ = ()

    @property
    def holders(self) -> Mapping[int, Holder]:
        return self._driver.holders


def nothing_held(view: TreeContractView, args: Args) -> bool:
    """``flush_cache`` resets only a fully idle scheduler (scheduler.py:5520), and the legacy tree has no
    streaming sessions that keep a lock across turns: no request or lock is live then."""
    return not any(held.live for held in view.holders.values())


CONTRACT = Contract(
    ops=PrefixCacheOps,
    view=TreeContractView,
    target="poolfuzz.harness.upstream:RadixCache",
    release="sglang==0.5.23",
    rules=(
        CallRule(
            PrefixCacheOps.request,
            ("match_prefix", "path_device_indices", "inc_lock_ref", "evict", "dec_lock_ref"),
            "match_prefix(prompt[:len-1]) and its path's indices, inc_lock_ref(last node), evict(n >= 1) when "
            "the allocator is short of the tail; a refused allocation releases the lock (dec_lock_ref)",
            (
                callers.ADMISSION_MATCH,
                MATCH_CALL,
                callers.PREFIX_INDICES,
                PATH_INDICES,
                callers.ADMISSION_LOCK,
                LOCK,
                callers.EVICT_FOR_ALLOC,
                EVICT_DEFAULT,
                callers.CHECK_LOCK,
                callers.CHECK_UNLOCK,
                UNLOCK,
            ),
        ),
        CallRule(
            PrefixCacheOps.extend,
            ("evict",),
            "evict(n >= 1) when the allocator is short of a request's new pages",
            (callers.DECODE_ALLOC, callers.EXTEND_ALLOC, callers.EVICT_FOR_ALLOC, EVICT_DEFAULT),
        ),
        CallRule(
            PrefixCacheOps.checkpoint,
            CHECKPOINT_CALLS,
            "RadixCache.checkpoint's calls: insert(the request's page-aligned tokens, its row), free the duplicates, "
            "match_prefix(the same key) and its path, the lock moved to the new last node (the driver takes the "
            "new lock before releasing the old: the same counts as two holders of nested paths)",
            (callers.CHECKPOINT_KV, CP_INSERT, CP_MATCH, CP_PATH, CP_UNLOCK, CP_LOCK),
        ),
        CallRule(
            PrefixCacheOps.settle,
            ("checkpoint", "dec_lock_ref"),
            "upstream RadixCache.checkpoint(req, up_to=len(tokens)) itself on a stand-in request; with release, "
            "release_kv_cache's frees and dec_lock_ref(new last node); an abort (cache=False) skips the checkpoint",
            (callers.CHECKPOINT_KV, callers.RELEASE_CHECKPOINT, callers.RELEASE_UNLOCK, UNLOCK),
        ),
        CallRule(
            PrefixCacheOps.finish,
            CHECKPOINT_CALLS,
            "release_kv_cache: checkpoint's calls (not for an abort), the row freed from cache_protected_len on, dec_lock_ref(last node)",
            (callers.RELEASE_CHECKPOINT, CP_INSERT, CP_MATCH, CP_PATH, CP_UNLOCK, CP_LOCK, callers.RELEASE_UNLOCK, UNLOCK),
        ),
        CallRule(
            PrefixCacheOps.lock,
            ("match_prefix", "path_device_indices", "inc_lock_ref"),
            "match_prefix(a whole prompt, maybe empty: the root) and inc_lock_ref(its last node)",
            (callers.WAITING_MATCH, MATCH_CALL, PATH_INDICES, callers.CHECK_LOCK, callers.ADMISSION_LOCK, LOCK),
        ),
        CallRule(
            PrefixCacheOps.unlock,
            ("dec_lock_ref",),
            "dec_lock_ref(a node a live lock holds), once",
            (callers.CHECK_UNLOCK, callers.RELEASE_UNLOCK, UNLOCK),
        ),
        CallRule(
            PrefixCacheOps.insert,
            ("evict", "insert"),
            "insert(a whole page-aligned key, fresh KV) outside any request, as the simulated tree does and as a "
            "checkpoint with cache_protected_len 0 does; evict(n >= 1) first when the allocator is short",
            (SIMULATED_INSERT, CP_INSERT, callers.EVICT_FOR_ALLOC, EVICT_DEFAULT),
        ),
        CallRule(
            PrefixCacheOps.match,
            ("match_prefix", "path_device_indices"),
            "match_prefix(a whole prompt, maybe empty)",
            (callers.WAITING_MATCH, SIMULATED_MATCH, MATCH_CALL, PATH_INDICES),
        ),
        CallRule(
            PrefixCacheOps.rematch,
            ("match_prefix", "path_device_indices"),
            "match_prefix(one cached prompt) many times: a waiting request is matched again every round",
            (callers.WAITING_MATCH, MATCH_CALL, PATH_INDICES),
        ),
        CallRule(
            PrefixCacheOps.evict,
            ("evict",),
            "evict(n), n >= 1",
            (callers.EVICT_FOR_ALLOC, EVICT_DEFAULT, EVICT_AGAIN, EVICT_NEED),
            today=callers.evicts_something,
            instead="callers evict only a positive shortfall (allocator/base.py:167)",
        ),
        CallRule(
            PrefixCacheOps.reset,
            ("reset",),
            "reset() with nothing locked or live; the allocator is cleared with it",
            (FLUSH_IDLE, callers.FLUSH_RESET, SIMULATED_RESET),
            allows=nothing_held,
        ),
    ),
    reads=("evictable_size", "protected_size", "total_size"),
    not_called=(
        NotCalled(
            PrefixCacheOps.node_lookup,
            "0.5.23's RadixCache has no lookup by id: callers keep the TreeNode a match returned "
            "(req.last_node, radix_cache.py:543); the wrapper's node() only walks children",
        ),
        *callers.TREE_MISUSE,
    ),
)

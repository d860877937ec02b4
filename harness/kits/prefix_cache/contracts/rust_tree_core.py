"""The calls the Rust TreeCore's callers make in SGLang 0.5.23 (target ``poolfuzz.harness.upstream:RustTreeCore``).

``RustUnifiedTreeCoreBinding`` is the core of 0.5.23's default cache, ``UnifiedRadixCache``
(``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND="rust"``), reached only through upstream's
``RustTreeCore`` adapter (``mem_cache/rust_tree_core/adapter.py``, ``self._binding``).  The
scheduler's calls are those of the legacy tree (``match_kv_cache``, ``lock``/``unlock``,
``evict_to_free_tokens``, ``checkpoint_kv_cache``/``release_kv_cache``, ``flush_cache``), and
``UnifiedRadixCache`` turns them into core calls: ``match_prefix`` and, for the indices,
``collect_full_device_indices(node, root_node_handle())``; ``inc_lock_ref(node, [])`` and
``dec_lock_ref(node, receipt, skip_swa)``; the step-wise eviction ``evict_device_start`` ->
(``evict_device_next_node`` -> ``evict_device_leaf``)* -> ``evict_device_end``, run only for a
positive request; the insert pumped as ``begin_insert`` -> ``resume_insert``* -> ``end_insert``
(``prev_prefix_len = cache_protected_len``, the duplicates freed from its ``free_device_kv``
actions); ``checkpoint_into_tree`` takes the path from the insert's last node, then unlocks the
old node and locks the new one; ``reset`` from ``flush_cache``, which also drops the streaming
sessions' locks and rows.  The wrapper pumps the insert the same way.  The driver's own ``insert`` passes ``prev_prefix_len = 0`` where
a checkpoint would pass ``cache_protected_len``: that changes only which indices the core's
actions name (the wrapper leaves those to the driver, which frees ``[cpl, prefix_len)``), not
the tree.
"""

from __future__ import annotations

from dataclasses import replace

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract
from poolfuzz.harness.kits.prefix_cache.ops import PrefixCacheOps
from poolfuzz.harness.upstream import callers

URC = "srt/mem_cache/unified_radix_cache.py"
ADAPTER = "srt/mem_cache/rust_tree_core/adapter.py"

# ------------------------------------------------------------------ the scheduler's calls (as for the legacy tree)
IDLE_FLUSH_RESET = replace(callers.FLUSH_RESET, note="flush_cache on an idle scheduler")

# ------------------------------------------------------------------ UnifiedRadixCache -> the core
MATCH = Cite(URC, 622, "result = self.tree_core.match_prefix(params)", note="_match_tree")
MATCH_BINDING = Cite(ADAPTER, 765, "result = self._binding.match_prefix(")
PATH_ROOT = Cite(URC, 3956, "root = self.root_node_handle(req.extra_key)", note="prefix_device_indices")
PATH = Cite(URC, 3957, "path = self.tree_core.collect_full_device_indices(req.last_node, root)")
NODE_PATH = Cite(URC, 3966, "return self.tree_core.collect_full_device_indices(node, self.root_node_handle())",
                 note="path_device_indices")
ROOT = Cite(ADAPTER, 1109, "return self._binding.root_node_handle(extra_key)")
INC = Cite(URC, 1082, "return self.tree_core.inc_lock_ref(node_id, skip_lock_components)")
INC_BINDING = Cite(ADAPTER, 580, "result = self._binding.inc_lock_ref(")
LOCK = Cite(URC, 1100, "result = self.inc_lock_ref(node_id, skip_lock_components)", note="lock")
DEC = Cite(URC, 1092, "return self.tree_core.dec_lock_ref(node_id, params, skip_swa)")
DEC_BINDING = Cite(ADAPTER, 591, "self._binding.dec_lock_ref(")
UNLOCK = Cite(URC, 1106, "self.dec_lock_ref(lock.node, lock.receipt, skip_swa=lock.swa_released)", note="unlock")
BEGIN_INSERT = Cite(URC, 672, "step = self.tree_core.begin_insert(params)",
                    note="UnifiedRadixCache.insert, pumped the same way by the wrapper")
RESUME_INSERT = Cite(URC, 679, "step = self.tree_core.resume_insert()")
END_INSERT = Cite(URC, 683, "self._apply_cache_actions(self.tree_core.end_insert())")
CP_INSERT = Cite(URC, 1238, "result = self.insert(insert_params)",
                 note="checkpoint_into_tree, prev_prefix_len = cache_protected_len")
CP_PROMPT_INSERT = Cite(URC, 1271, "self.insert(", note="the prompt-boundary insert, prev_prefix_len = len(prompt_key)")
CP_PATH = Cite(URC, 1287, "new_indices = self.path_device_indices(new_last_node)")
CP_UNLOCK = Cite(URC, 1300, "self.unlock(req.lock)")
CP_LOCK = Cite(URC, 1307, "req.lock = self.lock(")
FREE_ACTION = replace(callers.ACTION_SEGMENT, note="a FreeDeviceKV action: the insert's duplicates, an evicted leaf")
EVICT_GUARD = Cite(URC, 1017, "if target_reached(ct) or (not to_target and tracker[ct] >= request_cnt):",
                   note="_evict_components: a request of 0 tokens starts no FULL walk")
EVICT_START = Cite(URC, 1024, "self.tree_core.evict_device_start(ct, walk_quota)")
EVICT_NEXT = Cite(URC, 873, "result = self.tree_core.evict_device_next_node(component_type, tracker)")
EVICT_LEAF = Cite(URC, 923, "result = self.tree_core.evict_device_leaf(node_id, self.is_write_back)")
EVICT_END = Cite(URC, 1058, "self.tree_core.evict_device_end(ct)")
RESET = Cite(URC, 423, "self.tree_core.reset()", note="_reset_full")
RESET_BINDING = Cite(ADAPTER, 518, "self._binding.reset()")
SESSIONS_DROPPED = Cite(URC, 427, "self.session.slots.clear()",
                        note="a streaming session keeps its lock and row across idle turns (streaming_session.py:41): "
                             "an idle flush resets the tree under live locks")
IS_EVICTED = Cite(URC, 3603, "self.tree_core.is_full_device_evicted(best_match_node_id)",
                  note="init_load_back asks it of a node id it holds")

MATCH_CALLS = ("match_prefix", "root_node_handle", "collect_full_device_indices")
EVICT_CALLS = ("evict_device_start", "evict_device_next_node", "evict_device_leaf", "evict_device_end")
INSERT_CALLS = ("begin_insert", "resume_insert", "end_insert")
CHECKPOINT_CALLS = (*INSERT_CALLS, *MATCH_CALLS, "inc_lock_ref", "dec_lock_ref")
MATCH_CITES = (MATCH, MATCH_BINDING, PATH_ROOT, PATH, ROOT)
EVICT_CITES = (callers.EVICT_FOR_ALLOC, EVICT_START, EVICT_NEXT, EVICT_LEAF, EVICT_END, FREE_ACTION)
INSERT_CITES = (BEGIN_INSERT, RESUME_INSERT, END_INSERT)


CONTRACT = Contract(
    ops=PrefixCacheOps,
    target="poolfuzz.harness.upstream:RustTreeCore",
    release="sglang==0.5.23",
    upstream_attr="core",
    rules=(
        CallRule(PrefixCacheOps.request, (*MATCH_CALLS, "inc_lock_ref", *EVICT_CALLS, "dec_lock_ref"),
                 "match_prefix(prompt[:len-1]) and its path's indices, inc_lock_ref(last node, []), the FULL eviction "
                 "walk for n >= 1 when the allocator is short of the tail; a refused allocation releases the lock",
                 (callers.ADMISSION_MATCH, *MATCH_CITES, callers.PREFIX_INDICES, callers.ADMISSION_LOCK, LOCK, INC, INC_BINDING, *EVICT_CITES,
                  callers.CHECK_LOCK, callers.CHECK_UNLOCK, UNLOCK, DEC, DEC_BINDING)),
        CallRule(PrefixCacheOps.extend, EVICT_CALLS, "the FULL eviction walk for n >= 1 when the allocator is short of new pages",
                 (callers.DECODE_ALLOC, callers.EXTEND_ALLOC, *EVICT_CITES)),
        CallRule(PrefixCacheOps.checkpoint, CHECKPOINT_CALLS,
                 "checkpoint_into_tree: insert(page-aligned tokens, row), the duplicates freed, the path's indices, the "
                 "lock moved to the insert's last node; the driver finds that node with match_prefix(the same key), "
                 "which touches the path the insert just touched, and takes the new lock before releasing the old "
                 "(the same counts as two holders of nested paths)",
                 (callers.CHECKPOINT_KV, CP_INSERT, *INSERT_CITES, CP_PATH, NODE_PATH, *MATCH_CITES, CP_UNLOCK, UNLOCK, DEC,
                  CP_LOCK, LOCK, INC)),
        CallRule(PrefixCacheOps.settle, (*INSERT_CALLS, "root_node_handle", "collect_full_device_indices", "dec_lock_ref", "inc_lock_ref"),
                 "checkpoint_into_tree's FULL-only sequence: insert(prev_prefix_len = cache_protected_len), the "
                 "prompt-boundary insert, the path, unlock the old node, lock the new one; with release, "
                 "release_kv_cache's frees and dec_lock_ref(new last node); an abort (cache=False) skips the checkpoint",
                 (callers.CHECKPOINT_KV, callers.RELEASE_CHECKPOINT, CP_INSERT, CP_PROMPT_INSERT, *INSERT_CITES, CP_PATH, NODE_PATH, ROOT,
                  CP_UNLOCK, UNLOCK, DEC, CP_LOCK, LOCK, INC, callers.RELEASE_UNLOCK)),
        CallRule(PrefixCacheOps.finish, CHECKPOINT_CALLS,
                 "release_kv_cache: checkpoint's calls (not for an abort), the row freed from cache_protected_len on, "
                 "dec_lock_ref(last node, receipt)",
                 (callers.RELEASE_CHECKPOINT, CP_INSERT, *INSERT_CITES, CP_PATH, *MATCH_CITES, CP_UNLOCK, CP_LOCK, LOCK, INC,
                  callers.RELEASE_UNLOCK, UNLOCK, DEC, DEC_BINDING)),
        CallRule(PrefixCacheOps.lock, (*MATCH_CALLS, "inc_lock_ref"),
                 "match_prefix(a whole prompt, maybe empty: the root) and inc_lock_ref(its last node, [])",
                 (callers.WAITING_MATCH, *MATCH_CITES, callers.CHECK_LOCK, callers.ADMISSION_LOCK, LOCK, INC, INC_BINDING)),
        CallRule(PrefixCacheOps.unlock, ("dec_lock_ref",), "dec_lock_ref(a node a live lock holds, that lock's receipt, False), once",
                 (callers.CHECK_UNLOCK, callers.RELEASE_UNLOCK, UNLOCK, DEC, DEC_BINDING)),
        CallRule(PrefixCacheOps.insert, (*EVICT_CALLS, *INSERT_CALLS),
                 "insert(a whole page-aligned key, fresh KV, prev_prefix_len 0) outside any request, as a checkpoint "
                 "of a request that matched nothing does; the eviction walk for n >= 1 first when the allocator is short",
                 (CP_INSERT, *INSERT_CITES, *EVICT_CITES)),
        CallRule(PrefixCacheOps.match, MATCH_CALLS, "match_prefix(a whole prompt, maybe empty) and its path's indices",
                 (callers.WAITING_MATCH, *MATCH_CITES, callers.PREFIX_INDICES)),
        CallRule(PrefixCacheOps.rematch, MATCH_CALLS,
                 "match_prefix(one cached prompt) many times: a waiting request is matched again every round",
                 (callers.WAITING_MATCH, *MATCH_CITES)),
        CallRule(PrefixCacheOps.evict, EVICT_CALLS, "the FULL eviction walk for n tokens, n >= 1", (EVICT_GUARD, *EVICT_CITES),
                 today=callers.evicts_something, instead="a FULL walk starts only for a positive request (unified_radix_cache.py:1017)"),
        CallRule(PrefixCacheOps.reset, ("reset",),
                 "reset(), live holders or not (a flush drops the streaming sessions' locks and rows with the tree); "
                 "the allocator is cleared with it",
                 (IDLE_FLUSH_RESET, RESET, RESET_BINDING, SESSIONS_DROPPED)),
        CallRule(PrefixCacheOps.node_lookup, ("is_full_device_evicted", "root_node_handle"),
                 "is_full_device_evicted(the node id a live holder locked), a query on a node id the caller holds",
                 (IS_EVICTED, Cite(ADAPTER, 794, "return self._binding.is_full_device_evicted(node_id)"), ROOT)),
    ),
    reads=("evictable_size", "protected_size", "total_size", "sanity_check"),
    not_called=callers.TREE_MISUSE,
)

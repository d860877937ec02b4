"""The engine family's oracles: upstream's own runtime checker, and ours over the same state.

Two independent judges look at the loop after every iteration:

* **upstream's** ``SchedulerInvariantChecker`` (``managers/scheduler_components/invariant_checker.py``),
  called directly as the scheduler would with ``SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY`` and
  ``SGLANG_CHECK_KV_PAGE_INVARIANTS`` set: the full-pool leak equation with the owners' uncached
  tokens (``self_check_during_busy``, :313-345), the KV page owner check (:350-426), and at idle the
  request-pool check (:428-450);
* **ours**, which reads raw state only (the allocator's free pages, the tree's values, each owner's
  ``req_to_token`` row) and never upstream's size methods: every KV page is free, held by the tree,
  or private to exactly one owner, once (``scheduler-conservation``); each owner's row holds only
  pages of the tree or its own (``scheduler-conservation``); nothing is locked at idle
  (``lock-balance``); the free list repeats nothing (``no-double-allocation``).

When both see a leak it is reported under ``kv-accounting`` with both accounts.  When exactly one
does, that disagreement is itself the finding (``checker-agreement``): the message says which
judge saw what, and the raw partition decides which one is wrong.

A hybrid Mamba shape adds a second pool, judged the same way: upstream's ``_check_mamba_pool``
(invariant_checker.py:196-241; it runs only at idle, :477, never while busy) against our raw Mamba
partition (:func:`mamba_verdict`): every slot of ``mamba_allocator`` is free, held by exactly one live
request (``req.kv.mamba_pool_idx`` and its ping-pong entries) or by the tree (the MAMBA component's node
values), once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from harness.judge.invariants import InvariantViolation, check


def _pages(indices: Any, page_size: int) -> list[int]:
    values = [int(v) for v in indices]
    if page_size == 1:
        return values
    return sorted({v // page_size for v in values})


def _tree_values(tree_cache: Any) -> list[int]:
    """Every KV index the tree holds.  The legacy ``RadixCache.all_values_flatten`` concatenates node
    values and raises on a tree that holds none, so an empty tree is read as empty first."""
    if int(tree_cache.evictable_size()) + int(tree_cache.protected_size()) == 0:
        return []
    return [int(v) for v in tree_cache.all_values_flatten().tolist()]


def raw_partition(loop: Any) -> dict[str, Any]:
    """Every page of the pool by who holds it, read from raw state (see the module docstring)."""
    ps = loop.config.page_size
    allocator = loop.allocator
    if loop.config.hybrid_swa:
        allocator = allocator.full_attn_allocator  # the full side; swa_partition reads the SWA side
    # Both allocators keep free *page* ids (slot ids at page 1); release_pages is None on the paged one.
    free_pages = [int(v) for v in allocator.free_pages.tolist()]
    if allocator.release_pages is not None:
        free_pages += [int(v) for v in allocator.release_pages.tolist()]
    tree = _pages(_tree_values(loop.tree_cache), ps)
    rows = loop.req_to_token_pool.req_to_token
    private: dict[str, list[int]] = {}
    row_pages: dict[str, list[int]] = {}
    for req in loop.owners():
        kv = req.kv
        row = rows[kv.req_pool_idx]
        start = kv.cache_protected_len
        private[req.rid] = _pages(row[start:kv.kv_allocated_len].tolist(), ps)
        row_pages[req.rid] = _pages(row[:kv.kv_allocated_len].tolist(), ps)
    total = loop.config.tokens // ps
    return {"free": free_pages, "tree": tree, "private": private, "rows": row_pages, "total": total}


def _holders(tree: list[int], requests: dict[str, list[int]], free: list[int]) -> dict[int, list[str]]:
    """Who holds each page or slot id: ``"tree"``, a request id, ``"free"``; an id held twice lists every holder."""
    holders: dict[int, list[str]] = {}
    for item in tree:
        holders.setdefault(item, []).append("tree")
    for rid, items in requests.items():
        for item in items:
            holders.setdefault(item, []).append(rid)
    for item in free:
        holders.setdefault(item, []).append("free")
    return holders


def our_verdict(loop: Any) -> tuple[bool, str]:
    """(leak, message) of our page partition; structural breaches raise at once."""
    part = raw_partition(loop)
    counts: Counter[int] = Counter(part["free"])
    dup_free = sorted(p for p, n in counts.items() if n > 1)
    check(not dup_free, "no-double-allocation", "the allocator's free list holds a page twice", pages=dup_free)
    holders = _holders(part["tree"], part["private"], part["free"])
    twice = {p: who for p, who in holders.items() if len(who) > 1}
    check(not twice, "scheduler-conservation", "a KV page is held twice (free, tree or a request's own part)",
          pages=dict(sorted(twice.items())[:8]))
    tree = set(part["tree"])
    for rid, pages in part["rows"].items():
        foreign = sorted(set(pages) - tree - set(part["private"][rid]))
        check(not foreign, "scheduler-conservation", f"request {rid}'s req_to_token row maps pages neither the tree "
              "nor the request holds", request=rid, pages=foreign[:8])
        check(0 not in pages, "reserved-never-handed-out", f"request {rid}'s row maps the reserved slot 0", request=rid)
    held = len(holders)
    first = 1
    missing = sorted(set(range(first, part["total"] + first)) - set(holders))
    leak = bool(missing) or held != part["total"]
    message = (f"pages={part['total']} free={len(part['free'])} tree={len(part['tree'])} "
               f"private={sum(len(p) for p in part['private'].values())} unaccounted={missing[:8]}")
    return leak, message


def swa_verdict(loop: Any) -> tuple[bool, str]:
    """The SWA side of a hybrid loop, from raw state: ``full_to_swa_index_mapping`` against the SWA free list.

    Every SWA page is free or mapped into by a full slot, and no SWA slot is mapped twice; no free SWA
    page is mapped; a live request's last ``sliding_window`` positions (the window its next token reads)
    map to SWA slots (``swa-mapping``).  The out-of-window free of a live token's page (``free_swa_out_of_window_slots``
    past the cursor) and a double SWA free (SGLang PR #27586) both break it.
    """
    allocator = loop.allocator
    ps = loop.config.page_size
    swa = allocator.swa_attn_allocator
    free = [int(v) for v in swa.free_pages.tolist()]  # SWA page ids (slot ids at page size 1)
    if swa.release_pages is not None:
        free += [int(v) for v in swa.release_pages.tolist()]
    mapping = allocator.full_to_swa_index_mapping[:-1]
    mapped_slots = [int(v) for v in mapping[mapping > 0].tolist()]
    counts = Counter(mapped_slots)
    twice = sorted(v for v, n in counts.items() if n > 1)
    check(not twice, "swa-mapping", "two full slots map to one SWA slot", swa_slots=twice[:8])
    mapped = {v // ps for v in mapped_slots}  # the SWA pages some full slot maps into
    live_and_free = sorted(mapped & set(free))
    check(not live_and_free, "swa-mapping", "a mapped SWA page is on the SWA free list", swa_pages=live_and_free[:8])
    swa_kind = loop.m.component_type.ComponentType.SWA
    window = int(loop.config.sliding_window or 0)
    rows = loop.req_to_token_pool.req_to_token
    for req in loop.owners():
        kv = req.kv
        start = max(int(kv.get_evicted_seqlen(swa_kind)), kv.kv_allocated_len - window)
        slots = rows[kv.req_pool_idx, start:kv.kv_allocated_len].long()
        unmapped = [pos + start for pos, v in enumerate(mapping[slots].tolist()) if v <= 0]
        check(not unmapped, "swa-mapping", f"request {req.rid}'s last {window} positions (its window) map to no SWA slot",
              request=req.rid, positions=unmapped[:8], allocated=kv.kv_allocated_len)
    total = loop.config.swa_tokens // ps
    missing = sorted(set(range(1, total + 1)) - set(free) - mapped)
    leak = bool(missing) or len(free) + len(mapped) != total
    return leak, f"swa pages={total} free={len(free)} mapped={len(mapped)} unaccounted={missing[:8]}"


def _slots(value: Any) -> list[int]:
    """The Mamba slot ids in one value (a request's ``mamba_pool_idx`` is a 0-d or (1,) tensor, a node's (1,))."""
    if value is None:
        return []
    if hasattr(value, "reshape"):
        return [int(v) for v in value.reshape(-1).tolist()]
    return [int(value)]


def live_requests(loop: Any) -> list[Any]:
    """Every request the scheduler still serves: the row owners, plus the queued ones (a queued request holds
    no row, but may hold a Mamba slot: a retracted request is reset, a match's copy is freed on rejection)."""
    seen = {id(req) for req in loop.owners()}
    reqs = list(loop.owners())
    for req in loop.waiting_queue:
        if id(req) not in seen:
            seen.add(id(req))
            reqs.append(req)
    return reqs


def mamba_partition(loop: Any) -> dict[str, Any]:
    """Every Mamba slot by who holds it, from raw state: the allocator's free slots, the tree's MAMBA node
    values (``all_mamba_values_flatten``, the node walk, unified_tree_core.py:3448-3469), and each live
    request's ``mamba_pool_idx`` plus its non-empty ping-pong entries (``kv_mamba_slots``, pool_stats_observer.py:45-49)."""
    pool = loop.req_to_token_pool
    free = [int(v) for v in pool.mamba_allocator.free_slots.tolist()]
    tree = [int(v) for v in loop.tree_cache.all_mamba_values_flatten().reshape(-1).tolist()]
    held: dict[str, list[int]] = {}
    rowless: list[str] = []
    for req in live_requests(loop):
        kv = req.kv
        slots = _slots(kv.mamba_pool_idx) if kv.holds_mamba else []
        if kv.mamba_ping_pong_track_buffer is not None:
            entries = [int(v) for v in kv.mamba_ping_pong_track_buffer.reshape(-1).tolist()]
            slots += [v for v, empty in zip(entries, kv.mamba_ping_pong_empty) if not empty]
        if slots:
            held[req.rid] = slots
        if kv.holds_kv and not kv.holds_mamba:
            rowless.append(req.rid)
    return {"free": free, "tree": tree, "held": held, "rowless": rowless, "total": int(pool.mamba_pool.size)}


def mamba_verdict(loop: Any) -> tuple[bool, str]:
    """(leak, message) of the Mamba slot partition; a slot held twice or a repeated free slot raises at once."""
    part = mamba_partition(loop)
    counts: Counter[int] = Counter(part["free"])
    dup_free = sorted(v for v, n in counts.items() if n > 1)
    check(not dup_free, "no-double-allocation", "mamba_allocator's free list holds a Mamba slot twice", slots=dup_free[:8])
    holders = _holders(part["tree"], part["held"], part["free"])
    twice = {v: who for v, who in holders.items() if len(who) > 1}
    check(not twice, "scheduler-conservation", "a Mamba slot is held twice (free, tree or a live request)",
          slots=dict(sorted(twice.items())[:8]))
    check(0 not in holders, "reserved-never-handed-out", "the reserved Mamba slot 0 is in use", holders=holders.get(0))
    outside = sorted(v for v in holders if not 0 <= v <= part["total"])
    check(not outside, "scheduler-conservation", "a Mamba slot outside the pool is in use", slots=outside[:8],
          size=part["total"])
    check(not part["rowless"], "scheduler-conservation", "a request holds a request row but no Mamba slot "
          "(HybridReqToTokenPool.alloc gives every row one)", requests=part["rowless"][:8])
    missing = sorted(set(range(1, part["total"] + 1)) - set(holders))
    held = sum(len(v) for v in part["held"].values())
    message = (f"mamba slots={part['total']} free={len(part['free'])} tree={len(part['tree'])} requests={held} "
               f"unaccounted={missing[:8]}")
    return bool(missing), message


class UpstreamChecker:
    """Upstream's ``SchedulerInvariantChecker`` over the loop's pools, built as scheduler.py:2523 builds it."""

    def __init__(self, loop: Any) -> None:
        from harness.upstream.engine_loader import active

        with active(loop.m):
            self._build(loop)

    def _build(self, loop: Any) -> None:
        m = loop.m
        ic, obs = m.invariant_checker, m.pool_stats_observer
        self.loop = loop
        swa = loop.config.hybrid_swa
        ssm = loop.config.hybrid_ssm
        full_tokens = loop.config.tokens if swa else None
        swa_tokens = loop.config.swa_tokens if swa else None
        self.observer = obs.SchedulerPoolStatsObserver(
            tree_cache=loop.tree_cache, token_to_kv_pool_allocator=loop.allocator,
            req_to_token_pool=loop.req_to_token_pool, session_controller=None, hisparse_coordinator=None,
            is_hybrid_swa=swa, is_hybrid_ssm=ssm, enable_hisparse=False, full_tokens_per_layer=full_tokens,
            swa_tokens_per_layer=swa_tokens, max_total_num_tokens=loop.config.tokens,
        )
        self.checker = ic.SchedulerInvariantChecker(
            is_hybrid_swa=swa, is_hybrid_ssm=ssm, disaggregation_mode="null", page_size=loop.config.page_size,
            full_tokens_per_layer=full_tokens, swa_tokens_per_layer=swa_tokens, max_total_num_tokens=loop.config.tokens,
            tree_cache=loop.tree_cache, token_to_kv_pool_allocator=loop.allocator,
            req_to_token_pool=loop.req_to_token_pool, pool_stats_observer=self.observer,
            get_last_batch=lambda: loop.last_batch, get_running_batch=lambda: loop.running_batch,
            scheduler_stage_metrics=None, get_chunked_req=lambda: loop.chunked_req,
        )

    def verdict(self) -> tuple[bool, str] | None:
        """(leak, message) as upstream checks at this point of the loop, or ``None`` where it does not check.

        Fully idle: ``on_idle`` (scheduler.py:5292-5297) runs the pool check without uncached tokens
        and the request-pool check.  After a batch: ``self_check_during_busy`` (invariant_checker.py:313)
        with the owners' uncached tokens, then the page owner check (``_check_kv_page_invariants``,
        which asserts).  Between them (no batch formed, requests still queued) upstream checks nothing.
        """
        ps = self.observer.get_pool_stats()
        swa = self.loop.config.hybrid_swa
        if self.loop.fully_idle:
            leak, message = self.checker._check_full_pool(ps, uncached=0)
            if swa:
                swa_leak, swa_message = self.checker._check_swa_pool(ps)
                leak, message = leak or swa_leak, f"{message}; {swa_message}"
            self.checker._check_req_pool()
            return bool(leak), str(message)
        if self.loop.last_batch is None:
            return None
        full_uncached, swa_uncached = self.checker._get_total_uncached_sizes()
        leak, message = self.checker._check_full_pool(ps, uncached=full_uncached)
        if swa:
            swa_leak, swa_message = self.checker._check_swa_pool(ps, uncached=swa_uncached)
            leak, message = leak or swa_leak, f"{message}; {swa_message}"
        self.checker._check_kv_page_invariants()
        return bool(leak), str(message)

    def mamba_verdict(self) -> tuple[bool, str] | None:
        """Upstream's Mamba pool check where it runs: fully idle only (``_check_all_pools``, invariant_checker.py:477,
        under ``is_hybrid_ssm and supports_mamba()``: available + evictable + protected + session-held == size,
        :196-241).  ``self_check_during_busy`` never checks the Mamba pool, so busy is ``None``."""
        loop = self.loop
        if not (loop.config.hybrid_ssm and loop.tree_cache.supports_mamba()) or not loop.fully_idle:
            return None
        leak, message = self.checker._check_mamba_pool(self.observer.get_pool_stats())
        return bool(leak), str(message)


def judge(loop: Any, upstream: UpstreamChecker) -> None:
    """Both judges over the loop's state; see the module docstring."""
    from harness.upstream.engine_loader import active

    with active(loop.m):
        _judge(loop, upstream)


def row_verdict(loop: Any) -> None:
    """Every ``req_to_token`` row (1..rows) is free or held by exactly one live request, once (raw state).

    The free list repeats nothing (``no-double-allocation``); no live request's row is free, no two
    share one, and none is neither (``scheduler-conservation``).  A row a retraction or an abort
    fails to return, or returns twice, shows at the step it happens, not only at idle.
    """
    pool = loop.req_to_token_pool
    free = [int(row) for row in pool.free_slots]
    counts = Counter(free)
    twice = sorted(row for row, n in counts.items() if n > 1)
    check(not twice, "no-double-allocation", "the request-row free list holds a row twice", rows=twice)
    held: dict[int, str] = {}
    for req in live_requests(loop):
        row = req.kv.req_pool_idx
        if row is None:
            continue
        check(int(row) not in held, "scheduler-conservation", f"requests {held.get(int(row))} and {req.rid} hold one row",
              row=int(row))
        held[int(row)] = req.rid
    both = sorted(set(held) & set(free))
    check(not both, "scheduler-conservation", "a live request's row is on the free list", rows=both)
    lost = sorted(set(range(1, loop.config.rows + 1)) - set(held) - set(free))
    check(not lost, "scheduler-conservation", "a request row is neither free nor held by a live request (leaked)",
          rows=lost, free=len(free), held=len(held))


def _compare(what: str, ours: bool, our_message: str, verdict_of: Callable[[], tuple[bool, str] | None],
             unchecked: str) -> None:
    """Our leak verdict on one pool against upstream's: ``kv-accounting`` when both (or only ours, where
    upstream does not check) see a leak, ``checker-agreement`` when exactly one of two checks does."""
    try:
        verdict = verdict_of()
    except (AssertionError, ValueError) as exc:
        raise InvariantViolation("kv-accounting", f"upstream's invariant checker failed: {exc}", ours=our_message) from exc
    if verdict is None:
        check(not ours, "kv-accounting", f"a {what} is unaccounted for ({unchecked})", ours=our_message)
        return
    theirs, their_message = verdict
    if ours and theirs:
        raise InvariantViolation("kv-accounting", f"both judges see a {what} leak", ours=our_message, upstream=their_message)
    if ours != theirs:
        who = "ours" if ours else "upstream's invariant checker"
        raise InvariantViolation("checker-agreement", f"only {who} sees a {what} leak", ours=our_message,
                                 upstream=their_message)


def progress_verdict(loop: Any) -> None:
    """``scheduler-progress``: an idle iteration that left requests waiting with nothing running is a hang.

    A lock is taken at admission and dropped at release, so with nothing running no request holds one:
    a stalled loop whose tree still protects tokens has leaked a lock (``lock-balance``, checked first,
    since the leaked lock is then the cause of the hang).
    """
    if not loop.stalled:
        return
    protected = int(loop.tree_cache.protected_size())
    check(protected == 0, "lock-balance", "nothing runs, yet the tree holds locked tokens (and the queue is stuck)",
          protected=protected)
    a, tree = loop.allocator, loop.tree_cache
    head = loop.waiting_queue[0]
    sizes: dict[str, Any] = {"waiting": len(loop.waiting_queue), "head_prompt": len(head.origin_input_ids),
                             "head_max_new": head.sampling_params.max_new_tokens, "available": a.available_size(),
                             "evictable": tree.evictable_size()}
    if loop.config.hybrid_swa:
        sizes.update(swa_available=a.swa_available_size(), swa_evictable=tree.swa_evictable_size(), swa_pool=a.size_swa)
    raise InvariantViolation("scheduler-progress", "nothing runs and the queue admitted nothing: the server hangs", **sizes)


def _judge(loop: Any, upstream: UpstreamChecker) -> None:
    row_verdict(loop)
    progress_verdict(loop)
    ours, our_message = our_verdict(loop)
    if loop.config.hybrid_swa:
        swa_leak, swa_message = swa_verdict(loop)
        ours, our_message = ours or swa_leak, f"{our_message}; {swa_message}"
    _compare("KV page", ours, our_message, upstream.verdict, "upstream checks nothing at this point")
    if loop.config.hybrid_ssm:
        _judge_mamba(loop, upstream)
    if loop.fully_idle:
        check(loop.tree_cache.protected_size() == 0, "lock-balance", "nothing runs, yet the tree holds locked tokens",
              protected=loop.tree_cache.protected_size())
        rows_free = loop.req_to_token_pool.available_size()
        check(rows_free == loop.config.rows, "scheduler-conservation", "nothing runs, yet request rows are held",
              free_rows=rows_free, rows=loop.config.rows)


def _judge_mamba(loop: Any, upstream: UpstreamChecker) -> None:
    """The Mamba pool: our raw partition against upstream's idle check, with the full pool's rules."""
    ours, our_message = mamba_verdict(loop)
    _compare("Mamba slot", ours, our_message, upstream.mamba_verdict, "upstream checks no Mamba pool while busy")
    if loop.fully_idle:
        protected = int(loop.tree_cache.mamba_protected_size())
        check(protected == 0, "lock-balance", "nothing runs, yet the tree holds locked Mamba states", mamba_protected=protected)

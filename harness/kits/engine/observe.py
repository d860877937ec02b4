"""SGLang 0.5.23's engine loop seen as the engine judges see every engine: an :class:`~poolfuzz.harness.engines.interface.Observation`.

Everything is read from raw state, never from upstream's size methods (those feed the surface a user
sees and upstream's own checker only):

* **request rows**: ``req_to_token_pool.free_slots`` against each live request's ``req.kv.req_pool_idx``;
* **KV pages** (the full pool on hybrid SWA): the allocator's ``free_pages`` and ``release_pages`` (two free
  places), the pages of the tree's values (``all_values_flatten``; a cache holder, ``"tree"``), and each row
  owner's ``req_to_token`` row: the part past ``cache_protected_len`` it owns, the whole row it references;
* **SWA pages** (hybrid SWA): the SWA free list against the SWA pages ``full_to_swa_index_mapping`` maps into
  (a mapping holder; a breach is ``swa-mapping``);
* **Mamba slots** (hybrid Mamba): ``mamba_allocator.free_slots`` against the tree's MAMBA node values and each
  live request's ``mamba_pool_idx`` and non-empty ping-pong entries (``kv_mamba_slots``, pool_stats_observer.py:45-49).

The tree's ``protected_size`` (and ``mamba_protected_size``) are its lock counts; upstream's
``SchedulerInvariantChecker`` (:class:`~poolfuzz.harness.kits.engine.checks.UpstreamChecker`) gives the accounts'
verdicts.  The normal loop (``event_loop_normal``) lands every result in the iteration that scheduled it, so
nothing is in flight there; under ``event_loop_overlap`` the batch whose result is queued (``result_queue``) is
in flight (:func:`in_flight`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

from poolfuzz.harness.engines.interface import (
    Account,
    FreePlace,
    Holder,
    HolderKind,
    Holding,
    InFlight,
    LockCount,
    Observation,
    PoolState,
    Progress,
    Read,
    Verdict,
)


class Verdicts(Protocol):
    """Upstream's checker as the accounts read it (:class:`poolfuzz.harness.kits.engine.checks.UpstreamChecker`)."""

    def verdict(self) -> tuple[bool, str] | None: ...

    def mamba_verdict(self) -> tuple[bool, str] | None: ...


TREE = Holder(HolderKind.CACHE, "tree")
CHECKER = "upstream's invariant checker"
SURFACE_FIELDS = ("free KV", "free rows", "evictable", "protected", "waiting", "running", "chunked", "rows")
"""What a user of the loop can observe (:func:`surface`), compared across implementations."""


def pages(indices: Any, page_size: int) -> list[int]:
    """The pages of KV slot indices (the slots themselves at page size 1)."""
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


def _free_places(allocator: Any) -> tuple[FreePlace, ...]:
    """An allocator's free page ids (slot ids at page 1); ``release_pages`` is ``None`` on the paged one."""
    places = [FreePlace("free_pages", tuple(int(v) for v in allocator.free_pages.tolist()))]
    if allocator.release_pages is not None:
        places.append(FreePlace("release_pages", tuple(int(v) for v in allocator.release_pages.tolist())))
    return tuple(places)


def _holder(req: Any) -> Holder:
    return Holder(HolderKind.REQUEST, str(req.rid))


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


def kv_pool(loop: Any) -> PoolState:
    """Every KV page by who holds it (see the module docstring)."""
    ps = loop.config.page_size
    allocator = loop.allocator.full_attn_allocator if loop.config.hybrid_swa else loop.allocator
    rows = loop.req_to_token_pool.req_to_token
    holdings = [Holding(TREE, tuple(pages(_tree_values(loop.tree_cache), ps)))]
    for req in loop.owners():
        kv = req.kv
        row = rows[kv.req_pool_idx, : kv.kv_allocated_len].tolist()
        holder = _holder(req)
        holdings.append(Holding(holder, tuple(pages(row[kv.cache_protected_len :], ps))))
        holdings.append(Holding(holder, tuple(pages(row, ps)), owned=False))
    total = loop.config.tokens // ps
    return PoolState("KV page", range(1, total + 1), free=_free_places(allocator), holdings=tuple(holdings), reserved=(0,))


HOST_TREE = Holder(HolderKind.CACHE, "tree (host)")
"""The tree as the holder of HiCache host slots (its nodes' host values)."""


def host_pool(loop: Any) -> PoolState:
    """HiCache shapes: every host KV slot of the tree's host pool (``MHATokenToKVPoolHost``, pool_host/base.py:502-590) by
    where it is: on the free list (``free_slots``, and the freed chunks waiting in ``release_slots``) or marked in use
    (``slot_used``, set by ``alloc`` and cleared by ``free``: the tree's host values, and a copy's destination until its
    ack).  A slot on neither is lost (a host leak), one on both or twice on the free list a double free (SGLang #13483)."""
    host = loop.tree_cache.cache_controller.mem_pool_host.anchor_entry.host_pool
    free = [FreePlace("free_slots", tuple(int(v) for v in host.free_slots.tolist()))]
    free += [FreePlace("release_slots", tuple(int(v) for chunk in host.release_slots for v in chunk.tolist()))]
    used = tuple(int(v) for v in host.slot_used.nonzero().flatten().tolist())
    return PoolState("HiCache host slot", range(host.logical_size), free=tuple(free), holdings=(Holding(HOST_TREE, used),))


def swa_pool(loop: Any) -> PoolState:
    """The SWA pages: free, or mapped into by a full slot (``full_to_swa_index_mapping``, its trailing -1 left out)."""
    ps = loop.config.page_size
    mapping = loop.allocator.full_to_swa_index_mapping[:-1]
    mapped = sorted({int(v) // ps for v in mapping[mapping > 0].tolist()})
    index = Holder(HolderKind.MAPPING, "full_to_swa_index_mapping")
    total = loop.config.swa_tokens // ps
    free = _free_places(loop.allocator.swa_attn_allocator)
    return PoolState("SWA page", range(1, total + 1), free=free, holdings=(Holding(index, tuple(mapped)),), breach="swa-mapping")


def _mamba_slots(value: Any) -> list[int]:
    """The Mamba slot ids in one value (a request's ``mamba_pool_idx`` is a 0-d or (1,) tensor, a node's (1,))."""
    if value is None:
        return []
    if hasattr(value, "reshape"):
        return [int(v) for v in value.reshape(-1).tolist()]
    return [int(value)]


def request_mamba_slots(req: Any) -> list[int]:
    """A request's Mamba slots: its ``mamba_pool_idx`` while it holds one, and its non-empty ping-pong entries."""
    kv = req.kv
    slots = _mamba_slots(kv.mamba_pool_idx) if kv.holds_mamba else []
    if kv.mamba_ping_pong_track_buffer is not None:
        entries = [int(v) for v in kv.mamba_ping_pong_track_buffer.reshape(-1).tolist()]
        slots += [v for v, empty in zip(entries, kv.mamba_ping_pong_empty, strict=False) if not empty]
    return slots


def mamba_pool(loop: Any) -> PoolState:
    """Every Mamba slot by who holds it: free, the tree's MAMBA node values (``all_mamba_values_flatten``,
    unified_tree_core.py:3448-3469), or a live request."""
    pool = loop.req_to_token_pool
    tree = tuple(int(v) for v in loop.tree_cache.all_mamba_values_flatten().reshape(-1).tolist())
    holdings = [Holding(TREE, tree)]
    holdings += [Holding(_holder(req), tuple(slots)) for req in live_requests(loop) if (slots := request_mamba_slots(req))]
    free = (FreePlace("free_slots", tuple(int(v) for v in pool.mamba_allocator.free_slots.tolist())),)
    return PoolState("Mamba slot", range(1, int(pool.mamba_pool.size) + 1), free=free, holdings=tuple(holdings), reserved=(0,))


def row_pool(loop: Any) -> PoolState:
    """Every request row (1..rows): free, or held by the live request whose ``req.kv.req_pool_idx`` it is."""
    holdings = tuple(Holding(_holder(req), (int(req.kv.req_pool_idx),)) for req in live_requests(loop) if req.kv.req_pool_idx is not None)
    free = (FreePlace("free_slots", tuple(int(row) for row in loop.req_to_token_pool.free_slots)),)
    return PoolState("request row", range(1, loop.config.rows + 1), free=free, holdings=holdings, reserved=(0,))


def _account(what: str, pools: tuple[str, ...], verdict_of: Callable[[], tuple[bool, str] | None], unchecked: str) -> Account:
    """Upstream's verdict on one account, or its own assertion's words where it raised one."""
    try:
        verdict = verdict_of()
    except (AssertionError, ValueError) as exc:
        return Account(what, pools, None, unchecked, failure=str(exc))
    return Account(what, pools, None if verdict is None else Verdict(*verdict), unchecked)


def _progress(loop: Any) -> Progress:
    facts = loop.last_step
    context: list[tuple[str, int | float | None]] = []
    if loop.stalled:  # the numbers a hang report shows
        # the queue head; on a PD server, a request of its PD queues when none waits in the scheduler's queue
        a, tree, head = loop.allocator, loop.tree_cache, [*loop.waiting_queue, *getattr(loop, "pd_queued", list)()][0]
        context = [
            ("head_prompt", len(head.origin_input_ids)),
            ("head_max_new", head.sampling_params.max_new_tokens),
            ("available", int(a.available_size())),
            ("evictable", int(tree.evictable_size())),
        ]
        if loop.config.hybrid_swa:
            context += [
                ("swa_available", int(a.swa_available_size())),
                ("swa_evictable", int(tree.swa_evictable_size())),
                ("swa_pool", int(a.size_swa)),
            ]
    return Progress(facts.waiting, facts.active, facts.advanced, tuple(context))


def surface(loop: Any) -> tuple[tuple[str, Hashable], ...]:
    """What a user of the loop can observe: sizes, who waits and runs, and each owner's row.

    At page size 1 a row is compared slot by slot.  Above it, only each row's length: 0.5.23's
    ``free_segment`` (allocator/paged.py:340) returns a row's pages in row order, while
    ``poolfuzz.pools.kv_allocator`` (which predates segments) frees every batch in ascending page order,
    so the two free lists hold the same pages in another order and later rows name other pages.
    """
    rows = loop.req_to_token_pool.req_to_token
    paged = loop.config.page_size > 1
    owners = tuple(
        (r.rid, r.kv.kv_allocated_len if paged else tuple(rows[r.kv.req_pool_idx, : r.kv.kv_allocated_len].tolist())) for r in loop.owners()
    )
    chunked = loop.chunked_req.rid if loop.chunked_req is not None else None
    values = (
        loop.allocator.available_size(),
        loop.req_to_token_pool.available_size(),
        int(loop.tree_cache.evictable_size()),
        int(loop.tree_cache.protected_size()),
        tuple(r.rid for r in loop.waiting_queue),
        tuple(r.rid for r in loop.running_batch.reqs),
        chunked,
        owners,
    )
    return tuple(zip(SURFACE_FIELDS, values, strict=True))


def in_flight(loop: Any) -> tuple[InFlight, ...]:
    """Each queued batch and what it still reads for each request whose result it will commit: the request's row
    (``req_pool_indices``) and the KV pages its forward writes (its part of ``out_cache_loc``); on a HiCache shape, each
    device-to-host copy not yet acknowledged and the device pages it reads (the tree must keep them).

    A request that finished or was retracted after the batch was queued is left out: the result processor skips
    it (batch_result_processor.py:1022-1027 decode, :344-349 prefill), and its over-allocated slot is freed by its
    release (``_release_overallocated_kv_indices``, common.py:447), which one stream orders after the forward."""
    queued = loop.in_flight() if hasattr(loop, "in_flight") else []
    flights = []
    for n, batch in enumerate(queued):
        rows = [int(v) for v in batch.req_pool_indices.tolist()]
        if loop.config.speculative_num_steps and batch.forward_mode.is_decode():
            flights.append(InFlight(f"queued batch {n} (verify)", tuple(_verify_reads(loop, batch, rows))))
            continue
        locs = [int(v) for v in batch.out_cache_loc.tolist()] if batch.out_cache_loc is not None else []
        widths = list(batch.extend_lens) if batch.forward_mode.is_extend() else [1] * len(batch.reqs)
        reads: list[Read] = []
        start = 0
        for req, row, width in zip(batch.reqs, rows, widths, strict=True):
            slots, start = locs[start : start + width], start + width
            if req.finished() or req.is_retracted:
                continue
            holder = _holder(req)
            reads.append(Read("request row", holder, (row,)))
            reads.append(Read("KV page", holder, tuple(pages(slots, loop.config.page_size))))
        flights.append(InFlight(f"queued batch {n} ({batch.forward_mode.name.lower()})", tuple(reads)))
    copies = loop.hicache_in_flight() if hasattr(loop, "hicache_in_flight") else []
    for n, slots in enumerate(copies):
        # A HiCache device-to-host copy not yet acknowledged reads its node's device KV: the tree keeps the pages (its
        # write-through lock, ongoing_write_through, unified_radix_cache.py:1773, released at the ack :1808-1813).
        flights.append(InFlight(f"HiCache write to host {n}", (Read("KV page", TREE, tuple(pages(slots, loop.config.page_size))),)))
    return tuple(flights)


def _verify_reads(loop: Any, batch: Any, rows: list[int]) -> list[Read]:
    """What a queued speculative verify still reads and writes, per request whose result it will commit: its row and the
    ``K + 1`` slots past its committed length, where the worker's draft and verify write KV (``assign_draft_cache_locs``
    over ``num_draft_tokens`` past ``seq_lens``, eagle_worker_common.py:264-294).  The batch's own ``out_cache_loc`` is not
    it: upstream allocates through ``alloc_for_spec_decode`` without setting it (eagle_utils.py:857-921), and the forward's
    isolation restores it after the verify (scheduler.py:4789-4813).  ``seq_lens`` there is the committed length the previous
    result published, which is the committed length now: that result was processed in this iteration, after the launch."""
    table = loop.req_to_token_pool.req_to_token
    width = loop.config.speculative_num_steps + 1
    reads: list[Read] = []
    for req, row in zip(batch.reqs, rows, strict=True):
        if req.finished() or req.is_retracted:
            continue
        start = int(req.kv.kv_committed_len)
        holder = _holder(req)
        reads.append(Read("request row", holder, (row,)))
        reads.append(Read("KV page", holder, tuple(pages(table[row, start : start + width].tolist(), loop.config.page_size))))
    return reads


def observe(loop: Any, upstream: Verdicts, *, with_surface: bool = True) -> Observation:
    """The loop's whole memory state (upstream's modules must be active: :func:`poolfuzz.harness.upstream.sglang_modules.active`);
    ``with_surface=False`` leaves the surface out where no second implementation is compared (it costs size calls)."""
    config = loop.config
    pools = [row_pool(loop), kv_pool(loop)]
    kv_account = ("KV page", "SWA page") if config.hybrid_swa else ("KV page",)
    if config.hybrid_swa:
        pools.append(swa_pool(loop))
    if getattr(loop, "transfers", None) is not None:  # a HiCache tree (upstream's loops build one for a hicache shape)
        pools.append(host_pool(loop))
    accounts = [_account("KV page", kv_account, upstream.verdict, "upstream checks nothing at this point")]
    busy = getattr(loop, "busy_check", None)
    if busy is not None:
        # scheduler.py:2133 ran upstream's own busy check at the end of this iteration (the loop kept its verdict).
        accounts.append(Account("KV page (upstream's self_check_during_busy)", kv_account, Verdict(*busy)))
    locks = [LockCount("the tree", "tokens", int(loop.tree_cache.protected_size()))]
    if config.hybrid_ssm:
        pools.append(mamba_pool(loop))
        accounts.append(_account("Mamba slot", ("Mamba slot",), upstream.mamba_verdict, "upstream checks no Mamba pool while busy"))
        locks.append(LockCount("the tree", "Mamba states", int(loop.tree_cache.mamba_protected_size())))
    return Observation(
        engine=config.pools,
        pools=tuple(pools),
        progress=_progress(loop),
        in_flight=in_flight(loop),
        locks=tuple(locks),
        checker=CHECKER,
        accounts=tuple(accounts),
        surface=surface(loop) if with_surface else (),
    )

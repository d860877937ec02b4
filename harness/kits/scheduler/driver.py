"""Driver for the ``scheduler`` family: request rows, Mamba slots and paged KV, driven as scheduler steps.

One driver owns a request-row pool (``ReqToTokenPool``, or ``HybridReqToTokenPool``
when ``hybrid``) and a KV allocator together, built by :func:`build_scheduler_pools`
(swap it with ``--target scheduler=module:attr``), and replays what SGLang's
scheduler does with them:

* ``admit``: the Mamba group window opens around admission; rows and slots
  come from ``alloc(reqs)``; KV for the first chunk from ``alloc_extend``;
  ``req_to_token[row, :chunk] = out``.  A KV shortage rolls the admission back.
* ``prefill``: chunked prefill continues on the *same* row (``alloc`` reuses
  it, SGLang #17850), ``last_loc`` read from ``req_to_token``.
* ``decode``: ``alloc_decode`` with ``last_loc = req_to_token[row, len-1]``.
* ``finish``: KV freed inside a free group, then the Mamba slot, then the row;
  the row is overwritten before the group ends (the #34067 aliasing hazard).
* ``retract``: free from the page boundary at or below ``keep`` (#4977).
* ``abort``: mid-flight, no free group, row first.  ``clear``: reset everything.

Two options, drawn by the config (``poolfuzz.harness.kits.scheduler.moves``), change the KV side;
they are exclusive, as in SGLang 0.5.23, where a hybrid-SWA model with prefix
sharing uses an SWA-aware cache rather than ``RadixCache``:

* ``prefix_cache``: a ``RadixCache`` over the allocator.  Admission matches and
  locks a cached prefix and extends only the rest, a short pool evicts before it
  refuses, chunks are checkpointed, and finish/retract/abort go through
  ``release_request`` (:mod:`poolfuzz.harness.kits.scheduler.cache`).
* ``sliding_window``: an ``SWATokenToKVPoolAllocator``; tokens that left the window
  give their SWA slots back (``free_swa``) before each step
  (:mod:`poolfuzz.harness.kits.scheduler.swa`).

Every extend/decode result is compared with the loop oracle run on the same
pages and ``last_loc`` (``kernel-agreement``; on the SWA side ``swa-mapping``).
The page-level conservation (``scheduler-conservation``, or ``kv-accounting`` with
the cache) is O(pool + live tokens), so it runs with the audit: every
``audit_period`` steps (4 for this machine) and at teardown; the options' count
equations are O(live requests) and run after every step.

The pools, the model and the queries the step parts share live in
:class:`~poolfuzz.harness.kits.scheduler.base.SchedulerDriverBase`; the KV step
(:mod:`poolfuzz.harness.kits.scheduler.kv`) and the two books take that base, so
this module imports them and none of them imports it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, ConstructorKwargs, operation
from poolfuzz.harness.judge.invariants import InvariantViolation, check, check_unique
from poolfuzz.harness.kits.scheduler.base import SchedulerDriverBase
from poolfuzz.harness.kits.scheduler.cache import CacheBook
from poolfuzz.harness.kits.scheduler.kv import KVStep, first_difference
from poolfuzz.harness.kits.scheduler.model import ReqState
from poolfuzz.harness.kits.scheduler.ops import SchedulerOps
from poolfuzz.harness.kits.scheduler.swa import WindowBook
from poolfuzz.pools.errors import BadSizeError, PoolError, UnknownEvictionPolicyError, UnknownKernelError
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator
from poolfuzz.pools.mamba import HybridReqToTokenPool
from poolfuzz.pools.page_alloc import KERNEL_NAMES
from poolfuzz.pools.radix_cache import RadixCache
from poolfuzz.pools.radix_tree import EVICTION_POLICIES
from poolfuzz.pools.req_to_token import Req, ReqToTokenPool
from poolfuzz.pools.swa import SWATokenToKVPoolAllocator


@dataclass
class SchedulerPools:
    """What a scheduler holds: the request-row pool, the KV allocator and, optionally, the prefix cache."""

    req_to_token_pool: Any
    token_to_kv_pool_allocator: Any
    tree_cache: Any = None


def build_scheduler_pools(
    *, size: int, max_context_len: int, page_size: int, kv_pages: int, hybrid: bool = False, mamba_size: int = 0,
    need_sort: bool = False, kernel: str = "vectorized", device: str = "cpu", prefix_cache: bool = False,
    eviction_policy: str = "lru", sliding_window: int | None = None, swa_pages: int = 0,
    cache_type: type[RadixCache] = RadixCache, swa_type: type[SWATokenToKVPoolAllocator] = SWATokenToKVPoolAllocator,
) -> SchedulerPools:
    """The default ``scheduler`` target: the pools of :mod:`pools`, sized by the config.

    ``cache_type`` and ``swa_type`` let a variant (a canary) substitute its own class.
    """
    rows: Any = (
        HybridReqToTokenPool(size, max_context_len, mamba_size, device=device) if hybrid
        else ReqToTokenPool(size, max_context_len, device=device)
    )
    kv: Any = (
        swa_type(kv_pages * page_size, swa_pages * page_size, page_size, device, need_sort, kernel) if sliding_window
        else PagedTokenToKVPoolAllocator(kv_pages * page_size, page_size, device=device, need_sort=need_sort, kernel=kernel)
    )
    cache = cache_type(kv, eviction_policy=eviction_policy) if prefix_cache else None
    return SchedulerPools(rows, kv, cache)


class SchedulerDriver(SchedulerDriverBase):
    family = "scheduler"
    ops = SchedulerOps

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """The component pools' own: row and KV sizes >= 0, a page size >= 1, a known kernel and eviction policy."""
        errors: list[type[PoolError]] = []
        for name in ("size", "kv_pages", "mamba_size", "swa_pages"):
            if int(config.get(name, 0)) < 0:
                errors.append(BadSizeError)
        if int(config.get("page_size", 1)) < 1 or int(config.get("max_context_len", 1)) <= 0:
            errors.append(BadSizeError)
        token_sides = bool(config.get("sliding_window")) and int(config.get("page_size", 1)) == 1  # no page kernel
        if config.get("kernel", "vectorized") not in KERNEL_NAMES and not token_sides:
            errors.append(UnknownKernelError)
        if config.get("prefix_cache") and str(config.get("eviction_policy", "lru")).lower() not in EVICTION_POLICIES:
            errors.append(UnknownEvictionPolicyError)
        return tuple(dict.fromkeys(errors))

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.cache = CacheBook(self) if self.model.cache is not None else None
        self.swa = WindowBook(self) if self.window else None
        self.kv_step = KVStep(self, cache=self.cache, swa=self.swa)

    # ------------------------------------------------------------ policy
    def retract_free_start(self, keep: int) -> int:
        """Where this scheduler starts freeing on retract; the model's rule unless a variant plants a bug."""
        return self.model.retract_start(keep)

    # ------------------------------------------------------------ helpers
    def _release(self, state: ReqState, *, group: bool, insert: bool = False, row_first: bool | None = None) -> None:
        """Free one request's KV, Mamba slot and row: a finish inside a free group (``insert`` caches its
        tokens), an abort (row first), or a retract or rollback through the cache's release path."""
        req = self.reqs.pop(state.handle)
        row, length = state.row, state.length
        row_first = not group if row_first is None else row_first
        kv_slots = self.rows.req_to_token[row, :length]  # a view: the allocator must copy it (#34067)
        if row_first:
            kv_slots = kv_slots.clone()
            self.expect_accepted(lambda: self.rows.free(req), f"free(row {row})")
        if self.cache is not None:
            self.cache.release(state, kv_slots, insert=insert)
        elif length:
            self.expect_accepted(lambda: self.kv.free(kv_slots), f"free(KV of request {state.handle})")
        if self.hybrid:
            self.expect_accepted(lambda: self.rows.free_mamba_cache(req), f"free_mamba_cache(request {state.handle})")
        if not row_first:
            self.expect_accepted(lambda: self.rows.free(req), f"free(row {row})")
            if group:
                self.rows.req_to_token[row, :length] = 0  # the row's next owner overwrites it before the group ends
        if self.cache is None:
            self.model.release(state.handle)

    def _ledgers(self) -> None:
        """The options' count equations, after every step (O(live requests))."""
        if self.cache is not None:
            self.cache.check_ledger()
        if self.swa is not None:
            self.swa.check_ledger()

    # --------------------------------------------------------- operations
    @operation
    def admit(self, requests: list[list[int]], reserve_extra: int = 0, tokens: list[list[int]] | None = None) -> list[int]:
        """Admit ``[prompt, first_chunk]`` requests as one batch; returns their handles ([] if refused).

        ``tokens`` are the prompts' token ids (padded with 0 to the prompt length); the
        first chunk extends ``first_chunk`` tokens past whatever prefix the cache matched.
        """
        batch = [(min(prompt, self.max_len), chunk) for prompt, chunk in requests]
        if not batch:
            return SKIPPED  # type: ignore[return-value]
        model = self.model
        prompts = [((tokens[i] if tokens and i < len(tokens) else []) + [0] * prompt)[:prompt]
                   for i, (prompt, _) in enumerate(batch)]
        mamba: Any = self.rows.mamba_allocator if self.hybrid else None
        reqs = [Req(rid=f"req-{model.next_handle + i}") for i in range(len(batch))]
        if self.hybrid:
            self.expect_accepted(lambda: mamba.alloc_group_begin(len(batch) + reserve_extra), "alloc_group_begin")
        handles: list[int] = []
        if not model.can_admit(len(batch)):
            self.expect_refused(lambda: self.rows.alloc(reqs), f"admission of {len(reqs)} requests",
                                free_rows=len(model.free_rows), free_mamba=len(model.free_mamba))
            self.event("admission refused: rows or Mamba slots short")
        else:
            rows = self.expect_accepted(lambda: self.rows.alloc(reqs), f"alloc({len(reqs)} requests)")
            check(rows is not None and len(rows) == len(batch), "empty-pool-guard", "admission refused with room",
                  free_rows=len(model.free_rows), free_mamba=len(model.free_mamba))
            self.check_fresh(list(rows), model.free_rows, "alloc(reqs)", "row")
            slots = [req.mamba_pool_idx for req in reqs]
            if self.hybrid:
                self.check_fresh([int(s or 0) for s in slots], model.free_mamba, "alloc(reqs)", "mamba slot")
            states = [model.admit(row, slot, prompt, toks) for row, slot, (prompt, _), toks in zip(rows, slots, batch, prompts)]
            for state, req in zip(states, reqs):
                self.reqs[state.handle] = req
            prefixes = self.cache.match_and_lock(states) if self.cache is not None else [0] * len(states)
            if self.kv_step(states, [min(pre + chunk, s.target) for pre, s, (_, chunk) in zip(prefixes, states, batch)],
                             decode=False):
                handles = [s.handle for s in states]
                if self.cache is not None:
                    self.cache.checkpoint([s for s in states if s.prefilling])
            else:
                for state in states:
                    self._release(state, group=False)
                self.event("admission rolled back: KV short")
        if self.hybrid:
            self.expect_accepted(mamba.alloc_group_end, "alloc_group_end")
            check(not mamba.group_open, "group-window", "the Mamba group window stayed open after admission")
        self._ledgers()
        return handles

    @operation
    def prefill(self, handles: list[int], chunk: int) -> None:
        """The next chunk of each named prefilling request, on the row it already holds."""
        states = [self.model.live[h] for h in dict.fromkeys(handles) if h in self.model.live]
        states = [s for s in states if s.prefilling]
        if not states:
            return SKIPPED  # type: ignore[return-value]
        before = self.observe()
        rows = self.expect_accepted(lambda: self.rows.alloc([self.reqs[s.handle] for s in states]), "alloc(continuing)")
        check(rows == [s.row for s in states] and self.observe() == before, "valid-call-accepted",
              "continuing requests did not keep their rows", rows=rows, expected=[s.row for s in states])
        if self.kv_step(states, [min(s.length + chunk, s.target) for s in states], decode=False) and self.cache is not None:
            self.cache.checkpoint([s for s in states if s.prefilling])
        self._ledgers()

    @operation
    def decode(self, handles: list[int]) -> None:
        """One decode step of each named running request."""
        states = [self.model.live[h] for h in dict.fromkeys(handles) if h in self.model.live]
        states = [s for s in states if not s.prefilling and s.length < self.max_len]
        if not states:
            return SKIPPED  # type: ignore[return-value]
        self.kv_step(states, [s.length + 1 for s in states], decode=True)
        self._ledgers()

    @operation
    def finish(self, handles: list[int]) -> None:
        """Release finished requests: KV inside one free group (cached first, with a cache), then Mamba slots, then rows."""
        states = [self.model.live[h] for h in dict.fromkeys(handles) if h in self.model.live]
        if not states:
            return SKIPPED  # type: ignore[return-value]
        available = self.available()
        self.expect_accepted(self.kv.free_group_begin, "free_group_begin")
        for state in states:
            self._release(state, group=True, insert=True)
        check(self.available() == available, "group-window", "frees inside a free group took effect early")
        self.expect_accepted(self.kv.free_group_end, "free_group_end")
        self._ledgers()

    @operation
    def abort(self, handle: int) -> None:
        """Abort a request mid-flight: row first, then Mamba slot and KV, no free group."""
        if handle not in self.model.live:
            return SKIPPED  # type: ignore[return-value]
        self._release(self.model.live[handle], group=False)
        self._ledgers()

    @operation
    def retract(self, handle: int, keep: int) -> None:
        """Shrink a request to the page boundary at or below ``keep``; it must prefill the rest again.

        With a cache, retract is SGLang 0.5.23's: the whole request goes back through the
        release path (nothing inserted) and back to the queue; ``keep`` is unused.  With a
        window, a kept prefix must end inside it, else the request restarts from 0.
        """
        state = self.model.live.get(handle)
        if state is None or state.length == 0:
            return SKIPPED  # type: ignore[return-value]
        if self.cache is not None:
            self._release(state, group=False, row_first=False)
            self.event("retract released through the cache")
            self._ledgers()
            return
        keep, length = min(keep, state.length), state.length
        start, model_start = self.retract_free_start(keep), self.model.retract_start(keep)
        if self.swa is not None:
            start, model_start = self.swa.retract_bounds(state, start, model_start)
        if start < length:
            tail = self.rows.req_to_token[state.row, start:length]
            self.expect_accepted(lambda: self.kv.free(tail), f"free(tokens {start}..{length} of request {handle})")
        self.model.truncate(handle, model_start)
        state.target = max(state.target, length)
        if keep % self.ps:
            self.event("retract mid-page")
        self._ledgers()

    @operation
    def clear(self) -> None:
        """Reset the pools (the cache forgets its tree first, as ``flush_cache`` does); every request is dropped."""
        self.expect_accepted(self.rows.clear, "req_to_token_pool.clear()")
        if self.cache is not None:
            self.expect_accepted(self.cache.tree.reset, "tree_cache.reset()")
        self.expect_accepted(self.kv.clear, "allocator.clear()")
        self.model.clear()
        self.reqs.clear()
        check(self.rows.available_size() == self.model.num_rows, "clear-restores", "rows still allocated after clear")
        check(self.full.available_size() == self.model.num_pages * self.ps and not self.kv.in_free_group,
              "clear-restores", "KV pages still allocated (or a free group open) after clear")
        if self.cache is not None:
            self.cache.forget()
        self._ledgers()

    # ------------------------------------------------------------- audits
    def available(self) -> tuple[int, ...]:
        """Free tokens on each KV side."""
        return tuple(alloc.available_size() for _, alloc, _ in self.sides())

    def observe(self) -> Hashable:
        mamba = getattr(self.rows, "mamba_allocator", None)
        sides = tuple(tuple(self.free_pages(alloc)) for _, alloc, _ in self.sides())
        cache = self.cache.sizes() if self.cache is not None else ()
        return (tuple(self.rows.free_slots), sides, tuple(mamba.free_slots.tolist()) if mamba is not None else (), cache)

    def check_equation(self) -> None:
        """The scheduler conservation equation, from the pools' own state.

        Every KV page is on the allocator's free list, or in ``req_to_token[row, cached:len]``
        of exactly one live request, or (with a cache) held once by the cache, whose pages
        the first ``cached`` slots of any number of rows may share (``kv-accounting``
        then); every row and Mamba slot is free or held by exactly one.
        """
        model = self.model
        held: dict[int, list[int]] = {}
        for handle, state in model.live.items():
            row = self.rows.req_to_token[state.row, : state.length].tolist()
            if row != state.slots:
                i = first_difference(state.slots, row)
                raise InvariantViolation("scheduler-conservation", "req_to_token[row, :len] is not the request's slots",
                                         handle=handle, row=state.row, position=i,
                                         expected=state.slots[i: i + 4], actual=row[i: i + 4])
            held[handle] = row[state.cached:]
        if self.cache is not None:
            held[-1] = self.cache.held_slots()
        problems = model.ownership_problems(self.free_pages(), held)
        check(not problems, "kv-accounting" if self.cache is not None else "scheduler-conservation",
              "a KV page is not free-or-owned-once", **problems)
        self._check_partition("rows", list(self.rows.free_slots), [s.row for s in model.live.values()], model.num_rows)
        mamba = getattr(self.rows, "mamba_allocator", None)
        if self.hybrid and mamba is not None:
            self._check_partition("Mamba slots", mamba.free_slots.tolist(),
                                  [int(s.mamba or 0) for s in model.live.values()], model.num_mamba)

    def _check_partition(self, what: str, free: list[int], held: list[int], count: int) -> None:
        everything = free + held
        check(len(set(everything)) == len(everything) and set(everything) == set(range(1, count + 1)),
              "scheduler-conservation", f"{what} are not each free or held by exactly one live request",
              free=sorted(free), held=sorted(held), count=count)

    def audit(self) -> None:
        """Pools against the model: the conservation equation, free sets, handles, mapping, row 0, closed groups."""
        model = self.model
        self.check_equation()
        free_pages = self.free_pages()
        check_unique(free_pages, "no-double-allocation", "the KV free list")
        check(set(free_pages) == model.free_pages, "conservation", "KV free pages differ from the model",
              missing=sorted(model.free_pages - set(free_pages)), extra=sorted(set(free_pages) - model.free_pages))
        check(self.full.available_size() == len(model.free_pages) * self.ps, "conservation", "KV available_size()",
              available=self.full.available_size(), expected=len(model.free_pages) * self.ps)
        check(not self.kv.in_free_group, "group-window", "a free group is open between steps")
        check(set(self.rows.free_slots) == model.free_rows, "conservation", "free rows differ from the model",
              pool=sorted(self.rows.free_slots), model=sorted(model.free_rows))
        check(not bool(self.rows.req_to_token[0].any()), "reserved-never-handed-out", "row 0 of req_to_token written")
        for handle, state in model.live.items():
            req = self.reqs[handle]
            check(req.req_pool_idx == state.row and req.mamba_pool_idx == state.mamba, "conservation",
                  "a request's handles differ from the model", handle=handle, row=req.req_pool_idx,
                  mamba=req.mamba_pool_idx, expected=(state.row, state.mamba))
        if self.hybrid:
            mamba = self.rows.mamba_allocator
            check(set(mamba.free_slots.tolist()) == model.free_mamba, "conservation", "free Mamba slots differ")
            check(not mamba.group_open, "group-window", "a Mamba group window is open between steps")
            mapping = self.rows.req_index_to_mamba_index_mapping.tolist()
            expected = [0] * len(mapping)
            for state in model.live.values():
                expected[state.row] = int(state.mamba or 0)
            check(mapping == expected, "conservation", "req_index_to_mamba_index_mapping differs from the live requests",
                  mapping=mapping, expected=expected)
        if self.cache is not None:
            self.cache.audit()
        if self.swa is not None:
            self.swa.audit()

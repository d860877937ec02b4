"""Driver for the ``swa_kv`` family: ``SWATokenToKVPoolAllocator`` on both page regimes.

Handles name requests (one per new request of an ``extend`` or ``tail``, one per page-size-1
``alloc``), issued in order as in :mod:`poolfuzz.harness.kits.kv.driver`.  At page size 1 the
scheduler grows requests with ``alloc`` (``alloc_token_slots``), so ``extend`` and
``decode`` call ``alloc(n)`` there and share every check with the paged calls; the paged
calls at page size 1 and ``alloc`` above it are wrong-regime misuse.

What the driver reads, and nothing else (``poolfuzz.pools.protocols.SWAKVAllocator``): the returned
full slots, ``full_to_swa_index_mapping`` (the new tokens' SWA slots, the freed pages'
entries, the whole table in the audit), and each side's ``get_all_free_pages()`` and
available sizes.  Each call is judged on both sides: the fresh full pages and fresh SWA
pages must have been free on their side, pair page for page at the same offsets, and be
exactly what left each side's free pages (``conservation``, per side).  Those checks, and the
audit of the mapping table, are the pure functions of :mod:`poolfuzz.harness.kits.swa.checks`.

Valid-only calls with misuse off (upstream SGLang does not validate): a request whose last
token left the window is continued only by an SWA tail; ``free_swa`` names pages that still
have peers and ``free_full`` pages that have none; every free meets the rule of
:data:`poolfuzz.harness.kits.swa.contract.CONTRACT`, so at page size 1 a request partly out of
the window is freed as upstream's ``free_kv_row_segments`` frees it (``free_full`` of the part
without peers, then ``free``), where our pool gets one ``free``.  The misuse probes (double, foreign and
padding frees on all three free calls, out-of-window continuations, impossible tails, wrong
regimes, group nesting) run only with ``check_misuse``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from poolfuzz.harness.judge.driver import ConfigLike, Driver, operation
from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.kv.driver import ints
from poolfuzz.harness.kits.swa.batches import SWABatchMisuse
from poolfuzz.harness.kits.swa.checks import Grant, SideState, audit_mapping, audit_sides, check_handed_out, check_side_change, judge_grant
from poolfuzz.harness.kits.swa.config import SWAKVConfig
from poolfuzz.harness.kits.swa.contract import allows
from poolfuzz.harness.kits.swa.misuse import FREE_CALLS, free_errors, reject_misuse, skipped
from poolfuzz.harness.kits.swa.model import SWAModel
from poolfuzz.harness.kits.swa.ops import SWAKVOps
from poolfuzz.pools.errors import BadBatchError, BadSizeError, DoubleFreeError, GroupStateError, PoolError


class SWAKVDriver(Driver, SWABatchMisuse):
    family = "swa_kv"
    ops = SWAKVOps
    config: SWAKVConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        c = self.config
        ps = self.page_size = c.page_size
        self.model = SWAModel(c.size // ps, c.size_swa // ps, ps)
        layout = c.check_layout
        self.layout_checked = torch.device(c.device).type == "cpu" if layout is None else layout

    # ------------------------------------------------------------ helpers
    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.config.device)

    def _peers(self, slots: list[int]) -> list[int]:
        return ints(self.pool.full_to_swa_index_mapping[self._tensor(slots)]) if slots else []

    def _sides(self) -> SideState:
        full, swa = self.pool.full_attn_allocator, self.pool.swa_attn_allocator
        return (tuple(ints(full.get_all_free_pages())), int(self.pool.full_available_size()),
                tuple(ints(swa.get_all_free_pages())), int(self.pool.swa_available_size()))

    def _set_state(self) -> Hashable:
        """The pool as a refusal must leave it; a merge of staged pages may reorder the free lists."""
        full, full_avail, swa, swa_avail = self._sides()
        return frozenset(full), full_avail, frozenset(swa), swa_avail, tuple(ints(self.pool.full_to_swa_index_mapping))

    def observe(self) -> Hashable:
        return self._sides(), int(self.pool.available_size()), tuple(ints(self.pool.full_to_swa_index_mapping))

    def _sparse(self, slots: list[int]) -> list[int]:
        """One token per page: a free must release (and unmap) the whole page (SGLang #27779)."""
        return [s for i, s in enumerate(slots) if i == 0 or s // self.page_size != slots[i - 1] // self.page_size]

    def _reject(self, call: Callable[[], Any], error: type[PoolError] | tuple[type[PoolError], ...], what: str) -> Any:
        return reject_misuse(self, call, error, what)

    # -------------------------------------------------------- allocations
    def _grants(self, batch: list[list[int | None]]) -> list[Grant] | None:
        """``[[handle or None, extend_len], ...]`` as grants; ``None`` for a batch no caller can send."""
        named = [int(h) for h, _ in batch if h is not None]
        if len(set(named)) != len(named) or not all(self.model.is_live(h) for h in named):
            return None
        grants = []
        for h, extend_len in batch:
            slots = self.model.slots[int(h)] if h is not None else []
            last = slots[-1] if slots else -1
            swa_last = self.model.swa_slot(last) if slots else -1
            pre = len(slots)
            grants.append(Grant(None if h is None else int(h), pre, pre + int(extend_len or 0), last, swa_last, pre))
        return grants

    def _allocate(self, what: str, grants: list[Grant], call: Callable[[], Any], need_full: int,
                  need_swa: int) -> list[int]:
        """Run an allocating call the model calls valid; returns the handles of the new requests."""
        model = self.model
        if model.pages_short(need_full, need_swa):
            side = "full" if need_full > len(model.full.free) else "SWA"
            self.expect_refused(call, f"{what} needing {need_full} full and {need_swa} SWA pages", state=self._set_state,
                                crash_id="empty-pool-guard", full_free=len(model.full.free), swa_free=len(model.swa.free))
            self.event(f"allocation refused: {side} side short")
            return []
        before = self._sides()
        crash = "valid-call-accepted" if need_full or need_swa else "empty-pool-guard"
        result = self.expect_accepted(call, what, crash_id=crash)
        check(result is not None, "empty-pool-guard", f"{what} refused with {len(model.full.free)} full and "
              f"{len(model.swa.free)} SWA pages free", need_full=need_full, need_swa=need_swa)
        slots = ints(result)
        total = sum(g.seq - g.pre for g in grants)
        check(len(slots) == total, "page-layout", f"{what} returned {len(slots)} slots for {total} tokens", slots=slots)
        peers = self._peers(slots)
        check_handed_out(slots, model.full_slots_end, "full", what, "no-double-allocation", self.page_size)
        taken: list[tuple[Grant, list[int], list[int], dict[int, int], list[int]]] = []
        start = 0
        for g in grants:
            stop = start + g.seq - g.pre
            taken.append((g, slots[start:stop], *judge_grant(model, g, slots[start:stop], peers[start:stop], what)))
            start = stop
        check_handed_out([s for s in peers if s], model.swa_slots_end, "SWA", what, "swa-mapping", self.page_size)
        fresh_full = [p for _, _, pages, _, _ in taken for p in pages]
        fresh_swa = [p for _, _, _, pairs, _ in taken for p in pairs.values()]
        check(len(fresh_full) == need_full and len(fresh_swa) == need_swa, "page-layout",
              f"{what} took the wrong number of fresh pages", full=fresh_full, swa=fresh_swa,
              need_full=need_full, need_swa=need_swa)
        check_side_change(before, self._sides(), -1, fresh_full, fresh_swa, "conservation", what, self.page_size)
        new_handles = []
        for g, mine, pages, pairs, mapped in taken:
            handle = g.handle
            if handle is None:
                handle = model.new_handle()
                new_handles.append(handle)
            model.take(handle, mine, pages, pairs, mapped)
        if need_full and not model.full.free:
            self.event("full side exactly full")
        if need_swa and not model.swa.free:
            self.event("SWA side exactly full")
        return new_handles

    # --------------------------------------------------------- operations
    @operation
    def alloc(self, need_size: int) -> int | None:
        """Page size 1: a new request of ``need_size`` tokens, each with an SWA peer."""
        what = f"alloc({need_size})"
        if self.page_size != 1 or need_size < 0:
            return self._reject(lambda: self.pool.alloc(need_size), BadSizeError, what)
        made = self._allocate(what, [Grant(None, 0, need_size, -1, -1, 0)], lambda: self.pool.alloc(need_size),
                              need_size, need_size)
        return made[0] if made else None

    @operation
    def extend(self, batch: list[list[int | None]]) -> list[int]:
        """``alloc_extend`` (``alloc`` at page size 1) for ``[[handle or None, extend_len], ...]``; returns new handles."""
        grants = self._grants(batch)
        if grants is None or any(g.seq < g.pre for g in grants):
            return skipped()
        pres, seqs, lasts = [g.pre for g in grants], [g.seq for g in grants], [g.last_loc for g in grants]
        total = sum(seqs) - sum(pres)
        if self.page_size == 1:
            return self._allocate(f"alloc({total}) for extend {batch}", grants, lambda: self.pool.alloc(total), total, total)
        what = f"alloc_extend(prefix={pres}, seq={seqs}, last_loc={lasts})"
        pre_cpu, seq_cpu = torch.tensor(pres, dtype=torch.int64), torch.tensor(seqs, dtype=torch.int64)

        def call() -> Any:
            return self.pool.alloc_extend(self._tensor(pres), pre_cpu, self._tensor(seqs), seq_cpu, self._tensor(lasts),
                                          total)

        need = sum(self.model.extend_pages_needed(g.pre, g.seq) for g in grants)
        return self._paged(what, grants, call, need, need)

    @operation
    def decode(self, handles: list[int]) -> None:
        """One decode step for each request (``alloc_decode``; ``alloc`` at page size 1)."""
        grants = self._grants([[h, 1] for h in handles])
        if not handles or grants is None:
            return skipped()
        if self.page_size == 1:
            self._allocate(f"alloc({len(handles)}) for decode {handles}", grants,
                           lambda: self.pool.alloc(len(handles)), len(handles), len(handles))
            return None
        seqs, lasts = [g.seq for g in grants], [g.last_loc for g in grants]
        seq_cpu = torch.tensor(seqs, dtype=torch.int64)

        def call() -> Any:
            return self.pool.alloc_decode(self._tensor(seqs), seq_cpu, self._tensor(lasts))

        need = sum(self.model.decode_pages_needed(s) for s in seqs)
        self._paged(f"alloc_decode(seq={seqs}, last_loc={lasts})", grants, call, need, need)
        return None

    def _paged(self, what: str, grants: list[Grant], call: Callable[[], Any], need_full: int, need_swa: int) -> Any:
        """A paged extend or decode; a request whose last token left the window cannot be continued."""
        stale = [g.handle for g in grants if g.handle is not None and not self.model.last_in_window(g.handle)]
        if stale and (not self.layout_checked or not self.check_misuse):
            return skipped()  # unchecked, the SWA side would continue from slot 0: no caller may send it
        if stale and not self.model.pages_short(need_full, need_swa):  # a short pool refuses before looking
            return self._reject(call, BadBatchError, f"{what} continuing requests {stale} outside the window")
        return self._allocate(what, grants, call, need_full, need_swa)

    @operation
    def tail(self, handle: int | None, extend_len: int, swa_tail_len: int) -> int | None:
        """``alloc_extend_swa_tail`` for one request: full KV for the extend, SWA KV for its last ``swa_tail_len`` tokens."""
        grants = self._grants([[handle, extend_len]])
        if grants is None or extend_len < 0:
            return skipped()
        g = grants[0]
        what = f"alloc_extend_swa_tail(prefix={g.pre}, seq={g.seq}, last_loc={g.last_loc}, swa_tail_len={swa_tail_len})"
        pre_cpu, seq_cpu = torch.tensor([g.pre], dtype=torch.int64), torch.tensor([g.seq], dtype=torch.int64)

        def call() -> Any:
            return self.pool.alloc_extend_swa_tail(self._tensor([g.pre]), pre_cpu, self._tensor([g.seq]), seq_cpu,
                                                   self._tensor([g.last_loc]), extend_len, swa_tail_len)

        if self.page_size == 1 or not 0 <= swa_tail_len <= extend_len or not self.model.tail_aligned(g.seq, swa_tail_len):
            return self._reject(call, BadSizeError, what)
        tail_grant = Grant(g.handle, g.pre, g.seq, g.last_loc, -1, g.seq - swa_tail_len)
        made = self._allocate(what, [tail_grant], call, self.model.extend_pages_needed(g.pre, g.seq),
                              self.model.tail_pages_needed(swa_tail_len))
        if swa_tail_len < extend_len:
            self.event("SWA tail shorter than the extend")
        return made[0] if made else None

    # --------------------------------------------------------------- frees
    def _release(self, what: str, name: str, sent: list[int],
                 apply: Callable[[], tuple[list[int], list[int]]], unmapped: list[int],
                 then: tuple[str, list[int]] | None = None) -> None:
        """Run a valid free of ``sent`` (and ``then``, a second call of the same release, before the
        model moves); ``apply`` updates the model and returns the (full, SWA) pages released.

        A target that does not validate is sent only what upstream's callers send
        (:mod:`poolfuzz.harness.kits.swa.contract`): anything else here is a driver bug.
        The caller's tensor is zeroed afterwards, as a caller reusing its buffer would
        (SGLang #34067): the pool must have taken the values, and the SWA peers, at the call.
        """
        before = self._sides()
        for call, slots in [(name, sent), *([then] if then is not None else [])]:
            assert self.check_misuse or allows(self.model, call, self.model.pages_of(slots)), \
                f"driver: {call} of pages {self.model.pages_of(slots)} is not a call upstream's callers make"
            indices = self._tensor(slots)
            self.expect_accepted(lambda call=call, indices=indices: getattr(self.pool, call)(indices), what)  # type: ignore[misc]
            indices.zero_()
        full_pages, swa_pages = apply()
        entries = self._peers(self.model.page_slots(unmapped))
        stale = {s: e for s, e in zip(self.model.page_slots(unmapped), entries) if e}
        check(not stale, "swa-mapping", f"{what} left entries of the pages it unmapped", entries=stale)
        if self.model.group_open:
            check(self._sides() == before, "group-window", f"{what} inside a free group released pages early")
            self.event(f"{name} deferred by a free group")
            return
        check_side_change(before, self._sides(), +1, full_pages, swa_pages, "conservation", what, self.page_size)

    @operation
    def free(self, handle: int, sparse: bool = False) -> None:
        """Free a whole request (``sparse``: one token per page), its tokens out of the window included."""
        if not self.model.is_live(handle):
            return skipped()
        slots = self.model.slots[handle]
        if self.model.unwindowed_pages(handle) and self.model.windowed_pages(handle):
            self.event("free of a request partly out of the window")
        pages = self.model.pages_of(slots)
        sent = self._sparse(slots) if sparse else list(slots)
        if self.check_misuse or allows(self.model, "free", pages):
            self._release(f"free(handle {handle})", "free", sent, lambda: self.model.release_full(handle), pages)
            return None
        # Upstream's callers free a row as free_kv_row_segments does (mem_cache/common.py:152-190): the part whose
        # SWA peers are gone with free_full(_segments), the rest with free(_segments).
        gone = set(self.model.unwindowed_pages(handle))
        dead = [s for s in sent if s // self.page_size in gone]
        alive = [s for s in sent if s // self.page_size not in gone]
        self.event("free split as free_kv_row_segments does: free_full below the window, free for the rest")
        if alive:
            self._release(f"free_full then free (handle {handle})", "free_full", dead,
                          lambda: self.model.release_full(handle), pages, then=("free", alive))
        else:
            self._release(f"free_full(handle {handle})", "free_full", dead, lambda: self.model.release_full(handle), pages)
        return None

    @operation
    def free_swa(self, handle: int, pages: int = 1, sparse: bool = False) -> None:
        """The window slides: release the SWA peers of the request's oldest ``pages`` pages that still have them."""
        if not self.model.is_live(handle) or not self.model.windowed_pages(handle):
            return skipped()
        chosen = self.model.windowed_pages(handle)[: max(1, pages)]
        slots = [s for s in self.model.slots[handle] if s // self.page_size in set(chosen)]
        if chosen == self.model.windowed_pages(handle):
            self.event("free_swa of a request's last SWA page")
        self._release(f"free_swa(handle {handle}, pages {chosen})", "free_swa",
                      self._sparse(slots) if sparse else slots, lambda: ([], self.model.release_window(chosen)), chosen)
        return None

    @operation
    def free_full(self, handle: int) -> None:
        """Free a request none of whose pages has an SWA peer left; with peers it is misuse (``free`` is the call)."""
        if not self.model.is_live(handle):
            return skipped()
        slots = list(self.model.slots[handle])
        what = f"free_full(handle {handle})"
        if self.model.windowed_pages(handle):
            return self._reject(lambda: self.pool.free_full(self._tensor(slots)), BadBatchError, what)
        self.event("free_full of a request wholly out of the window")
        self._release(what, "free_full", slots, lambda: self.model.release_full(handle), [])
        return None

    @operation
    def free_again(self, handle: int, call: str = "free") -> None:
        """Free, ``free_swa`` or ``free_full`` again every slot ``handle`` released: a double free."""
        released = self.model.released.get(handle, [])
        if not released or call not in FREE_CALLS or any(
                self.model.full.state(p) == "live" for p in self.model.pages_of(released)):
            return skipped()  # a page handed out anew: no pool can tell
        return self._reject(lambda: getattr(self.pool, call)(self._tensor(released)), DoubleFreeError,
                            f"{call} again of handle {handle}'s released slots")

    @operation
    def free_swa_again(self, handle: int) -> None:
        """``free_swa`` of a live request's pages that have no SWA peer (left the window, or outside a tail)."""
        if not self.model.is_live(handle) or not self.model.unwindowed_pages(handle):
            return skipped()
        gone = set(self.model.unwindowed_pages(handle))
        slots = [s for s in self.model.slots[handle] if s // self.page_size in gone]
        return self._reject(lambda: self.pool.free_swa(self._tensor(slots)), DoubleFreeError,
                            f"free_swa of handle {handle}'s pages without SWA peers {sorted(gone)}")

    @operation
    def free_indices(self, indices: list[int], call: str = "free") -> None:
        """Raw full indices through ``call``; only misuse is issued (foreign, padding, not live, wrong side state)."""
        if call not in FREE_CALLS:
            return skipped()
        release = getattr(self.pool, call)
        if not indices:
            before = self.observe()
            self.expect_accepted(lambda: release(self._tensor([])), f"{call} of an empty tensor")
            check(self.observe() == before, "conservation", f"{call} of an empty tensor changed the pool")
            return None
        errors = free_errors(self.model, indices, call)
        if not errors:
            return skipped()  # live pages in the right state: free/free_swa/free_full of a handle is the call
        return self._reject(lambda: release(self._tensor(indices)), errors, f"{call}({indices})")

    # -------------------------------------------------------------- groups
    @operation
    def group_begin(self) -> None:
        if self.model.group_open:
            return self._reject(self.pool.free_group_begin, GroupStateError, "nested free_group_begin()")
        self.expect_accepted(self.pool.free_group_begin, "free_group_begin()")
        self.model.begin_group()
        return None

    @operation
    def group_end(self) -> None:
        """Close the group: exactly the pages enqueued on each side are released, now, the SWA peers as captured."""
        if not self.model.group_open:
            return self._reject(self.pool.free_group_end, GroupStateError, "free_group_end() without begin")
        before = self._sides()
        self.expect_accepted(self.pool.free_group_end, "free_group_end()", crash_id="group-window")
        full_pages, swa_pages = self.model.end_group()
        check_side_change(before, self._sides(), +1, full_pages, swa_pages, "group-window", "free_group_end()",
                          self.page_size)
        if swa_pages:
            self.event("free group released SWA pages")
        return None

    @operation
    def clear(self) -> None:
        """Both sides free, every entry 0 but the trailing -1, no group open (probed by a begin/end pair)."""
        self.expect_accepted(self.pool.clear, "clear()", crash_id="clear-restores")
        self.model.clear()
        full, full_avail, swa, swa_avail = self._sides()
        for name, pages, avail, side in (("full", full, full_avail, self.model.full), ("SWA", swa, swa_avail, self.model.swa)):
            check(sorted(pages) == list(range(1, side.num_pages + 1)), "clear-restores", f"clear() left {name} pages out",
                  free=sorted(pages))
            check(avail == side.num_pages * self.page_size, "clear-restores", f"{name} available size after clear()",
                  available=avail)
        table = ints(self.pool.full_to_swa_index_mapping)
        check(not any(table[:-1]) and table[-1:] == [-1], "clear-restores", "clear() left mapping entries",
              entries={i: v for i, v in enumerate(table[:-1]) if v})
        self.expect_accepted(self.pool.free_group_begin, "free_group_begin() after clear()", crash_id="clear-restores")
        self.expect_accepted(self.pool.free_group_end, "free_group_end() after clear()", crash_id="clear-restores")

    # -------------------------------------------------------------- audits
    def audit(self) -> None:
        self.model.self_check()
        audit_sides(self.model, self._sides(), available=int(self.pool.available_size()), size=int(self.pool.size))
        audit_mapping(self.model, ints(self.pool.full_to_swa_index_mapping))

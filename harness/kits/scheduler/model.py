"""Shadow model of a scheduler driving request rows, Mamba slots and paged KV together.

The model is the scheduler's ledger: each live request holds one row, at most
one Mamba slot, and the KV slots of its first ``len(slots)`` tokens.  It says
which rows, slots and pages are free and what a batch must consume; it never
asks the pools.  Pages follow from slots (``slot // page_size``), so the
conservation equation is a statement about the ledger alone: every page is
free or held by exactly one live request (SGLang #4977 leaked a partial page on
retract; #18694 double-freed across finish and retract).

Two options change what "held" means:

* a prefix cache (``cache``): the first ``cached`` slots of a request are the
  cache's (its locked path, shared with every request that matched it); only
  the rest of the row, ``ceil_align(len, ps) - cached`` tokens, is the request's
  own.  Every page is free, cached once, or in one request's own part: SGLang's
  leak equation ``available + evictable + protected + uncached == total``;
* a sliding window (``num_swa_pages``): each position also holds an SWA slot
  until the window passes it (``swa_evicted``); the SWA pages obey the same
  equation on their own side, with ``ceil_align(len, ps) - swa_evicted`` per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poolfuzz.harness.judge.pages import ceil_div, decode_pages_needed, extend_pages_needed
from poolfuzz.harness.kits.scheduler.cache_model import PrefixCacheModel, greedy_next


@dataclass
class ReqState:
    """A live request: its row, Mamba slot, KV slots (position order) and prefill target.

    ``target`` is how many tokens must be in KV before the request decodes: the
    prompt at admission, everything it held before a retract afterwards.
    """

    handle: int
    row: int
    mamba: int | None
    slots: list[int] = field(default_factory=list)
    target: int = 0
    tokens: list[int] = field(default_factory=list)
    """Token ids: the prompt, then decoded tokens (at least ``length`` of them)."""
    cached: int = 0
    """``cache_protected_len``: ``slots[:cached]`` are the cache's, on the path this request locks."""
    swa: list[int] = field(default_factory=list)
    """The SWA slot of each position, 0 once the window passed it (SWA only)."""
    swa_evicted: int = 0
    """Positions below this have released their SWA slots (page-aligned)."""

    @property
    def length(self) -> int:
        return len(self.slots)

    @property
    def prefilling(self) -> bool:
        return self.length < self.target


@dataclass(frozen=True)
class Settlement:
    """A release or checkpoint by the contract: what was cached already, the new protected length, tokens freed."""

    prefix_len: int
    cache_protected_len: int
    duplicates_freed: int
    tail_freed: int


@dataclass
class SchedulerModel:
    """Rows ``1..num_rows``, Mamba slots ``1..num_mamba`` (0 when not hybrid), KV pages ``1..num_pages``."""

    num_rows: int
    num_pages: int
    page_size: int
    num_mamba: int
    hybrid: bool
    num_swa_pages: int = 0
    """SWA pages ``1..num_swa_pages``; 0 without a sliding window."""
    cache: PrefixCacheModel | None = None
    free_rows: set[int] = field(default_factory=set)
    free_mamba: set[int] = field(default_factory=set)
    free_pages: set[int] = field(default_factory=set)
    free_swa: set[int] = field(default_factory=set)
    live: dict[int, ReqState] = field(default_factory=dict)
    next_handle: int = 0

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Every request gone, everything free (handles keep counting up)."""
        self.free_rows = set(range(1, self.num_rows + 1))
        self.free_mamba = set(range(1, self.num_mamba + 1)) if self.hybrid else set()
        self.free_pages = set(range(1, self.num_pages + 1))
        self.free_swa = set(range(1, self.num_swa_pages + 1))
        self.live = {}
        if self.cache is not None:
            self.cache.clear()

    # ------------------------------------------------------------ contract
    def pages_of(self, slots: list[int]) -> set[int]:
        return {slot // self.page_size for slot in slots}

    def extend_pages(self, prefix: int, seq: int) -> int:
        """Fresh pages an extend from ``prefix`` to ``seq`` tokens consumes."""
        return extend_pages_needed(prefix, seq, self.page_size)

    def decode_pages(self, seq: int) -> int:
        """Fresh pages a decode to post-step length ``seq`` consumes."""
        return decode_pages_needed(seq, self.page_size)

    def retract_start(self, keep: int) -> int:
        """First token a retract frees: the page boundary at or below ``keep`` (the #4977 rule).

        Freeing from ``ceil(keep/ps)*ps`` leaves the page holding tokens
        ``floor(keep/ps)*ps .. keep`` owned by nobody: a leak.
        """
        return keep // self.page_size * self.page_size

    def can_admit(self, count: int) -> bool:
        return count <= len(self.free_rows) and (not self.hybrid or count <= len(self.free_mamba))

    # ------------------------------------------------------------ updates
    def admit(self, row: int, mamba: int | None, target: int, tokens: list[int] | None = None) -> ReqState:
        assert row in self.free_rows, f"model: admitting on row {row}, which is not free"
        self.free_rows.remove(row)
        if self.hybrid:
            assert mamba in self.free_mamba, f"model: mamba slot {mamba} is not free"
            self.free_mamba.remove(mamba)
        req = ReqState(self.next_handle, row, mamba, [], target, list(tokens or []))
        self.live[req.handle] = req
        self.next_handle += 1
        return req

    def attach_prefix(self, handle: int, length: int) -> list[int]:
        """Admission's cache hit: the request starts with the cached slots of its first ``length`` tokens, locked."""
        req, cache = self.live[handle], self.cache
        assert cache is not None and not req.slots, "model: a prefix is attached at admission, with a cache"
        req.slots = cache.slots(req.tokens, length)
        req.cached = length
        cache.lock(req.tokens, length)
        return req.slots

    def grow(self, handle: int, slots: list[int], swa_slots: list[int] | None = None) -> None:
        """Append ``slots`` (and their SWA peers); the pages they open leave the free sets."""
        req = self.live[handle]
        fresh = self.pages_of(slots) - self.pages_of(req.slots)
        assert fresh <= self.free_pages, f"model: pages {sorted(fresh - self.free_pages)} are not free"
        if swa_slots is not None:
            fresh_swa = self.pages_of(swa_slots) - self.pages_of([s for s in req.swa if s])
            assert fresh_swa <= self.free_swa, f"model: SWA pages {sorted(fresh_swa - self.free_swa)} are not free"
            self.free_swa -= fresh_swa
            req.swa.extend(swa_slots)
        self.free_pages -= fresh
        req.slots.extend(slots)
        while len(req.tokens) < req.length:
            req.tokens.append(greedy_next(req.tokens))

    def truncate(self, handle: int, keep: int) -> set[int]:
        """Keep the first ``keep`` tokens; returns the pages released.

        With a window, ``keep`` is 0 or above ``swa_evicted``: a kept prefix must end on
        a token that still has its SWA slot, or the next extend has nothing to continue.
        """
        req = self.live[handle]
        released = self.pages_of(req.slots[keep:]) - self.pages_of(req.slots[:keep])
        del req.slots[keep:]
        self.free_pages |= released
        if self.num_swa_pages:
            assert keep == 0 or keep > req.swa_evicted, "model: a retract into the released window"
            self.free_swa |= self.pages_of([s for s in req.swa[keep:] if s]) - self.pages_of([s for s in req.swa[:keep] if s])
            del req.swa[keep:]
            req.swa_evicted = min(req.swa_evicted, keep)
        return released

    def release(self, handle: int) -> ReqState:
        """The request leaves: its row, Mamba slot, SWA slots and the pages of its own (uncached) part."""
        req = self.live.pop(handle)
        self.free_pages |= self.pages_of(req.slots[req.cached :])
        self.free_swa |= self.pages_of([s for s in req.swa if s])
        self.free_rows.add(req.row)
        if req.mamba is not None:
            self.free_mamba.add(req.mamba)
        return req

    def window_start(self, req: ReqState, window: int) -> int:
        """Where the window of a request about to extend from ``req.length`` begins, page-aligned down.

        SGLang 0.5.23 ``free_swa_out_of_window_slots`` without prefix sharing: once a
        token has left the window (``pre_len - window >= swa_evicted + 1``), positions
        below ``floor_page(pre_len - window)`` give their SWA slots back.
        """
        start = req.length - window
        return start // self.page_size * self.page_size if start > req.swa_evicted else req.swa_evicted

    def leave_window(self, handle: int, start: int) -> set[int]:
        """Release the SWA slots of positions ``swa_evicted .. start``; returns the SWA pages freed."""
        req = self.live[handle]
        released = self.pages_of([s for s in req.swa[req.swa_evicted : start] if s])
        req.swa[req.swa_evicted : start] = [0] * (start - req.swa_evicted)
        req.swa_evicted = start
        self.free_swa |= released
        return released

    def settle(self, handle: int, *, insert: bool, release: bool) -> Settlement:
        """What ``checkpoint`` (``insert``) or ``release_request`` does to a request, by the contract.

        The page-aligned tokens are inserted (with ``insert``); the request's own
        pages for a part someone else cached meanwhile are duplicates, freed, and its
        row then names the cache's; the lock moves to the new protected prefix, or is
        dropped on release, which also frees the uncached tail.
        """
        req, cache, ps = self.live[handle], self.cache, self.page_size
        assert cache is not None, "model: settling a request without a cache"
        key_len = req.length - req.length % ps if insert else req.cached
        matched = max(req.cached, cache.match(req.tokens[:key_len]))
        tree = cache.slots(req.tokens, matched)
        duplicates = self.pages_of(req.slots[req.cached : matched]) - self.pages_of(tree[req.cached :])
        req.slots[req.cached : matched] = tree[req.cached :]
        cache.insert(req.tokens, matched, key_len, [req.slots[p] // ps for p in range(matched, key_len, ps)])
        cache.unlock(req.tokens, req.cached)
        tail = self.pages_of(req.slots[key_len:]) if release else set()
        self.free_pages |= duplicates | tail
        result = Settlement(matched, key_len, len(duplicates) * ps, req.length - key_len if release else 0)
        req.cached = key_len
        if release:
            self.release(handle)
        else:
            cache.lock(req.tokens, key_len)
        return result

    def evict(self, victims: set[int]) -> dict[str, list[int]]:
        """Cached pages one ``evict`` freed go back to the free set (see :meth:`PrefixCacheModel.evict`)."""
        assert self.cache is not None, "model: evicting without a cache"
        problems = self.cache.evict(victims)
        if not problems:
            self.free_pages |= victims
        return problems

    # ------------------------------------------------------------ queries
    def ownership_problems(self, free_pages: list[int], held: dict[int, list[int]], num_pages: int | None = None) -> dict[str, list[int]]:
        """The scheduler conservation equation over pages ``1..num_pages`` (the full side's by default),
        given a free list and the slots each holder owns (a live request, or the cache).

        Returns the offending pages by kind (empty when the equation holds):
        ``leaked`` (neither free nor held), ``shared`` (held twice),
        ``free_and_held``, ``duplicate_free`` and ``foreign`` (outside ``1..num_pages``).
        """
        owners: dict[int, int] = {}
        shared: set[int] = set()
        for slots in held.values():
            for page in self.pages_of(slots):
                if page in owners:
                    shared.add(page)
                owners[page] = owners.get(page, 0) + 1
        free = set(free_pages)
        every = set(range(1, (self.num_pages if num_pages is None else num_pages) + 1))
        seen: set[int] = set()
        duplicate = {p for p in free_pages if p in seen or seen.add(p)}  # type: ignore[func-returns-value]
        return {
            k: sorted(v)
            for k, v in {
                "leaked": every - free - set(owners),
                "shared": shared,
                "free_and_held": free & set(owners),
                "duplicate_free": duplicate,
                "foreign": (free | set(owners)) - every,
            }.items()
            if v
        }

    def uncached_tokens(self) -> int:
        """The leak equation's ``uncached``: ``ceil_align(len, ps) - cache_protected_len`` over live requests."""
        ps = self.page_size
        return sum(ceil_div(r.length, ps) * ps - r.cached for r in self.live.values())

    def swa_uncached_tokens(self) -> int:
        """The SWA side's ``uncached``: ``ceil_align(len, ps) - swa_evicted`` over live requests."""
        ps = self.page_size
        return sum(ceil_div(r.length, ps) * ps - r.swa_evicted for r in self.live.values())

    def handles(self, *, prefilling: bool | None = None, max_length: int | None = None) -> list[int]:
        """Live handles, optionally only those (not) prefilling or shorter than ``max_length``."""
        return sorted(
            h
            for h, r in self.live.items()
            if (prefilling is None or r.prefilling == prefilling) and (max_length is None or r.length < max_length)
        )

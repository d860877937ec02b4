"""Shadow model of the SWA hybrid allocator (``SWATokenToKVPoolAllocator``).

Written from the contract (``pools/swa.py``; sglang-pools.md section 2.8), never from
the pool.  Two sides of pages ``1..n`` each (page 0 is padding on both): the full side
holds every token, the SWA side only the tokens still inside the sliding window.  On each
side a page is ``free`` (free list or staging), ``pending`` (enqueued in the open free
group) or ``live``.  A live full page is owned by one handle; a live SWA page is the peer
of exactly one live full page.

The mapping is kept page by page: ``peer[full_page]`` is the SWA page of a full page that
still has SWA KV, and ``mapped`` holds the full slots whose token has a peer, the slot at
the same offset of that SWA page.  Every other full slot maps to 0: free and pending
slots, tokens that left the window (``free_swa``), tokens allocated outside an SWA tail,
and the unused slots of a live page.

Which free page an allocation takes is not fixed here: the free-list order is the
sub-allocators' contract, fuzzed by ``token_kv`` and ``paged_kv``.  The driver checks
that the pages a call took were free on their side and records them with :meth:`take`.

A handle is one request (or one page-size-1 ``alloc``): ``slots[h]`` is its token layout,
the slot of position ``p`` at index ``p``, as in :mod:`poolfuzz.harness.kits.kv.model`.
``released[h]`` remembers every slot it gave back, so a double free can be issued on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poolfuzz.harness.judge.pages import ceil_div, decode_pages_needed, distinct_pages, extend_pages_needed, slots_end


@dataclass
class Side:
    """One side's pages: free, pending in the open group, live (the rest)."""

    num_pages: int
    free: set[int] = field(default_factory=set)
    pending: list[int] = field(default_factory=list)

    def state(self, page: int) -> str:
        """``reserved``, ``foreign``, ``free``, ``pending`` or ``live``."""
        if page == 0:
            return "reserved"
        if not 1 <= page <= self.num_pages:
            return "foreign"
        if page in self.free:
            return "free"
        return "pending" if page in self.pending else "live"

    def take(self, pages: list[int]) -> None:
        assert set(pages) <= self.free, f"model: taking pages {pages} that are not free"
        self.free -= set(pages)

    def release(self, pages: list[int], *, group_open: bool) -> None:
        if group_open:
            self.pending.extend(pages)
        else:
            self.free |= set(pages)

    def end_group(self) -> list[int]:
        pages, self.pending = self.pending, []
        self.free |= set(pages)
        return pages

    def clear(self) -> None:
        self.free = set(range(1, self.num_pages + 1))
        self.pending = []


@dataclass
class SWAModel:
    full_pages: int
    swa_pages: int
    page_size: int

    full: Side = field(init=False)
    swa: Side = field(init=False)
    group_open: bool = False
    owner: dict[int, int] = field(default_factory=dict)
    """Live full page -> the handle that owns it."""
    peer: dict[int, int] = field(default_factory=dict)
    """Full page -> its live SWA page, while some of its tokens are in the window."""
    mapped: set[int] = field(default_factory=set)
    """Full slots whose token has an SWA peer."""
    slots: dict[int, list[int]] = field(default_factory=dict)
    released: dict[int, list[int]] = field(default_factory=dict)
    next_handle: int = 0

    def __post_init__(self) -> None:
        self.full = Side(self.full_pages)
        self.swa = Side(self.swa_pages)
        self.clear()

    # ------------------------------------------------------------- queries
    @property
    def full_slots_end(self) -> int:
        """One past the highest full slot, page 0 included."""
        return slots_end(self.full_pages, self.page_size)

    @property
    def swa_slots_end(self) -> int:
        return slots_end(self.swa_pages, self.page_size)

    def is_live(self, handle: int) -> bool:
        return handle in self.slots

    def handles(self) -> list[int]:
        return sorted(self.slots)

    def swa_slot(self, full_slot: int) -> int:
        """What ``full_to_swa_index_mapping[full_slot]`` must hold."""
        if full_slot not in self.mapped:
            return 0
        ps = self.page_size
        return self.peer[full_slot // ps] * ps + full_slot % ps

    def page_slots(self, pages: list[int]) -> list[int]:
        ps = self.page_size
        return [page * ps + offset for page in pages for offset in range(ps)]

    def pages_of(self, slots: list[int]) -> list[int]:
        """The distinct pages of ``slots``, in order of first appearance."""
        return distinct_pages(slots, self.page_size)

    def windowed_pages(self, handle: int) -> list[int]:
        """The handle's full pages that still have an SWA peer, oldest first."""
        return [p for p in self.pages_of(self.slots[handle]) if p in self.peer]

    def unwindowed_pages(self, handle: int) -> list[int]:
        """The handle's full pages without an SWA peer (left the window, or outside a tail)."""
        return [p for p in self.pages_of(self.slots[handle]) if p not in self.peer]

    def last_in_window(self, handle: int) -> bool:
        """A request can be continued: no prefix, or its last token still has its SWA peer."""
        slots = self.slots[handle]
        return not slots or slots[-1] in self.mapped

    def pages_short(self, full_pages: int, swa_pages: int) -> bool:
        """A call needing these new pages is refused: either side has fewer free pages."""
        return full_pages > len(self.full.free) or swa_pages > len(self.swa.free)

    def extend_pages_needed(self, pre: int, seq: int) -> int:
        return extend_pages_needed(pre, seq, self.page_size)

    def decode_pages_needed(self, seq: int) -> int:
        return decode_pages_needed(seq, self.page_size)

    def tail_pages_needed(self, swa_tail_len: int) -> int:
        return ceil_div(swa_tail_len, self.page_size)

    def tail_aligned(self, seq: int, swa_tail_len: int) -> bool:
        """The SWA tail starts on a page boundary: it is allocated on fresh SWA pages."""
        return (seq - swa_tail_len) % self.page_size == 0

    # ------------------------------------------------------------- changes
    def new_handle(self) -> int:
        handle = self.next_handle
        self.next_handle += 1
        self.slots[handle] = []
        self.released[handle] = []
        return handle

    def take(self, handle: int, slots: list[int], full_pages: list[int], peers: dict[int, int], mapped: list[int]) -> None:
        """``handle`` grows by ``slots`` on the fresh ``full_pages``; ``peers`` pairs fresh full
        pages with fresh SWA pages, and the tokens of ``mapped`` now have SWA peers."""
        self.full.take(full_pages)
        self.swa.take(list(peers.values()))
        for page in full_pages:
            self.owner[page] = handle
        self.peer.update(peers)
        self.mapped.update(mapped)
        self.slots[handle].extend(slots)

    def release_window(self, full_pages: list[int]) -> list[int]:
        """``free_swa``: these full pages lose their SWA peers, whole pages; returns the SWA pages."""
        swa_pages = [self.peer.pop(page) for page in full_pages if page in self.peer]
        self.mapped -= set(self.page_slots(full_pages))
        self.swa.release(swa_pages, group_open=self.group_open)
        return swa_pages

    def release_full(self, handle: int) -> tuple[list[int], list[int]]:
        """``free`` (or ``free_full``) of the whole handle: its full pages and their SWA peers go back.

        Returns ``(full pages, SWA pages)``; the handle is retired.
        """
        pages = self.pages_of(self.slots[handle])
        swa_pages = self.release_window(pages)
        for page in pages:
            del self.owner[page]
        self.full.release(pages, group_open=self.group_open)
        self.released[handle].extend(self.slots.pop(handle))
        return pages, swa_pages

    def begin_group(self) -> None:
        assert not self.group_open, "model: nested free group"
        self.group_open = True

    def end_group(self) -> tuple[list[int], list[int]]:
        """Close the group: ``(full pages, SWA pages)`` released now."""
        assert self.group_open, "model: group end without begin"
        self.group_open = False
        return self.full.end_group(), self.swa.end_group()

    def clear(self) -> None:
        """Both sides free, nothing mapped, no group; every live handle is retired."""
        for handle, slots in self.slots.items():
            self.released[handle].extend(slots)
        self.full.clear()
        self.swa.clear()
        self.group_open = False
        self.owner, self.peer, self.mapped, self.slots = {}, {}, set(), {}

    # --------------------------------------------------------------- sanity
    def self_check(self) -> None:
        """The model's own partitions: a failure here is a harness bug, not a pool bug."""
        full_every = [*self.full.free, *self.full.pending, *self.owner]
        assert sorted(full_every) == list(range(1, self.full_pages + 1)), "model: full partition broken"
        swa_every = [*self.swa.free, *self.swa.pending, *self.peer.values()]
        assert sorted(swa_every) == list(range(1, self.swa_pages + 1)), "model: SWA partition broken"
        assert set(self.peer) <= set(self.owner), "model: a peer of a page nobody owns"
        assert {s // self.page_size for s in self.mapped} <= set(self.peer), "model: a mapped slot without a peer page"

"""Shadow model of a KV token allocator (``TokenToKVPoolAllocator``, ``PagedTokenToKVPoolAllocator``).

Pages ``1..num_pages`` (page 0 is the padding page, never owned) are in exactly
one of four places:

* the free list, in the order allocations take it (head first);
* the staging area -- freed with ``need_sort``, waiting for ``merge_and_sort_free``;
* ``pending`` -- enqueued in the open free group, released at group end;
* ``owner``   -- live, owned by one allocation handle.

Token allocators are the ``page_size == 1`` case, with one difference in
where released pages go: the token allocator appends them to the tail of the
free list in the order given, the paged allocator deduplicates and sorts them
and puts them at the head, so the most recently freed pages are reused first
(SGLang 0.5.23 ``token.py`` / ``paged.py``).

*When* an allocator merges its staging area is its own business: this repo
merges when the free list is short of the exact need, 0.5.23 also when an
upper bound of the need exceeds it, both when a call is refused.  So the free
list and the staging area are kept as a set of :data:`Order` s, every split
the contract allows; a take keeps the orders that hand out exactly the pages
the pool handed out.  Without ``need_sort`` there is always exactly one.

An *allocation handle* is what one ``alloc`` or one new request of
``alloc_extend`` created.  ``slots[h]`` lists its live token slots; for a
request the list is its token layout, slot of position ``p`` at index ``p``
(what ``req_to_token[row, :len]`` would hold).  ``released[h]`` remembers every
slot the handle gave back, so a later double free can be issued on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poolfuzz.harness.judge.pages import decode_pages_needed, distinct_pages, extend_pages_needed, slots_end

Order = tuple[tuple[int, ...], tuple[int, ...]]
"""``(free list, staging area)``: one arrangement of the free pages the pool may be in."""


@dataclass
class KVModel:
    num_pages: int
    page_size: int
    need_sort: bool
    head_release: bool
    """True for the paged allocator (sorted unique pages to the head), False for the token one."""

    orders: list[Order] = field(default_factory=list)
    pending: list[list[int]] | None = None
    pending_segments: list[int] = field(default_factory=list)
    """Pages ``free_segment`` enqueued in the open group, in row order: released after ``pending``'s."""
    owner: dict[int, int] = field(default_factory=dict)
    slots: dict[int, list[int]] = field(default_factory=dict)
    requests: set[int] = field(default_factory=set)
    released: dict[int, list[int]] = field(default_factory=dict)
    next_handle: int = 0

    def __post_init__(self) -> None:
        self.clear()

    # ------------------------------------------------------------- queries
    @property
    def capacity_slots(self) -> int:
        """One past the highest token slot (page 0 included)."""
        return slots_end(self.num_pages, self.page_size)

    @property
    def group_open(self) -> bool:
        return self.pending is not None

    @property
    def has_staged(self) -> bool:
        return any(staged for _, staged in self.orders)

    def available_pages(self) -> int:
        free, staged = self.orders[0]
        return len(free) + len(staged)

    def free_set(self) -> set[int]:
        """Pages an allocation may take: the free list and the staging area (the same in every order)."""
        free, staged = self.orders[0]
        return set(free) | set(staged)

    def pending_pages(self) -> list[int]:
        return [*(p for batch in self.pending or [] for p in batch), *self.pending_segments]

    def is_live(self, handle: int) -> bool:
        return handle in self.slots

    def pages_of(self, slots: list[int]) -> list[int]:
        """The distinct pages of ``slots``, in order of first appearance."""
        return distinct_pages(slots, self.page_size)

    def page_state(self, page: int) -> str:
        """``reserved``, ``foreign``, ``free`` (incl. staged), ``pending`` or ``live``."""
        if page == 0:
            return "reserved"
        if not 1 <= page <= self.num_pages:
            return "foreign"
        if page in self.owner:
            return "live"
        if page in self.pending_pages():
            return "pending"
        return "free"

    def heads(self, num_pages: int) -> list[list[int]]:
        """Every page sequence an allocation of ``num_pages`` may take; empty if the pool is short."""
        options: list[list[int]] = []
        for free, staged in self.orders:
            if num_pages <= len(free):
                options.append(list(free[:num_pages]))
            if staged and num_pages <= len(free) + len(staged):
                options.append(sorted(free + staged)[:num_pages])
        return [list(o) for o in dict.fromkeys(tuple(o) for o in options)]

    def extend_pages_needed(self, pre: int, seq: int) -> int:
        return extend_pages_needed(pre, seq, self.page_size)

    def decode_pages_needed(self, seq: int) -> int:
        return decode_pages_needed(seq, self.page_size)

    # ------------------------------------------------------------- changes
    def new_handle(self, *, request: bool) -> int:
        handle = self.next_handle
        self.next_handle += 1
        self.slots[handle] = []
        self.released[handle] = []
        if request:
            self.requests.add(handle)
        return handle

    def take(self, pages: list[int]) -> None:
        """``pages`` (one of :meth:`heads`) left the free pages: keep the orders that yield them."""
        if not pages:
            self.may_have_merged()  # a call that takes nothing may still merge (upstream's extend bound does)
            return
        n, kept = len(pages), []
        for free, staged in self.orders:
            if list(free[:n]) == pages:
                kept.append((free[n:], staged))
            merged, _ = _merged((free, staged))
            if staged and list(merged[:n]) == pages:
                kept.append((merged[n:], ()))
        assert kept, f"model: {pages} is not a head of {self.orders}"
        self._set_orders(kept)

    def own(self, handle: int, pages: list[int], slots: list[int]) -> None:
        """``handle`` now owns ``pages`` (just taken) and holds ``slots`` more."""
        for page in pages:
            self.owner[page] = handle
        self.slots[handle].extend(slots)

    def may_have_merged(self) -> None:
        """An allocating call may merge the staging area whatever it takes: keep both outcomes."""
        self._set_orders([*self.orders, *(_merged(order) for order in self.orders if order[1])])

    def refused(self) -> None:
        """A refusal may have merged the staging area first (both implementations do)."""
        self.may_have_merged()

    def release_slots(self, handle: int, slots: list[int], *, in_row: bool = False) -> list[int]:
        """``handle`` frees ``slots`` (whole pages, in one call); returns the pages as the free call orders them.

        ``in_row``: the call is ``free_segment``, which releases the pages in the row's order (not sorted)
        and, inside a group, after every page ``free`` enqueued (``paged.py:340-390``)."""
        gone = set(slots)
        self.slots[handle] = [s for s in self.slots[handle] if s not in gone]
        self.released[handle].extend(slots)
        pages = [s // self.page_size for s in slots]
        if in_row:
            pages = list(dict.fromkeys(pages))
        elif self.head_release:
            pages = sorted(set(pages))
        for page in pages:
            self.owner.pop(page, None)
        if self.pending is not None:
            if in_row and self.head_release:
                self.pending_segments.extend(pages)
            else:
                self.pending.append(pages)
        else:
            self._release(pages)
        return pages

    def retire(self, handle: int) -> None:
        """``handle`` holds nothing any more and is no longer live."""
        assert not self.slots[handle], f"model: retiring handle {handle}, which still holds slots"
        del self.slots[handle]
        self.requests.discard(handle)

    def begin_group(self) -> None:
        assert self.pending is None, "model: nested free group"
        self.pending = []

    def end_group(self) -> list[int]:
        """Close the group; the enqueued pages go through one free call.  Returns the pages released."""
        assert self.pending is not None, "model: group end without begin"
        pile = [p for batch in self.pending for p in batch]
        segments, self.pending, self.pending_segments = self.pending_segments, None, []
        pages = sorted(set(pile)) if self.head_release else pile
        self._release(pages)
        if segments:
            self._release(segments)
        return pages + segments

    def merge(self) -> None:
        """``merge_and_sort_free``: sorts only when something is staged (upstream's ``if release pages``)."""
        self._set_orders([_merged(order) for order in self.orders])

    def clear(self) -> None:
        """Every page free in order; every live handle is retired (its slots count as released)."""
        for handle, slots in self.slots.items():
            self.released[handle].extend(slots)
        self.orders = [(tuple(range(1, self.num_pages + 1)), ())]
        self.pending = None
        self.pending_segments = []
        self.owner = {}
        self.slots = {}
        self.requests = set()

    def _release(self, pages: list[int]) -> None:
        added = tuple(pages)
        if self.need_sort:
            self._set_orders([(free, staged + added) for free, staged in self.orders])
        elif self.head_release:
            self._set_orders([(added + free, staged) for free, staged in self.orders])
        else:
            self._set_orders([(free + added, staged) for free, staged in self.orders])

    def _set_orders(self, orders: list[Order]) -> None:
        self.orders = list(dict.fromkeys(orders))

    # --------------------------------------------------------------- sanity
    def self_check(self) -> None:
        """The model's own partition: a failure here is a harness bug, not a pool bug."""
        for free, staged in self.orders:
            every = [*free, *staged, *self.pending_pages(), *self.owner]
            assert sorted(every) == list(range(1, self.num_pages + 1)), f"model partition broken: {self.orders}"


def _merged(order: Order) -> Order:
    """The order after merging its staging area into the free pages (sorted), or unchanged if nothing is staged."""
    free, staged = order
    return (tuple(sorted(free + staged)), ()) if staged else order

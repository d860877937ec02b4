"""The driver of the ``token_kv`` family, and the base of ``paged_kv`` (:mod:`poolfuzz.harness.kits.kv.paged`).

Allocations are named by integer handles the model hands out in order: one per
successful ``alloc`` and one per new request of an ``extend`` batch, so a
trace's ``free(handle=3)`` means the same allocation on every replay.

How the driver learns which pages a call consumed, without trusting internals:
the pages of the returned slots.  ``alloc`` returns whole pages; for
``alloc_extend`` / ``alloc_decode`` the *fresh* pages are those of the slots at
positions past the prefix's partial page (``p >= ceil(pre/ps) * ps``), in batch
order.  Those pages must be exactly the head of the model's free list; that
``available_size()`` fell by exactly the model's page count (computed here with
the ``(seq - 1) % ps == 0`` decode predicate) shows that nothing else was taken
and nothing handed out was left on the free list.  The pool's free pages are
observed only through ``get_all_free_pages()`` and ``available_size()``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, operation
from poolfuzz.harness.judge.invariants import InvariantViolation, check, check_unique
from poolfuzz.harness.judge.limits import is_int
from poolfuzz.harness.kits.kv.config import TokenKVConfig
from poolfuzz.harness.kits.kv.misuse import KVMisuseDriver
from poolfuzz.harness.kits.kv.model import KVModel
from poolfuzz.harness.kits.kv.ops import TokenKVOps
from poolfuzz.pools.errors import BadSizeError, GroupStateError


def ints(tensor: torch.Tensor) -> list[int]:
    return [int(v) for v in tensor.tolist()]


class TokenKVDriver(KVMisuseDriver):
    """``TokenToKVPoolAllocator``: alloc, free, free groups, staging, clear."""

    family = "token_kv"
    ops = TokenKVOps
    paged = False

    config: TokenKVConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.page_size = self.config.tokens_per_page
        self.model = KVModel(self.config.size // self.page_size, self.page_size, need_sort=self.config.need_sort, head_release=self.paged)

    # ------------------------------------------------------------ helpers
    def _free_set_state(self) -> tuple[frozenset[int], int]:
        """The free pages as a set: a refused call may re-sort the free list (``merge_and_sort_free``)."""
        free, available = self._free_state()
        return frozenset(free), available

    def _free_state(self) -> tuple[list[int], int]:
        """What the pool says is free: its free pages (free list plus staging) and ``available_size()``."""
        return ints(self.pool.get_all_free_pages()), int(self.pool.available_size())

    def _check_fresh_slots(self, slots: list[int], what: str) -> None:
        """Slots handed out must be unique, in range, off page 0 and on pages the model holds free."""
        ps, cap = self.page_size, self.model.capacity_slots
        for slot in slots:
            check(not 0 <= slot < ps, "reserved-never-handed-out", f"{what} handed out slot {slot} of page 0")
            check(0 <= slot < cap, "in-bounds", f"{what} handed out slot {slot}", slots_end=cap)
        check_unique(slots, "no-double-allocation", f"slots returned by {what}")

    def _check_pages_free(self, pages: list[int], what: str) -> None:
        check_unique(pages, "no-double-allocation", f"pages taken by {what}")
        free = self.model.free_set()
        for page in pages:
            state = self.model.page_state(page)
            check(page in free, "no-double-allocation", f"{what} took page {page}, which is {state}", owner=self.model.owner.get(page))

    def _match_head(self, pages: list[int], num_pages: int, what: str) -> list[int]:
        """The allowed head of the free pages that ``pages`` came from (same set; the order is checked later)."""
        heads = self.model.heads(num_pages)
        if pages in heads:
            return pages
        for head in heads:
            if set(head) == set(pages):
                return head
        raise InvariantViolation("page-layout", f"{what} did not take the head of the free list", took=pages, heads=heads)

    def _check_consumed(self, before: tuple[list[int], int], pages: list[int], invariant: str, what: str) -> None:
        """After taking ``pages``: exactly those left the free pages, and ``available_size()`` fell by them."""
        free, available = self._free_state()
        expected = before[1] - len(pages) * self.page_size
        check(
            available == expected,
            invariant,
            f"{what} changed available_size() by the wrong amount",
            before=before[1],
            after=available,
            expected=expected,
        )
        check(
            set(free) == set(before[0]) - set(pages),
            "conservation",
            f"{what} left the free pages wrong",
            missing=sorted(set(before[0]) - set(pages) - set(free)),
            extra=sorted(set(free) - set(before[0])),
        )

    def _free_valid(
        self, handle: int, slots: list[int], sent: list[int], what: str, segment: Callable[[torch.Tensor], Any] | None = None
    ) -> None:
        """Free ``sent`` (tokens naming exactly the pages of ``slots``, all owned by ``handle``).

        Afterwards the tensor passed to ``free`` is zeroed, as a caller reusing
        its buffer would: SGLang #34067 queued views of ``req_to_token`` rows in
        a free group and released whatever the next request wrote there.  A
        pool must have taken the values, so this is harmless unless it kept a
        reference (in a free group or in the ``need_sort`` staging area).
        ``segment``: the call is ``free_segment`` (this callable), whose pages the model releases in row order.
        """
        before = self._free_state()
        indices = self._tensor(sent)
        call = segment or self.pool.free
        self.expect_accepted(lambda: call(indices), what)
        indices.zero_()
        in_row = segment is not None
        if self.model.group_open:
            self.model.release_slots(handle, slots, in_row=in_row)
            check(self._free_state() == before, "group-window", f"{what} inside a free group released pages early")
            self.event("free deferred by a free group")
            return
        pages = self.model.release_slots(handle, slots, in_row=in_row)
        free, available = self._free_state()
        check_unique(free, "no-double-allocation", f"free pages after {what}")
        check(
            set(free) == set(before[0]) | set(pages),
            "conservation",
            f"{what} released the wrong pages",
            released=sorted(set(free) - set(before[0])),
            expected=sorted(set(pages)),
        )
        expected = before[1] + len(set(pages)) * self.page_size
        check(
            available == expected,
            "conservation",
            f"{what} changed available_size() by the wrong amount",
            before=before[1],
            after=available,
            expected=expected,
        )

    # --------------------------------------------------------- operations
    @operation
    def alloc(self, need_size: float | bool) -> int | None:
        """``alloc(need_size)``; returns the new allocation's handle, or ``None`` if refused."""
        ps = self.page_size
        what = f"alloc({need_size!r})"
        if not is_int(need_size) or need_size < 0 or need_size % ps:
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(lambda: self.pool.alloc(need_size), BadSizeError, what)
            return None
        num_pages = int(need_size) // ps
        heads = self.model.heads(num_pages)
        if not heads:
            self.expect_refused(
                lambda: self.pool.alloc(need_size),
                what,
                state=self._free_set_state,
                crash_id="empty-pool-guard",
                free_pages=self.model.available_pages(),
            )
            self.model.refused()
            self.event("alloc refused: pool short")
            return None
        before = self._free_state()
        crash = "empty-pool-guard" if num_pages == 0 else "valid-call-accepted"
        result = self.expect_accepted(lambda: self.pool.alloc(need_size), what, crash_id=crash)
        check(result is not None, "empty-pool-guard", f"{what} refused with {self.model.available_pages()} pages free")
        slots = ints(result)
        check(len(slots) == need_size, "empty-pool-guard", f"{what} returned {len(slots)} slots", slots=slots)
        self._check_fresh_slots(slots, what)
        pages = [s // ps for s in slots[::ps]]
        for i, page in enumerate(pages):
            check(
                slots[i * ps : (i + 1) * ps] == list(range(page * ps, page * ps + ps)),
                "page-layout",
                f"{what} returned a page that is not whole and in order",
                slots=slots[i * ps : (i + 1) * ps],
            )
        self._check_pages_free(pages, what)
        head = self._match_head(pages, num_pages, what)
        check(pages == head, "page-layout", f"{what} took the head of the free list out of order", took=pages, head=head)
        self._check_consumed(before, pages, "empty-pool-guard" if num_pages == 0 else "conservation", what)
        if num_pages and self.model.has_staged:
            self.event("alloc while pages are staged")
        self.model.take(pages)
        handle = self.model.new_handle(request=False)
        self.model.own(handle, pages, slots)
        if not self.model.available_pages():
            self.event("pool exactly full")
        return handle

    @operation
    def free(self, handle: int) -> None:
        """Free everything ``handle`` holds (a request: its whole token layout)."""
        if not self.model.is_live(handle):
            return SKIPPED  # type: ignore[return-value]  # freed or cleared: free_again is the misuse probe
        slots = list(self.model.slots[handle])
        self._free_valid(handle, slots, slots, f"free(handle {handle})")
        self.model.retire(handle)

    @operation
    def free_part(self, handle: int, count: int, sparse: bool = False) -> None:
        """Free the first ``count`` pages (clipped to 1..held) of a plain allocation; ``sparse`` names one token a page."""
        if not self.model.is_live(handle) or handle in self.model.requests or not self.model.slots[handle]:
            return SKIPPED  # type: ignore[return-value]
        pages = self.model.pages_of(self.model.slots[handle])
        chosen = set(pages[: max(1, min(count, len(pages)))])
        slots = [s for s in self.model.slots[handle] if s // self.page_size in chosen]
        sent = [s for s in slots if s % self.page_size == self.page_size - 1] if sparse else slots
        self._free_valid(handle, slots, sent, f"free_part(handle {handle}, {len(chosen)} pages)")

    @operation
    def free_segment(self, handle: int, start_page: int, trim: int = 0) -> None:
        """``free_segment(row[start:end], start_pos=start)``, as ``free_kv_row_segments`` and radix eviction free
        a row: of a plain allocation the pages from ``start_page`` (clipped) on, the last page's last ``trim``
        tokens left out (a row ending inside a page; clipped to keep one); of a request its whole row (which
        ends where its tokens do).  Every page is released whole, in the row's order.  Skipped for a target
        without ``free_segment``."""
        call = getattr(self.pool, "free_segment", None)
        if call is None or not self.model.is_live(handle) or not self.model.slots[handle]:
            return SKIPPED  # type: ignore[return-value]
        ps, held = self.page_size, list(self.model.slots[handle])
        request = handle in self.model.requests  # a request's whole row, as release frees it from its start
        first = 0 if request else min(max(start_page, 0), len(held) // ps - 1) * ps
        end = len(held) if request else len(held) - min(max(trim, 0), ps - 1)
        slots, sent = held[first:], held[first:end]
        self._free_valid(
            handle, slots, sent, f"free_segment(handle {handle}, start_pos={first})", segment=lambda indices: call(indices, start_pos=first)
        )
        if request:
            self.model.retire(handle)
        if len(sent) % ps:
            self.event("free_segment of a row ending inside a page")

    @operation
    def group_begin(self) -> None:
        if self.model.group_open:
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(self.pool.free_group_begin, GroupStateError, "nested free_group_begin()")
            return
        self.expect_accepted(self.pool.free_group_begin, "free_group_begin()")
        self.model.begin_group()

    @operation
    def group_end(self) -> None:
        """Close the group: exactly the pages enqueued (by value, at enqueue time) are released, now."""
        if not self.model.group_open:
            if not self.check_misuse:
                return SKIPPED  # type: ignore[return-value]
            self.expect_rejected(self.pool.free_group_end, GroupStateError, "free_group_end() without begin")
            return
        before = self._free_state()
        self.expect_accepted(self.pool.free_group_end, "free_group_end()", crash_id="group-window")
        pages = set(self.model.end_group())
        free, available = self._free_state()
        check_unique(free, "no-double-allocation", "free pages after free_group_end()")
        check(
            set(free) == set(before[0]) | pages,
            "group-window",
            "free_group_end() released other pages than enqueued",
            released=sorted(set(free) - set(before[0])),
            enqueued=sorted(pages),
        )
        check(
            available == before[1] + len(pages) * self.page_size,
            "group-window",
            "free_group_end() changed available_size() by the wrong amount",
            before=before[1],
            after=available,
        )
        if pages:
            self.event("free group released pages")

    @operation
    def merge(self) -> None:
        before = self._free_state()
        self.expect_accepted(self.pool.merge_and_sort_free, "merge_and_sort_free()")
        self.model.merge()
        after = self._free_state()
        check(
            sorted(after[0]) == sorted(before[0]) and after[1] == before[1],
            "conservation",
            "merge_and_sort_free() changed the free pages",
            before=before,
            after=after,
        )

    @operation
    def clear(self) -> None:
        """Clear; afterwards every page is free and no group is open (probed by a begin/end pair)."""
        self.expect_accepted(self.pool.clear, "clear()", crash_id="clear-restores")
        self.model.clear()
        free, available = self._free_state()
        check(sorted(free) == list(range(1, self.model.num_pages + 1)), "clear-restores", "clear() left pages out", free=free)
        check(available == self.model.num_pages * self.page_size, "clear-restores", "available_size() after clear()", available=available)
        self.expect_accepted(self.pool.free_group_begin, "free_group_begin() after clear()", crash_id="clear-restores")
        self.expect_accepted(self.pool.free_group_end, "free_group_end() after clear()", crash_id="clear-restores")

    # ------------------------------------------------------------- audits
    def observe(self) -> Hashable:
        free, available = self._free_state()
        return tuple(free), available

    def audit(self) -> None:
        self.model.self_check()
        pending = getattr(self.pool, "pending_free_pages", None)
        if pending is not None:
            enqueued = sorted(set(ints(pending())))
            check(
                enqueued == sorted(set(self.model.pending_pages())),
                "group-window",
                "pending_free_pages() differs from the pages the open group enqueued",
                pending=enqueued,
                expected=sorted(set(self.model.pending_pages())),
            )
        free, available = self._free_state()
        check_unique(free, "no-double-allocation", "the pool's free pages")
        check(0 not in free, "reserved-never-handed-out", "page 0 is among the free pages")
        outside = [p for p in free if not 1 <= p <= self.model.num_pages]
        check(not outside, "in-bounds", "free pages that do not exist", pages=outside)
        expected = self.model.free_set()
        check(
            set(free) == expected,
            "conservation",
            "free pages differ from the model",
            missing=sorted(expected - set(free)),
            extra=sorted(set(free) - expected),
        )
        check(
            available == self.model.available_pages() * self.page_size,
            "conservation",
            "available_size() disagrees",
            available=available,
            expected=self.model.available_pages() * self.page_size,
        )

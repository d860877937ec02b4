"""The checks a generated standalone reproduction carries (:mod:`poolfuzz.harness.traces.repro_script` writes this
file's source into every script it generates, so it imports only torch and the standard library, never poolfuzz).

It keeps, in plain Python, the bookkeeping poolfuzz's drivers keep (``harness/kits/{kv,swa,mamba}/driver.py``): which
allocation (a handle, numbered in the order the trace makes them) holds which slots, which pages a free group
deferred, which Mamba slots a group window reserved.  Around every upstream call it checks what the driver checks
of that call, under the same invariant names, and stops at the first one broken (:class:`Reproduced`):

* ``empty-pool-guard``: a call is refused (``None``) exactly when a side has fewer free pages than it needs, and a
  refused call leaves every side's free size as it was;
* ``reserved-never-handed-out``: no slot on padding page 0 (Mamba: slot 0); ``in-bounds``: no slot past the pool;
* ``no-double-allocation``: no slot twice in one answer, no fresh page (Mamba: slot) another allocation holds;
* ``page-layout``: as many slots as tokens, a continuation on the request's own last page, and a side's free size
  fallen by exactly the pages taken; ``conservation``: a free (outside a group) gives back exactly its pages;
* ``group-window``: a free inside a free group releases nothing until ``free_group_end``, which releases exactly
  those pages; a Mamba window reserves its requests' slots and ``alloc(1)`` hands them out in order;
* ``clear-restores``: after ``clear`` every side is wholly free and no Mamba reservation is left.

Checks the drivers make that need the oracle's exact slots (the head of the free list, the loop oracle) are left out:
a script shows a bug by what the allocator's callers can observe.  A call that raises is ``valid-call-accepted``.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch

Call = Callable[[], Any]
"""An upstream call, made inside a check (its answer is whatever the upstream method returns)."""


class Reproduced(Exception):
    """An invariant broke: its name, the step of the trace, what happened and the numbers."""

    def __init__(self, invariant: str, message: str, **numbers: object) -> None:
        super().__init__(message)
        self.invariant, self.message, self.numbers, self.step = invariant, message, numbers, 0

    def report(self) -> str:
        shown = "".join(f"\n  {name} = {value}" for name, value in self.numbers.items())
        return f"REPRODUCED: [{self.invariant}] at step {self.step}: {self.message}{shown}"


def check(ok: bool, invariant: str, message: str, **numbers: object) -> None:
    if not ok:
        raise Reproduced(invariant, message, **numbers)


def t(values: list[int]) -> torch.Tensor:
    """A batch argument as upstream's callers pass it: a 1-D int64 tensor (on the CPU)."""
    return torch.tensor(values, dtype=torch.int64)


def ints(values: Any) -> list[int]:
    return [int(v) for v in values.reshape(-1).tolist()]


@contextlib.contextmanager
def at(step: int, op: str) -> Iterator[None]:
    """Step ``step`` of the trace (``op`` as the trace writes it): printed, and named by what breaks inside."""
    print(f"step {step}: {op}")
    try:
        yield
    except Reproduced as found:
        found.step = step
        raise


def accepted(what: str, call: Call) -> Any:
    """``call()``, printed with its answer; an exception from upstream is a broken invariant, not a crash of the script."""
    try:
        result = call()
    except Exception as exc:  # what upstream raised is the finding
        raise Reproduced("valid-call-accepted", f"{what} raised {type(exc).__name__}: {exc}") from exc
    print(f"  {what} -> {ints(result) if isinstance(result, torch.Tensor) else result}")
    return result


def one_per_page(slots: list[int], page_size: int) -> list[int]:
    """The first slot of each page: a free must release the whole page of any slot it names."""
    return [s for i, s in enumerate(slots) if i == 0 or s // page_size != slots[i - 1] // page_size]


class KVRun:
    """A token, paged or SWA KV allocator under the trace's calls: ``held`` maps each live allocation to its slots
    (a request's in token order), ``sides`` reads each side's free size in tokens (``full``, and ``SWA`` for an
    SWA pool: both sides take the same pages), ``num_pages`` is the full side's page count."""

    def __init__(self, page_size: int, num_pages: int, sides: dict[str, Callable[[], int]]) -> None:
        self.page_size, self.num_pages, self.sides = page_size, num_pages, sides
        self.held: dict[int, list[int]] = {}
        self.handles = 0
        self.group_open = False
        self.pending: set[int] = set()  # pages freed inside the open free group

    def first_pages(self, handle: int, count: int) -> list[int]:
        """The slots of the first ``count`` pages (clipped to 1..held) of allocation ``handle``."""
        ps, row = self.page_size, self.held[handle]
        pages = list(dict.fromkeys(s // ps for s in row))
        chosen = set(pages[: max(1, min(count, len(pages)))])
        return [s for s in row if s // ps in chosen]

    def free_sizes(self) -> dict[str, int]:
        return {side: int(size()) for side, size in self.sides.items()}

    def tails(self, handles: list[int | None]) -> tuple[list[int], list[int]]:
        """Each request's length and ``last_loc`` (the slot of its last token, -1 for none), as callers send them."""
        rows = [self.held[h] if h is not None else [] for h in handles]
        return [len(row) for row in rows], [row[-1] if row else -1 for row in rows]

    def extend_pages(self, pres: list[int], seqs: list[int]) -> int:
        ps = self.page_size
        return sum(-(-s // ps) - -(-p // ps) for p, s in zip(pres, seqs))

    def decode_pages(self, seqs: list[int]) -> int:
        return sum((s - 1) % self.page_size == 0 for s in seqs)

    def allocate(self, what: str, call: Call, *, owners: list[int | None], pres: list[int], seqs: list[int], need: int) -> None:
        """An allocating call for ``owners`` (``None``: a new allocation) growing from ``pres`` to ``seqs`` tokens."""
        ps, before = self.page_size, self.free_sizes()
        short = [side for side, free in before.items() if need * ps > free]
        result = accepted(what, call)
        if short:
            check(
                result is None,
                "empty-pool-guard",
                f"{what} needs {need} pages with the {short[0]} side short, yet it handed out slots",
                slots=None if result is None else ints(result),
                free_tokens=before,
            )
            after = self.free_sizes()
            check(
                after == before,
                "empty-pool-guard",
                f"{what} was refused (the {short[0]} side is short) but kept pages",
                free_tokens_before=before,
                free_tokens_after=after,
                need_pages=need,
            )
            return
        check(result is not None, "empty-pool-guard", f"{what} was refused with enough free", need_pages=need, free_tokens=before)
        slots, total = ints(result), sum(seqs) - sum(pres)
        check(len(slots) == total, "page-layout", f"{what} returned {len(slots)} slots for {total} tokens", slots=slots)
        for slot in slots:
            check(slot >= ps, "reserved-never-handed-out", f"{what} handed out slot {slot}, on padding page 0", slots=slots)
            check(slot < (self.num_pages + 1) * ps, "in-bounds", f"{what} handed out slot {slot} past the pool", slots=slots)
        check(len(set(slots)) == len(slots), "no-double-allocation", f"{what} handed out a slot twice", slots=slots)
        holder = {s // ps: h for h, row in self.held.items() for s in row}
        start, fresh = 0, set()
        for owner, pre, seq in zip(owners, pres, seqs):
            mine = slots[start : start + seq - pre]
            first_new = -(-pre // ps) * ps
            for position, slot in enumerate(mine, pre):
                page = slot // ps
                if position < first_new:  # the rest of the request's own last page
                    check(
                        owner is not None and page == self.held[owner][-1] // ps,
                        "page-layout",
                        f"{what}: token {position} left the request's last page",
                        slot=slot,
                    )
                    continue
                check(
                    page not in holder,
                    "no-double-allocation",
                    f"{what} handed out slot {slot}, on page {page}, which allocation {holder.get(page)} holds",
                    slots=slots,
                    held={h: row for h, row in self.held.items() if row},
                )
                fresh.add(page)
            if owner is None:
                owner, self.handles = self.handles, self.handles + 1
                self.held[owner] = []
            self.held[owner] += mine
            start += seq - pre
        after = self.free_sizes()
        expected = {side: free - len(fresh) * ps for side, free in before.items()}
        check(
            after == expected,
            "page-layout",
            f"{what} took {len(fresh)} fresh pages but the free sizes moved otherwise",
            free_tokens_before=before,
            free_tokens_after=after,
            expected=expected,
        )

    def release(self, what: str, call: Call, handle: int, slots: list[int]) -> None:
        """A free of ``slots`` (whole pages) of allocation ``handle``: released now, or at ``free_group_end``."""
        ps, before = self.page_size, self.free_sizes()
        accepted(what, call)
        pages = {s // ps for s in slots}
        self.held[handle] = [s for s in self.held[handle] if s // ps not in pages]
        if not self.held[handle]:
            del self.held[handle]
        after = self.free_sizes()
        if self.group_open:
            self.pending |= pages
            check(
                after == before,
                "group-window",
                f"{what} inside a free group released pages early",
                free_tokens_before=before,
                free_tokens_after=after,
            )
            return
        expected = {side: free + len(pages) * ps for side, free in before.items()}
        check(
            after == expected,
            "conservation",
            f"{what} released {len(pages)} pages but the free sizes moved otherwise",
            free_tokens_before=before,
            free_tokens_after=after,
            expected=expected,
        )

    def group_begin(self, call: Call) -> None:
        accepted("free_group_begin()", call)
        self.group_open = True

    def group_end(self, call: Call) -> None:
        before = self.free_sizes()
        accepted("free_group_end()", call)
        expected = {side: free + len(self.pending) * self.page_size for side, free in before.items()}
        after = self.free_sizes()
        check(
            after == expected,
            "group-window",
            f"free_group_end() released other than the {len(self.pending)} pages enqueued",
            free_tokens_before=before,
            free_tokens_after=after,
            expected=expected,
        )
        self.group_open, self.pending = False, set()

    def unchanged(self, what: str, call: Call) -> None:
        """A call that moves no page (``merge_and_sort_free``)."""
        before = self.free_sizes()
        accepted(what, call)
        check(self.free_sizes() == before, "conservation", f"{what} changed the free sizes", before=before, after=self.free_sizes())

    def clear(self, call: Call, sizes: dict[str, int]) -> None:
        """``clear()``: afterwards each side holds ``sizes`` free tokens, nothing is held, no group is open."""
        accepted("clear()", call)
        after = self.free_sizes()
        check(after == sizes, "clear-restores", "clear() did not free every page", free_tokens=after, expected=sizes)
        self.held, self.group_open, self.pending = {}, False, set()


class SlotRun:
    """A Mamba slot allocator under the trace's calls: slots 1..``size`` free, live (by handle) or reserved by the
    open window (upstream keeps the reservation as the iterator ``_alloc_iter``; its length is what is left)."""

    def __init__(self, pool: Any, size: int) -> None:
        self.pool, self.size = pool, size
        self.free: set[int] = set(range(1, size + 1))
        self.live: dict[int, int] = {}  # slot -> the handle holding it
        self.reserved: list[int] = []  # the open window's unconsumed reservation, in hand-out order
        self.handles: dict[int, int] = {}  # handle -> its slot

    def reserved_size(self) -> int:
        iterator = self.pool._alloc_iter  # upstream's reservation: the slots alloc(1) hands out next
        return 0 if iterator is None else operator.length_hint(iterator)

    def counts(self, what: str) -> None:
        available, reserved = int(self.pool.available_size()), self.reserved_size()
        check(available == len(self.free), "conservation", f"after {what}, available_size() is {available}", expected=len(self.free))
        check(
            reserved == len(self.reserved),
            "conservation",
            f"after {what}, the reservation holds {reserved} slots",
            expected=len(self.reserved),
        )

    def group_begin(self, num_reqs: int) -> None:
        what = f"alloc_group_begin({num_reqs})"
        before = ints(self.pool.free_slots)
        accepted(what, lambda: self.pool.alloc_group_begin(num_reqs))
        after = set(ints(self.pool.free_slots))
        taken = [s for s in dict.fromkeys(before) if s not in after]
        expected = num_reqs if num_reqs <= len(self.free) else 0
        check(
            len(taken) == expected == self.reserved_size(),
            "group-window",
            f"{what} with {len(self.free)} free must reserve {expected}",
            reserved=taken,
            reserved_size=self.reserved_size(),
        )
        check(0 not in taken, "reserved-never-handed-out", f"{what} reserved padding slot 0")
        check(set(taken) <= self.free, "no-double-allocation", f"{what} reserved slots that were not free", slots=taken)
        self.free -= set(taken)
        self.reserved = taken

    def group_end(self) -> None:
        available = int(self.pool.available_size())
        accepted("alloc_group_end()", self.pool.alloc_group_end)
        returned = int(self.pool.available_size()) - available
        check(
            returned == len(self.reserved),
            "group-window",
            "alloc_group_end() must return exactly the unconsumed reservation",
            returned=returned,
            unconsumed=self.reserved,
        )
        self.free |= set(self.reserved)
        self.reserved = []

    def alloc(self, need_size: int) -> None:
        what = f"alloc({need_size})"
        reserved = self.reserved[:1] if need_size == 1 else []
        result = accepted(what, lambda: self.pool.alloc(need_size))
        if not reserved and need_size > len(self.free):
            check(
                result is None,
                "empty-pool-guard",
                f"{what} with {len(self.free)} free handed out slots",
                slots=None if result is None else ints(result),
            )
            return
        check(result is not None, "empty-pool-guard", f"{what} refused with {len(self.free)} free", reserved=self.reserved)
        slots = ints(result)
        check(len(slots) == need_size, "empty-pool-guard", f"{what} returned {len(slots)} slots", slots=slots)
        check(len(set(slots)) == len(slots), "no-double-allocation", f"{what} returned a slot twice", slots=slots)
        for position, slot in enumerate(slots):
            check(slot != 0, "reserved-never-handed-out", f"{what} handed out padding slot 0")
            check(1 <= slot <= self.size, "in-bounds", f"{what} returned slot {slot}", size=self.size)
            check(
                slot not in self.live, "no-double-allocation", f"{what} returned slot {slot}, which allocation {self.live.get(slot)} holds"
            )
            if position < len(reserved):
                check(
                    slot == reserved[position],
                    "group-window",
                    f"{what} must hand out the reservation in order",
                    expected=reserved[position],
                    actual=slot,
                )
                self.reserved.pop(0)
            else:
                check(
                    slot in self.free, "group-window", f"{what} handed out reserved slot {slot} outside alloc(1)", reservation=self.reserved
                )
                self.free.discard(slot)
            handle = len(self.handles)
            self.handles[handle], self.live[slot] = slot, handle
        self.counts(what)

    def release(self, slots: list[int], what: str, dtype: torch.dtype = torch.int64) -> None:
        accepted(what, lambda: self.pool.free(t(slots).to(dtype)))
        for slot in slots:
            self.live.pop(slot, None)
            self.free.add(slot)
        self.counts(what)

    def clear(self) -> None:
        accepted("clear()", self.pool.clear)
        check(
            self.reserved_size() == 0,
            "clear-restores",
            "clear() kept the open window's unconsumed reservation: alloc(1) hands those slots out again, and they are on the free list too",
            reserved_size=self.reserved_size(),
            free_slots=ints(self.pool.free_slots),
        )
        available = int(self.pool.available_size())
        check(available == self.size, "clear-restores", "clear() left Mamba slots allocated", available=available, size=self.size)
        self.free, self.live, self.reserved = set(range(1, self.size + 1)), {}, []

"""The checks a generated standalone reproduction carries (:mod:`poolfuzz.harness.traces.repro_script` writes this
file's source into every script it generates, so it imports only torch and the standard library, never poolfuzz;
the Mamba slot checks are :mod:`~poolfuzz.harness.traces.repro_slots`, written after it into Mamba scripts).

It keeps, in plain Python, the bookkeeping poolfuzz's KV and SWA drivers keep (``harness/kits/{kv,swa}/driver.py``):
which allocation (a handle, numbered in the order the trace makes them) holds which slots, which of its pages still
have an SWA peer, which pages a free group deferred.  Around every upstream call it checks what the driver checks
of that call, under the same invariant names, and stops at the first one broken (:class:`Reproduced`):

* ``empty-pool-guard``: a call is refused (``None``) exactly when a side has fewer free pages than it needs, and a
  refused call leaves every side's free size as it was;
* ``reserved-never-handed-out``: no slot on padding page 0; ``in-bounds``: no slot past the pool;
* ``no-double-allocation``: no slot twice in one answer, no fresh page another allocation holds;
* ``page-layout``: as many slots as tokens, a continuation on the request's own last page, and each side's free
  size fallen by exactly the pages taken there; ``conservation``: a free (outside a group) gives back exactly its
  pages on each side (on the SWA side, those that still had a peer);
* ``group-window``: a free inside a free group releases nothing until ``free_group_end``, which releases exactly
  those pages;
* ``clear-restores``: after ``clear`` every side is wholly free.

Checks the drivers make that need the oracle's exact slots (the head of the free list, the loop oracle, the SWA
mapping table) are left out: a script shows a bug by what the allocator's callers can observe.  A call that raises
is ``valid-call-accepted``.
"""

from __future__ import annotations

import contextlib
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


def free_row(pool: Any, dead: list[int], alive: list[int]) -> None:
    """A request's row freed as upstream's callers free it (``free_kv_row_segments``, ``mem_cache/common.py``): the
    slots whose page lost its SWA peer with ``free_full``, the rest with ``free``."""
    if dead:
        pool.free_full(t(dead))
    if alive:
        pool.free(t(alive))


class KVRun:
    """A token, paged or SWA KV allocator under the trace's calls: ``held`` maps each live allocation to its slots
    (a request's in token order), ``sides`` reads each side's free size in tokens (``full``, and ``SWA`` for a
    hybrid SWA pool), ``num_pages`` is the full side's page count.  With both sides, ``windowed`` keeps each
    allocation's full pages that still have an SWA peer (oldest first): the SWA side gives back only those."""

    def __init__(self, page_size: int, num_pages: int, sides: dict[str, Callable[[], int]]) -> None:
        self.page_size, self.num_pages, self.sides = page_size, num_pages, sides
        self.two_sided = set(sides) == {"full", "SWA"}
        self.held: dict[int, list[int]] = {}
        self.requests: set[int] = set()  # the allocations an extend made (a request's row), not a plain alloc
        self.windowed: dict[int, list[int]] = {}
        self.handles = 0
        self.group_open = False
        self.pending: dict[str, set[int]] = {side: set() for side in sides}  # pages freed inside the open free group

    def out_of_window(self, handle: int, slots: list[int]) -> tuple[list[int], list[int]]:
        """``slots`` of ``handle`` split into those whose page lost its SWA peer and the rest."""
        window = set(self.windowed.get(handle, ()))
        return [s for s in slots if s // self.page_size not in window], [s for s in slots if s // self.page_size in window]

    def window_slots(self, handle: int, pages: int) -> list[int]:
        """The slots of ``handle``'s oldest ``pages`` (at least 1) pages that still have an SWA peer: the window slides."""
        chosen = set(self.windowed[handle][: max(1, pages)])
        return [s for s in self.held[handle] if s // self.page_size in chosen]

    def segment(self, handle: int, start_page: int, trim: int) -> tuple[list[int], list[int], int]:
        """``free_segment`` as ``free_kv_row_segments`` and radix eviction free a row: of a request its whole row, of a
        plain allocation the pages from ``start_page`` (clipped) on, the last one's last ``trim`` tokens left out (a row
        ending inside a page).  Returns the slots released (whole pages), the slots sent, and ``start_pos``."""
        ps, row = self.page_size, self.held[handle]
        request = handle in self.requests
        first = 0 if request else min(max(start_page, 0), len(row) // ps - 1) * ps
        end = len(row) if request else len(row) - min(max(trim, 0), ps - 1)
        return row[first:], row[first:end], first

    def tail_pages(self, swa_tail_len: int) -> int:
        return -(-swa_tail_len // self.page_size)

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

    def allocate(
        self,
        what: str,
        call: Call,
        *,
        owners: list[int | None],
        pres: list[int],
        seqs: list[int],
        need: int,
        need_swa: int | None = None,
        window_from: list[int] | None = None,
        request: bool = False,
    ) -> None:
        """An allocating call for ``owners`` (``None``: a new allocation) growing from ``pres`` to ``seqs`` tokens,
        taking ``need`` fresh pages on each side (``need_swa`` on the SWA side of an SWA tail, whose tokens from
        ``window_from`` on get SWA peers); ``request``: the new allocations are requests (an extend's)."""
        ps, before = self.page_size, self.free_sizes()
        needs = {side: need_swa if side == "SWA" and need_swa is not None else need for side in before}
        short = [side for side, free in before.items() if needs[side] * ps > free]
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
        start, fresh, peered = 0, set(), []
        for owner, pre, seq, since in zip(owners, pres, seqs, window_from or pres):
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
                if self.two_sided and position >= since and page not in peered:
                    peered.append(page)
            if owner is None:
                owner, self.handles = self.handles, self.handles + 1
                self.held[owner] = []
                if request:
                    self.requests.add(owner)
            self.held[owner] += mine
            self.windowed[owner] = self.windowed.get(owner, []) + [p for p in peered if p in {s // ps for s in mine}]
            start += seq - pre
        after = self.free_sizes()
        taken = {side: len(peered) if self.two_sided and side == "SWA" else len(fresh) for side in before}
        expected = {side: free - taken[side] * ps for side, free in before.items()}
        check(
            after == expected,
            "page-layout",
            f"{what} took {len(fresh)} fresh pages but the free sizes moved otherwise",
            free_tokens_before=before,
            free_tokens_after=after,
            expected=expected,
        )

    def release(self, what: str, call: Call, handle: int, slots: list[int], *, full: bool = True) -> None:
        """A free of ``slots`` (whole pages) of allocation ``handle``, released now or at ``free_group_end``: on the
        full side unless ``full`` is false (``free_swa``), on the SWA side the pages among them that had a peer."""
        ps, before = self.page_size, self.free_sizes()
        accepted(what, call)
        pages = {s // ps for s in slots}
        peers = pages & set(self.windowed.get(handle, ()))
        released = {side: peers if self.two_sided and side == "SWA" else pages if full else set() for side in before}
        self.windowed[handle] = [p for p in self.windowed.get(handle, ()) if p not in peers]
        if full:
            self.held[handle] = [s for s in self.held[handle] if s // ps not in pages]
            if handle in self.requests and not self.held[handle]:
                self.requests.discard(handle)
        after = self.free_sizes()
        if self.group_open:
            for side, gone in released.items():
                self.pending[side] |= gone
            check(
                after == before,
                "group-window",
                f"{what} inside a free group released pages early",
                free_tokens_before=before,
                free_tokens_after=after,
            )
            return
        expected = {side: free + len(released[side]) * ps for side, free in before.items()}
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
        expected = {side: free + len(self.pending[side]) * self.page_size for side, free in before.items()}
        after = self.free_sizes()
        check(
            after == expected,
            "group-window",
            "free_group_end() released other pages than the group enqueued",
            free_tokens_before=before,
            free_tokens_after=after,
            expected=expected,
        )
        self.group_open, self.pending = False, {side: set() for side in self.sides}

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
        self.held, self.requests, self.windowed, self.group_open = {}, set(), {}, False
        self.pending = {side: set() for side in self.sides}

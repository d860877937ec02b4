"""Shadow model of a scheduler driving request rows, Mamba slots and paged KV together.

The model is the scheduler's ledger: each live request holds one row, at most
one Mamba slot, and the KV slots of its first ``len(slots)`` tokens.  It says
which rows, slots and pages are free and what a batch must consume; it never
asks the pools.  Pages follow from slots (``slot // page_size``), so the
conservation equation is a statement about the ledger alone: every page is
free or held by exactly one live request (SGLang #4977 leaked a partial page on
retract; #18694 double-freed across finish and retract).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.judge.models.pages import decode_pages_needed, extend_pages_needed


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

    @property
    def length(self) -> int:
        return len(self.slots)

    @property
    def prefilling(self) -> bool:
        return self.length < self.target


@dataclass
class SchedulerModel:
    """Rows ``1..num_rows``, Mamba slots ``1..num_mamba`` (0 when not hybrid), KV pages ``1..num_pages``."""

    num_rows: int
    num_pages: int
    page_size: int
    num_mamba: int
    hybrid: bool
    free_rows: set[int] = field(default_factory=set)
    free_mamba: set[int] = field(default_factory=set)
    free_pages: set[int] = field(default_factory=set)
    live: dict[int, ReqState] = field(default_factory=dict)
    next_handle: int = 0

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Every request gone, everything free (handles keep counting up)."""
        self.free_rows = set(range(1, self.num_rows + 1))
        self.free_mamba = set(range(1, self.num_mamba + 1)) if self.hybrid else set()
        self.free_pages = set(range(1, self.num_pages + 1))
        self.live = {}

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
    def admit(self, row: int, mamba: int | None, target: int) -> ReqState:
        assert row in self.free_rows, f"model: admitting on row {row}, which is not free"
        self.free_rows.remove(row)
        if self.hybrid:
            assert mamba in self.free_mamba, f"model: mamba slot {mamba} is not free"
            self.free_mamba.remove(mamba)
        req = ReqState(self.next_handle, row, mamba, [], target)
        self.live[req.handle] = req
        self.next_handle += 1
        return req

    def grow(self, handle: int, slots: list[int]) -> None:
        """Append ``slots``; the pages they open leave the free set."""
        req = self.live[handle]
        fresh = self.pages_of(slots) - self.pages_of(req.slots)
        assert fresh <= self.free_pages, f"model: pages {sorted(fresh - self.free_pages)} are not free"
        self.free_pages -= fresh
        req.slots.extend(slots)

    def truncate(self, handle: int, keep: int) -> set[int]:
        """Keep the first ``keep`` tokens; returns the pages released."""
        req = self.live[handle]
        released = self.pages_of(req.slots[keep:]) - self.pages_of(req.slots[:keep])
        del req.slots[keep:]
        self.free_pages |= released
        return released

    def release(self, handle: int) -> ReqState:
        req = self.live.pop(handle)
        self.free_pages |= self.pages_of(req.slots)
        self.free_rows.add(req.row)
        if req.mamba is not None:
            self.free_mamba.add(req.mamba)
        return req

    # ------------------------------------------------------------ queries
    def ownership_problems(self, free_pages: list[int], held: dict[int, list[int]]) -> dict[str, list[int]]:
        """The scheduler conservation equation over pages, given a free list and each live request's slots.

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
        every = set(range(1, self.num_pages + 1))
        seen: set[int] = set()
        duplicate = {p for p in free_pages if p in seen or seen.add(p)}  # type: ignore[func-returns-value]
        return {k: sorted(v) for k, v in {
            "leaked": every - free - set(owners),
            "shared": shared,
            "free_and_held": free & set(owners),
            "duplicate_free": duplicate,
            "foreign": (free | set(owners)) - every,
        }.items() if v}

    def handles(self, *, prefilling: bool | None = None, max_length: int | None = None) -> list[int]:
        """Live handles, optionally only those (not) prefilling or shorter than ``max_length``."""
        return sorted(
            h for h, r in self.live.items()
            if (prefilling is None or r.prefilling == prefilling) and (max_length is None or r.length < max_length)
        )

"""The KV allocators' views: what the ``token_kv`` and ``paged_kv`` moves and catalogues may read.

:class:`KVView` reads the token allocator's page geometry, free pages, live and released
handles, their slots, the free group and the staging area; :class:`PagedKVView` adds the
paged allocator's requests.  Both read the driver's model only, so neither the random moves
(:mod:`poolfuzz.harness.kits.kv.moves`) nor the catalogues (:mod:`poolfuzz.harness.kits.kv.catalogue`) follow a driver's
internals.
"""

from __future__ import annotations

from collections.abc import Sequence

from poolfuzz.harness.kits.kv.contract_view import PagedContractView
from poolfuzz.harness.kits.kv.model import KVModel


class KVView(PagedContractView[KVModel]):
    """What the token allocator's moves may read: page geometry, free pages, live and released handles,
    their slots, the free group and the staging area (through the driver's model).

    The paged driver is a token driver too, and :class:`PagedKVView` extends this view.  The page size and
    the free group are read as the KV contracts read them (:class:`~poolfuzz.harness.kits.kv.contract_view.PagedContractView`).
    """

    __slots__ = ()

    @property
    def num_pages(self) -> int:
        return int(self._driver.model.num_pages)

    def free_pages(self) -> int:
        """Pages an allocation may take now (the free list and the staging area)."""
        return int(self._driver.model.available_pages())

    @property
    def has_staged(self) -> bool:
        """Whether freed pages wait in the staging area (a ``merge`` would move them)."""
        return bool(self._driver.model.has_staged)

    def holds_pages(self) -> bool:
        """Whether any page is live."""
        return bool(self._driver.model.owner)

    def live(self) -> list[int]:
        """Handles holding at least one slot (plain allocations and requests), in order."""
        slots = self._driver.model.slots
        return sorted(h for h in slots if slots[h])

    def plain(self) -> list[int]:
        """Live handles of plain allocations (``alloc``, not ``extend``), in order."""
        requests = self._driver.model.requests
        return [h for h in self.live() if h not in requests]

    def released(self) -> list[int]:
        """Handles that gave slots back (wholly or partly freed, or cleared): what a double free names."""
        return [h for h, slots in self._driver.model.released.items() if slots]

    def slots_of(self, handle: int) -> Sequence[int]:
        """The slots ``handle`` holds, in order (read only)."""
        slots: Sequence[int] = self._driver.model.slots[handle]
        return slots

    def pages_held(self, handle: int) -> int:
        model = self._driver.model
        return len(model.pages_of(model.slots[handle]))

    def occupancy(self) -> float:
        """Share of pages live or pending; an empty (size 0) pool counts as 0, not as full."""
        pages = self.num_pages
        return 1.0 - self.free_pages() / pages if pages else 0.0


class PagedKVView(KVView):
    """:class:`KVView` plus the paged allocator's requests: their lengths, and which sit on a page edge."""

    __slots__ = ()

    def requests(self) -> list[int]:
        """Live requests (an empty one included), in order."""
        return sorted(self._driver.model.requests)

    def holding_requests(self) -> list[int]:
        """Live requests holding at least one token (a malformed batch needs a prefix to break)."""
        model = self._driver.model
        return sorted(h for h in model.requests if model.slots.get(h))

    def length(self, handle: int) -> int:
        """Tokens request ``handle`` holds."""
        return len(self._driver.model.slots[handle])

    def edges_and_mids(self) -> tuple[list[int], list[int]]:
        """Requests whose next token opens a page (their length is a whole number of pages), and the others."""
        ps, slots = self.page_size, self._driver.model.slots
        reqs = self.requests()
        return [h for h in reqs if len(slots[h]) % ps == 0], [h for h in reqs if len(slots[h]) % ps]

    def fit(self, batch: list[list[int | None]]) -> list[list[int | None]]:
        """The entries of ``batch``, in order, that the free pages can serve together."""
        ps, slots, room, fitting = self.page_size, self._driver.model.slots, self.free_pages(), []
        for handle, extend in batch:
            need = _pages_needed(len(slots[handle]) if handle is not None else 0, int(extend), ps)  # type: ignore[arg-type]
            if need <= room:
                fitting.append([handle, extend])
                room -= need
        return fitting


def _pages_needed(prefix: int, extend: int, ps: int) -> int:
    return -(-(prefix + extend) // ps) - -(-prefix // ps)

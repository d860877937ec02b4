"""The SWA families' views: what the ``swa_kv`` and ``pure_swa_kv`` moves and catalogues may read.

:class:`SWAView` reads an ``SWATokenToKVPoolAllocator`` driver's model (the page size, each
side's free pages, the live requests with their lengths and windows, what freed requests
released); :class:`PureSWAView` reads a ``PureSWATokenToKVPoolAllocator`` driver's as the token view
does (its one page-size-1 pool's slots, live allocations, the free group).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poolfuzz.harness.kits.kv.views import KVView
from poolfuzz.strategies.table import DriverView

if TYPE_CHECKING:
    from poolfuzz.harness.kits.swa.driver import SWAKVDriver
    from poolfuzz.harness.kits.swa.pure import PureSWAKVDriver


class SWAView(DriverView):
    """What the ``swa_kv`` moves may read: the page size, each side's free pages, the live requests with
    their lengths and windows, and what freed requests released (through the driver's model)."""

    __slots__ = ()
    _driver: SWAKVDriver

    @property
    def page_size(self) -> int:
        return self._driver.page_size

    @property
    def need_sort(self) -> bool:
        return self._driver.config.need_sort

    @property
    def full_pages(self) -> int:
        """The full side's pages (page 0 not counted)."""
        return self._driver.model.full_pages

    def full_free(self) -> int:
        return len(self._driver.model.full.free)

    def swa_free(self) -> int:
        return len(self._driver.model.swa.free)

    def group_open(self) -> bool:
        return self._driver.model.group_open

    def any_live(self) -> bool:
        """Some request is live (it may hold no token yet)."""
        return bool(self._driver.model.slots)

    def live(self) -> list[int]:
        """Live requests, in order."""
        return self._driver.model.handles()

    def length(self, handle: int) -> int:
        """Tokens a live request holds."""
        return len(self._driver.model.slots[handle])

    def handles(self, *, windowed: bool | None = None, continuable: bool | None = None) -> list[int]:
        """Live requests; ``windowed``: with (or without) pages that still have SWA peers; ``continuable``:
        whose last token still has its peer (or page size 1, where ``alloc`` knows no requests)."""
        model, ps1 = self._driver.model, self._driver.page_size == 1
        found = []
        for h in model.handles():
            if windowed is not None and bool(model.windowed_pages(h)) != windowed:
                continue
            if continuable is not None and (ps1 or model.last_in_window(h)) != continuable:
                continue
            found.append(h)
        return found

    def windowed_pages(self, handle: int) -> int:
        """How many of a live request's pages still have SWA peers."""
        return len(self._driver.model.windowed_pages(handle))

    def out_of_window(self, handle: int) -> bool:
        """A live request has pages without SWA peers (they left the window, or lie outside a tail)."""
        return bool(self._driver.model.unwindowed_pages(handle))

    def released(self) -> list[int]:
        """Requests that gave slots back (freed or cleared), in order."""
        return sorted(h for h, slots in self._driver.model.released.items() if slots)

    def recycled_free(self) -> bool:
        """Some free full page was mapped by a request that freed it."""
        model, ps = self._driver.model, self._driver.page_size
        return bool({s // ps for slots in model.released.values() for s in slots} & model.full.free)

    def pages_short(self, full_pages: int, swa_pages: int) -> bool:
        """A call needing these new pages would be refused."""
        return self._driver.model.pages_short(full_pages, swa_pages)

    def occupancy(self) -> float:
        """The fuller side's share of pages live or pending; an empty side counts as 0."""
        model = self._driver.model
        shares = [1.0 - len(side.free) / side.num_pages for side in (model.full, model.swa) if side.num_pages]
        return max(shares, default=0.0)


class PureSWAView(KVView):
    """What the ``pure_swa_kv`` moves may read: the token allocator's view, since the pure pool is a token
    allocator at page size 1 (its driver is a ``TokenKVDriver`` over a ``KVModel``), so a page is one slot.

    Only ``released`` differs: the pure moves draw a double free from the released allocations in handle
    order (the token view keeps release order), and a draw must pick as it always did.
    """

    __slots__ = ()
    _driver: PureSWAKVDriver

    def released(self) -> list[int]:
        """Allocations that gave slots back (freed, partly freed or cleared), in handle order."""
        return sorted(super().released())

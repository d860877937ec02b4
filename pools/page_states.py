"""Per-page state of a KV allocator, kept where it is cheapest to check.

Upstream SGLang's ``free`` trusts its input: a page freed twice goes on the
free list twice and is later handed to two requests (sglang-pools.md section 8,
hazard 6).  Our allocators reject such a call, and the state table is what
they check it against:

* ``LIVE``: handed out; ``FREE``: on the free list or staged; ``PENDING``:
  enqueued in an open free group; ``RESERVED``: page 0 (the padding page,
  SGLang #1557) and one sentinel past the last page.

Every page id a caller names is *clipped* into ``[0, num_pages + 1]`` before it
is looked up, so a negative id lands on page 0 and an id past the pool on the
sentinel, both ``RESERVED``.  One gather therefore proves "in range, not
reserved, handed out" for a whole call; the allocator works out which rule
failed only when it did.

The cost model is the point of this module (issue 18: validation within 1.25x
of upstream's unvalidated calls).  On a CPU pool the table is read and written
through a NumPy view of the same memory: a NumPy call costs well under a
microsecond where a torch dispatch costs two to three.  On a device the checks
are torch ops that end in one host read per call.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor

from poolfuzz.pools.host_views import HostViews

__all__ = ["DEVICE_PATH_ON_CPU", "FREE", "LIVE", "PENDING", "RESERVED", "PageStateTable", "RepeatFinder", "host_tables"]

LIVE, FREE, PENDING, RESERVED = 0, 1, 2, 3

_SET_AT_MOST = 64
"""Up to this many ids a Python set finds a repeat faster than the NumPy stamp (measured on one CPU thread)."""

DEVICE_PATH_ON_CPU = "POOLFUZZ_DEVICE_PATH_ON_CPU"
"""Set to ``1`` when a pool is built to give a CPU pool the device code path (torch
checks, one host read), so CI without a GPU runs that path too."""


def host_tables(device: torch.device) -> bool:
    """Whether a pool on ``device`` checks through NumPy views (CPU) or torch ops (a device)."""
    return device.type == "cpu" and os.environ.get(DEVICE_PATH_ON_CPU) != "1"


class PageStateTable(HostViews):
    """``LIVE`` / ``FREE`` / ``PENDING`` / ``RESERVED`` for pages ``0..num_pages`` (plus the sentinel)."""

    _host_views = (("_host", "states"),)

    def __init__(self, num_pages: int, device: torch.device) -> None:
        self.num_pages = num_pages
        self.states = torch.empty(num_pages + 2, dtype=torch.int8, device=device)
        """The table itself (canaries and tests may index it like any tensor)."""
        self._host: np.ndarray | None = self.states.numpy() if host_tables(device) else None
        self._repeats: RepeatFinder | None = None
        self.reset()

    def reset(self) -> None:
        """Every page free except page 0 and the sentinel."""
        self.states.fill_(FREE)
        self.states[0] = RESERVED
        self.states[-1] = RESERVED

    def mark(self, pages: Tensor | np.ndarray, state: int) -> None:
        """Set ``pages`` (valid page ids; NumPy ones on a CPU pool only) to ``state``."""
        if self._host is not None:
            self._host[pages if isinstance(pages, np.ndarray) else pages.numpy()] = state
        else:
            self.states[pages] = state

    def page_ids(self, indices: Tensor, page_size: int) -> Tensor:
        """``indices // page_size`` (``indices`` itself at page size 1), through NumPy on a CPU pool."""
        if page_size == 1:
            return indices
        if self._host is not None:
            return torch.from_numpy(_page_of(indices.numpy(), page_size))
        return indices // page_size

    def valid_free(self, pages: Tensor, *, distinct: bool) -> bool:
        """Whether a ``free`` of ``pages`` is valid: each handed out and, with ``distinct``, named once.

        On a device the two checks are one count, read once.
        """
        if self._host is not None:
            return self._valid_host(pages.numpy(), distinct=distinct)  # one conversion: it costs more than the check
        return self._valid_device(pages, distinct=distinct)

    def segment_pages(self, indices: Tensor, page_size: int) -> Tensor | np.ndarray | None:
        """The pages of a row segment's token ``indices``, in row order, each once (NumPy ids on a CPU pool,
        fresh, for :meth:`mark` and the free list); ``None`` unless every page named is handed out and
        named in one run of consecutive tokens.

        A row segment's pages are the heads of its runs of equal page ids, so :meth:`valid_free`'s checks
        run over those heads (one id a page), not over every token: that is what keeps a validated
        ``free_segment`` within reach of upstream's, which reads ``indices[::page_size]`` and checks
        nothing.  A ``None`` says only that the segment is not valid; the caller works out why.
        """
        if self._host is not None:
            heads = _run_heads(_page_of(indices.numpy(), page_size))
            return heads if self._valid_host(heads, distinct=True) else None
        pages = torch.unique_consecutive(indices // page_size)
        return pages if self._valid_device(pages, distinct=True) else None

    def _valid_host(self, ids: np.ndarray, *, distinct: bool) -> bool:
        assert self._host is not None, "host checks need the host table"
        if self._host.take(ids, mode="clip").tobytes().count(LIVE) != len(ids):
            return False
        return not (distinct and len(ids) > 1 and self._repeat_finder()(ids))

    def _valid_device(self, pages: Tensor, *, distinct: bool) -> bool:
        clipped = pages.clamp(0, self.num_pages + 1)
        bad = (self.states[clipped] != LIVE).sum()
        if distinct and pages.shape[0] > 1:
            bad = bad + self._repeat_finder().misplaced(clipped)
        return int(bad) == 0

    def unique(self, pages: Tensor) -> Tensor:
        """``torch.unique(pages)`` (ascending); through NumPy on a CPU pool, where it costs a third."""
        if self._host is None:
            return torch.unique(pages)
        return torch.from_numpy(_run_heads(np.sort(pages.numpy())))

    def runs(self, pages: Tensor) -> Tensor:
        """The first id of each run of equal ids, in order (``torch.unique_consecutive``); NumPy on a CPU pool."""
        if self._host is None:
            return torch.unique_consecutive(pages)
        return torch.from_numpy(_run_heads(pages.numpy()))

    def repeats(self, pages: Tensor) -> bool:
        """Whether some id occurs twice in ``pages`` (valid ids), in O(len(pages))."""
        if pages.shape[0] < 2:
            return False
        return self._repeat_finder()(pages.numpy() if self._host is not None else pages)

    def _repeat_finder(self) -> RepeatFinder:
        if self._repeats is None:
            self._repeats = RepeatFinder(self.num_pages + 2, self.states.device)
        return self._repeats


def _page_of(ids: np.ndarray, page_size: int) -> np.ndarray:
    """``ids // page_size``: a shift at a power-of-two page size, which is the same floor and cheaper."""
    shift = page_size.bit_length() - 1
    return ids >> shift if page_size == 1 << shift else ids // page_size


def _run_heads(values: np.ndarray) -> np.ndarray:
    """The first value of each run of equal values, in order."""
    if len(values) > 1:
        keep = np.empty(len(values), dtype=bool)
        keep[0] = True
        np.not_equal(values[1:], values[:-1], out=keep[1:])
        values = values[keep]
    return values


class RepeatFinder(HostViews):
    """Finds a repeated id among valid ids ``0..bound-1`` in O(count), on the host or on a device.

    A short host call goes through a Python set.  Otherwise each id is stamped
    with its position in a scratch table: an id written twice keeps only one
    position, so the read-back differs at the other.
    """

    _host_views = (("_stamp_host", "_stamp"), ("_positions_host", "_positions"))

    def __init__(self, bound: int, device: torch.device | None = None) -> None:
        device = device or torch.device("cpu")
        self._stamp = torch.zeros(bound, dtype=torch.int64, device=device)
        self._positions = torch.arange(bound, device=device)
        self._stamp_host = self._stamp.numpy() if device.type == "cpu" else None
        self._positions_host = self._positions.numpy() if device.type == "cpu" else None

    def __call__(self, ids: np.ndarray | Tensor) -> bool:
        count = ids.shape[0]
        if count < 2:
            return False
        if count > self._positions.shape[0]:
            return True  # more ids than values: one repeats (and the stamp has no position for the rest)
        if isinstance(ids, np.ndarray):
            if count <= _SET_AT_MOST:
                return len(set(ids.tolist())) < count
            assert self._stamp_host is not None and self._positions_host is not None, "host ids need a host table"
            order = self._positions_host[:count]
            self._stamp_host[ids] = order
            return bool(np.count_nonzero(self._stamp_host[ids] - order))
        return bool(self.misplaced(ids))

    def misplaced(self, ids: Tensor) -> Tensor:
        """The number of positions whose stamp was overwritten (0-d, not read: a device caller fuses it);
        at least one, unread, when there are more ids than values."""
        if ids.shape[0] > self._positions.shape[0]:
            return self._positions.new_ones(())
        order = self._positions[: ids.shape[0]]
        self._stamp[ids] = order
        return (self._stamp[ids] != order).sum()

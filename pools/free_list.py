"""The free list of a KV allocator: page ids in a buffer with slack at both ends.

SGLang 0.5.23 keeps ``free_pages`` as a plain tensor and rebuilds it on every
free: ``torch.cat((free_pages, freed))`` for the token allocator (tail append),
``torch.cat((freed, free_pages))`` for the paged one (head prepend).  Each free
therefore copies the whole free list, O(pool) per call however few pages it
returns: about 15 us for a 65,536-slot pool on one CPU thread, most of what an
alloc plus free costs there.

:class:`PageFreeList` keeps the same sequence (same order of reuse, same head
pop) in a buffer with room before and after it, so pop, append and prepend
cost O(pages moved).  When one end runs out of room the live part moves to a
*new* buffer with slack proportional to its length, so the copies amortise to
O(1) per page and no memory already handed out is ever rewritten in place:

* memory before ``head`` was handed out (``take``) and is never written again
  by an append;
* a prepend writes just before ``head``, into pages taken earlier.  The paged
  allocator only passes ``take`` views to a kernel within the same call, so
  nothing outside still reads them; :attr:`view` is documented as valid until
  the next mutating call for the same reason.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from poolfuzz.pools.host_views import HostViews
from poolfuzz.pools.page_states import host_tables

__all__ = ["PageFreeList"]

_MIN_SLACK = 64
"""Room left at the growing end after a move, so small frees do not move the buffer every call."""


class PageFreeList(HostViews):
    """An ordered sequence of free page ids with O(k) ``pop``, ``append`` and ``prepend``.

    ``view()`` is the sequence as a tensor view (no copy).  The tensor backing
    it is replaced, never rewritten, when an end runs out of room.
    """

    _host_views = (("_host", "_buf"),)

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._on_host = host_tables(device)  # a CPU list can be told to take the device path, for tests
        self._buf = torch.empty(0, dtype=torch.int64, device=device)
        self._host = self._buf.numpy() if self._on_host else None
        self._capacity = 0
        self.head = 0
        self.tail = 0

    @property
    def on_host(self) -> bool:
        """Whether the list is read and written through a NumPy view (a CPU list) or with torch ops."""
        return self._on_host

    def __len__(self) -> int:
        return self.tail - self.head

    def view(self) -> Tensor:
        """The free pages, head first: a view, valid until the next ``append``/``prepend``/``replace``."""
        return self._buf[self.head : self.tail]

    def take(self, num_pages: int) -> Tensor:
        """A view of the first ``num_pages`` pages (all of them if fewer are left, as slicing a tensor would)."""
        end = min(self.head + num_pages, self.tail)
        if self._host is not None:
            return torch.from_numpy(self._host[self.head : end])  # a third of a torch slice's cost
        return self._buf[self.head : end]

    def take_host(self, num_pages: int) -> np.ndarray:
        """The first ``num_pages`` pages as NumPy values: a view on the CPU, one host sync on a device."""
        end = min(self.head + num_pages, self.tail)
        if self._host is not None:
            return self._host[self.head : end]
        return self._buf[self.head : end].cpu().numpy()

    def pop(self, num_pages: int) -> None:
        """Drop the first ``num_pages`` pages (all of them if fewer are left, as slicing a tensor would)."""
        self.head = min(self.head + num_pages, self.tail)

    def replace(self, pages: Tensor) -> None:
        """Make ``pages`` (copied) the whole sequence, with room to append behind it."""
        self._move(pages, front=0, back=max(len(pages), _MIN_SLACK))

    def append(self, pages: Tensor | np.ndarray | list[int]) -> None:
        """Put ``pages`` at the tail (reused last); host values (NumPy or a list) only on a CPU list."""
        count = len(pages)
        if self.tail + count > self._capacity:
            self._move(self.view(), front=0, back=max(count, len(self), _MIN_SLACK))
        if isinstance(pages, Tensor):
            self._buf[self.tail : self.tail + count] = pages
        else:
            assert self._host is not None, "host values go to a CPU free list only"
            self._host[self.tail : self.tail + count] = pages
        self.tail += count

    def append_one(self, page: int) -> None:
        """Put one page at the tail: :meth:`append` without building a tensor for it."""
        if self.tail == self._capacity:
            self._move(self.view(), front=0, back=max(len(self), _MIN_SLACK))
        if self._host is not None:
            self._host[self.tail] = page
        else:
            self._buf[self.tail] = page
        self.tail += 1

    def prepend(self, pages: Tensor | np.ndarray) -> None:
        """Put ``pages`` at the head (reused first), keeping their order; NumPy ids only on a CPU list."""
        count = len(pages)
        if count > self.head:
            self._move(self.view(), front=max(count, len(self), _MIN_SLACK), back=0)
        if isinstance(pages, np.ndarray):
            assert self._host is not None, "host values go to a CPU free list only"
            self._host[self.head - count : self.head] = pages
        elif self._host is not None and pages.is_cpu:
            self._host[self.head - count : self.head] = pages.numpy()
        else:
            self._buf[self.head - count : self.head] = pages
        self.head -= count

    def _move(self, pages: Tensor, *, front: int, back: int) -> None:
        size = len(pages)
        buf = torch.empty(front + size + back, dtype=torch.int64, device=self.device)
        buf[front : front + size] = pages
        self._buf, self.head, self.tail = buf, front, front + size
        self._host = buf.numpy() if self._on_host else None
        self._capacity = front + size + back

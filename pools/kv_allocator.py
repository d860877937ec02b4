"""KV-cache token allocators: ``TokenToKVPoolAllocator`` (page size 1) and
``PagedTokenToKVPoolAllocator``.

Semantics follow SGLang 0.5.23 (``mem_cache/allocator/{base,token,paged}.py``):

* Page 0 is reserved: its token slots are the dummy targets of padded tokens
  (SGLang #1557), so ``free_pages`` starts as ``arange(1, num_pages + 1)``.
* ``alloc*`` take pages from the head of ``free_pages``.  The token allocator
  appends freed slots to the tail; the paged allocator prepends freed pages, so
  the most recently freed pages are reused first.
* With ``need_sort`` (prefill/decode disaggregation) frees are staged and only
  merged, sorted, into ``free_pages`` when an allocation runs short.
* Inside ``free_group_begin() .. free_group_end()`` frees are deferred.  The
  values are captured when the free is enqueued: upstream once stored views of
  ``req_to_token`` rows that callers overwrote before the group ended, so the
  wrong pages were released (SGLang #34067).
* ``alloc_extend`` / ``alloc_decode`` check capacity on the CPU lengths *before*
  any kernel reads ``free_pages``; the snapshot launched first and read past the
  end of the free list (SGLang #34399).  The kernel receives exactly the pages
  it consumes, so an empty ``free_pages`` is a normal input (seed 002).

Hazards fixed here: upstream ``free`` neither validates nor deduplicates, so a
double free puts a page on the free list twice and it is later handed to two
requests.  These allocators keep a per-page state table
(:mod:`poolfuzz.pools.page_states`) and raise a typed error instead.  The table is read
through NumPy on a CPU pool and costs one host read per ``free`` on a device.
The free list is a :class:`~poolfuzz.pools.free_list.PageFreeList`: same order of reuse
as upstream's tensor, but a free costs O(pages freed), not an O(pool) ``torch.cat``.
Nested free groups raise (0.5.23 asserts), and the decode page count uses the
predicate ``(seq - 1) % page_size == 0``, which is also right for page size 1.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NoReturn

import numpy as np
import torch

from poolfuzz.pools.errors import (
    BadBatchError,
    BadSizeError,
    DoubleFreeError,
    ForeignIndexError,
    GroupStateError,
    ReservedIndexError,
    check_count,
)
from poolfuzz.pools.free_list import PageFreeList
from poolfuzz.pools.page_alloc import PageKernel, get_kernel
from poolfuzz.pools.page_alloc.counting import triton_page_size
from poolfuzz.pools.page_states import FREE as _FREE
from poolfuzz.pools.page_states import LIVE as _LIVE
from poolfuzz.pools.page_states import PENDING as _PENDING
from poolfuzz.pools.page_states import PageStateTable
from poolfuzz.pools.paged_checks import PagedBatchChecker, is_int_tensor

__all__ = ["PagedTokenToKVPoolAllocator", "TokenToKVPoolAllocator"]

PageIds = torch.Tensor | np.ndarray
"""Validated page ids: a tensor, or NumPy ids on a CPU pool."""


class _KVAllocatorBase(ABC):
    """Free-list, staging, free-group and page-state bookkeeping shared by both allocators."""

    pool_name = "KVAllocator"
    refuses_repeats: bool = False
    """Whether naming one page twice in a ``free`` is an error (token slots) or routine (a paged request's slots)."""

    def __init__(self, size: int, page_size: int, device: str | torch.device, need_sort: bool) -> None:
        check_count(self.pool_name, "page_size", page_size, 1)
        if check_count(self.pool_name, "size", size) % page_size:
            raise BadSizeError(self.pool_name, "size", size, f"must be a multiple of page_size={page_size}")
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        self.device = torch.device(device)
        self.need_sort = need_sort
        self._free_list = PageFreeList(self.device)
        self._staged: list[torch.Tensor]  # need_sort frees not yet merged into the free list
        self._num_staged: int
        self._free_group: list[torch.Tensor] | None  # pages enqueued in the open free group
        self._segment_group: list[torch.Tensor] = []  # pages free_segment enqueued there, released after them
        self._states = PageStateTable(self.num_pages, self.device)
        self._page_state = self._states.states
        self.clear()

    # ------------------------------------------------------------------ queries
    @property
    def free_pages(self) -> torch.Tensor:
        """The free list, head (next handed out) first; a view, valid until the next call that changes the pool."""
        return self._free_list.view()

    def available_size(self) -> int:
        return (len(self._free_list) + self._num_staged) * self.page_size

    def get_all_free_pages(self) -> torch.Tensor:
        return torch.cat([self.free_pages, *self._staged])

    @property
    def in_free_group(self) -> bool:
        return self._free_group is not None

    def pending_free_pages(self) -> torch.Tensor:
        """Pages enqueued in the open free group (empty outside a group)."""
        if not self._free_group and not self._segment_group:
            return self.free_pages.new_empty(0)
        return torch.cat([*(self._free_group or []), *self._segment_group])

    # ------------------------------------------------------------------- state
    def clear(self) -> None:
        """Every page free, nothing staged, no group open."""
        self._free_list.replace(torch.arange(1, self.num_pages + 1, dtype=torch.int64, device=self.device))
        self._staged = []
        self._num_staged = 0
        self._free_group = None
        self._segment_group = []
        self._states.reset()

    def merge_and_sort_free(self) -> None:
        if self._staged:
            self._free_list.replace(torch.sort(torch.cat([self.free_pages, *self._staged])).values)
            self._staged = []
            self._num_staged = 0

    def _take_pages(self, num_pages: int) -> torch.Tensor | None:
        """The first ``num_pages`` free pages, merged first if short; ``None`` if still short."""
        if num_pages > len(self._free_list):
            self.merge_and_sort_free()
        if num_pages > len(self._free_list):
            return None
        return self._free_list.take(num_pages)

    def _consume(self, num_pages: int) -> None:
        free = self._free_list  # host ids on a CPU pool: no tensor built just to be read back
        self._states.mark(free.take_host(num_pages) if free.on_host else free.take(num_pages), _LIVE)
        free.pop(num_pages)

    # ------------------------------------------------------------------- frees
    def _pages_of(self, indices: torch.Tensor) -> torch.Tensor:
        """Validated page ids named by token ``indices``; raises before any change.

        One clipped gather of the state table proves every id is in range, not
        reserved and handed out (:meth:`PageStateTable.valid_free`); only when it
        fails does :meth:`_explain_free` find which rule broke.
        """
        return self._dedup_pages(self._named_pages(indices))

    def _named_pages(self, indices: torch.Tensor) -> torch.Tensor:
        """The page of each of ``indices``, in their order, repeats kept, validated as :meth:`_pages_of` says."""
        indices = self._as_indices(indices)
        pages = self._states.page_ids(indices, self.page_size)
        if not self._states.valid_free(pages, distinct=self.refuses_repeats):
            self._explain_free(indices)
        return pages

    def _as_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """``indices`` as int64 on the pool's device; :class:`BadBatchError` unless a 1-D integer tensor."""
        if not is_int_tensor(indices) or indices.dim() != 1:
            raise BadBatchError(self.pool_name, f"free expects a 1-D integer tensor, got {indices!r}")
        return indices.to(self.device, torch.int64)

    def _explain_free(self, indices: torch.Tensor) -> None:
        """Raise the error for a free that names a page it may not: foreign, reserved, repeated or not handed out."""
        low, high = int(indices.min()), int(indices.max())
        last = (self.num_pages + 1) * self.page_size - 1
        if low < 0 or high > last:
            bad = indices[(indices < 0) | (indices > last)].tolist()
            raise ForeignIndexError(self.pool_name, bad, self.page_size, last, "token index")
        if low < self.page_size:
            raise ReservedIndexError(self.pool_name, low, "token index (page 0)")
        pages = indices // self.page_size
        values, counts = torch.unique(pages, return_counts=True)
        if self.refuses_repeats and bool((counts > 1).any()):
            raise DoubleFreeError(self.pool_name, values[counts > 1].tolist(), "slot (twice in one call)")
        pages = self._dedup_pages(pages)
        not_live = self._page_state[pages] != _LIVE
        raise DoubleFreeError(self.pool_name, pages[not_live].tolist(), "page")

    def _dedup_pages(self, pages: torch.Tensor) -> torch.Tensor:
        """The validated ``pages`` of one ``free``, each once, in the order they are released."""
        return pages

    @abstractmethod
    def _release(self, pages: PageIds) -> None:
        """Put validated, freed ``pages`` back on the free list, at the end the allocator reuses from."""

    def free(self, indices: torch.Tensor) -> None:
        """Release the pages of ``indices``: now, staged (``need_sort``) or at group end."""
        if isinstance(indices, torch.Tensor) and indices.numel() == 0:
            return
        pages = self._pages_of(indices)
        if self._free_group is not None:
            self._states.mark(pages, _PENDING)
            self._free_group.append(pages.clone())
            return
        self._free_now(pages)

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Free ``kv_row[start_pos : start_pos + n]`` of one request: SGLang's ``free_segment``, the call
        ``free_kv_row_segments``, radix eviction and the checkpoint's duplicate free make
        (``allocator/base.py:284-301``).  ``start_pos`` sits on a page boundary (:class:`BadSizeError`
        otherwise); the rest is :meth:`free`'s, as in upstream's base class."""
        self._check_segment_start(start_pos)
        self.free(free_index)

    def _check_segment_start(self, start_pos: int) -> None:
        ps = self.page_size
        if isinstance(start_pos, bool) or not isinstance(start_pos, int) or start_pos < 0 or start_pos % ps:
            raise BadSizeError(self.pool_name, "start_pos", start_pos, f"must be a multiple of page_size={ps} >= 0")  # type: ignore[arg-type]

    def _free_now(self, pages: PageIds) -> None:
        """Mark validated ``pages`` free: staged under ``need_sort``, else back on the free list.

        NumPy ids (a CPU pool's :meth:`PageStateTable.segment_pages`) are fresh arrays; a tensor may be the
        caller's own (page size 1 passes it through), so it is copied before it is kept."""
        self._states.mark(pages, _FREE)
        if self.need_sort:
            self._staged.append(torch.from_numpy(pages) if isinstance(pages, np.ndarray) else pages.clone())
            self._num_staged += len(pages)
        else:
            self._release(pages)

    def free_group_begin(self) -> None:
        if self._free_group is not None:
            raise GroupStateError(self.pool_name, "free", "free_group_begin while a free group is open (nesting)")
        self._free_group = []

    def free_group_end(self) -> None:
        if self._free_group is None:
            raise GroupStateError(self.pool_name, "free", "free_group_end without free_group_begin")
        pending, self._free_group = self._free_group, None
        segments, self._segment_group = self._segment_group, []
        if pending:
            pages = torch.cat(pending)
            self._states.mark(pages, _LIVE)
            self.free(self._token_of(pages))
        if segments:
            self._free_now(torch.cat(segments))

    def _token_of(self, pages: torch.Tensor) -> torch.Tensor:
        return pages * self.page_size


class TokenToKVPoolAllocator(_KVAllocatorBase):
    """Page-size-1 allocator: slots ``1..size``, head pop, tail append."""

    pool_name = "TokenToKVPoolAllocator"
    refuses_repeats = True

    def __init__(self, size: int, device: str | torch.device = "cpu", need_sort: bool = False) -> None:
        super().__init__(size, 1, device, need_sort)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if isinstance(need_size, bool) or not isinstance(need_size, int) or need_size < 0:
            raise BadSizeError(self.pool_name, "need_size", need_size, "must be an int >= 0")  # type: ignore[arg-type]
        taken = self._take_pages(need_size)
        if taken is None:
            return None
        self._consume(need_size)
        return taken

    def _release(self, pages: PageIds) -> None:
        self._free_list.append(pages)


class PagedTokenToKVPoolAllocator(_KVAllocatorBase):
    """Paged allocator: page ``p`` owns token slots ``[p*ps, p*ps + ps)``; pages ``1..size/ps``.

    ``kernel`` selects the page-index computation for ``alloc_extend`` and
    ``alloc_decode``: ``"loop"`` (the oracle), ``"vectorized"`` (default) or
    ``"triton"`` (power-of-two page sizes).  ``check_layout`` validates the
    ``last_loc`` alignment preconditions, which reads device tensors; it defaults
    to on for CPU and off for CUDA, where it would add a sync per step.
    """

    pool_name = "PagedTokenToKVPoolAllocator"

    def __init__(
        self,
        size: int,
        page_size: int,
        device: str | torch.device = "cpu",
        need_sort: bool = False,
        kernel: str = "vectorized",
        check_layout: bool | None = None,
    ) -> None:
        self.kernel: PageKernel = get_kernel(kernel)
        super().__init__(size, page_size, device, need_sort)
        if kernel == "triton" and not triton_page_size(page_size):
            raise BadSizeError(self.pool_name, "page_size", page_size, "the triton kernel needs a power of two")
        self.check_layout = self.device.type == "cpu" if check_layout is None else check_layout
        self._batches = PagedBatchChecker(self.pool_name, page_size, self._states, self.check_layout)
        self._token_offsets = torch.arange(page_size, device=self.device)  # alloc adds them to page * page_size

    def alloc(self, need_size: int) -> torch.Tensor | None:
        ps = self.page_size
        if isinstance(need_size, bool) or not isinstance(need_size, int) or need_size < 0 or need_size % ps:
            raise BadSizeError(self.pool_name, "need_size", need_size, f"must be an int >= 0, a multiple of {ps}")  # type: ignore[arg-type]
        num_pages = need_size // ps
        taken = self._take_pages(num_pages)
        if taken is None:
            return None
        if self._free_list.on_host:  # NumPy: a third of the three torch dispatches
            out = torch.from_numpy((taken.numpy()[:, None] * ps + self._token_offsets.numpy()).reshape(-1))
        else:
            out = (taken[:, None] * ps + self._token_offsets).reshape(-1)
        self._consume(num_pages)
        return out

    def _dedup_pages(self, pages: torch.Tensor) -> torch.Tensor:
        return self._states.unique(pages)

    def _release(self, pages: PageIds) -> None:
        self._free_list.prepend(pages)

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Free a row segment as upstream's paged ``free_segment`` does (``paged.py:340-369``): the segment's
        pages in the row's order (upstream frees ``free_index[::page_size] // page_size`` through
        ``free_page_ids``, not sorted), the last one whole when the segment ends inside it; inside a free
        group they wait apart from :meth:`free`'s and are released after them, as upstream's
        ``free_page_ids_group`` is.  Validated as :meth:`free` is.  Upstream assumes each page's tokens are
        contiguous and frees a page twice when they are not; here a segment naming a page in two runs
        raises :class:`BadBatchError` before anything changes."""
        self._check_segment_start(start_pos)
        if isinstance(free_index, torch.Tensor) and free_index.numel() == 0:
            return
        free_index = self._as_indices(free_index)
        in_row = self._states.segment_pages(free_index, self.page_size)
        if in_row is None:
            self._explain_segment(free_index)
        if self._free_group is not None:
            self._states.mark(in_row, _PENDING)
            self._segment_group.append(torch.from_numpy(in_row) if isinstance(in_row, np.ndarray) else in_row)
            return
        self._free_now(in_row)

    def _explain_segment(self, free_index: torch.Tensor) -> NoReturn:
        """Raise the error for a refused ``free_segment``: :meth:`free`'s, else a page named in two runs."""
        in_row = self._states.runs(self._named_pages(free_index))
        assert self._states.repeats(in_row), "segment_pages refused a segment whose pages are all live, each in one run"
        raise BadBatchError(self.pool_name, "free_segment names a page in two runs: a row segment holds each page's tokens together")

    # ------------------------------------------------------------ extend/decode
    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
    ) -> torch.Tensor | None:
        """Slots for tokens ``prefix_lens[i]..seq_lens[i]`` of each request, or ``None`` if short.

        The batch is checked (:mod:`poolfuzz.pools.paged_checks`) and its pages counted on
        the CPU lengths before the kernel reads ``free_pages`` (#34399).
        """
        num_new_pages = self._batches.extend_pages(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens)
        pages = self._take_pages(num_new_pages)
        if pages is None:
            return None
        out = torch.empty(extend_num_tokens, dtype=torch.int64, device=self.device)
        self.kernel.extend(prefix_lens.to(torch.int64), seq_lens.to(torch.int64), last_loc.to(torch.int64), pages, out, self.page_size)
        self._consume(num_new_pages)
        return out

    def alloc_decode(self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor) -> torch.Tensor | None:
        """One slot per request for token ``seq_lens[i] - 1`` (post-step lengths), or ``None``."""
        num_new_pages = self._batches.decode_pages(seq_lens, seq_lens_cpu, last_loc)
        if num_new_pages == 0:
            # Every request continues its page (checked on the CPU lengths): the kernels' answer, as upstream.
            return last_loc.to(self.device, torch.int64) + 1
        pages = self._take_pages(num_new_pages)
        if pages is None:
            return None
        out = torch.empty(len(seq_lens_cpu), dtype=torch.int64, device=self.device)
        self.kernel.decode(seq_lens.to(torch.int64), last_loc.to(torch.int64), pages, out, self.page_size)
        self._consume(num_new_pages)
        return out

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
requests.  These allocators keep a per-page state table on the device and raise
a typed error instead; the check costs one host read per ``free`` call on CUDA.
Nested free groups raise (0.5.23 asserts), and the decode page count uses the
predicate ``(seq - 1) % page_size == 0``, which is also right for page size 1.
"""

from __future__ import annotations

import torch

from pools.errors import BadBatchError, BadSizeError, DoubleFreeError, ForeignIndexError, GroupStateError, ReservedIndexError
from pools.page_alloc import PageKernel, get_kernel, get_num_new_pages

_LIVE, _FREE, _PENDING = 0, 1, 2


def _is_int_tensor(t: object) -> bool:
    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool


class _KVAllocatorBase:
    """Free-list, staging, free-group and page-state bookkeeping shared by both allocators."""

    pool_name = "KVAllocator"

    def __init__(self, size: int, page_size: int, device: str | torch.device, need_sort: bool) -> None:
        if page_size < 1:
            raise BadSizeError(self.pool_name, "page_size", page_size, "must be >= 1")
        if size < 0 or size % page_size:
            raise BadSizeError(self.pool_name, "size", size, f"must be >= 0 and a multiple of page_size={page_size}")
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        self.device = torch.device(device)
        self.need_sort = need_sort
        self.free_pages = torch.empty(0, dtype=torch.int64, device=self.device)
        self._staged: list[torch.Tensor] = []
        self._num_staged = 0
        self._free_group: list[torch.Tensor] | None = None
        self._page_state = torch.empty(self.num_pages + 1, dtype=torch.int8, device=self.device)
        self.clear()

    # ------------------------------------------------------------------ queries
    def available_size(self) -> int:
        return (len(self.free_pages) + self._num_staged) * self.page_size

    def get_all_free_pages(self) -> torch.Tensor:
        return torch.cat([self.free_pages, *self._staged])

    @property
    def in_free_group(self) -> bool:
        return self._free_group is not None

    def pending_free_pages(self) -> torch.Tensor:
        """Pages enqueued in the open free group (empty outside a group)."""
        return torch.cat(self._free_group) if self._free_group else self.free_pages.new_empty(0)

    # ------------------------------------------------------------------- state
    def clear(self) -> None:
        """Every page free, nothing staged, no group open."""
        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=torch.int64, device=self.device)
        self._staged = []
        self._num_staged = 0
        self._free_group = None
        self._page_state.fill_(_FREE)
        self._page_state[0] = _LIVE  # the padding page is never free

    def merge_and_sort_free(self) -> None:
        if self._staged:
            self.free_pages = torch.sort(torch.cat([self.free_pages, *self._staged])).values
            self._staged = []
            self._num_staged = 0

    def _take_pages(self, num_pages: int) -> torch.Tensor | None:
        """The first ``num_pages`` free pages, merged first if short; ``None`` if still short."""
        if num_pages > len(self.free_pages):
            self.merge_and_sort_free()
        if num_pages > len(self.free_pages):
            return None
        return self.free_pages[:num_pages]

    def _consume(self, num_pages: int) -> None:
        self._page_state[self.free_pages[:num_pages]] = _LIVE
        self.free_pages = self.free_pages[num_pages:]

    # ------------------------------------------------------------------- frees
    def _pages_of(self, indices: torch.Tensor) -> torch.Tensor:
        """Validated page ids named by token ``indices``; raises before any change."""
        if not _is_int_tensor(indices) or indices.dim() != 1:
            raise BadBatchError(self.pool_name, f"free expects a 1-D integer tensor, got {indices!r}")
        indices = indices.to(self.device, torch.int64)
        low, high = int(indices.min()), int(indices.max())
        last = (self.num_pages + 1) * self.page_size - 1
        if low < 0 or high > last:
            bad = indices[(indices < 0) | (indices > last)].tolist()
            raise ForeignIndexError(self.pool_name, bad, self.page_size, last, "token index")
        if low < self.page_size:
            raise ReservedIndexError(self.pool_name, low, "token index (page 0)")
        pages = self._dedup_pages(indices // self.page_size)
        not_live = self._page_state[pages] != _LIVE
        if bool(not_live.any()):
            raise DoubleFreeError(self.pool_name, pages[not_live].tolist(), "page")
        return pages

    def _dedup_pages(self, pages: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _release(self, pages: torch.Tensor) -> None:
        raise NotImplementedError

    def free(self, indices: torch.Tensor) -> None:
        """Release the pages of ``indices``: now, staged (``need_sort``) or at group end."""
        if isinstance(indices, torch.Tensor) and indices.numel() == 0:
            return
        pages = self._pages_of(indices)
        if self._free_group is not None:
            self._page_state[pages] = _PENDING
            self._free_group.append(pages.clone())
            return
        self._free_now(pages)

    def _free_now(self, pages: torch.Tensor) -> None:
        """Mark validated ``pages`` free: staged under ``need_sort``, else back on the free list."""
        self._page_state[pages] = _FREE
        if self.need_sort:
            self._staged.append(pages)
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
        if pending:
            pages = torch.cat(pending)
            self._page_state[pages] = _LIVE
            self.free(self._token_of(pages))

    def _token_of(self, pages: torch.Tensor) -> torch.Tensor:
        return pages * self.page_size


class TokenToKVPoolAllocator(_KVAllocatorBase):
    """Page-size-1 allocator: slots ``1..size``, head pop, tail append."""

    pool_name = "TokenToKVPoolAllocator"

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

    def _dedup_pages(self, pages: torch.Tensor) -> torch.Tensor:
        if len(torch.unique(pages)) != len(pages):
            values, counts = torch.unique(pages, return_counts=True)
            raise DoubleFreeError(self.pool_name, values[counts > 1].tolist(), "slot (twice in one call)")
        return pages

    def _release(self, pages: torch.Tensor) -> None:
        self.free_pages = torch.cat([self.free_pages, pages])


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
        if kernel == "triton" and page_size & (page_size - 1):
            raise BadSizeError(self.pool_name, "page_size", page_size, "the triton kernel needs a power of two")
        super().__init__(size, page_size, device, need_sort)
        self.check_layout = self.device.type == "cpu" if check_layout is None else check_layout

    def alloc(self, need_size: int) -> torch.Tensor | None:
        ps = self.page_size
        if isinstance(need_size, bool) or not isinstance(need_size, int) or need_size < 0 or need_size % ps:
            raise BadSizeError(self.pool_name, "need_size", need_size, f"must be an int >= 0, a multiple of {ps}")  # type: ignore[arg-type]
        num_pages = need_size // ps
        taken = self._take_pages(num_pages)
        if taken is None:
            return None
        out = (taken[:, None] * ps + torch.arange(ps, device=self.device)).reshape(-1)
        self._consume(num_pages)
        return out

    def _dedup_pages(self, pages: torch.Tensor) -> torch.Tensor:
        return torch.unique(pages)

    def _release(self, pages: torch.Tensor) -> None:
        self.free_pages = torch.cat([pages, self.free_pages])

    # ------------------------------------------------------------ extend/decode
    def _check_lengths(self, name: str, device_t: torch.Tensor, cpu_t: torch.Tensor, bs: int) -> None:
        for label, t in ((name, device_t), (f"{name}_cpu", cpu_t)):
            if not _is_int_tensor(t) or t.dim() != 1 or len(t) != bs:
                raise BadBatchError(self.pool_name, f"{label} must be a 1-D integer tensor of length {bs}, got {t!r}")
        if cpu_t.device.type != "cpu":
            raise BadBatchError(self.pool_name, f"{name}_cpu must live on the CPU")

    def _check_live_tail(self, last_loc: torch.Tensor, continues: torch.Tensor, call: str) -> None:
        """The page holding ``last_loc`` must be handed out where the batch continues it."""
        pages = torch.div(last_loc[continues], self.page_size, rounding_mode="floor")
        if pages.numel() and (int(pages.min()) < 1 or int(pages.max()) > self.num_pages):
            raise BadBatchError(self.pool_name, f"{call}: last_loc {last_loc.tolist()} points outside the pool")
        if bool((self._page_state[pages] != _LIVE).any()):
            raise BadBatchError(self.pool_name, f"{call}: last_loc {last_loc.tolist()} continues a page that is not allocated")

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
    ) -> torch.Tensor | None:
        """Slots for tokens ``prefix_lens[i]..seq_lens[i]`` of each request, or ``None`` if short."""
        bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1
        self._check_lengths("seq_lens", seq_lens, seq_lens_cpu, bs)
        self._check_lengths("prefix_lens", prefix_lens, prefix_lens_cpu, bs)
        if not _is_int_tensor(last_loc) or last_loc.shape != (bs,):
            raise BadBatchError(self.pool_name, f"last_loc must be an integer tensor of shape ({bs},)")
        if bs and int(prefix_lens_cpu.min()) < 0:
            raise BadBatchError(self.pool_name, f"negative prefix length in {prefix_lens_cpu.tolist()}")
        bad = (seq_lens_cpu < prefix_lens_cpu).nonzero()
        if len(bad):
            i = int(bad[0])
            raise BadBatchError(self.pool_name, f"seq_len {int(seq_lens_cpu[i])} < prefix_len {int(prefix_lens_cpu[i])}", position=i)
        total = int((seq_lens_cpu - prefix_lens_cpu).sum()) if bs else 0
        if extend_num_tokens != total:
            raise BadBatchError(self.pool_name, f"extend_num_tokens={extend_num_tokens} but the lengths sum to {total}")
        ps = self.page_size
        if self.check_layout and bs:
            loc = last_loc.cpu()
            expect = torch.where(prefix_lens_cpu > 0, (loc + 1) % ps, torch.zeros_like(loc))
            wrong = ((expect != prefix_lens_cpu % ps) | ((prefix_lens_cpu == 0) & (loc != -1))
                     | ((prefix_lens_cpu > 0) & (loc < 0))).nonzero()  # a page-aligned prefix still names its slot
            if len(wrong):
                i = int(wrong[0])
                raise BadBatchError(
                    self.pool_name,
                    f"last_loc {int(loc[i])} does not end prefix {int(prefix_lens_cpu[i])} at page size {ps}",
                    position=i,
                )
            self._check_live_tail(loc, (prefix_lens_cpu % ps != 0) & (seq_lens_cpu > prefix_lens_cpu), "alloc_extend")
        num_new_pages = get_num_new_pages(seq_lens_cpu, ps, prefix_lens_cpu)
        pages = self._take_pages(num_new_pages)
        if pages is None:
            return None
        out = torch.empty(extend_num_tokens, dtype=torch.int64, device=self.device)
        self.kernel.extend(prefix_lens.to(torch.int64), seq_lens.to(torch.int64), last_loc.to(torch.int64), pages, out, ps)
        self._consume(num_new_pages)
        return out

    def alloc_decode(
        self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor
    ) -> torch.Tensor | None:
        """One slot per request for token ``seq_lens[i] - 1`` (post-step lengths), or ``None``."""
        bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1
        self._check_lengths("seq_lens", seq_lens, seq_lens_cpu, bs)
        if not _is_int_tensor(last_loc) or last_loc.shape != (bs,):
            raise BadBatchError(self.pool_name, f"last_loc must be an integer tensor of shape ({bs},)")
        if bs and int(seq_lens_cpu.min()) < 1:
            raise BadBatchError(self.pool_name, f"decode needs seq_lens >= 1, got {seq_lens_cpu.tolist()}")
        ps = self.page_size
        if self.check_layout and bs:
            loc = last_loc.cpu()
            wrong = ((loc + 2) % ps != seq_lens_cpu % ps).nonzero()
            if len(wrong):
                i = int(wrong[0])
                raise BadBatchError(
                    self.pool_name,
                    f"last_loc {int(loc[i])} does not precede token {int(seq_lens_cpu[i]) - 1} at page size {ps}",
                    position=i,
                )
            self._check_live_tail(loc, (seq_lens_cpu - 1) % ps != 0, "alloc_decode")
        num_new_pages = get_num_new_pages(seq_lens_cpu, ps, decode=True)
        pages = self._take_pages(num_new_pages)
        if pages is None:
            return None
        out = torch.empty(bs, dtype=torch.int64, device=self.device)
        self.kernel.decode(seq_lens.to(torch.int64), last_loc.to(torch.int64), pages, out, ps)
        self._consume(num_new_pages)
        return out

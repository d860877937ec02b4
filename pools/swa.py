"""Sliding-window (SWA) hybrid KV allocator: ``SWATokenToKVPoolAllocator``.

Semantics follow SGLang 0.5.23 (``mem_cache/allocator/swa.py``; sglang-pools.md
section 2.8).  A hybrid model keeps two KV pools: the full-attention pool holds
every token, the SWA pool only the tokens still inside the sliding window.  Two
sub-allocators serve them (two :class:`TokenToKVPoolAllocator` at page size 1,
two :class:`PagedTokenToKVPoolAllocator` above) and ``full_to_swa_index_mapping``
links them: entry ``f`` is the SWA slot of full slot ``f``, or 0 when ``f`` has
no SWA peer (free, out of the window, or outside a tail allocation).  Its extra
last entry is ``-1``, so a ``last_loc`` of ``-1`` translates to ``-1``.

Invariants kept by every call:

* a free (or pending) full slot maps to 0, and the trailing entry stays ``-1``;
* the nonzero entries are distinct and are exactly the live SWA slots, so no SWA
  slot is leaked, owned twice, or pending while still mapped;
* pages move in step: a full page's mapped tokens lie in one SWA page at the same
  offsets, and no other full page maps into that SWA page.

Upstream hazards fixed here:

* ``alloc_decode`` (and the extends) check both sides' capacity before either side
  allocates; upstream left the full side consumed when the SWA side came up short.
* A double, foreign or padding free raises a typed :class:`PoolError` with nothing
  changed; upstream appends to its free lists unchecked.
* ``free`` / ``free_swa`` zero the mapping of every token of each page they touch,
  not only the tokens named (SGLang #27779: the rest of the page kept stale entries
  and a later ``free_swa`` released the SWA page again).
* ``alloc_extend_swa_tail`` zeroes the mapping of the full tokens outside the tail
  (SGLang #25805), also when the tail is empty.
* A mapping entry is zeroed whenever its SWA slot is released, so a stale entry can
  never release an SWA slot that now belongs to someone else (SGLang PR #27586).

Not implemented: the per-request SWA ring mode (``swa_req_ring_size``), segment
frees (``free_segment``, ``free_swa_segment``), ``resize``, the KV-data hooks
(``get_cpu_copy``...) and the scheduler budget hooks.

``PureSWATokenToKVPoolAllocator`` (every layer sliding-window, no mapping to keep)
lives in :mod:`poolfuzz.pools.pure_swa` and is re-exported here.
"""

from __future__ import annotations

import torch

from poolfuzz.pools.errors import BadBatchError, BadSizeError, DoubleFreeError, GroupStateError
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import get_num_new_pages
from poolfuzz.pools.page_alloc.counting import check_page_size
from poolfuzz.pools.pure_swa import PureSWATokenToKVPoolAllocator

__all__ = ["PureSWATokenToKVPoolAllocator", "SWATokenToKVPoolAllocator", "SubAllocator"]

SubAllocator = TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator


def _is_empty_tensor(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.numel() == 0


class SWATokenToKVPoolAllocator:
    """Full-attention and SWA KV slots allocated in step, linked by ``full_to_swa_index_mapping``.

    Page size 1 allocates with :meth:`alloc`; larger pages with :meth:`alloc_extend`,
    :meth:`alloc_extend_swa_tail` and :meth:`alloc_decode` (upstream asserts the
    regime; here the wrong one raises :class:`BadSizeError`).  Every index taken or
    returned is a *full* index; the SWA side is reached through the mapping.

    Order of checks in the extend/decode calls: first the arguments that live on the
    CPU (length tensors, ``extend_num_tokens``, ``swa_tail_len``) raise, then a
    shortfall on either side returns ``None`` with nothing consumed, then the
    ``last_loc`` checks raise (its SWA peer here, its layout in the full
    sub-allocator).  ``check_layout`` (default: on for CPU, off for CUDA, where it
    syncs) gates the ``last_loc`` checks on both sides alike; it and ``kernel`` configure
    the paged sub-allocators as in :class:`PagedTokenToKVPoolAllocator`.
    """

    pool_name = "SWATokenToKVPoolAllocator"

    def __init__(
        self,
        size: int,
        size_swa: int,
        page_size: int,
        device: str | torch.device = "cpu",
        need_sort: bool = False,
        kernel: str = "vectorized",
        check_layout: bool | None = None,
    ) -> None:
        check_page_size(self.pool_name, page_size)
        self.device = torch.device(device)
        self.page_size = page_size
        self.need_sort = need_sort
        self.full_attn_allocator: SubAllocator
        self.swa_attn_allocator: SubAllocator
        if page_size == 1:
            self.full_attn_allocator = TokenToKVPoolAllocator(size, device, need_sort)
            self.swa_attn_allocator = TokenToKVPoolAllocator(size_swa, device, need_sort)
        else:
            self.full_attn_allocator = PagedTokenToKVPoolAllocator(size, page_size, device, need_sort, kernel, check_layout)
            self.swa_attn_allocator = PagedTokenToKVPoolAllocator(size_swa, page_size, device, need_sort, kernel, check_layout)
        self.full_attn_allocator.pool_name = f"{self.pool_name}.full"
        self.swa_attn_allocator.pool_name = f"{self.pool_name}.swa"
        self.check_layout = self.device.type == "cpu" if check_layout is None else check_layout
        self.size_full = size
        self.size_swa = size_swa
        self.full_to_swa_index_mapping = torch.zeros(size + page_size + 1, dtype=torch.int64, device=self.device)
        self.clear()

    # ------------------------------------------------------------------ sizes
    @property
    def size(self) -> int:
        return min(self.size_full, self.size_swa)

    def available_size(self) -> int:
        return min(self.full_available_size(), self.swa_available_size())

    def full_available_size(self) -> int:
        return self.full_attn_allocator.available_size()

    def swa_available_size(self) -> int:
        return self.swa_attn_allocator.available_size()

    def new_pages_available(self, num_full_pages: int, num_swa_pages: int) -> bool:
        ps = self.page_size
        return num_full_pages <= self.full_available_size() // ps and num_swa_pages <= self.swa_available_size() // ps

    @property
    def in_free_group(self) -> bool:
        return self.full_attn_allocator.in_free_group

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """SWA slots of full slots ``kv_indices``: 0 where there is no peer, -1 for -1."""
        return self.full_to_swa_index_mapping[kv_indices]

    # ------------------------------------------------------------------ state
    def clear(self) -> None:
        """Both sides free, every mapping entry 0 except the trailing -1, no group open."""
        self.swa_attn_allocator.clear()
        self.full_attn_allocator.clear()
        self.full_to_swa_index_mapping.zero_()
        self.full_to_swa_index_mapping[-1] = -1

    def _paged_sides(self, call: str) -> tuple[PagedTokenToKVPoolAllocator, PagedTokenToKVPoolAllocator]:
        full, swa = self.full_attn_allocator, self.swa_attn_allocator
        if not isinstance(full, PagedTokenToKVPoolAllocator) or not isinstance(swa, PagedTokenToKVPoolAllocator):
            raise BadSizeError(self.pool_name, "page_size", 1, f"{call} needs page_size > 1; use alloc")
        return full, swa

    def _set_mapping(self, full_indices: torch.Tensor, swa_indices: torch.Tensor) -> None:
        self.full_to_swa_index_mapping[full_indices] = swa_indices

    def _clear_mapping(self, full_indices: torch.Tensor) -> None:
        self.full_to_swa_index_mapping.index_fill_(0, full_indices, 0)

    # ----------------------------------------------------------------- allocs
    def alloc(self, need_size: int) -> torch.Tensor | None:
        """Page size 1: ``need_size`` full slots, each paired with a fresh SWA slot, or ``None``."""
        if self.page_size != 1:
            raise BadSizeError(self.pool_name, "page_size", self.page_size, "alloc needs page_size 1; use alloc_extend")
        if isinstance(need_size, bool) or not isinstance(need_size, int) or need_size < 0:
            raise BadSizeError(self.pool_name, "need_size", need_size, "must be an int >= 0")  # type: ignore[arg-type]
        if need_size > self.full_available_size() or need_size > self.swa_available_size():
            return None
        full = self.full_attn_allocator.alloc(need_size)
        swa = self.swa_attn_allocator.alloc(need_size)
        assert full is not None and swa is not None, "capacity was checked on both sides"
        self._set_mapping(full, swa)
        return full

    def _count_extend_pages(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        extend_num_tokens: int,
    ) -> int:
        """New pages the batch needs on each side; raises on malformed CPU lengths first."""
        full, _ = self._paged_sides("alloc_extend")
        bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1
        full._batches.check_lengths("seq_lens", seq_lens, seq_lens_cpu, bs)  # the paged allocator's own shape check
        full._batches.check_lengths("prefix_lens", prefix_lens, prefix_lens_cpu, bs)
        bad = ((prefix_lens_cpu < 0) | (seq_lens_cpu < prefix_lens_cpu)).nonzero()
        if len(bad):
            i = int(bad[0])
            raise BadBatchError(
                self.pool_name, f"need 0 <= prefix_len <= seq_len, got {int(prefix_lens_cpu[i])}, {int(seq_lens_cpu[i])}", position=i
            )
        total = int((seq_lens_cpu - prefix_lens_cpu).sum())
        if extend_num_tokens != total:
            raise BadBatchError(self.pool_name, f"extend_num_tokens={extend_num_tokens} but the lengths sum to {total}")
        return get_num_new_pages(seq_lens_cpu, self.page_size, prefix_lens_cpu)

    def _swa_last_loc(self, last_loc: torch.Tensor, has_prefix: torch.Tensor, call: str) -> torch.Tensor:
        """``last_loc`` on the SWA side; with ``check_layout``, every request with a prefix
        must still hold the SWA peer of its last prefix token."""
        bs = len(has_prefix)
        if not isinstance(last_loc, torch.Tensor) or last_loc.is_floating_point() or last_loc.shape != (bs,):
            raise BadBatchError(self.pool_name, f"{call}: last_loc must be an integer tensor of shape ({bs},)")
        if not self.check_layout or bs == 0:
            return self.translate_loc_from_full_to_swa(last_loc)
        loc = last_loc.to(self.device, torch.int64)
        if int(loc.min()) < -1 or int(loc.max()) >= len(self.full_to_swa_index_mapping) - 1:
            raise BadBatchError(self.pool_name, f"{call}: last_loc {loc.tolist()} points outside the full pool")
        swa_loc = self.translate_loc_from_full_to_swa(loc)
        swa_cpu = swa_loc.cpu()
        for wrong, problem in (
            (has_prefix & (swa_cpu <= 0), "has no SWA peer: the prefix's last token left the window"),
            (~has_prefix & (swa_cpu != -1), "must be -1: the request has no prefix"),  # else a misaligned 0
        ):
            hits = wrong.nonzero()
            if len(hits):
                i = int(hits[0])
                raise BadBatchError(self.pool_name, f"{call}: last_loc {int(loc[i])} {problem}", position=i)
        return swa_loc

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
    ) -> torch.Tensor | None:
        """Full slots for tokens ``prefix_lens[i]..seq_lens[i]``, each with an SWA peer, or ``None``.

        Both sides take the same number of new pages and continue the prefix's partial
        page; ``last_loc`` (full side) is translated through the mapping for the SWA side.
        """
        full_side, swa_side = self._paged_sides("alloc_extend")
        num_new_pages = self._count_extend_pages(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, extend_num_tokens)
        if not self.new_pages_available(num_new_pages, num_new_pages):
            return None
        swa_last_loc = self._swa_last_loc(last_loc, prefix_lens_cpu > 0, "alloc_extend")
        args = (prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu)
        full = full_side.alloc_extend(*args, last_loc, extend_num_tokens)
        assert full is not None, "capacity was checked"
        swa = swa_side.alloc_extend(*args, swa_last_loc, extend_num_tokens)
        assert swa is not None, "capacity was checked and the SWA last_loc mirrors the full one"
        self._set_mapping(full, swa)
        return full

    def alloc_extend_swa_tail(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
        swa_tail_len: int,
    ) -> torch.Tensor | None:
        """One request (PD decode pre-allocation): full slots for the whole extend, SWA
        peers only for its last ``swa_tail_len`` tokens, or ``None``.

        The tail is allocated on fresh SWA pages, so it must start on a page boundary:
        ``seq_len - swa_tail_len`` is a multiple of ``page_size`` (upstream's caller
        asserts this afterwards).  The other new full tokens map to 0 (SGLang #25805).
        """
        full_side, swa_side = self._paged_sides("alloc_extend_swa_tail")
        num_full_pages = self._count_extend_pages(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, extend_num_tokens)
        if len(seq_lens_cpu) != 1:
            raise BadBatchError(self.pool_name, f"alloc_extend_swa_tail takes one request, got {len(seq_lens_cpu)}")
        ps = self.page_size
        if isinstance(swa_tail_len, bool) or not isinstance(swa_tail_len, int) or not 0 <= swa_tail_len <= extend_num_tokens:
            raise BadSizeError(self.pool_name, "swa_tail_len", swa_tail_len, f"must be an int in [0, {extend_num_tokens}]")
        if (int(seq_lens_cpu[0]) - swa_tail_len) % ps:
            raise BadSizeError(
                self.pool_name,
                "swa_tail_len",
                swa_tail_len,
                f"seq_len {int(seq_lens_cpu[0])} - swa_tail_len must be a multiple of page_size={ps}",
            )
        if not self.new_pages_available(num_full_pages, -(-swa_tail_len // ps)):
            return None
        full = full_side.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens)
        assert full is not None, "capacity was checked"
        tail_cpu = torch.tensor([swa_tail_len], dtype=torch.int64)
        no_prefix_cpu = torch.zeros(1, dtype=torch.int64)
        swa = swa_side.alloc_extend(
            no_prefix_cpu.to(self.device),
            no_prefix_cpu,
            tail_cpu.to(self.device),
            tail_cpu,
            torch.full((1,), -1, dtype=torch.int64, device=self.device),
            swa_tail_len,
        )
        assert swa is not None, "capacity was checked"
        head = extend_num_tokens - swa_tail_len
        self._clear_mapping(full[:head])
        self._set_mapping(full[head:], swa)
        return full

    def alloc_decode(self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor) -> torch.Tensor | None:
        """One full slot per request for token ``seq_lens[i] - 1`` (post-step lengths), with
        an SWA peer, or ``None`` with *neither* side consumed."""
        full, swa = self._paged_sides("alloc_decode")
        bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1
        full._batches.check_lengths("seq_lens", seq_lens, seq_lens_cpu, bs)
        if bs and int(seq_lens_cpu.min()) < 1:
            raise BadBatchError(self.pool_name, f"decode needs seq_lens >= 1, got {seq_lens_cpu.tolist()}")
        num_new_pages = get_num_new_pages(seq_lens_cpu, self.page_size, decode=True)
        if not self.new_pages_available(num_new_pages, num_new_pages):
            return None
        swa_last_loc = self._swa_last_loc(last_loc, seq_lens_cpu > 1, "alloc_decode")
        full_indices = full.alloc_decode(seq_lens, seq_lens_cpu, last_loc)
        assert full_indices is not None, "capacity was checked"
        swa_indices = swa.alloc_decode(seq_lens, seq_lens_cpu, swa_last_loc)
        assert swa_indices is not None, "capacity was checked and the SWA last_loc mirrors the full one"
        self._set_mapping(full_indices, swa_indices)
        return full_indices

    # ------------------------------------------------------------------ frees
    def _touched_slots(self, free_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Validated full pages of ``free_index`` (raises if any is foreign, padding, free
        or pending) and every full slot of those pages."""
        pages = self.full_attn_allocator._pages_of(free_index)  # validation only: nothing changes
        ps = self.page_size
        slots = (pages[:, None] * ps + torch.arange(ps, device=self.device)).reshape(-1)
        return pages, slots

    def _release_peers(self, slots: torch.Tensor, peers: torch.Tensor) -> None:
        """Release the SWA ``peers`` of full ``slots`` (deferred inside a free group, with the
        values captured now) and zero the mapping of all ``slots``."""
        self.swa_attn_allocator.free(peers[peers > 0])
        self._clear_mapping(slots)

    def free(self, free_index: torch.Tensor) -> None:
        """Release full slots and whatever SWA peers they still have, whole pages at a time.

        Tokens without a peer (out of the window, outside a swa tail) are fine.  The SWA
        side goes first, as in 0.5.23; the full side is validated before either changes.
        """
        if _is_empty_tensor(free_index):
            return
        _, slots = self._touched_slots(free_index)
        self._release_peers(slots, self.full_to_swa_index_mapping[slots])
        self.full_attn_allocator.free(free_index)

    def free_swa(self, free_index: torch.Tensor) -> None:
        """Release the SWA peers of live full slots that left the window; the full slots stay.

        At page size > 1 the whole SWA page of each named full page is released and the
        whole full page's mapping zeroed.  Every named slot (page size 1) or page must
        still have a peer: releasing it twice raises :class:`DoubleFreeError`.
        """
        if _is_empty_tensor(free_index):
            return
        pages, slots = self._touched_slots(free_index)
        peers = self.full_to_swa_index_mapping[slots]
        orphaned = peers.view(-1, self.page_size).amax(dim=1) <= 0
        if bool(orphaned.any()):
            what = "the SWA peer of full slot" if self.page_size == 1 else "the SWA page of full page"
            raise DoubleFreeError(self.pool_name, pages[orphaned].tolist(), what)
        self._release_peers(slots, peers)

    def free_full(self, free_index: torch.Tensor) -> None:
        """Release full slots whose SWA peers are already gone (see :meth:`free_swa`)."""
        if _is_empty_tensor(free_index):
            return
        pages, slots = self._touched_slots(free_index)
        mapped = self.full_to_swa_index_mapping[slots].view(-1, self.page_size).amax(dim=1) > 0
        if bool(mapped.any()):
            raise BadBatchError(
                self.pool_name, f"free_full of full pages {pages[mapped].tolist()} whose SWA peers are live; free releases both sides"
            )
        self.full_attn_allocator.free(free_index)

    def free_group_begin(self) -> None:
        """Defer frees on both sides until :meth:`free_group_end`; the mapping is zeroed and
        the SWA peers resolved when a free is enqueued, not when the group ends."""
        if self.in_free_group:
            raise GroupStateError(self.pool_name, "free", "free_group_begin while a free group is open (nesting)")
        self.full_attn_allocator.free_group_begin()
        self.swa_attn_allocator.free_group_begin()

    def free_group_end(self) -> None:
        """Release what the group enqueued: the SWA side first, then the full side."""
        if not self.in_free_group:
            raise GroupStateError(self.pool_name, "free", "free_group_end without free_group_begin")
        self.swa_attn_allocator.free_group_end()
        self.full_attn_allocator.free_group_end()

"""poolfuzz's own pools behind the interfaces SGLang 0.5.23's scheduler glue calls.

The engine loop (:mod:`poolfuzz.harness.upstream.engine`) runs the same scheduler iterations over either
upstream's pools or ours (``pools=`` in :class:`~poolfuzz.harness.kits.engine.config.EngineTargetConfig`), so one
operation sequence reaches both and the judges see any difference.  What is ours here:

* the KV allocator (``poolfuzz.pools.kv_allocator``: ``TokenToKVPoolAllocator`` at page 1,
  ``PagedTokenToKVPoolAllocator`` above), behind a subclass of upstream's allocator class that
  hands every call touching the free list to our pool.  The scheduler-facing helpers upstream
  defines on its base class (``create_prefill_budget``, ``check_decode_capacity``,
  ``evict_to_free_tokens``, ``free_segments``) stay upstream's, and call ours underneath;
* the request-row pool (``poolfuzz.pools.req_to_token.ReqToTokenPool``).  0.5.23 moved the row index
  into the request's KV record (``req.kv.req_pool_idx``, ``schedule_batch.py:955``); our pool
  reads ``req.req_pool_idx``, so each call passes a record view of the request (:class:`_RowRecord`).

The prefix cache stays upstream's: ``poolfuzz.pools.radix_cache`` keeps the pre-0.5.22 interface
(``match_prefix(key)``), not the ``MatchPrefixParams`` / ``TreeLock`` / ``checkpoint(req)`` one the
0.5.23 glue calls, so no adapter could put it on this path without re-implementing the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator as OurPagedAllocator
from poolfuzz.pools.kv_allocator import TokenToKVPoolAllocator as OurTokenAllocator
from poolfuzz.pools.req_to_token import ReqToTokenPool as OurRowPool


class _RowRecord:
    """A 0.5.23 request seen as the record our row pool reads: ``rid``, ``req_pool_idx``, ``kv_allocated_len``."""

    __slots__ = ("_req",)

    def __init__(self, req: Any) -> None:
        self._req = req

    @property
    def rid(self) -> str:
        return str(self._req.rid)

    @property
    def req_pool_idx(self) -> int | None:
        return self._req.kv.req_pool_idx  # type: ignore[no-any-return]

    @req_pool_idx.setter
    def req_pool_idx(self, row: int | None) -> None:
        self._req.kv.req_pool_idx = row

    @property
    def kv_allocated_len(self) -> int:
        return int(self._req.kv.kv_allocated_len)


class OurReqToTokenPool(OurRowPool):
    """``poolfuzz.pools.req_to_token.ReqToTokenPool`` taking 0.5.23 requests (``memory_pool.py:376`` interface)."""

    def alloc(self, reqs: Sequence[Any]) -> list[int] | None:  # type: ignore[override]
        records: list[Any] = [_RowRecord(r) for r in reqs]  # our pool reads rid / req_pool_idx / kv_allocated_len
        return super().alloc(records)

    def free(self, req: Any) -> None:  # type: ignore[override]
        super().free(_RowRecord(req))  # type: ignore[arg-type]

    def alloc_aux_to_lengths(self, *, req_pool_indices_cpu: torch.Tensor, target_seq_lens_cpu: torch.Tensor) -> None:
        """memory_pool.py:492: grows the auxiliary per-token cache, which only some models have; none here."""
        return None


def our_allocator(upstream_class: type, size: int, page_size: int) -> Any:
    """Our KV allocator behind a subclass of ``upstream_class`` (upstream's allocator of that page size)."""

    class PoolfuzzAllocator(upstream_class):  # type: ignore[misc, valid-type]
        """Upstream's allocator interface; the free list is poolfuzz's (see the module docstring)."""

        def __init__(self) -> None:
            # The base constructor (allocator/base.py) sets size, page_size, dtype, device and the
            # free-list fields, which the properties below take over.
            self.ours: Any = OurTokenAllocator(size) if page_size == 1 else OurPagedAllocator(size, page_size, "cpu", False)
            base: Any = next(k for k in upstream_class.__mro__ if k.__name__ == "BaseTokenToKVPoolAllocator")
            base.__init__(self, size, page_size, torch.float16, "cpu", None, False)
            self.debug_mode = False

        # ------------------------------------------------- the free list is ours
        free_pages = property(lambda self: self.ours.free_pages, lambda self, value: None)
        release_pages = property(lambda self: None, lambda self, value: None)
        free_group = property(lambda self: [] if self.ours.in_free_group else None, lambda self, value: None)

        def available_size(self) -> int:
            return int(self.ours.available_size())

        def get_all_free_pages(self) -> torch.Tensor:
            return self.ours.get_all_free_pages()

        def merge_and_sort_free(self) -> None:
            self.ours.merge_and_sort_free()

        def clear(self) -> None:
            if hasattr(self, "ours"):
                self.ours.clear()

        def alloc(self, need_size: int) -> torch.Tensor | None:
            return self.ours.alloc(need_size)

        def alloc_extend(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
            return self.ours.alloc_extend(*args, **kwargs)

        def alloc_decode(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
            return self.ours.alloc_decode(*args, **kwargs)

        def free(self, free_index: torch.Tensor) -> None:
            self.ours.free(free_index)

        def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
            """allocator/base.py:284: a page-aligned segment of one row, freed as one ``free``."""
            assert start_pos % self.page_size == 0, f"segment start {start_pos} is not page-aligned"
            self.ours.free(free_index)

        def free_group_begin(self) -> None:
            self.ours.free_group_begin()

        def free_group_end(self) -> None:
            self.ours.free_group_end()

    PoolfuzzAllocator.__name__ = f"Poolfuzz{upstream_class.__name__}"
    return PoolfuzzAllocator()

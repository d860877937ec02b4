"""One ``typing.Protocol`` per pool family: exactly what the harness may call.

A user's own pool is fuzzable when it satisfies the protocol of its family and
takes the same constructor arguments (see ``harness.judge.families``).  The harness
reads only these members; everything else is the implementation's business.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from pools.req_to_token import Req


@runtime_checkable
class RequestRowPool(Protocol):
    """``ReqToTokenPool`` / ``DecodeReqToTokenPool``: rows ``1..N`` of ``req_to_token``, row 0 padding."""

    req_to_token: torch.Tensor
    req_generation: torch.Tensor
    free_slots: list[int]

    def available_size(self) -> int: ...
    def alloc_rows(self, need_size: int) -> list[int] | None: ...
    def alloc(self, reqs: Sequence[Req]) -> list[int] | None: ...
    def free(self, req: Req) -> None: ...
    def free_rows(self, indices: Iterable[int]) -> None: ...
    def clear(self) -> None: ...
    def write(self, indices: Any, values: Any) -> None: ...


@runtime_checkable
class MambaSlotPool(Protocol):
    """``MambaSlotAllocator``: slots ``1..size`` with grouped (reserved) admission."""

    free_slots: torch.Tensor

    def available_size(self) -> int: ...
    def alloc(self, need_size: int) -> torch.Tensor | None: ...
    def free(self, indices: torch.Tensor) -> None: ...
    def alloc_group_begin(self, num_reqs: int) -> None: ...
    def alloc_group_end(self) -> None: ...
    def clear(self) -> None: ...


@runtime_checkable
class HybridRowPool(RequestRowPool, Protocol):
    """``HybridReqToTokenPool``: request rows plus one Mamba slot per request."""

    req_index_to_mamba_index_mapping: torch.Tensor

    def free_mamba_cache(self, req: Req) -> None: ...
    def mamba_available_size(self) -> int: ...


@runtime_checkable
class TokenKVAllocator(Protocol):
    """``TokenToKVPoolAllocator`` and the page-level surface of the paged allocator."""

    size: int
    page_size: int
    free_pages: torch.Tensor

    def available_size(self) -> int: ...
    def alloc(self, need_size: int) -> torch.Tensor | None: ...
    def free(self, indices: torch.Tensor) -> None: ...
    def free_group_begin(self) -> None: ...
    def free_group_end(self) -> None: ...
    def merge_and_sort_free(self) -> None: ...
    def clear(self) -> None: ...


@runtime_checkable
class PagedKVAllocator(TokenKVAllocator, Protocol):
    """``PagedTokenToKVPoolAllocator``: adds the scheduler's extend and decode calls."""

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
    ) -> torch.Tensor | None: ...

    def alloc_decode(
        self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor
    ) -> torch.Tensor | None: ...

"""One ``typing.Protocol`` per pool family: exactly what the harness may call.

A user's own pool is fuzzable when it satisfies the protocol of its family and
takes the same constructor arguments (see ``poolfuzz.harness.judge.families``).  The harness
reads only these members; everything else is the implementation's business.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from poolfuzz.pools.req_to_token import Req


@runtime_checkable
class RequestRowPool(Protocol):
    """``ReqToTokenPool`` / ``DecodeReqToTokenPool``: rows ``1..N`` of ``req_to_token``, row 0 padding."""

    size: int
    max_context_len: int
    pre_alloc_size: int
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


class ExtendDecodeCalls(Protocol):
    """The scheduler's paged calls, ``alloc_extend`` and ``alloc_decode``: one declaration for the two families
    that take them with the same signature (the paged KV allocator and the SWA allocator), so the wrappers that
    forward them (:class:`poolfuzz.harness.upstream.wrapper.ExtendDecodeForwarding`) show one signature."""

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
    ) -> torch.Tensor | None: ...

    def alloc_decode(self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor) -> torch.Tensor | None: ...


@runtime_checkable
class PagedKVAllocator(ExtendDecodeCalls, TokenKVAllocator, Protocol):
    """``PagedTokenToKVPoolAllocator``: adds the scheduler's extend and decode calls (:class:`ExtendDecodeCalls`)."""


@runtime_checkable
class PrefixCache(Protocol):
    """``RadixCache`` over its KV allocator (``poolfuzz.pools.prefix_cache.build_prefix_cache``): what the
    ``prefix_cache`` family calls, and all it calls.

    Nodes are opaque handles: the harness passes ``match_prefix(...).last_node`` back to
    ``inc_lock_ref``/``dec_lock_ref`` and reads nothing from them.  ``match_prefix`` returns an
    object with ``indices`` (a 1-D tensor), ``last_node`` and ``prefix_len``; ``insert`` returns
    the length already cached, whose indices are the caller's duplicates to free; the lock calls
    return the change in ``evictable_size()``; ``evict`` returns the number of tokens freed.
    ``allocator`` needs ``size``, ``page_size``, ``alloc``, ``free``, ``available_size`` and
    ``clear`` (and, when present, ``get_all_free_pages``); ``sanity_check`` is optional.
    """

    allocator: Any
    page_size: int

    def match_prefix(self, key: Sequence[int]) -> Any: ...
    def insert(self, key: Sequence[int], value: torch.Tensor) -> int: ...
    def inc_lock_ref(self, node: Any) -> int: ...
    def dec_lock_ref(self, node: Any) -> int: ...
    def evict(self, num_tokens: int) -> int: ...
    def evictable_size(self) -> int: ...
    def protected_size(self) -> int: ...
    def total_size(self) -> int: ...
    def reset(self) -> None: ...


@runtime_checkable
class KVSideView(Protocol):
    """What the harness reads of one side of a hybrid KV pool: its free pages and their count."""

    def available_size(self) -> int: ...
    def get_all_free_pages(self) -> torch.Tensor: ...


@runtime_checkable
class SWAKVAllocator(ExtendDecodeCalls, Protocol):
    """``SWATokenToKVPoolAllocator`` (and ``PureSWATokenToKVPoolAllocator``): full and SWA KV in step.

    Every index passed or returned is a *full* index; ``full_to_swa_index_mapping[f]`` is the
    SWA slot of full slot ``f`` (0 without a peer, ``-1`` in the trailing entry).  The sides are
    read only through :class:`KVSideView`.  Constructor: ``(size, size_swa, page_size, device,
    need_sort, kernel, check_layout)`` (the pure variant: ``(size_swa, page_size, device, need_sort)``).
    ``alloc_extend`` and ``alloc_decode`` take the paged allocator's arguments (:class:`ExtendDecodeCalls`).
    """

    page_size: int
    full_to_swa_index_mapping: torch.Tensor

    @property
    def full_attn_allocator(self) -> KVSideView: ...
    @property
    def swa_attn_allocator(self) -> KVSideView: ...

    def available_size(self) -> int: ...
    def full_available_size(self) -> int: ...
    def swa_available_size(self) -> int: ...
    def alloc(self, need_size: int) -> torch.Tensor | None: ...

    def alloc_extend_swa_tail(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
        swa_tail_len: int,
    ) -> torch.Tensor | None: ...

    def free(self, free_index: torch.Tensor) -> None: ...
    def free_swa(self, free_index: torch.Tensor) -> None: ...
    def free_full(self, free_index: torch.Tensor) -> None: ...
    def free_group_begin(self) -> None: ...
    def free_group_end(self) -> None: ...
    def clear(self) -> None: ...


@runtime_checkable
class BlockPoolLike(Protocol):
    """``BlockPool`` (vLLM v1 semantics): ref-counted blocks ``1..num_gpu_blocks-1``, null block 0, a prefix cache.

    ``blocks[i]`` is block ``i``; a block exposes ``block_id``, ``ref_cnt``, ``block_hash``
    (``None`` when uncached) and ``is_null``.  The harness passes the pool's own block
    objects back to ``touch``, ``free_blocks`` and ``cache_full_blocks`` and reads the
    state only through ``free_block_ids`` (front first), ``cached_block_ids`` (hash ->
    ids, lookup answer first) and ``ref_counts``.  Constructor: ``(num_gpu_blocks, enable_caching)``.
    """

    num_gpu_blocks: int
    enable_caching: bool
    blocks: Sequence[Any]
    null_block: Any

    def get_num_free_blocks(self) -> int: ...
    def get_usage(self) -> float: ...
    def get_new_blocks(self, num_blocks: int) -> list[Any]: ...
    def touch(self, blocks: Sequence[Any]) -> None: ...
    def free_blocks(self, ordered_blocks: Iterable[Any]) -> None: ...
    def cache_full_blocks(
        self, blocks: Sequence[Any], block_hashes: Sequence[Any], num_cached_blocks: int = 0, num_full_blocks: int | None = None
    ) -> None: ...
    def get_cached_block(self, block_hash: Any) -> Any | None: ...
    def evict_blocks(self, block_ids: Iterable[int]) -> None: ...
    def reset_prefix_cache(self) -> bool: ...
    def free_block_ids(self) -> list[int]: ...
    def cached_block_ids(self) -> dict[Any, list[int]]: ...
    def ref_counts(self) -> list[int]: ...

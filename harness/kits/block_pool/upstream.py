"""vLLM 0.33.0's v1 ``BlockPool`` behind our ``BlockPool``'s constructor and public API.

``VllmBlockPool(num_gpu_blocks, enable_caching)`` builds upstream's pool through
:mod:`poolfuzz.harness.upstream.vllm_loader` (the installed wheel, run under stand-ins; no
vLLM code is copied) and forwards the ``block_pool`` family protocol
(:class:`poolfuzz.pools.protocols.BlockPoolLike`) to it, translating only shapes:

* block hashes: the harness names them by small ints; upstream keys its map by
  ``bytes`` with a 4-byte group id appended.  Ints go in as 8-byte big-endian
  hashes (:func:`~poolfuzz.harness.upstream.vllm_stand_ins.block_hashes`) under KV-cache group 0,
  and come back out of ``block_hash`` and ``cached_block_ids()`` as the same ints;
* blocks: upstream's ``KVCacheBlock`` objects are wrapped once per block in a
  :class:`VllmBlock` view (``block_id``, ``ref_cnt``, ``block_hash``, ``is_null``),
  unwrapped again on the way in;
* ``cache_full_blocks(blocks, hashes, start, end)`` becomes upstream's
  ``cache_full_blocks(request, blocks, start, end, block_size, group)`` with a
  request stand-in carrying the hashes, at ``block_size == hash_block_size``;
* the read-only views (``free_block_ids``, ``cached_block_ids``, ``ref_counts``)
  walk upstream's free queue and hash map without changing them.

Nothing is validated or repaired here, so the harness judges upstream's behaviour.
Upstream does not validate its input (a double free drives ``ref_cnt`` to -1,
vLLM #42571), so ``poolfuzz_check_misuse = False``: machines issue valid calls only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from poolfuzz.harness.upstream.vllm_files import SUPPORTED_VERSION, VLLM, load_vllm
from poolfuzz.harness.upstream.vllm_stand_ins import block_hashes as upstream_hashes
from poolfuzz.harness.upstream.wrapper import inner_attribute, runs_upstream

HASH_BLOCK_SIZE = 16
"""Tokens per block hash; the adapter caches at ``block_size == HASH_BLOCK_SIZE`` (one hash per block)."""
GROUP_ID = 0
"""The one KV-cache group every block belongs to."""


def _hash_value(key: bytes) -> int:
    """The harness's int for an upstream ``BlockHashWithGroupId`` (8 hash bytes, then the group id)."""
    return int.from_bytes(key[:-4], "big", signed=True)


class VllmBlock:
    """A read-only view of one upstream ``KVCacheBlock`` with the harness's hash values."""

    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    block_id = inner_attribute(int)
    ref_cnt = inner_attribute(int)

    @property
    def block_hash(self) -> int | None:
        key = self.inner.block_hash
        return None if key is None else _hash_value(key)

    is_null = inner_attribute(bool)

    def __repr__(self) -> str:
        return f"VllmBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, block_hash={self.block_hash})"


@runs_upstream(VLLM)
class VllmBlockPool:
    """``block_pool``: upstream ``BlockPool(num_gpu_blocks, enable_caching, hash_block_size)``, events and metrics off."""

    poolfuzz_check_misuse: ClassVar[bool] = False
    poolfuzz_contract: ClassVar[str] = "poolfuzz.harness.kits.block_pool.contracts.block_pool:CONTRACT"
    upstream_class: ClassVar[str] = "BlockPool"
    upstream_version: ClassVar[str] = SUPPORTED_VERSION

    def __init__(self, num_gpu_blocks: int, enable_caching: bool = True) -> None:
        self.modules = load_vllm()
        # A refused reset_prefix_cache() logs a warning; a fuzz run refuses thousands.
        self.modules.block_pool.logger.setLevel(logging.ERROR)
        self.inner = self.modules.new_block_pool(num_gpu_blocks, enable_caching=enable_caching, hash_block_size=HASH_BLOCK_SIZE)
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.blocks = [VllmBlock(block) for block in self.inner.blocks]
        self.null_block = self.blocks[self.inner.null_block.block_id]

    def __repr__(self) -> str:
        return f"<upstream vllm=={self.upstream_version} {self.upstream_class} num_gpu_blocks={self.num_gpu_blocks}>"

    def _views(self, inner_blocks: Iterable[Any]) -> list[VllmBlock]:
        return [self.blocks[block.block_id] for block in inner_blocks]

    # ------------------------------------------------------------ queries
    def get_num_free_blocks(self) -> int:
        return int(self.inner.get_num_free_blocks())

    def get_usage(self) -> float:
        return float(self.inner.get_usage())

    def get_cached_block(self, block_hash: int) -> VllmBlock | None:
        found = self.inner.get_cached_block(upstream_hashes([block_hash])[0], [GROUP_ID])
        return None if found is None else self.blocks[found[0].block_id]

    def free_block_ids(self) -> list[int]:
        return [block.block_id for block in self.inner.free_block_queue.get_all_free_blocks()]

    def cached_block_ids(self) -> dict[int, list[int]]:
        """Hash -> ids of the blocks cached under it, lookup answer first (read from upstream's map)."""
        by_hash: dict[int, list[int]] = {}
        cached = self.inner.cached_block_hash_to_block
        duplicates = getattr(cached, "_dup_ids", {})
        for key, blocks in cached._cache.items():
            if isinstance(blocks, int):  # 0.34.0: the answer's id, every id of a shared key in _dup_ids (block_pool.py:61-64)
                ids = [blocks, *(i for i in duplicates.get(key, ()) if i != blocks)]
            else:  # 0.31.0-0.33.0: the block, or a dict of id -> block for a shared key
                ids = [blocks.block_id] if hasattr(blocks, "block_id") else list(blocks)
            by_hash.setdefault(_hash_value(key), []).extend(ids)
        return by_hash

    def ref_counts(self) -> list[int]:
        return [int(block.ref_cnt) for block in self.inner.blocks]

    # ------------------------------------------------------------ mutation
    def get_new_blocks(self, num_blocks: int) -> list[VllmBlock]:
        return self._views(self.inner.get_new_blocks(num_blocks))

    def touch(self, blocks: Sequence[VllmBlock]) -> None:
        self.inner.touch([block.inner for block in blocks])

    def free_blocks(self, ordered_blocks: Iterable[VllmBlock]) -> None:
        self.inner.free_blocks([block.inner for block in ordered_blocks])

    def cache_full_blocks(
        self, blocks: Sequence[VllmBlock], block_hashes: Sequence[int], num_cached_blocks: int = 0, num_full_blocks: int | None = None
    ) -> None:
        end = len(blocks) if num_full_blocks is None else num_full_blocks
        request = self.modules.request(upstream_hashes(list(block_hashes)))
        self.inner.cache_full_blocks(request, [block.inner for block in blocks], num_cached_blocks, end, HASH_BLOCK_SIZE, GROUP_ID)

    def unpin_blocks(self, blocks: Iterable[VllmBlock], on_reuse: Callable[[VllmBlock], None]) -> None:
        """``unpin_blocks(blocks, on_reuse)`` (block_pool.py:748-767), ``on_reuse`` seeing our block views."""
        views = self.blocks
        self.inner.unpin_blocks([block.inner for block in blocks], lambda inner: on_reuse(views[inner.block_id]))

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        self.inner.evict_blocks(set(block_ids))

    def reset_prefix_cache(self) -> bool:
        return bool(self.inner.reset_prefix_cache())

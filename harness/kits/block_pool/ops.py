"""The block-pool driver's operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`).

:class:`~poolfuzz.harness.kits.block_pool.driver.BlockPoolDriver` implements exactly these; its moves, its contract,
limits and realistic floors name them through :class:`BlockPoolOps`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.ops import Operations, op


class BlockPoolOps(Operations):
    """``block_pool``: requests admitted, blocks allocated, cached, touched, freed, evicted and slid past, and the
    misuse of each."""

    admit = op("tokens")
    allocate = op("handle", "num_blocks")
    cache = op("handle", "num_full")
    cache_misuse = op("kind")
    evict = op("block_ids")
    evict_non_int = op("block_id")
    foreign_block = op("call", "kind")
    free = op("handle")
    free_blocks = op("block_ids")
    reset = op()
    slide = op("handle", "num_skipped")
    touch = op("block_ids")
    unpin = op("handle", "position")
    unpin_misuse = op("kind")

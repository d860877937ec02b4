"""The block pool family's configuration: vLLM's ``BlockPool(num_gpu_blocks, enable_caching)``."""

from __future__ import annotations

from dataclasses import dataclass

from poolfuzz.harness.judge.config import PoolConfig, bounded, setting
from poolfuzz.harness.judge.limits import BLOCKS


@dataclass(frozen=True, kw_only=True)
class BlockPoolConfig(PoolConfig):
    """``num_gpu_blocks`` blocks (block 0 the null block); ``enable_caching`` keeps freed blocks' hashes."""

    family = "block_pool"
    takes_device = False  # blocks hold no tensors: vLLM's BlockPool takes no device, and the trace records it only

    num_gpu_blocks: int = bounded(1, BLOCKS)
    enable_caching: bool = setting(True)

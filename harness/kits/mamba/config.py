"""The Mamba families' configurations: the slot allocator, and request rows with Mamba state beside them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from poolfuzz.harness.judge.config import PoolConfig, bounded
from poolfuzz.harness.judge.limits import CELLS, LAYERS, ROWS, STATE_DIM, Footprint
from poolfuzz.harness.kits.rows.config import RowConfig


def _mamba_state(n: Callable[[str, int], int]) -> int:
    return n("num_layers", 1) * (n("mamba_size", 0) + 1) * (n("conv_shape", 4) + n("temporal_shape", 4))


MAMBA_STATE = Footprint("num_layers x (mamba_size + 1) x (conv_shape + temporal_shape elements)", CELLS, _mamba_state)


@dataclass(frozen=True, kw_only=True)
class MambaSlotConfig(PoolConfig):
    """``MambaSlotAllocator``: ``size`` state slots (slot 0 reserved)."""

    family = "mamba_slots"

    size: int = bounded(0, ROWS)


@dataclass(frozen=True, kw_only=True)
class HybridRowConfig(RowConfig):
    """``HybridReqToTokenPool``: request rows plus ``mamba_size`` Mamba slots of ``num_layers`` layers of
    conv and temporal state."""

    family = "hybrid_req_to_token"
    footprints = (*RowConfig.footprints, MAMBA_STATE)

    mamba_size: int = bounded(0, ROWS)
    num_layers: int = bounded(1, LAYERS, default=1)
    conv_shape: tuple[int, ...] = bounded(1, STATE_DIM, dims=4, default=(4,))
    temporal_shape: tuple[int, ...] = bounded(1, STATE_DIM, dims=4, default=(4,))

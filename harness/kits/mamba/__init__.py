"""The Mamba kit: ``mamba_slots`` (``MambaSlotAllocator``) and ``hybrid_req_to_token`` (rows plus slots).

``moves`` (the tables), ``catalogue`` (misuse and corners), ``views``, ``model``, ``driver`` (the
slot allocator), ``state`` (the slot tensors' contents), ``hybrid`` (the hybrid pool's driver,
over the row kit's), ``canaries``.  The pools are :mod:`pools.mamba`.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.judge.kit import ALLOCATOR_INVARIANTS, Family, settings
from harness.judge.limits import CELLS, LAYERS, REQUEST, ROWS, SETTING, STATE_DIM, FamilyLimits, Footprint, Limit
from harness.kits.rows import ROW_ARGS, ROW_CELLS, ROW_CONFIG, ROW_INVARIANTS


def _mamba_state(n: Callable[[str, int], int]) -> int:
    return n("num_layers", 1) * (n("mamba_size", 0) + 1) * (n("conv_shape", 4) + n("temporal_shape", 4))


FAMILIES = (
    Family(name="mamba_slots", summary="Mamba state slots with group windows", default="pools:MambaSlotAllocator",
           driver="harness.kits.mamba.driver:MambaSlotDriver", moves="harness.kits.mamba.moves:mamba_slot_table",
           bench_config=settings(size=16, device="cpu"), canaries=("harness.kits.mamba.canaries",),
           upstream=("harness.upstream:MambaSlots",),
           invariants=(*ALLOCATOR_INVARIANTS, "group-window", "clear-restores"),
           realistic=(("size", 4), ("alloc.need_size", 1), ("group_begin.num_reqs", 1)),
           protocol="pools.protocols:MambaSlotPool", device_path=True,
           limits=FamilyLimits({"size": Limit(0, ROWS), "device": SETTING}, (),
                               {"alloc.need_size": REQUEST, "group_begin.num_reqs": REQUEST})),
    Family(name="hybrid_req_to_token", summary="request rows plus Mamba slots, all-or-nothing",
           default="pools:HybridReqToTokenPool", driver="harness.kits.mamba.hybrid:HybridDriver",
           moves="harness.kits.mamba.moves:hybrid_table",
           bench_config=settings(size=12, max_context_len=16, mamba_size=8, device="cpu"),
           canaries=("harness.kits.mamba.canaries",), invariants=(*ROW_INVARIANTS, "group-window"),
           protocol="pools.protocols:HybridRowPool", device_path=True,
           limits=FamilyLimits(
               {**ROW_CONFIG, "mamba_size": Limit(0, ROWS), "num_layers": Limit(1, LAYERS),
                "conv_shape": Limit(1, STATE_DIM, dims=4), "temporal_shape": Limit(1, STATE_DIM, dims=4)},
               (ROW_CELLS, Footprint("num_layers x (mamba_size + 1) x (conv_shape + temporal_shape elements)", CELLS,
                                     _mamba_state)),
               {**ROW_ARGS, "group_begin.num_reqs": REQUEST})),
)

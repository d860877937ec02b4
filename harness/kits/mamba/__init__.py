"""The Mamba kit: ``mamba_slots`` (``MambaSlotAllocator``) and ``hybrid_req_to_token`` (rows plus slots).

``moves`` (the tables), ``catalogue`` (misuse and corners), ``views``, ``model``, ``driver`` (the
slot allocator), ``state`` (the slot tensors' contents), ``hybrid`` (the hybrid pool's driver,
over the row kit's), ``canaries``.  The pools are :mod:`pools.mamba`.
"""

from __future__ import annotations

from harness.judge.kit import ALLOCATOR_INVARIANTS, Family
from harness.judge.limits import REQUEST
from harness.kits.mamba.config import HybridRowConfig, MambaSlotConfig
from harness.kits.mamba.ops import HybridOps, SlotOps
from harness.kits.rows import ROW_ARGS, ROW_INVARIANTS

FAMILIES = (
    Family(name="mamba_slots", summary="Mamba state slots with group windows", default="pools:MambaSlotAllocator",
           driver="harness.kits.mamba.driver:MambaSlotDriver", moves="harness.kits.mamba.moves:mamba_slot_table",
           bench_config=MambaSlotConfig(size=16, device="cpu"), canaries=("harness.kits.mamba.canaries",),
           upstream=("harness.upstream:MambaSlots",),
           known_findings="harness.kits.mamba.contracts.mamba_slots:KNOWN_FINDINGS",
           invariants=(*ALLOCATOR_INVARIANTS, "group-window", "clear-restores"),
           realistic=(("size", 4), (SlotOps.at(SlotOps.alloc, "need_size"), 1), (SlotOps.at(SlotOps.group_begin, "num_reqs"), 1)),
           protocol="pools.protocols:MambaSlotPool", device_path=True,
           limits=MambaSlotConfig.with_args({SlotOps.at(SlotOps.alloc, "need_size"): REQUEST,
                                             SlotOps.at(SlotOps.group_begin, "num_reqs"): REQUEST}),
           ops=SlotOps),
    Family(name="hybrid_req_to_token", summary="request rows plus Mamba slots, all-or-nothing",
           default="pools:HybridReqToTokenPool", driver="harness.kits.mamba.hybrid:HybridDriver",
           moves="harness.kits.mamba.moves:hybrid_table",
           bench_config=HybridRowConfig(size=12, max_context_len=16, mamba_size=8, device="cpu"),
           canaries=("harness.kits.mamba.canaries",), invariants=(*ROW_INVARIANTS, "group-window"),
           protocol="pools.protocols:HybridRowPool", device_path=True,
           limits=HybridRowConfig.with_args({**ROW_ARGS, HybridOps.at(HybridOps.group_begin, "num_reqs"): REQUEST}),
           ops=HybridOps),
)

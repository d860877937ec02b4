"""The Mamba kit: ``mamba_slots`` (``MambaSlotAllocator``) and ``hybrid_req_to_token`` (rows plus slots).

``moves`` (the tables), ``catalogue`` (misuse and corners), ``views``, ``model``, ``driver`` (the
slot allocator), ``state`` (the slot tensors' contents), ``hybrid`` (the hybrid pool's driver,
over the row kit's), ``canaries``.  The pools are :mod:`poolfuzz.pools.mamba`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import ALLOCATOR_INVARIANTS, Family
from poolfuzz.harness.judge.limits import REQUEST
from poolfuzz.harness.kits.mamba.config import HybridRowConfig, MambaSlotConfig
from poolfuzz.harness.kits.mamba.ops import HybridOps, SlotOps
from poolfuzz.harness.kits.rows import ROW_ARGS, ROW_INVARIANTS

FAMILIES = (
    Family(name="mamba_slots", summary="Mamba state slots with group windows", default="poolfuzz.pools:MambaSlotAllocator",
           driver="poolfuzz.harness.kits.mamba.driver:MambaSlotDriver", moves="poolfuzz.harness.kits.mamba.moves:mamba_slot_table",
           bench_config=MambaSlotConfig(size=16, device="cpu"), canaries=("poolfuzz.harness.kits.mamba.canaries",),
           upstream=("poolfuzz.harness.upstream:MambaSlots",),
           known_findings="poolfuzz.harness.kits.mamba.contracts.mamba_slots:KNOWN_FINDINGS",
           invariants=(*ALLOCATOR_INVARIANTS, "group-window", "clear-restores"),
           realistic=(("size", 4), (SlotOps.at(SlotOps.alloc, "need_size"), 1), (SlotOps.at(SlotOps.group_begin, "num_reqs"), 1)),
           protocol="poolfuzz.pools.protocols:MambaSlotPool", device_path=True,
           limits=MambaSlotConfig.with_args({SlotOps.at(SlotOps.alloc, "need_size"): REQUEST,
                                             SlotOps.at(SlotOps.group_begin, "num_reqs"): REQUEST}),
           ops=SlotOps),
    Family(name="hybrid_req_to_token", summary="request rows plus Mamba slots, all-or-nothing",
           default="poolfuzz.pools:HybridReqToTokenPool", driver="poolfuzz.harness.kits.mamba.hybrid:HybridDriver",
           moves="poolfuzz.harness.kits.mamba.moves:hybrid_table",
           bench_config=HybridRowConfig(size=12, max_context_len=16, mamba_size=8, device="cpu"),
           canaries=("poolfuzz.harness.kits.mamba.canaries",), invariants=(*ROW_INVARIANTS, "group-window"),
           protocol="poolfuzz.pools.protocols:HybridRowPool", device_path=True,
           limits=HybridRowConfig.with_args({**ROW_ARGS, HybridOps.at(HybridOps.group_begin, "num_reqs"): REQUEST}),
           ops=HybridOps),
)

"""The request-row kit: ``req_to_token`` (``ReqToTokenPool``, tail pop) and ``decode_req_to_token`` (head pop).

``moves`` (the move table and :class:`~poolfuzz.harness.kits.rows.moves.RowView`), ``model`` (who holds
which row), ``driver`` (one operation per pool call), ``canaries`` (the historical row bugs).
The pools are :mod:`poolfuzz.pools.req_to_token`.  The row limits below serve the hybrid pool's kit too.
"""

from __future__ import annotations

from poolfuzz.harness.judge.kit import ALLOCATOR_INVARIANTS, Family
from poolfuzz.harness.judge.limits import REQUEST
from poolfuzz.harness.kits.rows.config import DecodeRowConfig, RowConfig
from poolfuzz.harness.kits.rows.ops import RowOps

ROW_ARGS = {RowOps.at(RowOps.alloc_rows, "need_size"): REQUEST, RowOps.at(RowOps.alloc_rows_non_int, "need_size"): REQUEST,
            RowOps.at(RowOps.write, "start"): REQUEST, RowOps.at(RowOps.write, "length"): REQUEST}
ROW_INVARIANTS = (*ALLOCATOR_INVARIANTS, "in-bounds", "generation-monotonic", "clear-restores")

FAMILIES = (
    Family(name="req_to_token", summary="request rows, tail pop", default="poolfuzz.pools:ReqToTokenPool",
           driver="poolfuzz.harness.kits.rows.driver:RowPoolDriver", moves="poolfuzz.harness.kits.rows.moves:row_table",
           bench_config=RowConfig(size=32, max_context_len=16), canaries=("poolfuzz.harness.kits.rows.canaries",),
           invariants=ROW_INVARIANTS, protocol="poolfuzz.pools.protocols:RequestRowPool", rate_target=10_000,
           limits=RowConfig.with_args(ROW_ARGS), ops=RowOps),
    Family(name="decode_req_to_token", summary="decode request rows with pre-allocation, head pop",
           default="poolfuzz.pools:DecodeReqToTokenPool", driver="poolfuzz.harness.kits.rows.driver:DecodeRowPoolDriver",
           moves="poolfuzz.harness.kits.rows.moves:decode_row_table",
           bench_config=DecodeRowConfig(size=24, max_context_len=16, pre_alloc_size=8, device="cpu"),
           canaries=("poolfuzz.harness.kits.rows.canaries",), invariants=ROW_INVARIANTS, protocol="poolfuzz.pools.protocols:RequestRowPool",
           limits=DecodeRowConfig.with_args(ROW_ARGS), ops=RowOps),
)

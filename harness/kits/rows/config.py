"""The request-row families' configurations: ``ReqToTokenPool(size, max_context_len)`` and its decode twin."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from poolfuzz.harness.judge.config import PoolConfig, bounded
from poolfuzz.harness.judge.limits import CELLS, CONTEXT, ROWS, Footprint


def _rows_cells(n: Callable[[str, int], int]) -> int:
    return (n("size", 0) + n("pre_alloc_size", 0)) * n("max_context_len", 0)


ROW_CELLS = Footprint("(size + pre_alloc_size) x max_context_len", CELLS, _rows_cells)
"""The ``req_to_token`` table a row pool allocates: rows times context, in int32 cells."""


@dataclass(frozen=True, kw_only=True)
class RowConfig(PoolConfig):
    """``ReqToTokenPool``: ``size`` rows (row 0 is the padding row) of ``max_context_len`` token slots."""

    family = "req_to_token"
    footprints: ClassVar[tuple[Footprint, ...]] = (ROW_CELLS,)

    size: int = bounded(0, ROWS)
    max_context_len: int = bounded(1, CONTEXT)


@dataclass(frozen=True, kw_only=True)
class DecodeRowConfig(RowConfig):
    """``DecodeReqToTokenPool``: rows plus ``pre_alloc_size`` rows held back for pre-allocated requests."""

    family = "decode_req_to_token"

    pre_alloc_size: int = bounded(0, ROWS, default=0)

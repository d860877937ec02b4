"""The row drivers' operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`).

:class:`~poolfuzz.harness.kits.rows.driver.RowPoolDriver` and its head-pop subclass implement exactly these; the row
moves, the limits and the hybrid kit's operations (which extend them) name them through :class:`RowOps`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.ops import Operations, op


class RowOps(Operations):
    """``req_to_token`` and ``decode_req_to_token``: rows taken (by count, claiming a handle, or malformed),
    written, freed and cleared."""

    alloc = op("batch")
    alloc_claiming = op("handle", "claim")
    alloc_rows = op("need_size")
    alloc_rows_non_int = op("need_size")
    clear = op()
    free = op("handle")
    free_rows = op("rows")
    write = op("handle", "start", "length")
    write_rows = op("handles", "padding")
    write_selecting = op("handle", "selector", "whole_rows")

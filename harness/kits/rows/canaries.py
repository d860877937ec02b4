"""Request-row canaries: ``ReqToTokenPool`` / ``DecodeReqToTokenPool`` with one historical bug put back.

Each class differs from the production pool in exactly the lines that carried
the bug upstream; everything else is inherited, so a canary the harness misses
is a hole in the harness, not a difference in the pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.pools.req_to_token import DecodeReqToTokenPool, ReqToTokenPool

#: What uninitialised ``torch.empty`` memory is pinned to, so the canary is deterministic.
GARBAGE = 0x7EEE


class NegativeZeroSlice(ReqToTokenPool):
    """Tail pop without the ``need_size == 0`` branch (seed 000, SGLang #32208).

    ``free_slots[-0:]`` is ``free_slots[0:]``: a batch whose requests all reuse
    their rows (chunked prefill continuing) takes every free row at once.
    Caught by ``empty-pool-guard``: need 0 must consume nothing.
    """

    def alloc_rows(self, need_size: int) -> list[int] | None:
        if need_size < 0 or need_size > len(self.free_slots):
            return super().alloc_rows(need_size)
        rows = self.free_slots[-need_size:]
        del self.free_slots[-need_size:]
        for row in rows:
            self._is_free[row] = 0
        self.req_generation[rows] += 1
        return rows


class RowZeroHandedOut(ReqToTokenPool):
    """No padding row: ``free_slots`` starts at 0 (before SGLang #24243).

    Padded CUDA-graph batches read and write row 0, so a request owning it has
    its token table clobbered.  Caught by ``reserved-never-handed-out``.
    """

    def clear(self) -> None:
        super().clear()
        self.free_slots = list(range(0, self._alloc_size - 1))
        self._is_free = bytearray(b"\x01" * (self._alloc_size - 1) + b"\x00")


class AllocSizeMismatch(ReqToTokenPool):
    """Row 0 reserved but the table sized by ``size`` (seed 003, SGLang #24439).

    Rows run ``1..size``, so ``req_to_token`` needs ``size + 1`` rows; sized with
    ``size`` the last row is out of bounds, exactly as the auxiliary tables
    sized from ``pool.size`` were.  Caught by ``in-bounds``.
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu") -> None:
        super().__init__(size, max_context_len, device)
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32, device=self.device)


class GenerationZeroedOnClear(ReqToTokenPool):
    """``clear()`` zeroes ``req_generation`` (fixed in 0.5.23).

    After a clear a reused row's generation repeats one its previous owner had,
    so a reader comparing generations cannot tell the owners apart.  Caught by
    ``generation-monotonic``.
    """

    def clear(self) -> None:
        super().clear()
        self.req_generation.zero_()


class UninitialisedTable(ReqToTokenPool):
    """``req_to_token`` from ``torch.empty`` (before SGLang #1782).

    Padded requests read row 0 and got stale slot ids.  The garbage is pinned
    to :data:`GARBAGE` so the canary fails the same way everywhere.  Caught by
    ``reserved-never-handed-out`` (row 0 must stay zero).
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu") -> None:
        super().__init__(size, max_context_len, device)
        self.req_to_token.fill_(GARBAGE)


class SilentDoubleFreeRows(ReqToTokenPool):
    """``free_rows`` appends without a membership check (upstream, sglang-pools.md hazard 6).

    A row freed twice sits on the free list twice and is later handed to two
    requests.  Caught by ``misuse-rejected``: the double free must raise.
    """

    def free_rows(self, indices: Iterable[int]) -> None:
        rows = list(indices)
        for row in rows:
            if 0 < row < self._alloc_size:
                self._is_free[row] = 1
        self.free_slots.extend(rows)


class DecodeClearForgetsPreAlloc(DecodeReqToTokenPool):
    """``clear()`` rebuilds the free list from ``size`` alone (seed 003's decode-side fix).

    The pre-allocation share ``1 + size .. size + pre_alloc_size`` vanishes
    after the first clear: a leak the size of the decode pre-allocation queue.
    Caught by ``clear-restores``.  The constructor's own ``clear()`` is the fixed one: the bug is in
    the reset a scheduler calls later, so a fresh pool is whole (else the first alloc past ``size``
    rows would report it as a refusal, not as a clear that lost rows).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.constructed = False
        super().__init__(*args, **kwargs)
        self.constructed = True

    def clear(self) -> None:
        super().clear()
        if not self.constructed:
            return
        usable = self.size + 1
        self.free_slots = list(range(1, usable))
        self._is_free = bytearray(b"\x00" + b"\x01" * self.size + b"\x00" * (self._alloc_size - usable))


CANARIES: dict[str, Canary] = {
    "negative-zero-slice": Canary(
        "req_to_token",
        "poolfuzz.harness.kits.rows.canaries:NegativeZeroSlice",
        "tail pop without the need-0 guard: free_slots[-0:] takes every free row",
        "seed 000, SGLang #32208",
        "empty-pool-guard",
    ),
    "row-zero-handed-out": Canary(
        "req_to_token",
        "poolfuzz.harness.kits.rows.canaries:RowZeroHandedOut",
        "no padding row: free rows start at 0",
        "SGLang #24243",
        "reserved-never-handed-out",
    ),
    "alloc-size-mismatch": Canary(
        "req_to_token",
        "poolfuzz.harness.kits.rows.canaries:AllocSizeMismatch",
        "row 0 reserved but req_to_token sized by size, not _alloc_size",
        "seed 003, SGLang #24439",
        "in-bounds",
    ),
    "generation-zeroed-on-clear": Canary(
        "req_to_token",
        "poolfuzz.harness.kits.rows.canaries:GenerationZeroedOnClear",
        "clear() zeroes req_generation",
        "SGLang 0.5.23 (post-snapshot fix)",
        "generation-monotonic",
    ),
    "uninitialised-req-to-token": Canary(
        "req_to_token",
        "poolfuzz.harness.kits.rows.canaries:UninitialisedTable",
        "req_to_token from torch.empty (garbage pinned to a sentinel)",
        "SGLang #1782",
        "reserved-never-handed-out",
    ),
    "silent-double-free-rows": Canary(
        "req_to_token",
        "poolfuzz.harness.kits.rows.canaries:SilentDoubleFreeRows",
        "free_rows appends without validation: a double free is accepted",
        "sglang-pools.md section 8, hazard 6",
        "misuse-rejected",
    ),
    "decode-clear-forgets-prealloc": Canary(
        "decode_req_to_token",
        "poolfuzz.harness.kits.rows.canaries:DecodeClearForgetsPreAlloc",
        "clear() rebuilds the free list from size, dropping the pre-allocation rows",
        "seed 003 (DecodeReqToTokenPool.clear)",
        "clear-restores",
    ),
}

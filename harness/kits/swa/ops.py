"""The SWA drivers' operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`).

:class:`~poolfuzz.harness.kits.swa.driver.SWAKVDriver` implements :class:`SWAKVOps`;
:class:`~poolfuzz.harness.kits.swa.pure.PureSWAKVDriver`, over the KV kit's token driver, :class:`PureSWAKVOps`.  Moves,
contracts, limits, realistic floors and the known-finding filter name them here.
"""

from __future__ import annotations

from poolfuzz.harness.judge.ops import op
from poolfuzz.harness.kits.kv.ops import FreeGroupOps, TokenKVOps


class SWAKVOps(FreeGroupOps):
    """``swa_kv``: tokens taken in both pools, extend and decode batches, the SWA tail, frees of either side
    (well-formed, repeated or malformed) and free groups."""

    alloc = op("need_size")
    alloc_non_int = op("need_size")
    decode = op("handles")
    decode_malformed = op("handles", "defect")
    extend = op("batch")
    extend_malformed = op("handles", "defect")
    free = op("handle", "sparse")
    free_again = op("handle", "call")
    free_full = op("handle")
    free_indices = op("indices", "call")
    free_swa = op("handle", "pages", "sparse")
    free_swa_again = op("handle")
    tail = op("handle", "extend_len", "swa_tail_len")
    tail_of_two = op()


class PureSWAKVOps(TokenKVOps):
    """``pure_swa_kv``: the token operations over the one SWA pool, plus its full-side and padded frees and the
    paged calls it refuses."""

    free_full = op("handle")
    free_padded = op("handle")
    free_swa = op("handle")
    paged_call = op("call")

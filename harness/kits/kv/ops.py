"""The KV drivers' operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`).

:class:`~poolfuzz.harness.kits.kv.driver.TokenKVDriver` implements :class:`TokenKVOps`,
:class:`~poolfuzz.harness.kits.kv.paged.PagedKVDriver` :class:`PagedKVOps`; the SWA kit's pure variant extends
:class:`TokenKVOps` too.  Moves, contracts, limits, realistic floors and the known-finding filter name them here.
"""

from __future__ import annotations

from poolfuzz.harness.judge.ops import Operations, op


class FreeGroupOps(Operations):
    """What every KV allocator's driver (the token, paged and SWA ones) has: a free group opened and closed, and
    ``clear`` (the contracts' shared rules, :func:`poolfuzz.harness.upstream.callers.free_group_rules`, name them here)."""

    clear = op()
    group_begin = op()
    group_end = op()


class TokenKVOps(FreeGroupOps):
    """``token_kv``: tokens taken and freed (whole, in part, by page segment, or malformed), free groups, merges."""

    alloc = op("need_size")
    free = op("handle")
    free_again = op("handle")
    free_indices = op("indices")
    free_malformed = op("form")
    free_part = op("handle", "count", "sparse")
    free_segment = op("handle", "start_page", "trim")
    free_segment_malformed = op("handle", "kind")
    merge = op()


class PagedKVOps(TokenKVOps):
    """``paged_kv``: the token operations, plus extend and decode batches (well-formed or malformed) and the
    page kernels called directly."""

    decode = op("handles")
    decode_malformed = op("handles", "defect")
    extend = op("batch")
    extend_malformed = op("handles", "defect")
    kernel_call = op("case")


ONE_TOKEN = ((PagedKVOps.at(PagedKVOps.alloc, "need_size"), 1), (PagedKVOps.at(PagedKVOps.extend, "batch", "[*][1]"), 1))
"""A request a scheduler sends has at least one token (realistic floors of the KV families)."""

"""Page arithmetic the KV models share: the contract's counts, written once and independently of the pools.

The models must not borrow :mod:`poolfuzz.pools.page_alloc.counting`: a bug there would
then agree with itself.
"""

from __future__ import annotations


def ceil_div(x: int, d: int) -> int:
    return -(-x // d)


def distinct_pages(slots: list[int], page_size: int) -> list[int]:
    """The distinct pages of ``slots`` (token slots, or a prefix cache's indices), in order of first appearance."""
    return list(dict.fromkeys(s // page_size for s in slots))


def slots_end(num_pages: int, page_size: int) -> int:
    """One past the highest token slot of pages ``1..num_pages``: ``(num_pages + 1) * page_size``, the padding
    page 0 included (the length of a pool's slot range, and of its SWA mapping less its trailing entry)."""
    return (num_pages + 1) * page_size


def extend_pages_needed(prefix: int, seq: int, page_size: int) -> int:
    """``ceil(seq/ps) - ceil(prefix/ps)``: the prefix's partial page is finished first, for free."""
    return ceil_div(seq, page_size) - ceil_div(prefix, page_size)


def decode_pages_needed(seq: int, page_size: int) -> int:
    """A post-step length ``seq`` opens a page iff token ``seq - 1`` is a page's first: ``(seq-1) % ps == 0``.

    Upstream counts ``seq % ps == 1`` instead, which is never true at page size 1.
    """
    return int((seq - 1) % page_size == 0)

"""The oracle: one request at a time, one token at a time, in plain Python.

This is the slowest and the most obviously correct implementation, and the
other two are tested against it bit for bit.  Rather than re-stating the three
phases of the kernel it states the layout they produce, position by position:

* a position ``p`` still inside the prefix's partial last page
  (``p < ceil(pre/ps) * ps``) continues the prefix: slot ``last_loc + 1 + (p - pre)``;
* any later position lives on the request's ``p // ps - ceil(pre/ps)``-th new
  page, at offset ``p % ps``: slot ``page * ps + p % ps``.

Phase 1 of the kernels is the first case; phases 2 and 3 are the second case
for whole pages and for the final partial page.  Because the oracle computes
the page index from the position, it cannot truncate a long extend (upstream
#9271, where a ``constexpr`` bound silently dropped the tail of phase 2).

Unlike the fast paths, the oracle also checks the whole contract and raises
:class:`~poolfuzz.pools.errors.BadBatchError` for a malformed batch -- in particular a
``free_pages`` that is not exactly as long as the batch needs, so it never
reads past the end of the free list (upstream #34399) and never leaves a
consumed page unused.
"""

from __future__ import annotations

import torch
from torch import Tensor

from poolfuzz.pools.errors import BadBatchError
from poolfuzz.pools.page_alloc.counting import check_page_size

__all__ = ["alloc_decode_loop", "alloc_extend_loop"]

_POOL = "page_alloc.loop"


def _ceil_div(x: int, d: int) -> int:
    return -(-x // d)


def _check_lengths(name: str, values: list[int], expected: int) -> None:
    if len(values) != expected:
        raise BadBatchError(_POOL, f"{name} has {len(values)} entries, expected {expected}")


def _write(out_indices: Tensor, slots: list[int]) -> None:
    if out_indices.numel() != len(slots):
        raise BadBatchError(_POOL, f"out_indices has {out_indices.numel()} entries, the batch fills {len(slots)}")
    if slots:
        out_indices.copy_(torch.tensor(slots, dtype=torch.int64, device=out_indices.device))


def alloc_extend_loop(
    prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int
) -> None:
    """Write every request's extend slots into ``out_indices`` (in place).

    Request ``i`` fills ``out_indices[S_i : S_i + seq_i - pre_i]`` and owns
    ``free_pages[P_i : P_i + n_i]`` with ``n_i = ceil(seq_i/ps) - ceil(pre_i/ps)``
    (``S``, ``P``: exclusive prefix sums).  Raises ``BadBatchError`` when
    ``seq < pre``, ``last_loc`` is misaligned, or ``free_pages``/``out_indices``
    are not exactly as long as the batch needs.
    """
    check_page_size(_POOL, page_size)
    ps = page_size
    pres, seqs, lasts = prefix_lens.tolist(), seq_lens.tolist(), last_loc.tolist()
    pages = free_pages.tolist()
    _check_lengths("seq_lens", seqs, len(pres))
    _check_lengths("last_loc", lasts, len(pres))

    slots: list[int] = []
    next_page = 0
    for i, (pre, seq, last) in enumerate(zip(pres, seqs, lasts)):
        if not 0 <= pre <= seq:
            raise BadBatchError(_POOL, f"need 0 <= prefix_len ({pre}) <= seq_len ({seq})", position=i)
        if pre == 0 and last != -1 or pre > 0 and (last < 0 or (last + 1) % ps != pre % ps):
            raise BadBatchError(_POOL, f"last_loc {last} is not the slot of token {pre - 1}", position=i)
        first_new_page = _ceil_div(pre, ps)
        n_new = _ceil_div(seq, ps) - first_new_page
        own = pages[next_page : next_page + n_new]
        if len(own) != n_new:
            wanted = f"pages {next_page}..{next_page + n_new - 1}"
            raise BadBatchError(_POOL, f"free_pages ran out: request needs {wanted} of {len(pages)}", position=i)
        next_page += n_new
        for p in range(pre, seq):
            if p < first_new_page * ps:
                slots.append(last + 1 + (p - pre))
            else:
                slots.append(own[p // ps - first_new_page] * ps + p % ps)
    if next_page != len(pages):
        raise BadBatchError(_POOL, f"free_pages has {len(pages)} pages, the batch consumes {next_page}")
    _write(out_indices, slots)


def alloc_decode_loop(seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int) -> None:
    """Write one slot per request for a decode step (in place).

    ``seq_lens`` are post-step lengths.  A request whose new token opens a page
    (``(seq - 1) % ps == 0``; every request when ``ps == 1``) takes the next
    unused page of ``free_pages`` and gets ``page * ps``; the others continue
    at ``last_loc + 1``.  Raises ``BadBatchError`` for ``seq < 1``, a misaligned
    ``last_loc``, or a ``free_pages``/``out_indices`` of the wrong length.
    """
    check_page_size(_POOL, page_size)
    ps = page_size
    seqs, lasts, pages = seq_lens.tolist(), last_loc.tolist(), free_pages.tolist()
    _check_lengths("last_loc", lasts, len(seqs))

    slots: list[int] = []
    next_page = 0
    for i, (seq, last) in enumerate(zip(seqs, lasts)):
        if seq < 1:
            raise BadBatchError(_POOL, f"decode seq_len {seq} < 1 (seq_lens are post-step lengths)", position=i)
        if (seq - 1) % ps == 0:
            if next_page >= len(pages):
                raise BadBatchError(_POOL, f"free_pages ran out after {len(pages)} pages", position=i)
            slots.append(pages[next_page] * ps)
            next_page += 1
        else:
            if last < 0 or (last + 2) % ps != seq % ps:
                raise BadBatchError(_POOL, f"last_loc {last} is not the slot of token {seq - 2}", position=i)
            slots.append(last + 1)
    if next_page != len(pages):
        raise BadBatchError(_POOL, f"free_pages has {len(pages)} pages, the batch consumes {next_page}")
    _write(out_indices, slots)

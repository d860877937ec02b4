"""Whole-batch torch implementation: no per-request loop, no per-request sync.

Every output slot ``j`` finds its request with ``torch.searchsorted`` over the
inclusive prefix sum of extend lengths (the "owner"), turns into a token
position ``p``, and then takes one of two values (same layout as the oracle in
:mod:`poolfuzz.pools.page_alloc.loop`):

* inside the prefix's partial page: ``last_loc + 1 + (p - pre)``;
* otherwise: ``free_pages[P_owner + p // ps - ceil(pre/ps)] * ps + p % ps``.

``torch.where`` evaluates *both* branches for every slot, so the gather into
``free_pages`` also runs for slots whose value is thrown away.  Two guards keep
that dead branch in bounds (the design of seed 002 / the 0.5.23 vectorised
``alloc_extend_naive``):

* the gather index is clamped to ``[0, len(free_pages) - 1]``.  A dead slot
  (one still inside the prefix's partial page) computes index ``P_i - 1``,
  which is -1 for the first page-owning request: torch would silently wrap it
  to the last page rather than fail, and a short list would push live indices
  past the end.  With ``free_pages`` exactly as long as the batch needs (the
  contract) no live slot is affected;
* an empty ``free_pages`` takes a separate path that never gathers at all,
  because clamping into an empty range is impossible.  It is valid only when no
  request needs a new page; an ``assert`` checks that (the only host sync, and
  only on this path).

The clamp means a ``free_pages`` that is too *short* yields duplicate page ids
instead of an out-of-bounds read (upstream #34399); the allocator must count
pages first (:func:`poolfuzz.pools.page_alloc.counting.get_num_new_pages`).  The page
index comes from the position, so long extends cannot be truncated (#9271).
"""

from __future__ import annotations

import torch
from torch import Tensor

from poolfuzz.pools.errors import BadBatchError
from poolfuzz.pools.page_alloc.counting import check_page_size

__all__ = ["alloc_decode_vectorized", "alloc_extend_vectorized", "token_positions"]

_POOL = "page_alloc.vectorized"


def _check_batch(*named: tuple[str, Tensor]) -> None:
    """Host-side shape checks only (no device sync)."""
    (first_name, first), *rest = named
    for name, t in named:
        if t.dim() != 1:
            raise BadBatchError(_POOL, f"{name} must be 1-D, got shape {tuple(t.shape)}")
    for name, t in rest:
        if t.numel() != first.numel():
            raise BadBatchError(_POOL, f"{name} has {t.numel()} entries, {first_name} has {first.numel()}")


def token_positions(prefix_lens: Tensor, seq_lens: Tensor, num_tokens: int) -> tuple[Tensor, Tensor, Tensor]:
    """For each of the batch's ``num_tokens`` output slots: its request (the owner), that request's prefix
    length, and the slot's token position.

    Slot ``j`` belongs to the first request whose inclusive end of extend lengths exceeds ``j``
    (``right=True``: a zero-length request shares its end with the next one's start), and sits at
    position ``prefix_lens[owner] + (j - start of owner)``.
    """
    ext_lens = seq_lens - prefix_lens
    ext_end = torch.cumsum(ext_lens, 0)
    j = torch.arange(num_tokens, dtype=torch.int64, device=seq_lens.device)
    owner = torch.searchsorted(ext_end, j, right=True)
    pre = prefix_lens[owner]
    return owner, pre, pre + (j - (ext_end - ext_lens)[owner])


def alloc_extend_vectorized(
    prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int
) -> None:
    """Write every request's extend slots into ``out_indices`` (in place).

    Same contract as :func:`poolfuzz.pools.page_alloc.loop.alloc_extend_loop`, but only
    shapes are validated: ``free_pages`` must hold exactly the needed pages
    (shorter: clamped duplicates; an empty one that is needed trips an assert).
    """
    check_page_size(_POOL, page_size)
    _check_batch(("prefix_lens", prefix_lens), ("seq_lens", seq_lens), ("last_loc", last_loc))
    ps = page_size
    num_tokens = out_indices.numel()
    if prefix_lens.numel() == 0 or num_tokens == 0:
        return
    owner, pre, pos = token_positions(prefix_lens, seq_lens, num_tokens)

    first_new_page = (prefix_lens + (ps - 1)) // ps  # ceil(pre / ps), per request
    in_partial = pos < first_new_page[owner] * ps
    continued = last_loc[owner] + 1 + (pos - pre)

    if free_pages.numel() == 0:
        assert bool(in_partial.all()), f"{_POOL}: free_pages is empty but the batch needs new pages"
        out_indices.copy_(continued)
        return

    n_new = (seq_lens + (ps - 1)) // ps - first_new_page
    page_start = torch.cumsum(n_new, 0) - n_new  # exclusive prefix sum P_i
    page_idx = page_start[owner] + pos // ps - first_new_page[owner]
    page_idx = page_idx.clamp(0, free_pages.numel() - 1)  # dead where-branch stays in bounds
    fresh = free_pages[page_idx] * ps + pos % ps
    out_indices.copy_(torch.where(in_partial, continued, fresh))


def alloc_decode_vectorized(seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int) -> None:
    """Write one slot per request for a decode step (in place).

    A request needs a page iff ``(seq - 1) % ps == 0``; its page is
    ``free_pages[rank]`` with ``rank`` the exclusive count of earlier requests
    that need one (``masked_scatter_`` hands the source out in mask order).  An
    empty ``free_pages`` is never read; it asserts that nobody needed a page.
    """
    check_page_size(_POOL, page_size)
    _check_batch(("seq_lens", seq_lens), ("last_loc", last_loc), ("out_indices", out_indices))
    ps = page_size
    if seq_lens.numel() == 0:
        return
    need = (seq_lens - 1) % ps == 0
    if free_pages.numel() == 0:
        assert not bool(need.any()), f"{_POOL}: free_pages is empty but a request needs a new page"
        out_indices.copy_(last_loc + 1)
        return
    # The k-th request that needs a page takes free_pages[k]: exactly what masked_scatter_ does, with no sync.
    out_indices.copy_(last_loc + 1)
    out_indices.masked_scatter_(need, free_pages * ps)

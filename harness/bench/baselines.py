"""Baselines and inputs the benchmark measures our pools against.

They are measuring sticks, not implementations: the head-slice request pool
that seed 000 replaced, and the per-request extend loop that seed 002 replaced.
Both are tested to compute what the pools compute (``tests/test_bench.py``).
"""

from __future__ import annotations

import torch

from poolfuzz.pools.req_to_token import ReqToTokenPool


class HeadSliceReqToTokenPool(ReqToTokenPool):
    """The pre-seed-000 pool: head slice and a full list rebuild, O(len(free_slots)) per alloc."""

    def _take_rows(self, need: int) -> list[int]:
        rows = self.free_slots[:need]
        self.free_slots = self.free_slots[need:]
        return rows


def extend_inputs(bs: int, ps: int, seed: int, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    """A consistent extend batch: prefixes 0..511 tokens, extends 1..128, distinct pages, exact ``free_pages``."""
    gen = torch.Generator().manual_seed(seed)
    pre = torch.randint(0, 512, (bs,), generator=gen)
    seq = pre + torch.randint(1, 129, (bs,), generator=gen)
    n_new = (seq + ps - 1) // ps - (pre + ps - 1) // ps
    prefix_page = torch.arange(1, bs + 1)
    last_loc = torch.where(pre > 0, prefix_page * ps + (pre - 1) % ps, torch.full_like(pre, -1))
    free_pages = bs + 1 + torch.randperm(int(n_new.sum()), generator=gen)
    out = torch.empty(int((seq - pre).sum()), dtype=torch.int64)
    return tuple(t.to(device) for t in (pre, seq, last_loc, free_pages, out))


def extend_per_request_torch(
    prefix_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    last_loc: torch.Tensor,
    free_pages: torch.Tensor,
    out_indices: torch.Tensor,
    page_size: int,
) -> None:
    """The baseline seed 002 replaced: one iteration per request, scalar reads and torch slices in each.

    Every ``int(tensor[i])`` is a host read (a device sync on CUDA); the three
    phases are written with small torch ops.  Kept here, not in ``pools/``: it
    is a measuring stick, and the oracle is :mod:`poolfuzz.pools.page_alloc.loop`.
    """
    ps = page_size
    out_at = page_at = 0
    for i in range(len(seq_lens)):
        pre, seq, last = int(prefix_lens[i]), int(seq_lens[i]), int(last_loc[i])
        first_new = -(-pre // ps) * ps
        num1 = min(seq, first_new) - pre
        if num1:
            out_indices[out_at : out_at + num1] = torch.arange(last + 1, last + 1 + num1)
        out_at += num1
        rest = seq - pre - num1
        if rest <= 0:
            continue
        n_pages = -(-rest // ps)
        pages = free_pages[page_at : page_at + n_pages]
        slots = (pages[:, None] * ps + torch.arange(ps)).reshape(-1)[:rest]
        out_indices[out_at : out_at + rest] = slots
        out_at += rest
        page_at += n_pages

"""The index tensors the pool unit tests pass in and read back, written once for every pool's tests.

Pools take and return int64 index tensors (slots, rows, pages); a test states its indices as a list and
compares lists, so ``idx`` builds the tensor a call takes and ``ints`` reads an answer back, checking on the
way that the pool answered (not ``None``, its refusal) with the dtype every pool promises.
"""

from __future__ import annotations

from typing import Any

import torch


def ints(tensor: torch.Tensor | None) -> list[int]:
    """A pool's answer as a list of ints; fails where the pool refused (``None``) or answered another dtype."""
    assert tensor is not None, "the allocator refused"
    assert tensor.dtype == torch.int64
    return [int(v) for v in tensor.tolist()]


def idx(values: list[Any], device: str | torch.device) -> torch.Tensor:
    """``values`` as the int64 index tensor a pool call takes, on ``device``."""
    return torch.tensor(values, dtype=torch.int64, device=device)

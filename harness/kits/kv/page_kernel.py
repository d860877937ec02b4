"""The paged allocator's page kernel, called directly: malformed batches it must reject, corners it must serve.

A :class:`~poolfuzz.pools.kv_allocator.PagedTokenToKVPoolAllocator` hands its page
kernel (``pool.kernel``: ``loop``, ``vectorized`` or ``triton``) only batches it
has validated, so the kernels' own checks never fire through the allocator.
They are a public contract all the same (:mod:`poolfuzz.pools.page_alloc`): every kernel
rejects a ``page_size`` below 1 and tensors of different lengths; ``vectorized``
and ``triton`` check shapes only (no device sync), ``triton`` also dtypes and a
power-of-two page size; the ``loop`` oracle checks the whole contract
(``0 <= prefix <= seq``, ``last_loc`` ending the prefix, ``free_pages`` and
``out_indices`` exactly as long as the batch needs).  ``get_num_new_pages`` (the
count the allocator asks before it launches) rejects malformed lengths too.

Each case here is one named call on a small fixed batch (two requests: a new one
and one continuing a partial page) and what the contract says it must do: raise
one error type (for the kernels that check it; others are not asked), or write
exactly what the loop oracle writes (a strided ``out_indices``, an empty
decode batch).  Case names are public: traces carry them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from poolfuzz.harness.judge.pages import decode_pages_needed, extend_pages_needed
from poolfuzz.pools.errors import BadBatchError, BadSizeError, PoolError
from poolfuzz.pools.page_alloc import get_num_new_pages
from poolfuzz.pools.page_alloc.loop import alloc_decode_loop, alloc_extend_loop

ALL = ("loop", "vectorized", "triton")


@dataclass(frozen=True)
class KernelCase:
    """One call and its verdict: ``error`` for a rejection, else ``expected`` slots in ``out``."""

    call: Callable[[], None]
    error: type[PoolError] | None
    out: torch.Tensor
    expected: list[int]


@dataclass
class _Batch:
    pres: list[int]
    seqs: list[int]
    lasts: list[int]
    pages: list[int]
    out_len: int


def _extend_batch(ps: int) -> _Batch:
    """A new request of ``ps + 1`` tokens and one mid-page (page-aligned at page size 1) growing by ``ps + 1``."""
    pre = 2 * ps - 1 if ps > 1 else 1
    pres, seqs = [0, pre], [ps + 1, pre + ps + 1]
    lasts = [-1, 7 * ps + (pre - 1) % ps]
    need = sum(extend_pages_needed(p, s, ps) for p, s in zip(pres, seqs))
    return _Batch(pres, seqs, lasts, list(range(11, 11 + need)), sum(seqs) - sum(pres))


def _decode_batch(ps: int) -> _Batch:
    """A request whose token opens a page and one mid-page (both open pages at page size 1)."""
    seqs = [ps + 1, ps + 2]
    lasts = [4 * ps + ps - 1, 9 * ps + (seqs[1] - 2) % ps]
    need = sum(decode_pages_needed(s, ps) for s in seqs)
    return _Batch([s - 1 for s in seqs], seqs, lasts, list(range(21, 21 + need)), len(seqs))


def _damage(batch: _Batch, case: str, ps: int) -> tuple[dict[str, Any], int] | None:
    """The call's tensors as lists (or a tensor) after ``case`` broke them, and the page size passed; ``None``: n/a."""
    b = _Batch(list(batch.pres), list(batch.seqs), list(batch.lasts), list(batch.pages), batch.out_len)
    shapes: dict[str, Any] = {}
    page_size = ps
    what = case.split(": ", 1)[1]
    if what == "page size 0":
        page_size = 0
    elif what == "page size not a power of two":
        page_size = 3
    elif what == "lengths differ":
        b.lasts.append(b.lasts[-1])
    elif what == "2-D last_loc":
        shapes["last_loc"] = "2-D"
    elif what == "int32 seq_lens":
        shapes["seq_lens"] = "int32"
    elif what == "out_indices one short":
        b.out_len -= 1
    elif what == "out_indices one long":
        b.out_len += 1
    elif what == "seq_len below prefix_len":
        b.seqs[1] = b.pres[1] - 1
    elif what == "last_loc does not end its prefix":
        if case.startswith("decode") and ps == 1:
            return None  # at page size 1 every decode token opens a page: last_loc is not read
        b.lasts[1] = -1
    elif what == "post-step length 0":
        b.seqs[0] = 0
    elif what == "free_pages one short":
        if not b.pages:
            return None
        b.pages.pop()
    elif what == "free_pages one long":
        b.pages.append(b.pages[-1] + 1 if b.pages else 40)
    elif what == "empty batch":
        b = _Batch([], [], [], [], 0)
    elif what == "no request opens a page":
        if ps == 1:
            return None  # at page size 1 every decode token opens a page
        b = _Batch([ps + 1, 2 * ps + 1], [ps + 2, 2 * ps + 2], [4 * ps, 9 * ps], [], 2)
    elif what != "strided out_indices":
        raise KeyError(case)
    return {"b": b, "shapes": shapes}, page_size


CASES: dict[str, tuple[tuple[str, ...], type[PoolError] | None]] = {
    "extend: page size 0": (ALL, BadSizeError),
    "extend: page size not a power of two": (("triton",), BadSizeError),
    "extend: lengths differ": (ALL, BadBatchError),
    "extend: 2-D last_loc": (ALL, BadBatchError),
    "extend: int32 seq_lens": (("triton",), BadBatchError),
    "extend: out_indices one short": (("loop",), BadBatchError),
    "extend: seq_len below prefix_len": (("loop",), BadBatchError),
    "extend: last_loc does not end its prefix": (("loop",), BadBatchError),
    "extend: free_pages one short": (("loop",), BadBatchError),
    "extend: free_pages one long": (("loop",), BadBatchError),
    "extend: strided out_indices": (ALL, None),
    "decode: page size 0": (ALL, BadSizeError),
    "decode: lengths differ": (ALL, BadBatchError),
    "decode: out_indices one long": (ALL, BadBatchError),
    "decode: post-step length 0": (("loop",), BadBatchError),
    "decode: last_loc does not end its prefix": (("loop",), BadBatchError),
    "decode: free_pages one short": (("loop",), BadBatchError),
    "decode: free_pages one long": (("loop",), BadBatchError),
    "decode: empty batch": (ALL, None),
    "decode: no request opens a page": (ALL, None),
    "decode: strided out_indices": (ALL, None),
    "count: decode with prefix_lens": (ALL, BadBatchError),
    "count: decode post-step length 0": (ALL, BadBatchError),
    "count: prefix_lens of another length": (ALL, BadBatchError),
    "count: seq_len below prefix_len": (ALL, BadBatchError),
}
"""Case name -> (the kernels whose contract decides it, the error it must raise or ``None`` for a valid call)."""


def _tensor(values: list[int], device: str, damage: str = "") -> torch.Tensor:
    out = torch.tensor(values, dtype=torch.int64, device=device)
    if damage == "2-D":
        return out.reshape(1, -1)
    return out.to(torch.int32) if damage == "int32" else out


def _count_case(case: str, ps: int) -> Callable[[], None]:
    """``get_num_new_pages`` with lengths that break its contract."""
    seqs = torch.tensor([ps + 1, 2 * ps])
    arguments: dict[str, tuple[torch.Tensor, torch.Tensor | None, bool]] = {
        "count: decode with prefix_lens": (seqs, torch.tensor([1, ps]), True),
        "count: decode post-step length 0": (torch.tensor([0, 3]), None, True),
        "count: prefix_lens of another length": (seqs, torch.tensor([1]), False),
        "count: seq_len below prefix_len": (seqs, torch.tensor([1, 2 * ps + 1]), False),
    }
    seq, pre, decode = arguments[case]

    def call() -> None:
        get_num_new_pages(seq, ps, pre, decode=decode)

    return call


def kernel_case(kernel: Any, ps: int, case: str, device: str) -> KernelCase | None:
    """``case`` on ``kernel`` (a :class:`poolfuzz.pools.page_alloc.PageKernel`) at page size ``ps``; ``None`` if its contract is silent."""
    kernels, error = CASES[case]
    if kernel.name not in kernels:
        return None
    empty = torch.empty(0, dtype=torch.int64)
    if case.startswith("count: "):
        return KernelCase(_count_case(case, ps), error, empty, [])
    decode = case.startswith("decode: ")
    base = _decode_batch(ps) if decode else _extend_batch(ps)
    damaged = _damage(base, case, ps)
    if damaged is None:
        return None
    parts, page_size = damaged
    b, shapes = parts["b"], parts["shapes"]
    seq = _tensor(b.seqs, device, shapes.get("seq_lens", ""))
    last = _tensor(b.lasts, device, shapes.get("last_loc", ""))
    pages = _tensor(b.pages, device)
    if case.endswith("strided out_indices"):
        out = torch.full((2 * b.out_len,), -7, dtype=torch.int64, device=device)[::2]
    else:
        out = torch.full((b.out_len,), -7, dtype=torch.int64, device=device)
    expected = torch.empty(b.out_len, dtype=torch.int64)
    cpu = [torch.tensor(v, dtype=torch.int64) for v in (b.pres, b.seqs, b.lasts, b.pages)]
    if decode:
        call: Callable[[], None] = lambda: kernel.decode(seq, last, pages, out, page_size)
        if error is None:
            alloc_decode_loop(cpu[1], cpu[2], cpu[3], expected, ps)
    else:
        pre = _tensor(b.pres, device)
        call = lambda: kernel.extend(pre, seq, last, pages, out, page_size)
        if error is None:
            alloc_extend_loop(cpu[0], cpu[1], cpu[2], cpu[3], expected, ps)
    return KernelCase(call, error, out, [int(v) for v in expected.tolist()] if error is None else [])

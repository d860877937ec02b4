"""Triton kernels: compiled on CUDA tensors, interpreted on CPU tensors.

Importing this module imports ``triton`` (and, for the interpreter, numpy);
:mod:`poolfuzz.pools.page_alloc` imports it lazily so that ``import pools`` never does.

**How the interpreter is chosen.**  Each kernel body is a plain Python function
wrapped twice: by ``triton.jit`` (a ``JITFunction``, compiled for the GPU on
first launch) and by ``triton.runtime.interpreter.InterpretedFunction`` (the
object ``triton.jit`` itself returns under ``TRITON_INTERPRET=1``).  Each call
picks the wrapper from the device of ``out_indices``: ``cpu`` runs the
interpreter, anything else the compiled kernel, so one process can serve CPU
and CUDA tensors side by side.  Setting ``TRITON_INTERPRET`` ourselves was
rejected: triton consults it every time ``triton.jit`` decorates a function,
including its own standard library at import, so it only works if set before
triton is first imported (by anyone), and it then turns *every* triton kernel
in the process into an interpreted one.  (If a user sets it anyway, both
wrappers interpret, which is still correct.)  ``InterpretedFunction`` is a
triton runtime internal, checked against triton 3.9.0; while a kernel runs it
temporarily patches ``triton.language``, so do not interpret kernels while
another thread compiles one.

**Kernel design** (grid ``(bs,)``, one program per request,
``bs_upper = next_power_of_2(bs)``):

* each program derives its output offset ``S_i`` and page offset ``P_i`` by
  summing the lanes of *earlier* requests; masked lanes load ``other=0`` so
  they contribute nothing (upstream left masked lanes undefined);
* ``tl.arange(0, page_size)`` covers phases 1 and 3 (each < ``page_size``
  tokens), which is why ``page_size`` must be a power of two here;
* phase 2 (whole pages) loops over **runtime-bounded** blocks of
  :data:`PHASE2_BLOCK` tokens.  Upstream #9271 used a ``constexpr`` maximum
  extend length fixed at start-up; longer extends silently lost their tail.
  Nothing here bounds the extend length at compile time;
* every ``free_pages`` load is masked by the number of pages passed in, so no
  kernel reads past the end of ``free_pages`` even if the caller breaks the
  contract (upstream #34399); an empty ``free_pages`` is never dereferenced.
  A too-short list yields slots from page ``-1`` (negative, easy to spot).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.interpreter import InterpretedFunction

from poolfuzz.pools.errors import BadBatchError, BadSizeError
from poolfuzz.pools.page_alloc.counting import check_page_size, triton_page_size

__all__ = ["PHASE2_BLOCK", "alloc_decode_triton", "alloc_extend_triton"]

_POOL = "page_alloc.triton"

PHASE2_BLOCK = 1024
"""Tokens per iteration of the runtime-bounded phase-2 loop."""


# Lane sums use ``tl.reduce(x, 0, _sum_combine)`` rather than ``tl.sum``.
# ``tl.sum`` is itself a ``@triton.jit`` function of ``triton.language.standard``
# and, unless TRITON_INTERPRET=1 was set before triton was imported, a
# compile-only JITFunction that refuses to run inside an interpreted kernel
# ("Cannot call @triton.jit'd outside of the scope of a kernel").  ``tl.reduce``
# is a builtin that both paths handle.  Its combine function is triton's own
# ``standard._sum_combine`` (what ``tl.sum`` reduces with) because the
# interpreter recognises that object and sums with numpy; any other combine
# function runs as Python once per lane, O(bs^2) per launch (4.5 s at bs=256).
# ``_sum_combine`` is private, so an equivalent fallback keeps a future triton
# that drops it correct, only slower when interpreted.
@triton.jit
def _add(a, b):  # type: ignore[no-untyped-def, unused-ignore]
    return a + b


_sum_combine = getattr(tl.standard, "_sum_combine", _add)


# Kernel bodies: pointer and runtime-scalar parameters stay unannotated on
# purpose -- triton reads parameter annotations as type/specialisation hints.
def _extend_body(  # type: ignore[no-untyped-def, unused-ignore]
    prefix_lens_ptr,
    seq_lens_ptr,
    last_loc_ptr,
    free_pages_ptr,
    num_free,
    out_ptr,
    bs_upper: tl.constexpr,
    page_size: tl.constexpr,
    block: tl.constexpr,
) -> None:
    pid = tl.program_id(0)
    lanes = tl.arange(0, bs_upper)
    earlier = lanes < pid
    pre_before = tl.load(prefix_lens_ptr + lanes, mask=earlier, other=0)
    seq_before = tl.load(seq_lens_ptr + lanes, mask=earlier, other=0)
    out_start = tl.reduce(seq_before - pre_before, 0, _sum_combine)
    pages_before = (seq_before + page_size - 1) // page_size - (pre_before + page_size - 1) // page_size
    page_start = tl.reduce(pages_before, 0, _sum_combine)

    pre = tl.load(prefix_lens_ptr + pid)
    seq = tl.load(seq_lens_ptr + pid)
    last = tl.load(last_loc_ptr + pid)
    new_from = (pre + page_size - 1) // page_size * page_size  # first position on a new page
    whole_to = seq // page_size * page_size  # end of the last whole page
    k = tl.arange(0, page_size)

    # Phase 1: finish the prefix's partial page.
    num1 = tl.minimum(seq, new_from) - pre
    tl.store(out_ptr + out_start + k, last + 1 + k, mask=k < num1)

    # Phase 2: whole new pages, in runtime-bounded blocks (no constexpr cap: #9271).
    num2 = tl.maximum(whole_to - new_from, 0)
    out2 = out_start + num1
    for block_start in range(0, num2, block):
        o = block_start + tl.arange(0, block)
        page_idx = page_start + o // page_size
        live = o < num2
        page = tl.load(free_pages_ptr + page_idx, mask=live & (page_idx < num_free), other=-1)
        tl.store(out_ptr + out2 + o, page * page_size + o % page_size, mask=live)

    # Phase 3: the head of the last new page (only if phase 1 did not finish).
    num3 = tl.where(seq > new_from, seq - whole_to, 0)
    last_idx = page_start + num2 // page_size
    last_page = tl.load(free_pages_ptr + last_idx, mask=(num3 > 0) & (last_idx < num_free), other=-1)
    tl.store(out_ptr + out2 + num2 + k, last_page * page_size + k, mask=k < num3)


def _decode_body(  # type: ignore[no-untyped-def, unused-ignore]
    seq_lens_ptr, last_loc_ptr, free_pages_ptr, num_free, out_ptr, bs_upper: tl.constexpr, page_size: tl.constexpr
) -> None:
    pid = tl.program_id(0)
    lanes = tl.arange(0, bs_upper)
    earlier = lanes < pid
    seq_before = tl.load(seq_lens_ptr + lanes, mask=earlier, other=0)
    needs_before = earlier & ((seq_before - 1) % page_size == 0)
    rank = tl.reduce(needs_before.to(tl.int64), 0, _sum_combine)

    seq = tl.load(seq_lens_ptr + pid)
    last = tl.load(last_loc_ptr + pid)
    need = (seq - 1) % page_size == 0
    page = tl.load(free_pages_ptr + rank, mask=need & (rank < num_free), other=-1)
    tl.store(out_ptr + pid, tl.where(need, page * page_size, last + 1))


# num_free changes every call and its value must not trigger recompiles;
# free_pages is a slice of the allocator's list, so its alignment varies too.
_NO_SPECIALIZE = ["num_free"]
_NO_ALIGN = ["free_pages_ptr"]


def _wrap_both(body: Callable[..., None]) -> tuple[Any, Any]:
    compiled = triton.jit(do_not_specialize=_NO_SPECIALIZE, do_not_specialize_on_alignment=_NO_ALIGN)(body)
    interpreted = InterpretedFunction(body, do_not_specialize=_NO_SPECIALIZE, do_not_specialize_on_alignment=_NO_ALIGN)
    return compiled, interpreted


_EXTEND_KERNELS = _wrap_both(_extend_body)
_DECODE_KERNELS = _wrap_both(_decode_body)


def _pick(kernels: tuple[Any, Any], device: torch.device) -> Any:
    compiled, interpreted = kernels
    return interpreted if device.type == "cpu" else compiled


def _check_page_size(page_size: int) -> None:
    check_page_size(_POOL, page_size)
    if not triton_page_size(page_size):
        raise BadSizeError(_POOL, "page_size", page_size, "must be a power of two for the triton kernel")


def _check_batch(out_indices: Tensor, free_pages: Tensor, *named: tuple[str, Tensor]) -> None:
    """Host-side checks only: shapes, dtypes, one device (no sync)."""
    (first_name, first), *_ = named
    for name, t in (*named, ("free_pages", free_pages), ("out_indices", out_indices)):
        if t.dim() != 1:
            raise BadBatchError(_POOL, f"{name} must be 1-D, got shape {tuple(t.shape)}")
        if t.dtype != torch.int64:
            raise BadBatchError(_POOL, f"{name} must be int64, got {t.dtype}")
        if t.device != out_indices.device:  # two devices: a CUDA one and the CPU at least
            raise BadBatchError(_POOL, f"{name} is on {t.device}, out_indices on {out_indices.device}")  # pragma: no cover
    for name, t in named:
        if t.numel() != first.numel():
            raise BadBatchError(_POOL, f"{name} has {t.numel()} entries, {first_name} has {first.numel()}")


def _launch(kernels: tuple[Any, Any], out_indices: Tensor, inputs: list[Tensor], free_pages: Tensor, **meta: int) -> None:
    bs = inputs[0].numel()
    target = out_indices if out_indices.is_contiguous() else torch.empty_like(out_indices)
    kernel = _pick(kernels, out_indices.device)
    kernel[(bs,)](
        *(t.contiguous() for t in inputs), free_pages.contiguous(), free_pages.numel(), target, bs_upper=triton.next_power_of_2(bs), **meta
    )
    if target is not out_indices:
        out_indices.copy_(target)


def alloc_extend_triton(
    prefix_lens: Tensor, seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int
) -> None:
    """Write every request's extend slots into ``out_indices`` (in place).

    Same contract as :func:`poolfuzz.pools.page_alloc.loop.alloc_extend_loop`, with
    ``page_size`` a power of two (else :class:`BadSizeError`).  Only shapes,
    dtypes and devices are validated (no host sync).
    """
    _check_page_size(page_size)
    inputs = [prefix_lens, seq_lens, last_loc]
    _check_batch(out_indices, free_pages, *zip(("prefix_lens", "seq_lens", "last_loc"), inputs))
    if seq_lens.numel() == 0 or out_indices.numel() == 0:
        return
    _launch(_EXTEND_KERNELS, out_indices, inputs, free_pages, page_size=page_size, block=PHASE2_BLOCK)


def alloc_decode_triton(seq_lens: Tensor, last_loc: Tensor, free_pages: Tensor, out_indices: Tensor, page_size: int) -> None:
    """Write one slot per request for a decode step (in place).

    A request needs a page iff ``(seq - 1) % ps == 0`` (every request at page
    size 1); ``page_size`` must be a power of two (else :class:`BadSizeError`).
    """
    _check_page_size(page_size)
    _check_batch(out_indices, free_pages, ("seq_lens", seq_lens), ("last_loc", last_loc))
    if out_indices.numel() != seq_lens.numel():
        raise BadBatchError(_POOL, f"out_indices has {out_indices.numel()} entries, seq_lens has {seq_lens.numel()}")
    if seq_lens.numel() == 0:
        return
    _launch(_DECODE_KERNELS, out_indices, [seq_lens, last_loc], free_pages, page_size=page_size)

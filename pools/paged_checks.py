"""Validation of ``alloc_extend`` / ``alloc_decode`` batches, and their page counts, in one pass.

The paged allocator refuses a malformed batch before it touches its free list
(issue 19 names each rule; the machines issue every one as misuse):

* the length tensors are 1-D integer tensors of the batch size, the ``_cpu``
  ones on the CPU; ``last_loc`` an integer tensor of shape ``(bs,)``;
* extend: ``0 <= prefix_len <= seq_len`` and ``extend_num_tokens`` is the sum of
  the extend lengths; decode: ``seq_len >= 1`` (post-step lengths);
* with ``check_layout``: ``last_loc`` ends the prefix (``-1`` for an empty one,
  ``(last_loc + 1) % ps == prefix % ps`` otherwise), and where a request
  continues a partial page, that page is handed out.  Upstream only asserts the
  alignment in ``debug_mode``; a wrong ``last_loc`` silently writes another
  request's slots.

Cost: every rule is one array expression over the whole batch, evaluated with
NumPy on the CPU lengths (and on ``last_loc`` for a CPU pool), or with torch on
the device for a device pool's ``last_loc`` (one host read).  Only when a rule
fails does the slow path below work out which request broke which rule, for the
error message.  The same pass yields the number of new pages, so the counting
in :mod:`poolfuzz.pools.page_alloc.counting` is not validated a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from poolfuzz.pools.errors import BadBatchError
from poolfuzz.pools.host_views import HostViews
from poolfuzz.pools.page_states import LIVE, PageStateTable, host_tables

__all__ = ["PagedBatchChecker", "is_int_tensor"]

_Lengths = TypeVar("_Lengths", np.ndarray, Tensor)

_INT_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})


def is_int_tensor(t: object) -> bool:
    """A torch tensor of an integer dtype (not bool, float or complex)."""
    return isinstance(t, torch.Tensor) and t.dtype in _INT_DTYPES


def _host(t: Tensor) -> np.ndarray:
    """The int64 NumPy values of a CPU integer tensor (a view when it already is int64)."""
    return t.numpy().astype(np.int64, copy=False)


class PagedBatchChecker(HostViews):
    """The batch rules of one paged allocator: its name, page size, state table and ``check_layout``."""

    _host_views = (("_host_states", "states.states"),)

    def __init__(self, pool_name: str, page_size: int, states: PageStateTable, check_layout: bool) -> None:
        self.pool_name = pool_name
        self.page_size = page_size
        self.states = states
        self.check_layout = check_layout
        self._host_table = host_tables(states.states.device)
        self._host_states = states.states.numpy() if self._host_table else None

    # ------------------------------------------------------------- shapes
    def check_lengths(self, name: str, device_t: Tensor, cpu_t: Tensor, bs: int) -> None:
        """``name`` and ``name_cpu`` are 1-D integer tensors of length ``bs``, the second on the CPU."""
        for label, t in ((name, device_t), (f"{name}_cpu", cpu_t)):
            if not is_int_tensor(t) or t.dim() != 1 or t.shape[0] != bs:
                raise BadBatchError(self.pool_name, f"{label} must be a 1-D integer tensor of length {bs}, got {t!r}")
        if not cpu_t.is_cpu:  # only a CUDA tensor is off the CPU
            raise BadBatchError(self.pool_name, f"{name}_cpu must live on the CPU")  # pragma: no cover

    def check_shapes(self, named: tuple[tuple[str, Tensor, Tensor], ...], last_loc: Tensor, bs: int) -> None:
        """Each ``(name, device_t, cpu_t)`` triple (:meth:`check_lengths`), then ``last_loc``."""
        for name, device_t, cpu_t in named:
            self.check_lengths(name, device_t, cpu_t, bs)
        if not is_int_tensor(last_loc) or last_loc.shape != (bs,):
            raise BadBatchError(self.pool_name, f"last_loc must be an integer tensor of shape ({bs},)")

    # ------------------------------------------------------------- extend
    def extend_pages(
        self, prefix_lens: Tensor, prefix_lens_cpu: Tensor, seq_lens: Tensor, seq_lens_cpu: Tensor, last_loc: Tensor, extend_num_tokens: int
    ) -> int:
        """New pages an extend batch needs; :class:`BadBatchError` if it breaks a rule."""
        bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1
        self.check_shapes((("seq_lens", seq_lens, seq_lens_cpu), ("prefix_lens", prefix_lens, prefix_lens_cpu)), last_loc, bs)
        if bs == 0:
            if extend_num_tokens != 0:
                raise BadBatchError(self.pool_name, f"extend_num_tokens={extend_num_tokens} but the lengths sum to 0")
            return 0
        pre, seq = _host(prefix_lens_cpu), _host(seq_lens_cpu)
        ext = seq - pre
        if bool(((pre < 0) | (ext < 0)).any()) or int(ext.sum()) != extend_num_tokens:
            self._explain_lengths(pre, seq, extend_num_tokens)
        if self.check_layout and not self._layout_ok(
            (pre, ext), lambda: (prefix_lens.to(torch.int64), (seq_lens - prefix_lens).to(torch.int64)), last_loc, decode=False
        ):
            self._explain_layout(pre, ext, last_loc, decode=False)
        ps = self.page_size
        return int(((seq + (ps - 1)) // ps - (pre + (ps - 1)) // ps).sum())

    def _explain_lengths(self, pre: np.ndarray, seq: np.ndarray, extend_num_tokens: int) -> None:
        if int(pre.min()) < 0:
            raise BadBatchError(self.pool_name, f"negative prefix length in {pre.tolist()}")
        short = np.flatnonzero(seq < pre)
        if len(short):
            i = int(short[0])
            raise BadBatchError(self.pool_name, f"seq_len {int(seq[i])} < prefix_len {int(pre[i])}", position=i)
        raise BadBatchError(self.pool_name, f"extend_num_tokens={extend_num_tokens} but the lengths sum to {int((seq - pre).sum())}")

    # ------------------------------------------------------------- decode
    def decode_pages(self, seq_lens: Tensor, seq_lens_cpu: Tensor, last_loc: Tensor) -> int:
        """New pages a decode batch needs; :class:`BadBatchError` if it breaks a rule.

        A decode step continues a prefix of ``seq - 1`` tokens by one token, which
        opens a page where ``(seq - 1) % ps == 0`` and continues ``last_loc``'s page
        elsewhere (upstream counts ``seq % ps == 1``, zero at page size 1).
        """
        bs = seq_lens_cpu.shape[0] if isinstance(seq_lens_cpu, torch.Tensor) and seq_lens_cpu.dim() == 1 else -1
        self.check_shapes((("seq_lens", seq_lens, seq_lens_cpu),), last_loc, bs)
        if bs == 0:
            return 0
        seq = _host(seq_lens_cpu)
        if int(seq.min()) < 1:
            raise BadBatchError(self.pool_name, f"decode needs seq_lens >= 1, got {seq.tolist()}")
        ps = self.page_size
        offset = (seq - 1) % ps  # 0 where the new token opens a page
        if self.check_layout:
            if self._host_table:
                assert self._host_states is not None, "a host table has a NumPy view"
                loc = _host(last_loc if last_loc.is_cpu else last_loc.cpu())
                # LIVE is 0, so state x offset is nonzero exactly where a continued page is not handed out.
                ok = not np.count_nonzero((loc - seq + 2) % ps) and not np.count_nonzero(
                    self._host_states.take(loc // ps, mode="clip") * offset
                )
            else:
                ok = self._layout_ok(
                    (seq - 1, np.ones_like(seq)), lambda: ((seq_lens - 1).to(torch.int64), torch.ones_like(seq_lens)), last_loc, decode=True
                )
            if not ok:
                self._explain_layout(seq - 1, np.ones_like(seq), last_loc, decode=True)
        return bs - int(np.count_nonzero(offset))

    # ------------------------------------------------------------- layout
    def _layout_ok(
        self, host: tuple[np.ndarray, np.ndarray], device: Callable[[], tuple[Tensor, Tensor]], last_loc: Tensor, *, decode: bool
    ) -> bool:
        """Every request's ``last_loc`` ends its prefix, on a handed-out page where it continues one.

        ``host`` is ``(prefix, extend)`` lengths as NumPy arrays; ``device`` builds
        them on ``last_loc``'s device, called only for a device pool.
        """
        ps = self.page_size
        if self._host_table:
            pre, ext = host
            loc = _host(last_loc.cpu())
            not_live = self.states.states.numpy().take(loc // ps, mode="clip") != LIVE
            bad = _misplaced(pre, loc, ps, decode) | (not_live & _continues(pre, ext, ps))
            return not bool(bad.any())
        pre_d, ext_d = device()
        loc_d = last_loc.to(torch.int64)
        not_live_d = self.states.states[(loc_d // ps).clamp(0, self.states.num_pages + 1)] != LIVE
        bad_d = _misplaced(pre_d, loc_d, ps, decode) | (not_live_d & _continues(pre_d, ext_d, ps))
        return not bool(bad_d.any())

    def _explain_layout(self, pre: np.ndarray, ext: np.ndarray, last_loc: Tensor, *, decode: bool) -> None:
        """Raise the error for the first request whose ``last_loc`` breaks a layout rule."""
        ps = self.page_size
        call = "alloc_decode" if decode else "alloc_extend"
        loc = _host(last_loc.cpu())
        wrong = np.flatnonzero(_misplaced(pre, loc, ps, decode))
        if len(wrong):
            i = int(wrong[0])
            what = f"does not precede token {int(pre[i])}" if decode else f"does not end prefix {int(pre[i])}"
            raise BadBatchError(self.pool_name, f"last_loc {int(loc[i])} {what} at page size {ps}", position=i)
        pages = loc[_continues(pre, ext, ps)] // ps
        if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):
            raise BadBatchError(self.pool_name, f"{call}: last_loc {loc.tolist()} points outside the pool")
        raise BadBatchError(self.pool_name, f"{call}: last_loc {loc.tolist()} continues a page that is not allocated")


def _misplaced(pre: _Lengths, loc: _Lengths, ps: int, decode: bool) -> _Lengths:
    """Where ``loc`` is not the slot of token ``pre - 1`` modulo the page (NumPy or torch alike).

    Extend also needs ``-1`` exactly for an empty prefix; decode (``pre = seq - 1``)
    keeps upstream's alignment-only rule.
    """
    misaligned = (loc + 1 - pre) % ps != 0
    if decode:
        return misaligned
    return misaligned | ((pre == 0) != (loc == -1)) | (loc < -1)


def _continues(pre: _Lengths, ext: _Lengths, ps: int) -> _Lengths:
    """Requests that write into the prefix's partial last page."""
    return (pre % ps != 0) & (ext > 0)

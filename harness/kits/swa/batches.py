"""Malformed batches, sizes and constructors for the ``swa_kv`` driver (a mixin of :class:`SWAKVDriver`).

The defects are the paged allocator's (:mod:`poolfuzz.harness.kits.kv.batches`).  The
SWA allocator checks in a documented order (``poolfuzz.pools.swa``): the CPU arguments (length
tensors, ``extend_num_tokens``, a decode's lengths) raise first; then a shortfall on
either side refuses with ``None``; then ``last_loc`` (its shape, its SWA peer, its layout
in the full side) raises.  So a ``last_loc`` defect on a pool the batch does not fit
must be refused, anywhere else rejected with ``BadBatchError``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from poolfuzz.harness.judge.driver import SKIPPED, ConstructorKwargs, operation
from poolfuzz.harness.judge.limits import is_int
from poolfuzz.harness.kits.kv.batches import DECODE_DEFECTS, EXTEND_DEFECTS, BatchArgs, apply_defect, decode_call_args, extend_call_args
from poolfuzz.harness.kits.swa.config import SWAKVConfig
from poolfuzz.harness.kits.swa.model import SWAModel
from poolfuzz.pools.errors import BadBatchError, BadSizeError, PoolError, UnknownKernelError
from poolfuzz.pools.page_alloc import KERNEL_NAMES

CPU_CHECKED = frozenset({"seq_lens longer than the batch", "prefix_lens_cpu longer than the batch", "float prefix_lens",
                         "2-D seq_lens", "negative prefix", "seq_len below prefix_len", "extend_num_tokens off by one",
                         "float seq_lens_cpu", "post-step length 0"})
"""Defects the SWA allocator rejects before it looks at capacity; the rest (``last_loc``) after."""


class SWABatchMisuse:
    """``extend_malformed``, ``decode_malformed``, ``tail_of_two``, non-integer ``alloc`` and constructor errors."""

    model: SWAModel
    page_size: int
    pool: Any
    config: SWAKVConfig
    check_misuse: bool
    layout_checked: bool
    expect_rejected: Callable[..., None]
    expect_refused: Callable[..., None]
    event: Callable[[str], None]
    _set_state: Callable[[], Hashable]

    def _swa_args(self, handles: list[int | None], *, decode: bool) -> BatchArgs | None:
        model, ps = self.model, self.page_size
        named = [h for h in handles if h is not None]
        if ps == 1 or len(set(named)) != len(named) or not all(model.is_live(h) and model.last_in_window(h)
                                                                for h in named):
            return None
        if decode and len(named) != len(handles):
            return None
        pres = [len(model.slots[h]) if h is not None else 0 for h in handles]
        lasts = [model.slots[h][-1] if h is not None and model.slots[h] else -1 for h in handles]
        seqs = [p + 1 for p in pres] if decode else [p + ps + 1 for p in pres]
        free = [p for p in range(1, model.full_pages + 1) if p not in model.owner]
        return BatchArgs(pres, seqs, lasts, ps, model.full_pages, free)

    def _judge_malformed(self, defect: str, args: BatchArgs, call: Callable[[], Any], need: int, what: str) -> None:
        if defect not in CPU_CHECKED and self.model.pages_short(need, need):
            self.expect_refused(call, f"{what} on a pool it does not fit", state=self._set_state,
                                crash_id="empty-pool-guard", full_free=len(self.model.full.free),
                                swa_free=len(self.model.swa.free))
            self.event(f"misuse refused for want of pages ({defect})")
            return
        self.expect_rejected(call, BadBatchError, what)

    @operation
    def extend_malformed(self, handles: list[int | None], defect: str) -> Any:
        """``alloc_extend`` of requests still in the window (each grown by a page and a token) with one defect."""
        args = self._swa_args(handles, decode=False)
        if args is None or not self.check_misuse or not apply_defect(
                EXTEND_DEFECTS, defect, args, layout_checked=self.layout_checked):
            return SKIPPED
        call = extend_call_args(args, self.config.device)
        need = sum(self.model.extend_pages_needed(p, s) for p, s in zip(args.pres, args.seqs) if 0 <= p <= s)
        self._judge_malformed(defect, args, lambda: self.pool.alloc_extend(**call), need,
                              f"alloc_extend(prefix={args.pres}, seq={args.seqs}, last_loc={args.lasts}) with {defect}")
        self.event(f"misuse: malformed extend ({defect})")
        return None

    @operation
    def decode_malformed(self, handles: list[int], defect: str) -> Any:
        """``alloc_decode`` of requests still in the window with one defect."""
        args = self._swa_args(list(handles), decode=True)
        if not handles or args is None or not self.check_misuse or not apply_defect(
                DECODE_DEFECTS, defect, args, layout_checked=self.layout_checked):
            return SKIPPED
        call = decode_call_args(args, self.config.device)
        need = sum(self.model.decode_pages_needed(s) for s in args.seqs if s >= 1)
        self._judge_malformed(defect, args, lambda: self.pool.alloc_decode(**call), need,
                              f"alloc_decode(seq={args.seqs}, last_loc={args.lasts}) with {defect}")
        self.event(f"misuse: malformed decode ({defect})")
        return None

    @operation
    def tail_of_two(self) -> Any:
        """``alloc_extend_swa_tail`` of two new requests (it takes one): ``BadBatchError``."""
        if self.page_size == 1 or not self.check_misuse:
            return SKIPPED
        ps, device = self.page_size, self.config.device
        zeros, seqs = torch.zeros(2, dtype=torch.int64), torch.tensor([ps, ps], dtype=torch.int64)
        self.expect_rejected(lambda: self.pool.alloc_extend_swa_tail(
            zeros.to(device), zeros, seqs.to(device), seqs, torch.full((2,), -1, device=device), 2 * ps, ps),
            BadBatchError, "alloc_extend_swa_tail of two requests")
        self.event("misuse: alloc_extend_swa_tail of two requests")
        return None

    @operation
    def alloc_non_int(self, need_size: float | bool) -> Any:
        """``alloc`` of a size that is not an int: ``BadSizeError`` (at any page size)."""
        if is_int(need_size) or not self.check_misuse:
            return SKIPPED
        self.expect_rejected(lambda: self.pool.alloc(need_size), BadSizeError, f"alloc({need_size!r})")
        self.event("misuse: alloc of a size that is not an int")
        return None

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """A page size >= 1, both sizes non-negative multiples of it; above page size 1 a known kernel."""
        ps = config.get("page_size")
        if not isinstance(ps, int) or isinstance(ps, bool) or ps < 1:
            return (BadSizeError,)
        errors: list[type[PoolError]] = []
        if ps > 1 and config.get("kernel", "vectorized") not in KERNEL_NAMES:
            errors.append(UnknownKernelError)
        for name in ("size", "size_swa"):
            size = config.get(name)
            if not isinstance(size, (int, float)) or isinstance(size, bool) or size < 0 or size % ps:
                errors.append(BadSizeError)
        return tuple(dict.fromkeys(errors))

"""The driver of the ``paged_kv`` family: the token driver plus ``alloc_extend`` and ``alloc_decode``.

Each extend or decode call is judged against the model's free list and the loop
oracle (:mod:`poolfuzz.pools.page_alloc.loop`): the short-pool guard, the slot layout of
every request (page 0 never, continuation of ``last_loc``, one page per page
index), fresh pages taken from the head of the free list, and the page count.

Misuse (with ``check_misuse``): ``extend_malformed`` / ``decode_malformed`` send a
batch of live requests with one defect of :mod:`poolfuzz.harness.kits.kv.batches`
(``BadBatchError``, nothing taken); ``kernel_call`` calls the pool's page kernel
directly with a case of :mod:`poolfuzz.harness.kits.kv.page_kernel` (a malformed
batch its contract rejects, or a corner it must serve as the loop oracle does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, operation
from poolfuzz.harness.judge.invariants import check, check_slot_layout
from poolfuzz.harness.kits.kv.batches import DECODE_DEFECTS, EXTEND_DEFECTS, BatchArgs, apply_defect, decode_call_args, extend_call_args
from poolfuzz.harness.kits.kv.config import PagedKVConfig
from poolfuzz.harness.kits.kv.driver import TokenKVDriver, ints
from poolfuzz.harness.kits.kv.ops import PagedKVOps
from poolfuzz.harness.kits.kv.page_kernel import CASES, kernel_case
from poolfuzz.pools.errors import BadBatchError
from poolfuzz.pools.page_alloc import PageKernel
from poolfuzz.pools.page_alloc.loop import alloc_decode_loop, alloc_extend_loop

Lengths = tuple[list[int], list[int], list[int]]
"""``(prefix_lens, seq_lens, last_loc)`` of one batch, as plain lists."""


class PagedKVDriver(TokenKVDriver):
    """``PagedTokenToKVPoolAllocator``: everything above plus ``alloc_extend`` and ``alloc_decode``."""

    family = "paged_kv"
    ops = PagedKVOps
    paged = True

    def _request_tail(self, handle: int | None) -> tuple[int, int]:
        """``(length, last_loc)`` of a request: ``last_loc`` is the slot of its last token, or -1."""
        slots = self.model.slots[handle] if handle is not None else []
        return len(slots), (slots[-1] if slots else -1)

    config: PagedKVConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        layout = self.config.check_layout
        self.layout_checked = torch.device(self.config.device).type == "cpu" if layout is None else layout

    def _batch_ok(self, handles: list[int]) -> bool:
        """Distinct live requests: the same request twice in one batch is a caller bug no pool can see."""
        return len(set(handles)) == len(handles) and all(h in self.model.requests for h in handles)

    @operation
    def extend(self, batch: list[list[int | None]]) -> list[int]:
        """``batch`` is ``[[handle or None, extend_len], ...]``; ``None`` starts a new request.  Returns new handles."""
        named = [int(h) for h, _ in batch if h is not None]
        if not self._batch_ok(named) or any(int(e) < 0 for _, e in batch):  # type: ignore[arg-type]
            return SKIPPED  # type: ignore[return-value]
        tails = [self._request_tail(None if h is None else int(h)) for h, _ in batch]
        pres = [length for length, _ in tails]
        seqs = [length + int(e) for (length, _), (_, e) in zip(tails, batch)]  # type: ignore[arg-type]
        lasts = [last for _, last in tails]
        what = f"alloc_extend(prefix={pres}, seq={seqs}, last_loc={lasts})"
        pre_cpu, seq_cpu = torch.tensor(pres, dtype=torch.int64), torch.tensor(seqs, dtype=torch.int64)
        num_pages = sum(self.model.extend_pages_needed(p, s) for p, s in zip(pres, seqs))
        call = lambda: self.pool.alloc_extend(self._tensor(pres), pre_cpu, self._tensor(seqs), seq_cpu,
                                              self._tensor(lasts), sum(seqs) - sum(pres))
        out = self._judge(what, (pres, seqs, lasts), num_pages, call, alloc_extend_loop)
        if out is None:
            return []
        new_handles = []
        for (h, _), p, _s, (start, stop) in zip(batch, pres, seqs, _spans(pres, seqs)):
            if h is None:
                h = self.model.new_handle(request=True)
                new_handles.append(h)
            self._take_request(int(h), p, out[start:stop])
        return new_handles

    @operation
    def decode(self, handles: list[int]) -> None:
        """One decode step for each request: ``seq_lens`` are the post-step lengths; no request is an empty batch."""
        if not self._batch_ok(handles):
            return SKIPPED  # type: ignore[return-value]
        if not handles:
            self.event("corner: an empty decode batch")
        tails = [self._request_tail(h) for h in handles]
        pres = [length for length, _ in tails]
        seqs = [p + 1 for p in pres]
        lasts = [last for _, last in tails]
        what = f"alloc_decode(seq={seqs}, last_loc={lasts})"
        seq_cpu = torch.tensor(seqs, dtype=torch.int64)
        num_pages = sum(self.model.decode_pages_needed(s) for s in seqs)
        call = lambda: self.pool.alloc_decode(self._tensor(seqs), seq_cpu, self._tensor(lasts))

        def oracle(pre: torch.Tensor, seq: torch.Tensor, last: torch.Tensor, pages: torch.Tensor,
                   out: torch.Tensor, ps: int) -> None:
            alloc_decode_loop(seq, last, pages, out, ps)

        out = self._judge(what, (pres, seqs, lasts), num_pages, call, oracle)
        if out is None:
            return
        if self.page_size == 1:
            self.event("decode at page size 1")
        for h, p, slot in zip(handles, pres, out):
            self._take_request(h, p, [slot])

    # ------------------------------------------------------------ misuse
    def _batch_args(self, handles: list[int | None], *, decode: bool) -> BatchArgs | None:
        """The well-formed batch of ``handles`` (``None``: a new request, extend only) a defect then breaks."""
        named = [int(h) for h in handles if h is not None]
        if not self._batch_ok(named) or (decode and len(named) != len(handles)):
            return None
        tails = [self._request_tail(h) for h in handles]
        pres = [length for length, _ in tails]
        seqs = [p + 1 for p in pres] if decode else [p + self.page_size + 1 for p in pres]
        held = set(self.model.owner)
        free = [p for p in range(1, self.model.num_pages + 1) if p not in held]
        return BatchArgs(pres, seqs, [last for _, last in tails], self.page_size, self.model.num_pages, free)

    def _reject_malformed(self, handles: list[int | None], defect: str, *, decode: bool) -> Any:
        """``alloc_decode`` (``decode``) or ``alloc_extend`` of ``handles`` with ``defect``: ``BadBatchError``."""
        args = self._batch_args(handles, decode=decode) if handles or not decode else None  # no empty decode batch
        if args is None or not self.check_misuse or not apply_defect(
                DECODE_DEFECTS if decode else EXTEND_DEFECTS, defect, args, layout_checked=self.layout_checked):
            return SKIPPED
        if decode:
            kwargs = decode_call_args(args, self.config.device)
            call: Callable[[], Any] = lambda: self.pool.alloc_decode(**kwargs)
            what = f"alloc_decode(seq={args.seqs}, last_loc={args.lasts})"
        else:
            kwargs = extend_call_args(args, self.config.device)
            call = lambda: self.pool.alloc_extend(**kwargs)
            what = f"alloc_extend(prefix={args.pres}, seq={args.seqs}, last_loc={args.lasts})"
        self.expect_rejected(call, BadBatchError, f"{what} with {defect}")
        self.event(f"misuse: malformed {'decode' if decode else 'extend'} ({defect})")
        return None

    @operation
    def extend_malformed(self, handles: list[int | None], defect: str) -> None:
        """``alloc_extend`` of ``handles`` (each grown by a page and a token) with one defect: ``BadBatchError``."""
        return self._reject_malformed(handles, defect, decode=False)

    @operation
    def decode_malformed(self, handles: list[int], defect: str) -> None:
        """``alloc_decode`` of live requests with one defect: ``BadBatchError``, nothing taken."""
        return self._reject_malformed(list(handles), defect, decode=True)

    @operation
    def kernel_call(self, case: str) -> None:
        """The pool's page kernel called directly with a :data:`~poolfuzz.harness.kits.kv.page_kernel.CASES` case."""
        kernel = getattr(self.pool, "kernel", None)  # pools' own allocators only: a target may name its kernel otherwise
        if not isinstance(kernel, PageKernel) or case not in CASES:
            return SKIPPED  # type: ignore[return-value]
        found = kernel_case(kernel, self.page_size, case, self.config.device)
        if found is None or (found.error is not None and not self.check_misuse):
            return SKIPPED  # type: ignore[return-value]
        what = f"{kernel.name} kernel, {case}, page size {self.page_size}"
        if found.error is None:
            self.expect_accepted(found.call, what)
            check(ints(found.out) == found.expected, "kernel-agreement", f"{what} differs from the loop oracle",
                  slots=ints(found.out), oracle=found.expected)
            self.event(f"corner: kernel {case}")
            return
        before = ints(found.out)
        self.expect_rejected(found.call, found.error, what)
        check(ints(found.out) == before, "misuse-rejected", f"{what} raised but wrote out_indices")
        self.event(f"misuse: kernel {case}")

    # ------------------------------------------------------------ judging
    def _take_request(self, handle: int, pre: int, slots: list[int]) -> None:
        """``handle`` owns the fresh pages among ``slots`` (positions from ``pre``); :meth:`_judge` took them."""
        first_new = -(-pre // self.page_size) * self.page_size
        fresh = self.model.pages_of([s for p, s in enumerate(slots, pre) if p >= first_new])
        self.model.own(handle, fresh, slots)

    def _judge(self, what: str, lengths: Lengths, num_pages: int, call: Callable[[], Any],
               oracle: Callable[..., None]) -> list[int] | None:
        """Run an extend/decode call and check its result; returns the slots, or ``None`` if refused.

        Checks, in order: the short-pool guard, the length, each slot (page 0,
        bounds, uniqueness, phase-1 continuation of ``last_loc``, position
        offset, one page per page index), the fresh pages (free in the model,
        the head of the free list), agreement with the loop oracle on that
        head, and the page count (``available_size()`` fell by exactly it).
        """
        pres, seqs, lasts = lengths
        ps = self.page_size
        heads = self.model.heads(num_pages)
        if not heads:
            self.expect_refused(call, f"{what} needing {num_pages} pages", state=self._free_set_state,
                                crash_id="empty-pool-guard", free_pages=self.model.available_pages())
            self.model.refused()
            self.event("extend/decode refused: pool short")
            return None
        if num_pages == 0 and not self.model.available_pages():
            self.event("extend/decode needing no page with no free page")
        before = self._free_state()
        crash = "empty-pool-guard" if num_pages == 0 else "valid-call-accepted"
        result = self.expect_accepted(call, what, crash_id=crash)
        check(result is not None, "empty-pool-guard", f"{what} refused needing {num_pages} of "
              f"{self.model.available_pages()} free pages")
        slots = ints(result)
        total = sum(seqs) - sum(pres)
        check(len(slots) == total, "page-layout", f"{what} returned {len(slots)} slots for {total} tokens")
        self._check_fresh_slots(slots, what)
        fresh: list[int] = []
        for (start, stop), pre, last in zip(_spans(pres, seqs), pres, lasts):
            check_slot_layout(slots[start:stop], prefix=pre, last_loc=last, page_size=ps, what=what)
            first_new = -(-pre // ps) * ps
            own: dict[int, int] = {}
            for pos, slot in enumerate(slots[start:stop], pre):
                if pos < first_new:
                    continue
                page = own.setdefault(pos // ps, slot // ps)
                check(slot // ps == page, "page-layout", f"{what}: position {pos} left its page {page}", slot=slot)
            fresh.extend(own.values())
        self._check_pages_free(fresh, what)
        head = self._match_head(fresh, num_pages, what)
        expected = torch.empty(total, dtype=torch.int64)
        cpu = [torch.tensor(v, dtype=torch.int64) for v in (pres, seqs, lasts, head)]
        oracle(*cpu, expected, ps)
        check(slots == ints(expected), "kernel-agreement", f"{what} differs from the loop oracle on pages {head}",
              slots=slots, oracle=ints(expected))
        self._check_consumed(before, fresh, "page-layout", what)
        self.model.take(fresh)
        if num_pages and not self.model.available_pages():
            self.event("extend/decode filled the pool exactly")
        return slots


def _spans(pres: list[int], seqs: list[int]) -> list[tuple[int, int]]:
    """Each request's ``[start, stop)`` in the flat output of an extend."""
    spans, start = [], 0
    for pre, seq in zip(pres, seqs):
        spans.append((start, start + seq - pre))
        start += seq - pre
    return spans

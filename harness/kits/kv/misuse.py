"""The misuse half of the KV drivers: every call the contract forbids, and what the pool must answer.

:class:`KVMisuseDriver` is the base of :class:`~poolfuzz.harness.kits.kv.driver.TokenKVDriver` (and so of the
paged, SWA and pure-SWA drivers).  Each operation here builds a call a caller must not make (a second
free, raw foreign or reserved indices, a malformed tensor, a broken row segment, a malformed
constructor) from the model's state, and requires the typed :class:`~poolfuzz.pools.errors.PoolError` with the
pool unchanged (:meth:`~poolfuzz.harness.judge.driver.Driver.expect_rejected`); with misuse off, each is
skipped.  The valid calls and the audits stay in :mod:`poolfuzz.harness.kits.kv.driver`.
"""

from __future__ import annotations

from typing import Any

import torch

from poolfuzz.harness.judge.driver import SKIPPED, ConstructorKwargs, Driver, operation
from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.judge.limits import is_int
from poolfuzz.harness.kits.kv.model import KVModel
from poolfuzz.pools.errors import (
    BadBatchError,
    BadSizeError,
    DoubleFreeError,
    ForeignIndexError,
    KernelUnavailableError,
    PoolError,
    ReservedIndexError,
    UnknownKernelError,
)
from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import KERNEL_NAMES, triton_available
from poolfuzz.pools.page_alloc.counting import triton_page_size

__all__ = ["MALFORMED_FREES", "SEGMENT_MISUSE", "KVMisuseDriver"]

SEGMENT_MISUSE = (
    "start off the page grid",
    "a page in two runs",
    "a free page",
    "the reserved page",
    "a token past the pool",
    "a 2-D tensor",
    "a float tensor",
)
"""The ways :meth:`KVMisuseDriver.free_segment_malformed` breaks a row segment (the move draws one)."""
_AFTER_THE_ROW: dict[str, type[PoolError]] = {
    "a free page": DoubleFreeError,
    "the reserved page": ReservedIndexError,
    "a token past the pool": ForeignIndexError,
}
"""The error of each kind that appends one page's first token to the row."""


MALFORMED_FREES = ("list", "float tensor", "2-D tensor")
"""What ``free_malformed`` passes instead of a 1-D integer tensor."""


class KVMisuseDriver(Driver):
    """The misuse operations of a KV allocator driver; the subclass builds ``model`` and sets ``page_size``."""

    paged = False
    model: KVModel
    page_size: int

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.config.device)

    @operation
    def free_segment_malformed(self, handle: int, kind: str) -> None:
        """``free_segment`` of a live allocation broken one way (misuse), nothing freed: a ``"start off the page
        grid"`` (:class:`BadSizeError`); above page size 1 ``"a page in two runs"`` (:class:`BadBatchError`);
        the row with ``"a free page"`` (:class:`DoubleFreeError`), ``"the reserved page"``
        (:class:`ReservedIndexError`) or ``"a token past the pool"`` (:class:`ForeignIndexError`) after it; or
        the row as ``"a 2-D tensor"`` or ``"a float tensor"`` (:class:`BadBatchError`).  Every token a segment
        names is checked, not only each page's first."""
        call = getattr(self.pool, "free_segment", None)
        ps, held = self.page_size, self.model.slots.get(handle, [])
        if call is None or not self.check_misuse or not held:
            return SKIPPED  # type: ignore[return-value]
        error: type[PoolError] = BadBatchError  # unless the kind names another
        start = 0
        after = self._page_after_row(kind)
        if kind == "start off the page grid":
            start, tensor, error = (1 if ps > 1 else -1), self._tensor(held), BadSizeError
        elif kind == "a page in two runs" and ps > 1 and len(held) >= 2 * ps:
            tensor = self._tensor([held[0], *held[ps : 2 * ps], held[1]])
        elif after is not None:
            tensor, error = self._tensor([*held, after * ps]), _AFTER_THE_ROW[kind]
        elif kind == "a 2-D tensor":
            tensor = self._tensor(held).reshape(1, -1)
        elif kind == "a float tensor":
            tensor = self._tensor(held).float()
        else:
            return SKIPPED  # type: ignore[return-value]
        self.expect_rejected(lambda: call(tensor, start_pos=start), error, f"free_segment with {kind}")
        self.event(f"misuse: free_segment with {kind}")

    def _page_after_row(self, kind: str) -> int | None:
        """The page whose first token ``kind`` appends to a row segment: a free one, page 0 or one past the pool
        (``None`` for another kind, or when no page is free)."""
        if kind == "a free page":
            return next((p for p in range(1, self.model.num_pages + 1) if self.model.page_state(p) == "free"), None)
        return {"the reserved page": 0, "a token past the pool": self.model.num_pages + 1}.get(kind)

    @operation
    def free_again(self, handle: int) -> None:
        """Free again every slot ``handle`` already released: a double free, unless a page was handed out anew."""
        released = self.model.released.get(handle, [])
        pages = self.model.pages_of(released)
        if not released or not self.check_misuse or any(self.model.page_state(p) == "live" for p in pages):
            return SKIPPED  # type: ignore[return-value]  # a re-allocated page: no pool can tell
        self.expect_rejected(
            lambda: self.pool.free(self._tensor(released)),
            DoubleFreeError,
            f"second free of handle {handle}'s slots",
            offending=self._offends(released),
        )
        self.event("double free rejected" + (" inside a free group" if self.model.group_open else ""))

    @operation
    def free_indices(self, indices: list[int]) -> None:
        """Free raw token indices; only misuse (foreign, reserved, not live, repeated slot) is issued."""
        if not indices:
            before = self.observe()
            self.expect_accepted(lambda: self.pool.free(self._tensor([])), "free of an empty tensor")
            check(self.observe() == before, "conservation", "free of an empty tensor changed the pool")
            return
        ps, cap = self.page_size, self.model.capacity_slots
        expected: list[type[PoolError]] = []
        if any(i < 0 or i >= cap for i in indices):
            expected.append(ForeignIndexError)
        if any(0 <= i < ps for i in indices):
            expected.append(ReservedIndexError)
        states = {self.model.page_state(i // ps) for i in indices if ps <= i < cap}
        repeated = not self.paged and len(set(indices)) != len(indices)
        if states & {"free", "pending"} or repeated:
            expected.append(DoubleFreeError)
        if not expected or not self.check_misuse:
            return SKIPPED  # type: ignore[return-value]  # live pages: free/free_part is the call
        self.expect_rejected(
            lambda: self.pool.free(self._tensor(indices)), tuple(expected), f"free({indices})", offending=self._offends(indices)
        )

    def _offends(self, indices: list[int]) -> Any:
        """What a rejected ``free(indices)`` may name: foreign token indices, a page-0 index, or pages it may not free.

        A double free names pages (token slots on the page-size-1 allocator): each
        one not live, or (token slots) named twice in the call.
        """
        ps, cap = self.page_size, self.model.capacity_slots
        repeated = set() if self.paged else {i for i in indices if indices.count(i) > 1}
        pages = {i // ps for i in indices if ps <= i < cap}

        def offends(error: PoolError, number: int) -> bool:
            if isinstance(error, ForeignIndexError):
                return number in indices and not 0 <= number < cap
            if isinstance(error, ReservedIndexError):
                return number in indices and 0 <= number < ps
            return number in pages and (number in repeated or self.model.page_state(number) in ("free", "pending"))

        return offends

    @operation
    def free_malformed(self, form: str) -> None:
        """A free of a live allocation's slots as a :data:`MALFORMED_FREES` form: ``BadBatchError``, nothing freed."""
        live = sorted(h for h, slots in self.model.slots.items() if slots)
        values = self.model.slots[live[0]] if live else [self.page_size]
        indices: Any = {
            "list": list(values),
            "float tensor": torch.tensor(values, dtype=torch.float32),
            "2-D tensor": self._tensor(values).reshape(1, -1),
        }.get(form)
        if indices is None or form not in self.malformed_frees or not self.check_misuse:
            return SKIPPED  # type: ignore[return-value]
        self.expect_rejected(lambda: self.pool.free(indices), BadBatchError, f"free of a {form} {values}")
        self.event(f"misuse: free of a {form}")

    malformed_frees: tuple[str, ...] = MALFORMED_FREES
    """The forms this family's ``free`` must reject."""

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """``size`` a non-negative multiple of ``page_size`` (>= 1); a known kernel, Triton at powers of two only."""
        ps, size = config.get("page_size", 1), config.get("size")
        by_name = self._kernel_by_name()  # a target that fixes its own kernel (a canary) does not read the name
        kernel = config.get("kernel", "vectorized") if by_name else "vectorized"
        errors: list[type[PoolError]] = []
        if self.paged and kernel not in KERNEL_NAMES:
            errors.append(UnknownKernelError)
        if self.paged and kernel == "triton" and not triton_available():
            return (KernelUnavailableError,)  # the kernel is looked up before any size is checked
        bad_page = not is_int(ps) or ps < 1 or (self.paged and kernel == "triton" and not triton_page_size(ps))
        if bad_page or not isinstance(size, (int, float)) or isinstance(size, bool) or size < 0 or size % ps:
            errors.append(BadSizeError)
        return tuple(errors)

    def _kernel_by_name(self) -> bool:
        """Whether the target's constructor is the paged allocator's own, which picks its kernel by name."""
        init = getattr(type(self.pool), "__init__", None)
        return init is PagedTokenToKVPoolAllocator.__init__

"""Driver for the ``pure_swa_kv`` family: ``PureSWATokenToKVPoolAllocator``.

Every layer is sliding-window: one page-size-1 pool plays both sides, so the family is the
``token_kv`` driver (:class:`~poolfuzz.harness.kits.kv.driver.TokenKVDriver`) on that pool plus the
SWA surface it adds.  A family of its own rather than a ``swa_kv`` option: its constructor
(``size_swa`` only) and its contract (identity mapping, padding dropped, ``free_full`` a
no-op, no paged calls) differ, and so does every upstream target that implements it.
"""

from __future__ import annotations

from typing import Any

import torch

from poolfuzz.harness.judge.driver import ConfigLike, ConstructorKwargs, Driver, operation
from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.kv.driver import TokenKVDriver, ints
from poolfuzz.harness.kits.kv.model import KVModel
from poolfuzz.harness.kits.swa.config import PureSWAKVConfig
from poolfuzz.harness.kits.swa.driver import reject_misuse, skipped
from poolfuzz.harness.kits.swa.ops import PureSWAKVOps
from poolfuzz.pools.errors import BadSizeError, DoubleFreeError, ForeignIndexError, PoolError

PAGED_CALLS = ("alloc_extend", "alloc_extend_swa_tail", "alloc_decode")
"""The SWA allocator's paged calls: a pure pool has page size 1 and refuses them."""


class _FreeThrough:
    """The pool with ``free`` routed to another of its free calls, so the token driver's
    release checks judge that call unchanged."""

    def __init__(self, pool: Any, call: str) -> None:
        self._pool, self._call = pool, call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def free(self, indices: torch.Tensor) -> None:
        getattr(self._pool, self._call)(indices)


class PureSWAKVDriver(TokenKVDriver):
    """``PureSWATokenToKVPoolAllocator``: one page-size-1 pool plays both sides.

    The token driver's checks, on the pool's one side, plus the SWA surface: ``free_swa``
    is ``free``; indices <= 0 are padding and dropped silently, the rest validated
    strictly; ``free_full`` releases nothing (there is no full-attention pool); the
    mapping is the identity with the trailing ``-1``; both sides report one available size.
    """

    family = "pure_swa_kv"
    ops = PureSWAKVOps
    malformed_frees: tuple[str, ...] = ("list", "float tensor")  # the padding filter flattens a 2-D tensor, as upstream

    config: PureSWAKVConfig  # type: ignore[assignment]  # not the token driver's: no ``size``

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        Driver.__init__(self, factory, config, **kwargs)  # the token driver's own __init__ reads ``size``
        self.page_size = 1
        self.model = KVModel(self.config.size_swa, 1, need_sort=self.config.need_sort, head_release=False)

    def _free_state(self) -> tuple[list[int], int]:
        return ints(self.pool.swa_attn_allocator.get_all_free_pages()), int(self.pool.available_size())

    def _free_through(self, call: str, handle: int, padding: list[int]) -> Any:
        if not self.model.is_live(handle):
            return skipped()
        slots = list(self.model.slots[handle])
        pool, self.pool = self.pool, _FreeThrough(self.pool, call)
        try:
            self._free_valid(handle, slots, padding[:1] + slots + padding[1:], f"{call}(handle {handle}, padding {padding})")
        finally:
            self.pool = pool
        self.model.retire(handle)
        return None

    @operation
    def free_swa(self, handle: int) -> None:
        """``free_swa`` of a whole allocation: the same release as ``free``."""
        return self._free_through("free_swa", handle, [])

    @operation
    def free_padded(self, handle: int) -> None:
        """``free`` of an allocation with the padding slots 0 and -1 around it: they are dropped."""
        return self._free_through("free", handle, [0, -1])

    @operation
    def free_full(self, handle: int) -> None:
        """``free_full`` of a live allocation changes nothing."""
        if not self.model.is_live(handle):
            return skipped()
        before = self.observe()
        self.expect_accepted(lambda: self.pool.free_full(self._tensor(self.model.slots[handle])), f"free_full(handle {handle})")
        check(self.observe() == before, "conservation", "free_full changed a pure SWA pool", before=before, after=self.observe())
        return None

    @operation
    def paged_call(self, call: str) -> None:
        """One of :data:`PAGED_CALLS` with a one-request batch: ``BadSizeError`` (page size 1 allocates with ``alloc``)."""
        if call not in PAGED_CALLS:
            return skipped()
        one, none = self._tensor([1]), self._tensor([0])
        args: dict[str, Any] = {"seq_lens": one, "seq_lens_cpu": one.cpu(), "last_loc": self._tensor([-1])}
        if call != "alloc_decode":
            args.update(prefix_lens=none, prefix_lens_cpu=none.cpu(), extend_num_tokens=1)
        if call == "alloc_extend_swa_tail":
            args["swa_tail_len"] = 1
        result = reject_misuse(self, lambda: getattr(self.pool, call)(**args), BadSizeError, f"{call} on a pure SWA pool")
        if result is None:
            self.event(f"misuse: {call} on a pure SWA pool")
        return result  # type: ignore[no-any-return]

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """``page_size`` must be 1 and ``size_swa`` a non-negative size."""
        size, ps = config.get("size_swa"), config.get("page_size", 1)
        if ps != 1 or not isinstance(size, (int, float)) or isinstance(size, bool) or size < 0 or size % 1:
            return (BadSizeError,)
        return ()

    @operation
    def merge(self) -> None:
        """Not a call of the pure pool (its allocator merges inside ``alloc``)."""
        return skipped()

    @operation
    def free_indices(self, indices: list[int]) -> None:
        """Raw indices: <= 0 are dropped as padding; foreign, free and repeated ones raise, changing nothing."""
        end, kept = self.model.capacity_slots, [i for i in indices if i > 0]
        expected: list[type[PoolError]] = []
        if any(i >= end for i in kept):
            expected.append(ForeignIndexError)
        if {self.model.page_state(i) for i in kept if i < end} & {"free", "pending"} or len(set(kept)) != len(kept):
            expected.append(DoubleFreeError)
        if expected:
            return reject_misuse(self, lambda: self.pool.free(self._tensor(indices)), tuple(expected), f"free({indices})")
        if kept:
            return skipped()  # live slots: free of a handle is the call
        before = self.observe()
        self.expect_accepted(lambda: self.pool.free(self._tensor(indices)), f"free({indices}) of padding only")
        check(self.observe() == before, "conservation", f"free({indices}) of padding only changed the pool")
        return None

    def audit(self) -> None:
        super().audit()
        pool, pages = self.pool, self.model.num_pages
        check(pool.size == pages, "conservation", "a pure SWA pool's size is not its one side's", size=pool.size)
        probe = self._tensor([1, -1])
        check(
            ints(pool.translate_loc_from_full_to_swa(probe)) == [1, -1],
            "swa-mapping",
            "translate_loc_from_full_to_swa is not the identity on a pure SWA pool",
        )
        room = getattr(pool, "new_pages_available", None)  # a query beyond the protocol, where the pool has it
        if room is not None:
            free = self.model.available_pages()
            check(
                room(free, free) and not room(free + 1, 0), "conservation", "new_pages_available() disagrees with the free pages", free=free
            )
        table, identity = ints(self.pool.full_to_swa_index_mapping), [*range(self.model.num_pages + 1), -1]
        check(
            table == identity,
            "swa-mapping",
            "the pure SWA mapping is not the identity plus the trailing -1",
            entries={i: v for i, (v, e) in enumerate(zip(table, identity)) if v != e},
            length=len(table),
        )
        sizes = (int(self.pool.full_available_size()), int(self.pool.swa_available_size()), int(self.pool.available_size()))
        check(len(set(sizes)) == 1, "conservation", "the sides of a pure SWA pool report different sizes", sizes=sizes)

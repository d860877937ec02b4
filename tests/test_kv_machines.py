"""The KV allocator machines: they pass on the real allocators and catch planted bugs by name.

Each broken allocator below re-creates one historical bug in a few lines; the
machine must report it under the invariant id that names that bug.  Bug hunts
run the generate phase only (no target phase, no shrinking): the assertion is
about *which* invariant fires, and shrinking would only cost time.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import Phase

from poolfuzz.harness.kits.kv.driver import TokenKVDriver
from poolfuzz.harness.kits.kv.moves import paged_kv_table
from poolfuzz.harness.kits.kv.paged import PagedKVDriver
from poolfuzz.harness.machines import PoolMachine, make_machine, pinned_settings, run_machine, violation_of
from poolfuzz.pools.errors import GroupStateError
from poolfuzz.pools.kv_allocator import _LIVE, _PENDING, PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolfuzz.pools.page_alloc import PageKernel, get_kernel


def test_the_driver_accepts_a_refusal_that_merged_the_staging_area() -> None:
    """Found by fuzzing the model: a refused extend merges staged pages (upstream too), pages
    staged afterwards stay staged, and the next allocations follow that order, not a full merge."""
    driver = PagedKVDriver(PagedTokenToKVPoolAllocator, {"size": 3, "page_size": 1, "need_sort": True,
                                                         "kernel": "vectorized", "device": "cpu"})
    first = driver.step("alloc", need_size=1)
    driver.step("free", handle=first)  # page 1 staged
    second = driver.step("alloc", need_size=1)  # page 2
    assert driver.step("extend", batch=[[None, 3]]) == []  # refused; the pool merged page 1 in
    driver.step("free_part", handle=second, count=1)  # page 2 staged
    driver.step("alloc", need_size=1)  # page 1
    driver.step("alloc", need_size=1)  # page 3, with page 2 still staged
    driver.teardown()


# ------------------------------------------------------------ broken pools
class FreeWithoutDedup(PagedTokenToKVPoolAllocator):
    """Upstream's unchecked free, minus the ``unique``: two tokens of one page free it twice."""

    poolfuzz_check_misuse = False

    def _pages_of(self, indices: torch.Tensor) -> torch.Tensor:
        return indices.to(self.device, torch.int64) // self.page_size


class FreeGroupKeepsCallersTensor(PagedTokenToKVPoolAllocator):
    """SGLang #34067: the free group stores the caller's tensor, not a copy, and reads it at group end."""

    def free(self, indices: torch.Tensor) -> None:
        if self._free_group is not None and isinstance(indices, torch.Tensor) and indices.numel():  # misuse: the pool's
            self._page_state[self._pages_of(indices)] = _PENDING
            self._free_group.append(indices)  # token indices, by reference
            return
        super().free(indices)

    def free_group_end(self) -> None:
        if self._free_group is None:
            raise GroupStateError(self.pool_name, "free", "free_group_end without free_group_begin")
        pending, self._free_group = self._free_group, None
        if pending:
            tokens = torch.cat(pending)
            self._page_state[torch.unique(tokens // self.page_size)] = _LIVE
            self.free(tokens)


class UpstreamDecodeCount(PagedTokenToKVPoolAllocator):
    """Upstream decode: counts ``seq % ps == 1`` (zero at page size 1) and launches on the whole free list.

    Like upstream (and :class:`FreeWithoutDedup`) it does not validate its input (its
    ``alloc_decode`` takes a malformed batch as it comes), so it is fuzzed with valid calls
    only: with misuse calls on, the catalogue's malformed decode batch would report that
    instead of the miscount this test is about.
    """

    poolfuzz_check_misuse = False

    def alloc_decode(self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor) -> torch.Tensor | None:
        num_pages = int((seq_lens_cpu % self.page_size == 1).sum())
        if num_pages > len(self.free_pages):
            self.merge_and_sort_free()
        if num_pages > len(self.free_pages):
            return None
        out = torch.empty(len(seq_lens_cpu), dtype=torch.int64, device=self.device)
        get_kernel("vectorized").decode(seq_lens.long(), last_loc.long(), self.free_pages, out, self.page_size)
        self._consume(num_pages)
        return out


def _extend_pages_reversed(prefix_lens: torch.Tensor, seq_lens: torch.Tensor, last_loc: torch.Tensor,
                           free_pages: torch.Tensor, out_indices: torch.Tensor, page_size: int) -> None:
    get_kernel("vectorized").extend(prefix_lens, seq_lens, last_loc, free_pages.flip(0), out_indices, page_size)


class KernelReversesPages(PagedTokenToKVPoolAllocator):
    """A rewritten extend kernel that hands the batch's pages out back to front."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.kernel = PageKernel("reversed", _extend_pages_reversed, get_kernel("vectorized").decode)


def at_page_size_one(machine: type[PoolMachine]) -> type[PoolMachine]:
    """``machine`` drawing only page size 1 (the decode-count bug lives nowhere else)."""

    class PageSizeOne(machine):  # type: ignore[valid-type, misc]
        table = paged_kv_table(page_size=1)

    return PageSizeOne


def caught(broken: type, narrow: Callable[[type[PoolMachine]], type[PoolMachine]] = lambda m: m) -> str:
    """Fuzz ``broken`` as the ``paged_kv`` target; the id of the invariant that caught it."""
    machine = narrow(make_machine("paged_kv", f"{__name__}:{broken.__name__}"))
    with pytest.raises(BaseException) as failure:
        run_machine(machine, settings=pinned_settings(max_examples=300, phases=[Phase.generate]), shrink=False)
    violation = violation_of(failure.value)
    assert violation is not None, f"{broken.__name__} failed without a violation: {failure.value!r}"
    return violation.invariant_id


def test_a_free_that_does_not_deduplicate_pages_is_a_double_allocation() -> None:
    assert caught(FreeWithoutDedup) == "no-double-allocation"


def test_a_free_group_that_keeps_the_callers_tensor_breaks_the_group_window() -> None:
    assert caught(FreeGroupKeepsCallersTensor) == "group-window"


def test_upstreams_decode_count_at_page_size_one_is_caught_as_a_miscount_or_an_unguarded_launch() -> None:
    """Counting zero pages shows as slots handed out but never consumed (page-layout) or, on a
    full pool, as the kernel launched on an empty free list instead of a refusal (empty-pool-guard)."""
    assert caught(UpstreamDecodeCount, at_page_size_one) in {"page-layout", "empty-pool-guard"}


def test_a_kernel_that_reorders_pages_disagrees_with_the_loop_oracle() -> None:
    assert caught(KernelReversesPages) == "kernel-agreement"


@pytest.mark.parametrize(
    ("config", "steps"),
    [
        pytest.param(
            {"size": 8, "need_sort": False},
            [("alloc", {"need_size": 3}), ("free", {"handle": 0}), ("merge", {}), ("alloc", {"need_size": 6})],
            id="merge-with-nothing-staged-keeps-the-order",
        ),
        pytest.param(
            {"size": 3, "need_sort": True},
            [("alloc", {"need_size": 1}), ("free", {"handle": 0}), ("alloc", {"need_size": 1}), ("group_begin", {}),
             ("free", {"handle": 1}), ("alloc", {"need_size": 3}), ("group_end", {}), ("alloc", {"need_size": 2})],
            id="a-refusal-inside-a-group-may-merge-the-staging-area",
        ),
    ],
)
def test_the_token_model_follows_every_merge_the_contract_allows(
    config: dict[str, object], steps: list[tuple[str, dict[str, int]]]
) -> None:
    driver = TokenKVDriver(TokenToKVPoolAllocator, {**config, "device": "cpu"})
    for op, args in steps:
        driver.step(op, **args)
    driver.teardown()

"""Draws for the Mamba families: configs, slot counts, group sizes and raw slot numbers.

Pools are tiny (0, 1 and 2 slots are where boundary bugs live).  For the
hybrid pool ``mamba_size`` is drawn around ``size``: smaller, equal and larger,
because a mapping sized by ``mamba_size`` only goes out of bounds when the
request rows outnumber the slots (SGLang #24244), and the all-or-nothing check
only matters on the side that runs short first.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies.configs import Config, pool_sizes


def mamba_slot_configs(*, max_size: int = 10) -> SearchStrategy[Config]:
    """``MambaSlotAllocator(size, device)`` without ``device`` (the machine adds it); mostly room for a
    reservation of a few slots, often the tiny and boundary sizes."""
    sizes = st.one_of(st.integers(min_value=2, max_value=6), pool_sizes(max_size=max_size))
    return st.fixed_dictionaries({"size": sizes})


def hybrid_configs(*, max_size: int = 8) -> SearchStrategy[Config]:
    """``HybridReqToTokenPool(size, max_context_len, mamba_size)`` with ``mamba_size`` within 3 of ``size``."""

    def build(size: int, offset: int, max_context_len: int) -> Config:
        return {"size": size, "max_context_len": max_context_len, "mamba_size": max(0, size + offset)}

    offsets = st.sampled_from([-1, 1, 0, -2, 2, -3, 3])
    return st.builds(build, pool_sizes(max_size=max_size), offsets, st.sampled_from([4, 8]))


def slot_counts(*, misuse: bool, max_count: int = 4) -> SearchStrategy[int]:
    """``alloc(need_size)`` sizes, 0 included (the negative-zero slice, seed 000); -1 only with ``misuse``."""
    return st.integers(min_value=-1 if misuse else 0, max_value=max_count)


def group_sizes(*, misuse: bool, max_reqs: int = 6) -> SearchStrategy[int]:
    """``alloc_group_begin(num_reqs)``: mostly 1..3 (a reservation to hand out in order), also 0 and
    more than the pool (a window with no reservation); -1 only with ``misuse``."""
    any_size = st.integers(min_value=-1 if misuse else 0, max_value=max_reqs)
    return st.one_of(st.integers(min_value=1, max_value=3), any_size)


def raw_slots(*, max_slot: int = 13) -> SearchStrategy[list[int]]:
    """Arbitrary slot numbers for misuse: -1, padding 0, live, free, reserved and past the end."""
    return st.lists(st.integers(min_value=-1, max_value=max_slot), min_size=1, max_size=3)

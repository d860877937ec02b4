"""Pool configurations: sizes including tiny and near-boundary ones."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

Config = dict[str, Any]


def pool_sizes(*, max_size: int = 12) -> SearchStrategy[int]:
    """Tiny pools (0, 1, 2) are where boundary bugs live; a few larger ones keep variety."""
    return st.one_of(st.sampled_from([0, 1, 2, 3]), st.integers(min_value=1, max_value=max_size))


def row_pool_configs(*, decode: bool = False) -> SearchStrategy[Config]:
    """Configs for the request-row pools; the machine adds ``device``."""
    base = st.fixed_dictionaries({"size": pool_sizes(), "max_context_len": st.sampled_from([4, 8, 16])})
    if not decode:
        return base
    return st.builds(lambda c, pre: {**c, "pre_alloc_size": pre}, base, st.integers(min_value=0, max_value=4))

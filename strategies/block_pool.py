"""Draws for the ``block_pool`` family: configs, prompts, block counts and raw block ids.

Pools are tiny (a null block plus 0..9 usable blocks): full pools and reused
blocks are where the ordering and ref-count bugs live.  Prompts are a few
"tokens" from a three-letter alphabet, one token per block, so two requests
share a prefix often and prefix hits happen within a handful of steps.  Block
ids are drawn as small picks that the machine folds onto the pool (``% n``), so
a draw never depends on the pool's size and shrinks toward block 0, the null block.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies.configs import Config

ALPHABET = 3
"""Distinct block contents: small, so prompts collide on their prefixes."""


def block_pool_configs(*, max_blocks: int = 10) -> SearchStrategy[Config]:
    """``BlockPool(num_gpu_blocks, enable_caching)`` without ``device`` (the machine adds it; the driver drops it).

    ``num_gpu_blocks`` counts the null block, so 1 is a pool with nothing to hand
    out; caching is on three draws in four (off, nothing is ever hashed).
    """
    counts = st.one_of(st.integers(min_value=3, max_value=6), st.just(2),
                       st.integers(min_value=1, max_value=max_blocks))
    caching = st.sampled_from([True, True, False, True])
    return st.fixed_dictionaries({"num_gpu_blocks": counts, "enable_caching": caching})


def prompts(*, min_blocks: int = 0, max_blocks: int = 4) -> SearchStrategy[list[int]]:
    """A request's full blocks as tokens ``0..ALPHABET-1``; the driver chains them into block hashes."""
    return st.lists(st.integers(min_value=0, max_value=ALPHABET - 1), min_size=min_blocks, max_size=max_blocks)


def block_counts(*, misuse: bool, max_count: int = 4) -> SearchStrategy[int]:
    """``get_new_blocks(n)`` sizes, 0 included; -1 only with ``misuse``."""
    return st.integers(min_value=-1 if misuse else 0, max_value=max_count)


def block_picks(*, min_size: int = 1, max_size: int = 3) -> SearchStrategy[list[int]]:
    """Picks the machine folds onto block ids (or onto the blocks a rule may name); repeats on purpose."""
    return st.lists(st.integers(min_value=0, max_value=15), min_size=min_size, max_size=max_size)


def raw_block_ids(*, max_id: int = 12) -> SearchStrategy[list[int]]:
    """Arbitrary block ids for misuse: negative, the null block, held, free and past the end."""
    return st.lists(st.integers(min_value=-1, max_value=max_id), min_size=1, max_size=3)

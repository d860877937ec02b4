"""Draws for the ``block_pool`` family: configs, prompts, block counts and raw block ids.

Pools are tiny (a null block plus 0..9 usable blocks): full pools and reused
blocks are where the ordering and ref-count bugs live.  Prompts are a few
"tokens" from a three-letter alphabet, one token per block, so two requests
share a prefix often and prefix hits happen within a handful of steps.  Block
ids are drawn as small picks that the machine folds onto the pool (``% n``), so
a draw never depends on the pool's size and shrinks toward block 0, the null block.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from harness.judge.drivers.block_pool_misuse import CACHE_MISUSE, FOREIGN_BLOCKS
from harness.judge.models.block_pool import chain_hashes as model_hashes
from strategies.table import Config, Move, Step

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


# ---------------------------------------------------------------- the catalogue
Draw = Callable[[Any, random.Random], "Step | None"]
UNSHARED = 7
"""A token outside :data:`ALPHABET`: a prompt of it never hits the prefix cache."""


def _live(driver: Any) -> list[int]:
    return sorted(h for h, r in driver.model.requests.items() if r.live)


def _build_held_blocks(driver: Any, rng: random.Random) -> Step | None:
    """Toward a request holding an uncached block and a cached one: admit it, allocate, cache its first block."""
    model = driver.model
    live = [h for h in _live(driver) if len(model.requests[h].hashes) == 2]
    if not live:
        return ("admit", {"tokens": [UNSHARED, UNSHARED]}) if model.num_free >= 2 else None
    handle = live[-1]
    request = model.requests[handle]
    if len(request.table) < 2:
        return "allocate", {"handle": handle, "num_blocks": 2 - len(request.table)}
    if request.num_cached == 0 and model.enable_caching:
        return "cache", {"handle": handle, "num_full": 1}
    return None


def _fixed(op: str, **args: Any) -> Draw:
    return lambda driver, rng: (op, dict(args))


def _cache_after_slide(driver: Any, rng: random.Random) -> Step | None:
    """Cache a request whose first block a sliding window replaced by the null block (it is skipped)."""
    model = driver.model
    for handle in _live(driver):
        request = model.requests[handle]
        if request.table[:1] == [0] and request.num_cached == 0 and min(len(request.table), len(request.hashes)) > 1:
            return "cache", {"handle": handle, "num_full": len(request.hashes)}
    return None


def _toward_a_slide(driver: Any, rng: random.Random) -> Step | None:
    """Admit a request of two unshared blocks, allocate them, slide its first out."""
    model = driver.model
    fresh = [h for h in _live(driver) if len(model.requests[h].hashes) == 2 and model.requests[h].num_cached == 0]
    if not fresh:
        return ("admit", {"tokens": [UNSHARED, UNSHARED + 1]}) if model.num_free >= 2 else None
    request = model.requests[fresh[-1]]
    if len(request.table) < 2:
        return "allocate", {"handle": fresh[-1], "num_blocks": 2 - len(request.table)}
    return "slide", {"handle": fresh[-1], "num_skipped": 1}


def _cache_misuse(kind: str) -> Draw:
    return lambda driver, rng: ("cache_misuse", {"kind": kind}) if driver.cache_misuse_ready(kind) else None


def _evict_uncached(driver: Any, rng: random.Random) -> Step | None:
    model = driver.model
    plain = [b for b in range(1, model.num_gpu_blocks) if b not in model.hash_of]
    return ("evict", {"block_ids": plain[:2]}) if plain and model.hash_of else None


def _shared_hash(driver: Any, rng: random.Random) -> Step | None:
    """Evict one of two blocks cached under one hash (the other keeps it)."""
    shared = [blocks for blocks in driver.model.cached.values() if len(blocks) > 1]
    return ("evict", {"block_ids": shared[0][:1]}) if shared else None


def _toward_a_shared_hash(driver: Any, rng: random.Random) -> Step | None:
    """Two requests admitted with one unshared prompt before either caches it, allocated, then both cached."""
    model = driver.model
    if not model.enable_caching:
        return None
    key = model_hashes([UNSHARED + 2])
    twins = [h for h in _live(driver) if model.requests[h].hashes == key]
    if len(twins) < 2:
        return ("admit", {"tokens": [UNSHARED + 2]}) if model.num_free >= 2 - len(twins) else None
    empty = [h for h in twins if not model.requests[h].table]
    if empty:
        return "allocate", {"handle": empty[0], "num_blocks": 1}
    uncached = [h for h in twins if model.requests[h].num_cached == 0]
    return ("cache", {"handle": uncached[0], "num_full": 1}) if uncached else None


def _toward_reset(driver: Any, rng: random.Random) -> Step | None:
    """Free every live request, caching one block first if nothing is cached."""
    live, model = _live(driver), driver.model
    if not model.hash_of:
        return _build_held_blocks(driver, rng)
    return ("free", {"handle": live[0]}) if live else None


def _reset_cached(driver: Any, rng: random.Random) -> Step | None:
    model = driver.model
    return ("reset", {}) if model.hash_of and model.num_free == model.usable else None


def _touch_free_uncached(driver: Any, rng: random.Random) -> Step | None:
    model = driver.model
    idle = [b for b in range(1, model.num_gpu_blocks) if model.is_free(b) and b not in model.hash_of]
    return ("touch", {"block_ids": idle[:1]}) if idle else None


def block_pool_catalogue() -> tuple[Move, ...]:
    """Every kind of misuse ``BlockPool`` must reject beyond double frees, and the null-block caching corner."""
    constructors: tuple[Config, ...] = ({"num_gpu_blocks": 0}, {"num_gpu_blocks": 2.5}, {"num_gpu_blocks": True})
    return (
        Move("cache after a slide", 0.2, _cache_after_slide, setup=_toward_a_slide),
        Move("evict blocks without a hash", 0.1, _evict_uncached, setup=_build_held_blocks),
        Move("evict one of two blocks under one hash", 0.1, _shared_hash, setup=_toward_a_shared_hash),
        Move("reset with cached free blocks", 0.1, _reset_cached, setup=_toward_reset),
        *(Move(f"cache_full_blocks with {kind}", 0.05, _cache_misuse(kind), misuse=True,
               setup=_build_held_blocks) for kind in CACHE_MISUSE),
        *(Move(f"{call} of {kind}", 0.03, _fixed("foreign_block", call=call, kind=kind), misuse=True)
          for call in ("touch", "free_blocks", "cache_full_blocks") for kind in FOREIGN_BLOCKS),
        Move("evict of a float id", 0.03, _fixed("evict_non_int", block_id=1.5), misuse=True),
        Move("touch of a free uncached block", 0.03, _touch_free_uncached, misuse=True),
        *(Move(f"malformed constructor {c}", 0.02, _fixed("construct", overrides=c), misuse=True) for c in constructors),
    )

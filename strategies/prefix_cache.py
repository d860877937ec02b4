"""Prefix-cache inputs: cache configurations and prompts that share prefixes on purpose.

Prompts are cut from a few fixed stems over a three-token alphabet and given a
short random tail, so two draws usually share a prefix and diverge somewhere:
at a page boundary, inside a page (a split falls on the boundary below) or not
at all (a hit).  Lengths rarely land on a page boundary, so partial pages are
the common case.  Pools are a handful of pages, so eviction and refusals happen
within a few requests.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from harness.judge.drivers.prefix_cache_misuse import INSERT_MISUSE, RELEASE_MISUSE
from strategies.table import Move

Config = dict[str, Any]

ALPHABET = (0, 1, 2)
MAX_PROMPT = 12
STEMS: tuple[tuple[int, ...], ...] = (
    (0,) * MAX_PROMPT,
    (0, 1) * (MAX_PROMPT // 2),
    (0, 0, 1, 1, 2, 2) * (MAX_PROMPT // 6),
    (1, 2, 0) * (MAX_PROMPT // 3),
)
"""Prefixes every prompt starts from: the first shares with the second and third, the fourth with none."""

PAGE_SIZES = (1, 2, 4)
POLICIES = ("lru", "mru", "fifo", "filo")


def prefix_cache_configs(*, page_size: int | None = None) -> SearchStrategy[Config]:
    """Configs for ``pools.prefix_cache.build_prefix_cache``; the machine adds ``device``.

    ``size`` is 8 to 48 tokens rounded up to whole pages: a few prompts fill
    it, so eviction and refusals come early while prompts still share what they
    cached.  ``page_size`` pins the page size.
    """
    sizes = st.sampled_from(PAGE_SIZES) if page_size is None else st.just(page_size)

    def for_page_size(ps: int) -> SearchStrategy[Config]:
        return st.fixed_dictionaries({
            "size": st.integers(min_value=8, max_value=48).map(lambda tokens: -(-tokens // ps) * ps),
            "page_size": st.just(ps),
            "eviction_policy": st.sampled_from(POLICIES),
        })

    return sizes.flatmap(for_page_size)


TAILS: tuple[tuple[int, ...], ...] = ((), (2,), (1,), (0,), (2, 1), (1, 0, 2), (2, 2, 0, 1))


def _prompt_table() -> tuple[tuple[int, ...], ...]:
    """Every stem cut at every length with each tail, shortest first (hypothesis shrinks toward the front)."""
    cut = {(stem[:n] + tail)[:MAX_PROMPT] for stem in STEMS for n in range(MAX_PROMPT + 1) for tail in TAILS}
    return tuple(sorted((p for p in cut if p), key=lambda p: (len(p), p)))


PROMPTS = _prompt_table()
"""Prompts of 1 to 12 tokens: 225 of them, each one draw (a composite strategy made shrinking ten times slower)."""
PROMPTS_OR_EMPTY = ((), *PROMPTS)
GENERATED: tuple[tuple[int, ...], ...] = ((0,), (1,), (2, 0), (0, 1, 2), (1, 1, 1, 1), ())


def tokens() -> SearchStrategy[list[int]]:
    """Tokens a running request generates in one step (none to four)."""
    return st.sampled_from(GENERATED).map(list)


def prompts(*, empty: bool = False) -> SearchStrategy[list[int]]:
    """A stem cut anywhere, then a short tail of free tokens: shared prefixes, divergence anywhere.
    ``empty`` lets the empty prompt in (a lock or match of nothing is the root)."""
    return st.sampled_from(PROMPTS_OR_EMPTY if empty else PROMPTS).map(list)


HANDLE_ACTIONS = ("extend", "checkpoint", "finish", "abort")
"""What a step does to a live request: generate tokens, cache what it has, release it cached or not."""


def picks() -> SearchStrategy[int]:
    """Which holder a step names: an index into the eligible handles (taken modulo their count)."""
    return st.integers(min_value=0, max_value=15)


def evict_counts() -> SearchStrategy[int]:
    """Tokens to evict: a leaf or two most often, sometimes everything, rarely -1 (misuse; skipped when
    misuse is off)."""
    return st.sampled_from((1, 2, 4, 0, 3, 8, 64, -1))


# ---------------------------------------------------------------- the catalogue
def _fixed(op: str, **args: Any) -> Any:
    return lambda driver, rng: (op, dict(args))


def _live_requests(driver: Any) -> list[int]:
    return driver.handles(request=True)


def _release_misuse(kind: str) -> Any:
    def draw(driver: Any, rng: random.Random) -> Any:
        ready = [h for h in _live_requests(driver) if driver.release_args(h, kind) is not None]
        return ("release_malformed", {"handle": rng.choice(ready), "kind": kind}) if ready else None
    return draw


def _toward_a_release(driver: Any, rng: random.Random) -> Any:
    """A cached prompt (its nodes unlocked), then requests sharing part of it, each with an uncached tail."""
    live = _live_requests(driver)
    if not driver.model.held_pages():
        return ("insert", {"prompt": list(STEMS[1][:8])}) if driver.model.free else None
    if len(live) < 2 and len(driver.model.free) * driver.ps >= 8:
        return "request", {"prompt": [*STEMS[1][: 3 + 2 * len(live)], 2]}
    return None


def _node_of_a_holder(driver: Any, rng: random.Random) -> Any:
    live = driver.handles()
    return ("node_lookup", {"handle": rng.choice(live)}) if live else None


def _rematch(driver: Any, rng: random.Random) -> Any:
    prompt = list(STEMS[2][:6])
    return ("rematch", {"prompt": prompt, "times": 70}) if driver.model.match(tuple(prompt)).prefix_len else None


def prefix_cache_catalogue() -> tuple[Any, ...]:
    """Every kind of misuse ``RadixCache`` must reject beyond the machine's rules, and its rarer corners."""
    constructors: tuple[Config, ...] = ({"eviction_policy": "most-recent"}, {"page_size": 0}, {"size": -8})
    return (
        Move("node of a holder", 0.1, _node_of_a_holder, setup=_fixed("lock", prompt=[0, 0])),
        Move("one prefix matched many times", 0.05, _rematch, setup=_fixed("insert", prompt=list(STEMS[2][:6]))),
        Move("node of an id never handed out", 0.03, _fixed("node_lookup", handle=None), misuse=True),
        *(Move(f"insert with {kind}", 0.03, _fixed("insert_malformed", kind=kind), misuse=True) for kind in INSERT_MISUSE),
        *(Move(f"release_request with {kind}", 0.03, _release_misuse(kind), misuse=True, setup=_toward_a_release)
          for kind in RELEASE_MISUSE),
        Move("a cache of page size 0 over the allocator", 0.02, _fixed("cache_over", page_size=0, eviction_policy="lru"),
             misuse=True),
        Move("a cache of another page size over the allocator", 0.02,
             lambda driver, rng: ("cache_over", {"page_size": driver.ps + 1, "eviction_policy": "lru"}) if driver.ps > 1
             else None, misuse=True),
        Move("a cache with an unknown policy over the allocator", 0.02,
             lambda driver, rng: ("cache_over", {"page_size": driver.ps, "eviction_policy": "nope"}), misuse=True),
        *(Move(f"malformed constructor {c}", 0.02, _fixed("construct", overrides=c), misuse=True) for c in constructors),
    )

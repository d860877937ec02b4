"""The prefix-cache driver's operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`).

:class:`~poolfuzz.harness.kits.prefix_cache.driver.PrefixCacheDriver` implements exactly these; its moves, contracts,
limits and realistic floors name them through :class:`PrefixCacheOps`.
"""

from __future__ import annotations

from poolfuzz.harness.judge.ops import Operations, op


class PrefixCacheOps(Operations):
    """``prefix_cache``: requests matched, extended, checkpointed, finished and settled; prefixes inserted,
    locked, unlocked and evicted; and the misuse of each."""

    cache_over = op("page_size", "eviction_policy")
    checkpoint = op("handle")
    evict = op("num_tokens")
    extend = op("handle", "tokens")
    finish = op("handle", "cache")
    insert = op("prompt")
    insert_malformed = op("kind")
    insert_mismatched = op("prompt", "extra")
    lock = op("prompt")
    match = op("prompt")
    node_lookup = op("handle")
    recache = op("prompt")
    release_malformed = op("handle", "kind")
    rematch = op("prompt", "times")
    request = op("prompt")
    reset = op()
    settle = op("handle", "prompt_len", "release", "cache")
    unlock = op("handle")

"""The ``block_pool`` bench walk: a seeded random walk over the block-pool driver (no hypothesis).

Most steps are vLLM's request lifecycle (admit with prefix lookup, allocate
what fits, cache full blocks, free in reverse); a few slide a window, share
blocks, evict or reset.  Tokens come from a three-letter alphabet so prefixes
repeat and hits, reuses and LRU eviction all happen.
"""

from __future__ import annotations

import random
from typing import Any

Step = tuple[str, dict[str, Any]]


def block_pool_workload(driver: Any, rng: random.Random) -> Step:
    model = driver.model
    live = sorted(h for h, request in model.requests.items() if request.live)
    roll = rng.random()
    if roll < 0.25 or not live:
        return "admit", {"tokens": [rng.randrange(3) for _ in range(rng.randint(1, 4))]}
    handle = rng.choice(live)
    request = model.requests[handle]
    if roll < 0.5:
        need = max(0, len(request.hashes) - len(request.table)) or rng.randint(0, 2)
        return "allocate", {"handle": handle, "num_blocks": min(need, model.num_free)}
    if roll < 0.65:
        return "cache", {"handle": handle, "num_full": len(request.table)}
    if roll < 0.85:
        return "free", {"handle": handle}
    if roll < 0.9:
        return "slide", {"handle": handle, "num_skipped": rng.randint(1, 3)}
    if roll < 0.95:
        touchable = model.touchable()
        return "touch", {"block_ids": [rng.choice(touchable) for _ in range(rng.randint(1, 2))]}
    if roll < 0.99:
        return "evict", {"block_ids": request.table[rng.randint(0, 2):] or [0]}
    return "reset", {}

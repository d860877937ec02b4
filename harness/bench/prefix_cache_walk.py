"""The ``prefix_cache`` bench walk: a seeded scheduler-like mix of requests, decodes, checkpoints and releases.

Prompts come from the machine's stems (``strategies.prefix_cache``) so they share
prefixes; the choice of step reads only the driver's handles, never the pool.
"""

from __future__ import annotations

import random
from typing import Any

from strategies.prefix_cache import ALPHABET, MAX_PROMPT, STEMS

Step = tuple[str, dict[str, Any]]


def _prompt(rng: random.Random) -> list[int]:
    stem = rng.choice(STEMS)[: rng.randint(0, MAX_PROMPT)]
    return (list(stem) + [rng.choice(ALPHABET) for _ in range(rng.randint(0, 4))])[:MAX_PROMPT] or [0]


def prefix_cache_workload(driver: Any, rng: random.Random) -> Step:
    requests = driver.handles(request=True)
    locks = driver.handles(request=False)
    roll = rng.random()
    if roll < 0.3 or not requests:
        return "request", {"prompt": _prompt(rng)}
    if roll < 0.5:
        return "extend", {"handle": rng.choice(requests), "tokens": [rng.choice(ALPHABET) for _ in range(rng.randint(1, 3))]}
    if roll < 0.6:
        return "checkpoint", {"handle": rng.choice(requests)}
    if roll < 0.8:
        return "finish", {"handle": rng.choice(requests), "cache": rng.random() < 0.8}
    if roll < 0.85:
        return "lock", {"prompt": _prompt(rng)}
    if roll < 0.9 and locks:
        return "unlock", {"handle": rng.choice(locks)}
    if roll < 0.95:
        return "match", {"prompt": _prompt(rng)}
    if roll < 0.99:
        return "evict", {"num_tokens": rng.randint(1, 8)}
    return "reset", {}

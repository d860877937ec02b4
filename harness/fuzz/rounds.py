"""A worker's rounds: the hypothesis seed each one gets and how many examples it runs.

A round is one ``run_machine`` call on one target.  Its seed derives from ``--seed``, the
worker, the worker's restart and the round number, so a run is reproducible and no two
rounds repeat each other's draws; its size adapts so a round lasts about
``--round-seconds``, the interval at which a worker looks at its queue again.
"""

from __future__ import annotations

import hashlib

FIRST_ROUND_EXAMPLES = 10
"""A target's first round: small, so the first progress arrives quickly; later rounds adapt."""
MAX_ROUND_EXAMPLES = 5_000

__all__ = ["FIRST_ROUND_EXAMPLES", "MAX_ROUND_EXAMPLES", "next_round_size", "round_seed"]


def round_seed(seed: int, worker: int, generation: int, round_no: int) -> int:
    """The hypothesis seed of one round: distinct per worker, restart and round, reproducible from ``--seed``."""
    digest = hashlib.sha256(f"poolfuzz:{seed}:{worker}:{generation}:{round_no}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def next_round_size(examples: int, seconds: float, target_seconds: float) -> int:
    """``max_examples`` for the next round, so it lasts about ``target_seconds``."""
    if examples <= 0 or seconds <= 0:
        return FIRST_ROUND_EXAMPLES
    rate = examples / seconds
    return max(5, min(MAX_ROUND_EXAMPLES, int(rate * target_seconds)))

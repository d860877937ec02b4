"""The user request both engine kits draw (``engine``, ``vllm_engine``; a module of no kit): a prompt of one of
three shared stems, so prompts share prefixes and the prefix cache splits and hits, then tokens of its own, and a
cap on the tokens it may generate."""

from __future__ import annotations

from poolfuzz.harness.judge.trace import Args
from poolfuzz.strategies.choosers import Chooser


def arrival(choose: Chooser, *, length: int, tail: int, max_new: int) -> Args:
    """An ``arrive`` step's arguments, drawn in this order: a stem (0-2), 1 to ``length`` tokens of it, 0 to ``tail``
    tokens of its own and 1 to ``max_new`` new tokens."""
    return {
        "stem": choose.randrange(0, 3),
        "length": choose.randint(1, length),
        "tail": choose.randint(0, tail),
        "max_new": choose.randint(1, max_new),
    }

"""Argument types every command line of poolfuzz shares (the CLI, its subcommands, the pytest plugin).

A leaf module, standard library only: the pytest plugin imports it while registering its
options, before anything heavy (torch, hypothesis) may be imported.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

Number = TypeVar("Number", int, float)


def positive(kind: Callable[[str], Number]) -> Callable[[str], Number]:
    """An argparse ``type`` accepting a number of ``kind`` above zero, with a plain-words error otherwise."""
    what = "a positive integer" if kind is int else "a positive number"

    def parse(value: str) -> Number:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, not {value!r}") from None
        if number <= 0:
            raise argparse.ArgumentTypeError(f"expected {what}, not {value!r}")
        return number

    return parse

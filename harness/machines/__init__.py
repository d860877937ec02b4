"""Hypothesis state machines, one per pool family, all thin layers over drivers."""

from harness.machines.base import PoolMachine, make_machine

__all__ = ["PoolMachine", "make_machine"]

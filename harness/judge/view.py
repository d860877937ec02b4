"""Views: the typed, read-only face a driver shows to the code that steers it.

Two kinds of code decide what the next step may be without being the driver: a family's
moves (:mod:`poolfuzz.strategies.table`, each draw reads the table's view) and an upstream target's
caller contract (:mod:`poolfuzz.harness.judge.contract`, each predicate reads the contract's view).
Both read the driver only through a :class:`DriverView` subclass that names, with types,
what they may see, so a driver's internals can change without its moves or contracts
following them, and mypy checks each read against the view class.
"""

from __future__ import annotations

from typing import Any


class DriverView:
    """The base of a view: it holds the driver it reads (``_driver``), and nothing else.

    Each read goes to the driver (or its model) when a draw asks, never to a copy, so a view built
    once per pool answers for the state the last step left.  ``__slots__`` keeps it that one attribute;
    a subclass declares ``__slots__ = ()`` (or its own extra slots) to stay so, and may narrow the
    driver's type with an annotation (``_driver: SWAKVDriver``).
    """

    __slots__ = ("_driver",)

    def __init__(self, driver: Any) -> None:
        self._driver: Any = driver

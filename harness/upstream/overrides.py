"""Values that hold for the length of a block and are put back after it: the server environment and the published
arguments upstream rereads on every call, which other loops in the process may set otherwise."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TypeVar

V = TypeVar("V")


@contextlib.contextmanager
def overridden(mapping: MutableMapping[str, V], values: Mapping[str, V]) -> Iterator[None]:
    """``values`` set in ``mapping`` (``os.environ``, a namespace's ``__dict__``) for the block; after it, each of
    their keys holds what it held before, and a key it did not hold is removed again."""
    saved = {name: mapping[name] for name in values if name in mapping}
    mapping.update(values)
    try:
        yield
    finally:
        for name in values:
            if name in saved:
                mapping[name] = saved[name]
            else:
                mapping.pop(name, None)

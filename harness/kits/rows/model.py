"""Shadow model of a request-row pool (``ReqToTokenPool``, ``DecodeReqToTokenPool``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RowModel:
    """Rows ``1..num_rows``: which are free, who owns each live one, and expected generations.

    ``owner`` maps a live row to the handle of the request holding it, or to
    ``None`` for a row taken with ``alloc_rows``.  ``generation[row]`` is how
    many fresh bindings the row has seen: it only ever rises.
    """

    num_rows: int
    free: set[int] = field(default_factory=set)
    owner: dict[int, int | None] = field(default_factory=dict)
    generation: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.generation = [0] * (self.num_rows + 1)
        self.clear()

    def clear(self) -> None:
        self.free = set(range(1, self.num_rows + 1))
        self.owner = {}

    def in_range(self, row: int) -> bool:
        return 1 <= row <= self.num_rows

    def bind(self, row: int, handle: int | None) -> None:
        assert row in self.free, f"model: binding row {row}, which is not free"
        self.free.remove(row)
        self.owner[row] = handle
        self.generation[row] += 1

    def release(self, row: int) -> int | None:
        """Free a live row; returns the handle that held it."""
        self.free.add(row)
        return self.owner.pop(row)

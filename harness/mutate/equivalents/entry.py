"""One equivalent mutant, named by what it edits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Equivalent:
    """The mutant of ``module``'s ``function`` by ``operator`` at column ``col`` of the line reading ``source``
    (stripped, as ``mutate`` prints it after ``|``), described ``description``, and why it is equivalent."""

    module: str
    function: str
    operator: str
    source: str
    col: int
    description: str
    why: str

    @property
    def key(self) -> tuple[str, str, str, str, int, str]:
        return self.module, self.function, self.operator, self.source, self.col, self.description

"""From the baseline to jobs: which targets each mutant runs, in what order, under what time limit.

The baseline is one traced, unmutated run of every target.  It must be clean
(a failing baseline means the harness or the pools are broken, and every
mutant would look killed), and it records which lines each target executes.
A mutant runs only the targets that execute one of its lines, the one that
executes them most often per second first, and stops at the first failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poolfuzz.harness.mutate.mutants import Mutant
from poolfuzz.harness.mutate.targets import LineHits

AUTO_FLOOR = 10.0
AUTO_FACTOR = 3.0
"""Automatic time limit: ``AUTO_FLOOR + AUTO_FACTOR x`` the traced baseline seconds of the targets a mutant runs.

Traced runs are already two to three times slower than plain ones, so a mutant
is stopped only when it runs several times longer than the unmutated machines.
"""


class BaselineFailed(RuntimeError):
    """The unmutated pools failed a machine: nothing the mutants do could be judged."""


@dataclass
class Baseline:
    """Traced seconds and executed lines of each target, filled in as the workers reply."""

    order: list[str]
    seconds: dict[str, float] = field(default_factory=dict)
    hits: dict[str, LineHits] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def record(self, target: str, seconds: float, hits: LineHits, error: str | None) -> None:
        if error is not None:
            self.failures[target] = error
            return
        self.seconds[target] = seconds
        self.hits[target] = hits

    def check(self) -> None:
        if self.failures:
            details = "\n".join(f"  {target}: {error}" for target, error in self.failures.items())
            raise BaselineFailed(
                f"the unmutated pools fail {len(self.failures)} machine(s), so no mutant can be judged; fix these first:\n{details}"
            )

    def reaching(self, mutant: Mutant) -> list[str]:
        """Targets executing a line of ``mutant``, most hits per traced second first (ties: registry order)."""
        span = range(mutant.line, mutant.end_line + 1)
        ranked: list[tuple[float, int, str]] = []
        for position, target in enumerate(self.order):
            lines = self.hits.get(target, {}).get(mutant.path, {})
            count = sum(lines.get(line, 0) for line in span)
            if count:
                ranked.append((-count / max(self.seconds[target], 1e-3), position, target))
        return [target for _, _, target in sorted(ranked)]

    def limit(self, targets: list[str], fixed: float | None) -> float:
        """``fixed`` if given, else the automatic limit for running ``targets``."""
        if fixed is not None:
            return fixed
        return AUTO_FLOOR + AUTO_FACTOR * sum(self.seconds[target] for target in targets)

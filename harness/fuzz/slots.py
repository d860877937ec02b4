"""One worker position of a fuzz run, as the coordinator (:mod:`poolfuzz.harness.fuzz.session`) tracks it and the
report (:mod:`poolfuzz.harness.fuzz.run_report`) reads it once its process has ended."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poolfuzz.harness.fuzz.protocol import Hello, RoundStarted, worker_name

__all__ = ["Slot"]


@dataclass
class Slot:
    """One worker position; a crashed worker is replaced by the next generation in the same slot."""

    index: int
    generation: int
    process: Any
    conn: Any
    log: Path
    target: str | None = None
    round: RoundStarted | None = None
    greeted: bool = False
    said_bye: bool = False
    asked_to_stop: bool = False
    rounds: int = 0
    info: Hello | None = None

    @property
    def name(self) -> str:
        return worker_name(self.index, self.generation)

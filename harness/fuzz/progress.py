"""Live progress of a fuzz run: a refreshing table on a terminal, periodic plain lines elsewhere.

No dependencies: the table is redrawn with two ANSI sequences (cursor up,
erase to end of screen).  Announcements (a failure, a crash) are printed above
the table and stay in the scrollback.  Rates in the table are per target while
it was being fuzzed; the total is throughput over wall time.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from typing import TextIO

from poolfuzz.harness.fuzz.report import TargetStats

UP = "\x1b[{n}F"
ERASE_DOWN = "\x1b[J"


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def compact(number: float) -> str:
    """``1234567`` as ``1.2M``: plain lines must stay short."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(number) >= scale:
            return f"{number / scale:.1f}{suffix}"
    return f"{number:.0f}"


class Progress:
    """Renders :class:`TargetStats` every ``every`` seconds to ``stream``."""

    def __init__(self, stream: TextIO, *, live: bool, every: float, started: float, deadline: float) -> None:
        self.stream = stream
        self.live = live
        self.every = every
        self.started = started
        """When the command started: the elapsed clock counts from here and never goes back."""
        self.fuzz_started: float | None = None
        """When the workers were all ready and fuzzing began (``None`` while they start)."""
        self.budget = deadline - started
        self.deadline = deadline
        self.last = 0.0
        self.drawn = 0
        self.status = "starting workers"

    def fuzzing_from(self, when: float, deadline: float) -> None:
        """Start-up is over: the budget runs from ``when`` to ``deadline``."""
        self.fuzz_started, self.deadline, self.status = when, deadline, "fuzzing"

    def note(self, line: str) -> None:
        """An announcement that must stay visible (failures, crashes, stopping)."""
        self._erase()
        self.stream.write(line + "\n")
        self.stream.flush()

    def tick(self, stats: Iterable[TargetStats], *, now: float | None = None, force: bool = False) -> None:
        now = time.time() if now is None else now
        if not force and now - self.last < self.every:
            return
        self.last = now
        rows = list(stats)
        if self.live:
            self._erase()
            # A wrapped line would break the cursor-up count of the next redraw.
            width = max(20, shutil.get_terminal_size().columns - 1)
            lines = [line[:width] for line in self.table(rows, now)]
            self.stream.write("\n".join(lines) + "\n")
            self.drawn = len(lines)
        else:
            self.stream.write(self.line(rows, now) + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Leave the last table in place (live) so the scrollback keeps it."""
        self.drawn = 0

    def _erase(self) -> None:
        if self.live and self.drawn:
            self.stream.write(UP.format(n=self.drawn) + ERASE_DOWN)
            self.drawn = 0

    # ------------------------------------------------------------- renderings
    def _times(self, now: float) -> tuple[str, float, float]:
        """The status with the start-up phase's length once it is over, seconds fuzzed, seconds left.

        The elapsed clock (``now - started``) counts from the command's start and never goes back;
        the budget counts from the end of start-up, which the status shows as its own phase.
        """
        if self.fuzz_started is None:
            return self.status, 0.0, self.budget
        status = f"{self.status}, start-up {self.fuzz_started - self.started:.1f} s"
        return status, now - self.fuzz_started, max(0.0, self.deadline - now)

    def line(self, rows: list[TargetStats], now: float) -> str:
        status, fuzzed, left = self._times(now)
        steps = sum(r.steps for r in rows)
        examples = sum(r.examples for r in rows)
        failures = sum(len(r.failing) + len(r.crashes) for r in rows)
        parts = ", ".join(f"{r.key} {compact(r.steps)}" + ("!" if r.failing or r.crashes else "~" if r.failures else "") for r in rows)
        rate = steps / fuzzed if fuzzed > 0 else 0.0
        return (
            f"[poolfuzz {clock(now - self.started)} elapsed, {clock(left)} left, {status}] steps {compact(steps)} "
            f"({compact(rate)}/s) examples {compact(examples)} failures {failures} | {parts}"
        )

    def table(self, rows: list[TargetStats], now: float) -> list[str]:
        status, fuzzed, left = self._times(now)
        width = max([len("target")] + [len(r.key) for r in rows])
        header = f"{'target':<{width}}  {'examples':>9}  {'steps':>10}  {'steps/s':>8}  {'events':>6}  {'failures':>8}"
        lines = [f"poolfuzz  {status}  elapsed {clock(now - self.started)}  left {clock(left)}", header]
        for r in rows:
            failed = len(r.failing) + len(r.crashes)
            lines.append(
                f"{r.key:<{width}}  {r.examples:>9,}  {r.steps:>10,}  {r.steps_per_second:>8,.0f}  {len(r.events):>6}  {failed:>8}"
            )
        steps = sum(r.steps for r in rows)
        rate = steps / fuzzed if fuzzed > 0 else 0.0
        total_failed = sum(len(r.failing) + len(r.crashes) for r in rows)
        lines.append(f"{'total':<{width}}  {sum(r.examples for r in rows):>9,}  {steps:>10,}  {rate:>8,.0f}  {'':>6}  {total_failed:>8}")
        return lines

"""The measuring kit every benchmark section uses: sections, budgets, interleaved best-of-N timing, output.

Every ratio compares two things timed in the same run, interleaved round by
round and reduced with best-of-N, so a busy machine slows both sides alike.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from poolfuzz.pools.page_alloc import triton_available


@dataclass
class Section:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Budget:
    seconds: float  # per timed comparison
    rounds: int
    smoke: bool = False
    """Every section once at the smallest sizes: proves the bench runs end to end; its numbers mean nothing."""

    @staticmethod
    def of(quick: bool, smoke: bool = False) -> Budget:
        if smoke:
            return Budget(0.01, 1, smoke=True)
        return Budget(0.25, 5) if quick else Budget(1.5, 9)


# ------------------------------------------------------------------ timing
def _calibrate(fn: Callable[[], Any], target: float) -> int:
    number = 1
    while True:
        start = perf_counter()
        for _ in range(number):
            fn()
        if perf_counter() - start >= target or number >= 1 << 20:
            return number
        number *= 4


def compare(fns: dict[str, Callable[[], Any]], budget: Budget) -> dict[str, float]:
    """Best seconds per call of each function, timed in interleaved rounds."""
    per_round = budget.seconds / max(1, budget.rounds) / max(1, len(fns))
    numbers = {name: _calibrate(fn, per_round / 4) for name, fn in fns.items()}
    best = {name: float("inf") for name in fns}
    for _ in range(budget.rounds):
        for name, fn in fns.items():
            start = perf_counter()
            for _ in range(numbers[name]):
                fn()
            best[name] = min(best[name], (perf_counter() - start) / numbers[name])
    return best


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}x"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


# ------------------------------------------------------------------- output
def machine_description() -> list[str]:
    model = "unknown CPU"
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = found.group(1).strip() if found else model
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import hypothesis

    lines = [
        f"- CPU: {model}, {os.cpu_count()} logical cores ({usable} usable); CPU timings use one torch thread",
        f"- Python {platform.python_version()}, torch {torch.__version__}, hypothesis {hypothesis.__version__}",
    ]
    if triton_available():
        import triton

        lines[-1] += f", triton {triton.__version__}"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    lines.append(f"- GPU: {gpu}")
    if hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
        lines.append(
            f"- Load average when the run started: {load:.2f} (other processes share these cores; "
            "ratios are interleaved best-of-N, absolute times inflate with load)"
        )
    lines.append(f"- Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return lines


def to_text(section: Section) -> str:
    widths = [max(len(h), *(len(r[i]) for r in section.rows)) if section.rows else len(h) for i, h in enumerate(section.header)]
    lines = [section.title, "  ".join(h.ljust(w) for h, w in zip(section.header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in section.rows]
    lines += [f"  * {note}" for note in section.notes]
    return "\n".join(lines)


def to_markdown(section: Section) -> str:
    lines = [f"## {section.title}", ""]
    if section.rows:
        lines += ["| " + " | ".join(section.header) + " |", "|" + "---|" * len(section.header)]
        lines += ["| " + " | ".join(row) + " |" for row in section.rows]
        lines.append("")
    lines += [f"- {note}" for note in section.notes]
    return "\n".join(lines) + "\n"

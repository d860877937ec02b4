"""Replay: walk a trace's steps through the family driver, without hypothesis.

The driver is the same object the fuzz machines use, so a replay runs exactly
the checks the fuzz run ran: the per-call invariants after every step, the full
audit every ``audit_period`` steps (the schedule the trace recorded) and at teardown.

Which implementation a replay judges, and what it expects of it:

* by default the trace's ``implementation`` (``""`` meaning the family default);
  ``target=`` (``--target FAMILY=module:attr``) substitutes another;
* ``expect`` ``{"outcome": "violation", ...}`` applies to the implementation it
  names (``expect.implementation``, else the trace's ``implementation``); any
  other implementation is expected to **pass** the trace.  A corpus trace is a
  regression test every correct pool must pass; the broken variant it was
  found on is the one place where it must fail, with the recorded invariant id.

A trace recorded on CUDA replays on CPU and vice versa: ``device=`` overrides
the recorded device, and a CUDA trace on a machine without CUDA falls back to CPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.judge.invariants import InvariantViolation
from harness.judge.families import UnknownTargetError, family, load_factory, parse_overrides, resolve, validates_input
from harness.judge.trace import Trace
from harness.traces.corpus import DEFAULT_CORPUS
from harness.traces.schema import TraceError, load_trace



@dataclass(frozen=True)
class ReplayResult:
    """What one replay saw.

    ``outcome`` is ``"pass"``, ``"violation"`` (an invariant failed),
    ``"error"`` (anything else raised: a trace that does not fit the driver, a
    pool that cannot be built) or ``"unavailable"`` (the implementation cannot
    be imported here, e.g. upstream SGLang is not installed: nothing was run).  ``step`` is the 1-based
    number of the trace step where it happened; ``None`` means at teardown for a
    violation, and before the first step for an error.
    """

    outcome: str
    implementation: str
    device: str
    steps: int
    invariant: str | None = None
    step: int | None = None
    message: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    recorded: tuple[dict[str, Any], ...] = field(default=(), repr=False, compare=False)
    """The steps the driver ran, without those it skipped as not applicable (the shrinker keeps these)."""

    @property
    def where(self) -> str:
        if self.step is not None:
            return f"at step {self.step}"
        return "at teardown" if self.outcome == "violation" else "before the first step"

    def describe(self) -> str:
        """``[conservation] at step 7: free rows differ from the model (missing=[3])`` and the like."""
        if self.outcome == "pass":
            return f"pass ({_steps(self.steps)})"
        if self.outcome == "unavailable":
            return f"{self.implementation} is unavailable here: {self.message}"
        head = f"[{self.invariant}]" if self.outcome == "violation" else "error"
        numbers = ", ".join(f"{k}={_short(v)}" for k, v in self.numbers.items())
        return f"{head} {self.where}: {self.message}" + (f" ({numbers})" if numbers else "")


def _steps(count: int) -> str:
    return f"{count} step{'' if count == 1 else 's'}"


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -------------------------------------------------------------------- replay
def replay_device(trace: Trace, device: str | None = None) -> str:
    """``device`` if given; else the recorded one, or CPU when it was CUDA and none is here."""
    if device:
        return device
    recorded = str(trace.config.get("device", "cpu"))
    if recorded.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return "cpu"
    return recorded


def implementation_of(trace: Trace, target: str | None = None) -> str:
    """The ``module:attr`` spec a replay of ``trace`` judges."""
    return target or trace.implementation or family(trace.family).default


def replay_trace(
    trace: Trace,
    *,
    target: str | None = None,
    device: str | None = None,
    factory: Callable[..., Any] | None = None,
    check_misuse: bool | None = None,
) -> ReplayResult:
    """Run every step of ``trace`` and the teardown audit; never raises for what the trace or pool does.

    ``factory`` (with ``target`` as its label) replays against a callable that
    has no importable spec, as the runner does with a machine's own factory.
    """
    device = replay_device(trace, device)
    spec = target or trace.implementation

    def result(outcome: str, steps: int, **kw: Any) -> ReplayResult:
        return ReplayResult(outcome, spec, device, steps, **kw)

    try:
        spec = implementation_of(trace, target)
        driver_cls = resolve(family(trace.family).driver)
    except UnknownTargetError as exc:
        return result("error", 0, message=f"cannot load the family's driver: {exc}")
    try:
        factory = factory if factory is not None else load_factory(spec)
    except UnknownTargetError as exc:
        return result("unavailable", 0, message=str(exc))
    misuse = validates_input(factory) if check_misuse is None else check_misuse
    try:
        driver = driver_cls(factory, {**trace.config, "device": device}, implementation=spec, check_misuse=misuse,
                            audit_period=trace.audit_period)
    except Exception as exc:  # noqa: BLE001 - a pool that cannot be built is reported, not raised
        return result("error", 0, message=f"building the pool: {type(exc).__name__}: {exc}")

    def recorded() -> tuple[dict[str, Any], ...]:
        return tuple(driver.trace.steps)

    for number, step in enumerate(trace.steps, 1):
        try:
            driver.step(step["op"], **step["args"])
        except InvariantViolation as violation:
            return result("violation", number, invariant=violation.invariant_id, step=number,
                          message=violation.detail, numbers=dict(violation.numbers), recorded=recorded())
        except Exception as exc:  # noqa: BLE001 - e.g. a hand-edited handle the driver never issued
            return result("error", number, step=number, message=f"{step['op']}: {type(exc).__name__}: {exc}",
                          recorded=recorded())
    try:
        driver.teardown()
    except InvariantViolation as violation:
        return result("violation", len(trace.steps), invariant=violation.invariant_id, message=violation.detail,
                      numbers=dict(violation.numbers), recorded=recorded())
    except Exception as exc:  # noqa: BLE001
        return result("error", len(trace.steps), message=f"teardown audit: {type(exc).__name__}: {exc}",
                      recorded=recorded())
    return result("pass", len(trace.steps), recorded=recorded())


# ------------------------------------------------------------- expectations
def _same_implementation(trace: Trace, a: str, b: str) -> bool:
    try:
        default = family(trace.family).default
    except UnknownTargetError:
        default = ""
    return (a or default).strip() == (b or default).strip()


def expected_outcome(trace: Trace, implementation: str) -> tuple[str, str | None]:
    """``("pass", None)`` or ``("violation", id)``: what ``trace`` expects of ``implementation``."""
    if trace.expect.get("outcome") != "violation":
        return "pass", None
    named = trace.expect.get("implementation") or trace.implementation
    if _same_implementation(trace, named, implementation):
        return "violation", trace.expect.get("invariant")
    return "pass", None


def matches_expectation(result: ReplayResult, trace: Trace) -> bool:
    """Whether ``result`` is what ``trace`` expects of the implementation that was replayed.

    A violation matches on the invariant id alone: the step where it surfaces
    may move when the audit schedule changes, the broken invariant does not.
    """
    outcome, invariant = expected_outcome(trace, result.implementation)
    return result.outcome == outcome and result.invariant == invariant


# ----------------------------------------------------------------------- CLI
def trace_files(paths: Sequence[Path]) -> Iterator[Path]:
    """Files as given; directories searched recursively for ``*.json`` (hidden files, e.g. temporaries, left out)."""
    for path in paths:
        if path.is_dir():
            for found in sorted(path.rglob("*.json")):
                if not any(part.startswith(".") for part in found.relative_to(path).parts):
                    yield found
        else:
            yield path


def report_line(path: Path | str, trace: Trace, result: ReplayResult) -> tuple[str, str]:
    """``(status, line)`` for one replayed trace; status is ``matched``, ``failed`` or ``skipped``."""
    outcome, invariant = expected_outcome(trace, result.implementation)
    notes = []
    if not _same_implementation(trace, trace.implementation, result.implementation):
        notes.append(f"against {result.implementation}")
    recorded = str(trace.config.get("device", "cpu"))
    if recorded != result.device:
        notes.append(f"recorded on {recorded}, replayed on {result.device}")
    suffix = f" [{'; '.join(notes)}]" if notes else ""
    if result.outcome == "unavailable":
        return "skipped", f"SKIP {path}: {result.describe()}"
    if result.outcome == outcome == "pass":
        return "matched", f"PASS {path} ({_steps(result.steps)}){suffix}"
    if result.outcome == outcome and result.invariant == invariant:
        return "matched", f"OK   {path} reproduced expected [{invariant}] {result.where}{suffix}"
    wanted = "pass" if outcome == "pass" else f"[{invariant}]"
    return "failed", f"FAIL {path} expected {wanted}, got {result.describe()}{suffix}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness replay",
        description="Replay trace files without hypothesis and check each against its expected outcome.",
        epilog="exit status: 0 every trace matched (or was skipped: its implementation is unavailable here), "
               "1 some did not, 2 usage error or unreadable trace",
    )
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help=f"trace files, or directories searched for *.json (default: {DEFAULT_CORPUS}/)")
    parser.add_argument("--target", action="append", default=[], metavar="FAMILY=module:attr",
                        help="replay a family's traces against another implementation (repeatable)")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="replay on this device instead of the recorded one")
    parser.add_argument("--steps", action="store_true", help="print the steps of every trace that does not match")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m harness replay [PATH ...] [--target FAMILY=module:attr] [--device cpu|cuda]``."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the usage error (or the help)
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        overrides = parse_overrides(args.target)
        for spec in overrides.values():
            load_factory(spec)
    except UnknownTargetError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("replay: --device cuda, but no CUDA device is available here", file=sys.stderr)
            return 2
    paths = args.paths or [DEFAULT_CORPUS]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"replay: no such file or directory: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    counts = {"matched": 0, "failed": 0, "skipped": 0, "unreadable": 0}
    for path in trace_files(paths):
        try:
            trace = load_trace(path)
        except TraceError as exc:
            print(f"BAD  {exc}")
            counts["unreadable"] += 1
            continue
        result = replay_trace(trace, target=overrides.get(trace.family), device=args.device)
        status, line = report_line(path, trace, result)
        print(line)
        counts[status] += 1
        if status == "failed" and args.steps:
            print(trace.steps_text())
    total = sum(counts.values())
    print(f"{total} trace{'' if total == 1 else 's'}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return 2 if counts["unreadable"] else 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

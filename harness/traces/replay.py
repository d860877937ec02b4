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
  found on is the one place where it must fail, with the recorded invariant id;
* ``{"outcome": "pass", "regression": {"invariant": ID, "implementation": OLD}}``
  is a *regression trace*: a finding whose pool was fixed.  It must pass on
  every implementation but ``OLD``, the broken one it was found on, which must
  still fail with ``ID`` (unless ``OLD`` is the trace's own implementation: then
  it was fixed in place and the violation is history).  The command line
  (:mod:`poolfuzz.harness.traces.replay_cli`) checks both sides.

A trace recorded on CUDA replays on CPU and vice versa: ``device=`` overrides
the recorded device, and a CUDA trace on a machine without CUDA falls back to CPU.
Before anything is built, the config and the step arguments are held to the
size limits of :mod:`poolfuzz.harness.judge.limits` (outcome ``invalid`` otherwise).

``python -m poolfuzz.harness.traces.replay`` is the command line; :func:`main` hands it on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolfuzz.harness.judge.families import UnknownTargetError, family, load_factory, resolve, validates_input
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.limits import LimitError, check_steps
from poolfuzz.harness.judge.trace import Trace


@dataclass(frozen=True)
class ReplayResult:
    """What one replay saw.

    ``outcome`` is ``"pass"``, ``"violation"`` (an invariant failed),
    ``"error"`` (anything else raised: a trace that does not fit the driver, a
    pool that cannot be built), ``"unavailable"`` (the implementation cannot
    be imported here, e.g. upstream SGLang is not installed: nothing was run) or
    ``"invalid"`` (a size beyond :mod:`poolfuzz.harness.judge.limits`: nothing was built).
    ``step`` is the 1-based number of the trace step where it happened, counted
    in the trace as replayed (every step of the file, those the driver skipped
    included); ``None`` means at teardown for a violation, and before the first
    step for an error.  ``steps`` is how many steps ran (up to and including
    ``step``), ``total`` how many the trace has.
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
    off_path: tuple[tuple[int, str, str], ...] = field(default=(), repr=False, compare=False)
    """``(step, op, what the callers do instead)`` for each step the target accepts but its callers do not send
    today (:attr:`~poolfuzz.harness.judge.driver.Driver.off_path`, from the target's caller contract)."""
    total: int | None = None

    @property
    def where(self) -> str:
        """``at step 3 of 5`` (of the trace's steps), ``at teardown`` or ``before the first step``."""
        if self.step is not None:
            return f"at step {self.step}" + (f" of {self.total}" if self.total is not None else "")
        return "at teardown" if self.outcome == "violation" else "before the first step"

    def describe(self) -> str:
        """``[conservation] at step 7 of 9: free rows differ from the model (missing=[3])`` and the like."""
        if self.outcome == "pass":
            return f"pass ({plural(self.steps, 'step')})"
        if self.outcome == "unavailable":
            return f"{self.implementation} is unavailable here: {self.message}"
        if self.outcome == "invalid":
            return self.message
        head = f"[{self.invariant}]" if self.outcome == "violation" else "error"
        numbers = ", ".join(f"{k}={_short(v)}" for k, v in self.numbers.items())
        return f"{head} {self.where}: {self.message}" + (f" ({numbers})" if numbers else "")


def plural(count: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -------------------------------------------------------------------- replay
def replay_device(trace: Trace, device: str | None = None) -> str:
    """``device`` if given; else the recorded one, or CPU when it was CUDA and none is here."""
    if device:
        return device
    recorded = trace.recorded_device
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
    total = len(trace.steps)

    def result(outcome: str, steps: int, **kw: Any) -> ReplayResult:
        return ReplayResult(outcome, spec, device, steps, total=total, **kw)

    try:
        spec = implementation_of(trace, target)
        driver_cls = resolve(family(trace.family).driver)
    except UnknownTargetError as exc:
        return result("error", 0, message=f"cannot load the family's driver: {exc}")
    try:  # before anything is imported or built: a trace never sizes memory beyond the limits
        recorded = family(trace.family).configured(trace.config)  # the config's keys, types and sizes, checked once
        check_steps(trace.family, trace.steps, trace.config)
    except LimitError as exc:
        return result("invalid", 0, message=str(exc))
    try:
        factory = factory if factory is not None else load_factory(spec)
    except UnknownTargetError as exc:
        return result("unavailable", 0, message=str(exc))
    misuse = validates_input(factory) if check_misuse is None else check_misuse
    try:
        driver = driver_cls(factory, recorded.on_device(device), implementation=spec, check_misuse=misuse, audit_period=trace.audit_period)
    except LimitError as exc:  # a config the family's constructor refuses as bad input (engine: an unbuildable shape)
        return result("invalid", 0, message=str(exc))
    except UnknownTargetError as exc:  # a builder that loads upstream when it builds (UpstreamUnavailableError), not before
        return result("unavailable", 0, message=str(exc))
    except Exception as exc:  # noqa: BLE001 - a pool that cannot be built is reported, not raised
        return result("error", 0, message=f"building the pool: {type(exc).__name__}: {exc}")

    def ran() -> dict[str, Any]:
        return {"recorded": tuple(driver.trace.steps), "off_path": tuple(driver.off_path)}

    for number, step in enumerate(trace.steps, 1):
        try:
            driver.step(step["op"], **step["args"])
        except InvariantViolation as violation:
            return result(
                "violation",
                number,
                invariant=violation.invariant_id,
                step=number,
                message=violation.detail,
                numbers=dict(violation.numbers),
                **ran(),
            )
        except Exception as exc:  # noqa: BLE001 - e.g. a hand-edited handle the driver never issued
            return result("error", number, step=number, message=f"{step['op']}: {type(exc).__name__}: {exc}", **ran())
    try:
        driver.teardown()
    except InvariantViolation as violation:
        return result(
            "violation", total, invariant=violation.invariant_id, message=violation.detail, numbers=dict(violation.numbers), **ran()
        )
    except Exception as exc:  # noqa: BLE001
        return result("error", total, message=f"teardown audit: {type(exc).__name__}: {exc}", **ran())
    return result("pass", total, **ran())


# ------------------------------------------------------------- expectations
def same_implementation(trace: Trace, a: str, b: str) -> bool:
    """Whether two specs name the same implementation (``""`` is the family default)."""
    try:
        default = family(trace.family).default
    except UnknownTargetError:
        default = ""
    return (a or default).strip() == (b or default).strip()


def regression_of(trace: Trace) -> dict[str, str] | None:
    """``{"invariant": ID, "implementation": OLD}`` of a regression trace, else ``None``."""
    regression = trace.expect.get("regression") if trace.expect.get("outcome") == "pass" else None
    return dict(regression) if isinstance(regression, dict) else None


def old_implementation(trace: Trace) -> str | None:
    """The broken implementation a regression trace must still fail on; ``None`` if fixed in place (or none)."""
    regression = regression_of(trace)
    if regression is None or same_implementation(trace, regression["implementation"], trace.implementation):
        return None
    return regression["implementation"]


def expected_outcome(trace: Trace, implementation: str) -> tuple[str, str | None]:
    """``("pass", None)`` or ``("violation", id)``: what ``trace`` expects of ``implementation``."""
    old = old_implementation(trace)
    if old is not None:
        regression = regression_of(trace) or {}
        if same_implementation(trace, old, implementation):
            return "violation", regression.get("invariant")
        return "pass", None
    if trace.expect.get("outcome") != "violation":
        return "pass", None
    named = trace.expect.get("implementation") or trace.implementation
    if same_implementation(trace, named, implementation):
        return "violation", trace.expect.get("invariant")
    return "pass", None


def matches_expectation(result: ReplayResult, trace: Trace) -> bool:
    """Whether ``result`` is what ``trace`` expects of the implementation that was replayed.

    A violation matches on the invariant id alone: the step where it surfaces
    may move when the audit schedule changes, the broken invariant does not.
    """
    outcome, invariant = expected_outcome(trace, result.implementation)
    return result.outcome == outcome and result.invariant == invariant


# ------------------------------------------------------------------- files
def trace_files(paths: Sequence[Path]) -> Iterator[Path]:
    """Files as given; directories searched recursively for ``*.json`` (hidden files, e.g. temporaries, left out)."""
    for path in paths:
        if path.is_dir():
            for found in sorted(path.rglob("*.json")):
                if not any(part.startswith(".") for part in found.relative_to(path).parts):
                    yield found
        else:
            yield path

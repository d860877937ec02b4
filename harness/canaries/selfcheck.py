"""``python -m harness selfcheck``: prove the harness has teeth on every canary.

Each canary (:mod:`harness.canaries`) is fuzzed with the normal machine of its
family through :func:`harness.machines.run.run_machine`, under a random (seeded,
hence reproducible) settings profile, in chunks of examples until it is caught
or its time budget is spent.  A probe wrapped around the machine counts driver
steps and notes the moment of the first violation, so the report gives the
time and steps to *detection*, separately from the time hypothesis then spends
shrinking.

Exit status: 0 when every selected canary was caught by its expected invariant,
1 when any was missed, caught by another invariant or crashed the harness, 2
when none failed but some could not run because their family's machine is not
available yet.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis import settings as Settings

from harness.canaries import CANARIES, Canary, canary_machine, machine_available
from harness.judge.invariants import InvariantViolation
from harness.machines.base import PoolMachine
from harness.machines.run import failure_trace, run_machine, violation_of
from harness.judge.families import UnknownTargetError

DEFAULT_SECONDS = 60.0
CHUNK_EXAMPLES = 50
STEPS_PER_EXAMPLE = 40


@dataclass
class Probe:
    """Counts driver steps across examples and remembers the first violation."""

    started: float
    steps: int = 0
    detected_at: float | None = None
    detected_steps: int | None = None
    first_invariant: str | None = None

    def hit(self, violation: InvariantViolation) -> None:
        if self.detected_at is None:
            self.detected_at = perf_counter() - self.started
            self.detected_steps = self.steps
            self.first_invariant = violation.invariant_id


@dataclass
class Outcome:
    name: str
    canary: Canary
    status: str  # caught | wrong-invariant | missed | error | unavailable
    invariant: str | None = None
    first_invariant: str | None = None
    seconds_to_detect: float | None = None
    steps_to_detect: int | None = None
    shrunk_steps: int | None = None
    seconds_total: float = 0.0
    examples: int = 0
    detail: str = ""

    @property
    def caught(self) -> bool:
        return self.status in ("caught", "wrong-invariant")


def probed(machine: type[PoolMachine], probe: Probe, seed: int) -> type[PoolMachine]:
    """``machine`` with every driver step counted and the first violation timed."""

    def do(self: PoolMachine, op: str, **args: Any) -> Any:
        before = self.driver.steps if self.driver is not None else 0
        try:
            return machine.do(self, op, **args)
        except InvariantViolation as violation:
            probe.hit(violation)
            raise
        finally:
            probe.steps += (self.driver.steps if self.driver is not None else 0) - before

    def teardown(self: PoolMachine) -> None:
        try:
            machine.teardown(self)
        except InvariantViolation as violation:
            probe.hit(violation)
            raise

    namespace = {"do": do, "teardown": teardown, "__module__": machine.__module__,
                 "_hypothesis_internal_use_seed": seed}
    return type(machine.__name__, (machine,), namespace)


def fuzz_settings(*, examples: int = CHUNK_EXAMPLES, steps: int = STEPS_PER_EXAMPLE) -> Settings:
    """Random generation (the seed fixes it), no database, quiet, shrinking on."""
    return Settings(
        database=None, derandomize=False, max_examples=examples, stateful_step_count=steps,
        deadline=None, report_multiple_bugs=False, print_blob=False, verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.target, Phase.shrink],
    )


def check_canary(name: str, *, seconds: float = DEFAULT_SECONDS, seed: int = 0) -> Outcome:
    """Fuzz one canary in chunks of :data:`CHUNK_EXAMPLES` examples until caught or out of time."""
    canary = CANARIES[name]
    outcome = Outcome(name, canary, "missed")
    missing = machine_available(canary.family)
    if missing is not None:
        outcome.status, outcome.detail = "unavailable", missing
        return outcome
    started = perf_counter()
    probe = Probe(started)
    try:
        base = canary_machine(name)
    except UnknownTargetError as exc:
        outcome.status, outcome.detail = "error", str(exc)
        return outcome
    chunk = 0
    while perf_counter() - started < seconds:
        machine = probed(base, probe, seed + chunk)
        chunk += 1
        try:
            run_machine(machine, settings=fuzz_settings(), note=f"selfcheck canary {name}")
        except Exception as exc:  # noqa: BLE001 - the report says what it was
            _record_failure(outcome, exc)
            break
    outcome.examples = chunk * CHUNK_EXAMPLES
    outcome.seconds_total = perf_counter() - started
    outcome.seconds_to_detect = probe.detected_at
    outcome.steps_to_detect = probe.detected_steps
    outcome.first_invariant = probe.first_invariant
    if outcome.status == "missed":
        outcome.detail = f"not caught in {outcome.seconds_total:.1f} s ({probe.steps} steps)"
    return outcome


def _record_failure(outcome: Outcome, exc: BaseException) -> None:
    violation = violation_of(exc)
    if violation is None:
        outcome.status, outcome.detail = "error", f"{type(exc).__name__}: {exc}".splitlines()[0]
        return
    outcome.invariant = violation.invariant_id
    expected = outcome.canary.invariant
    outcome.status = "caught" if violation.invariant_id == expected else "wrong-invariant"
    trace = failure_trace(exc)
    outcome.shrunk_steps = len(trace.steps) if trace is not None else None
    outcome.detail = violation.detail


def run_selfcheck(names: Sequence[str], *, seconds: float = DEFAULT_SECONDS, seed: int = 0) -> list[Outcome]:
    return [check_canary(name, seconds=seconds, seed=seed) for name in names]


def _fmt(value: float | int | None, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def report(outcomes: Sequence[Outcome]) -> str:
    """The per-canary table and a summary line."""
    name_w = max([len("canary"), *(len(o.name) for o in outcomes)])
    fam_w = max([len("family"), *(len(o.canary.family) for o in outcomes)])
    header = (f"{'canary':{name_w}}  {'family':{fam_w}}  {'result':18}  {'invariant':26}  {'detect s':>8}  "
              f"{'steps':>6}  {'shrunk':>6}  {'total s':>7}")
    lines = [header, "-" * len(header)]
    for o in outcomes:
        result = o.status if o.status != "wrong-invariant" else f"wrong (want {o.canary.invariant})"
        lines.append(
            f"{o.name:{name_w}}  {o.canary.family:{fam_w}}  {result:18}  {o.invariant or '-':26}  "
            f"{_fmt(o.seconds_to_detect, '.2f'):>8}  {_fmt(o.steps_to_detect):>6}  {_fmt(o.shrunk_steps):>6}  "
            f"{o.seconds_total:7.1f}"
        )
        if o.status in ("missed", "error", "unavailable"):
            lines.append(f"{'':{name_w}}  {o.detail}")
    detected = [o.seconds_to_detect for o in outcomes if o.caught and o.seconds_to_detect is not None]
    caught = sum(o.status == "caught" for o in outcomes)
    median = f", median time to detect {statistics.median(detected):.2f} s" if detected else ""
    lines.append(f"{caught}/{len(outcomes)} canaries caught by their expected invariant{median}")
    return "\n".join(lines)


def exit_status(outcomes: Sequence[Outcome]) -> int:
    if any(o.status in ("missed", "error", "wrong-invariant") for o in outcomes):
        return 1
    return 2 if any(o.status == "unavailable" for o in outcomes) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness selfcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds-per-canary", type=float, default=DEFAULT_SECONDS, metavar="N",
                        help=f"fuzzing budget per canary (default {DEFAULT_SECONDS:g})")
    parser.add_argument("--canary", action="extend", nargs="+", default=[], metavar="NAME",
                        choices=sorted(CANARIES), help="check only these canaries (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first chunk (default 0)")
    parser.add_argument("--list", action="store_true", help="list the canaries and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name, c in CANARIES.items():
            print(f"{name:32} {c.family:20} {c.invariant:26} {c.upstream}: {c.bug}")
        return 0
    names = args.canary or list(CANARIES)
    outcomes = []
    for name in names:
        outcome = check_canary(name, seconds=args.seconds_per_canary, seed=args.seed)
        outcomes.append(outcome)
        print(f"  {name}: {outcome.status} ({outcome.seconds_total:.1f} s)", flush=True)
    print(report(outcomes))
    return exit_status(outcomes)


if __name__ == "__main__":
    raise SystemExit(main())

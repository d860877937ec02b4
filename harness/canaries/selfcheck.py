"""``poolfuzz selfcheck``: prove the harness has teeth on every canary, and time it.

Each canary (:mod:`poolfuzz.harness.canaries`) is chased by the engines of a nightly
worker, one seed each run: by default (``--engine mixed``) walk bursts
(:mod:`poolfuzz.harness.fuzz.walk`, the family's driver driven by a seeded random walk)
alternate with chunks of hypothesis examples of the family's normal machine
(:func:`poolfuzz.harness.machines.run.run_machine`), the walk bursts growing from a
quarter to one second (:data:`WALK_BURSTS`) so a bug only hypothesis reaches
is not kept waiting.  ``--engine
walk`` or ``hypothesis`` runs one alone.  Probes count driver steps, so the
report gives the time and steps to *detection*, apart from shrinking.

The chase goes on until the canary's expected invariant is reported or the
budget is spent: a violation of another invariant first (a bug often shows
several ways) is noted in the ``first`` column and the chase continues, so the
time to detect is the time to the expected invariant.

``--seeds N`` chases every canary under seeds ``seed .. seed + N - 1``
(without shrinking, which does not count towards detection) and reports the
median and worst time to detect per canary, per family and overall; with
``--shrink`` each finding is shrunk too, and the family table adds the time to
the *report*: from the chase's start to the shrunk trace a user is handed.

Exit status: 0 when every selected canary was caught by its expected invariant
(under every seed), 1 when any was missed, caught only by another invariant or
crashed the harness, 2 when none failed but some could not run because their
family's machine is not available yet.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from hypothesis import Phase

from poolfuzz.harness.canaries import CANARIES, Canary, canary_machine, machine_available
from poolfuzz.harness.fuzz.walk import Finding, WalkRun
from poolfuzz.harness.helptext import prog, summary
from poolfuzz.harness.judge.families import UnknownTargetError
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.machines import PoolMachine, build_settings, failure_trace, run_machine, violation_of
from poolfuzz.harness.traces.shrink import shrink_trace

DEFAULT_SECONDS = 60.0
CHUNK_EXAMPLES = 20
STEPS_PER_EXAMPLE = 40
ENGINES = ("mixed", "walk", "hypothesis")
WALK_BURSTS = (0.25, 0.5, 1.0)
"""Walk bursts between hypothesis chunks, growing to the last: a bug only hypothesis reaches waits little."""
SHRINK_SECONDS = 10.0


@dataclass
class Probe:
    """Counts driver steps across examples and remembers the first violation since :meth:`arm`."""

    started: float
    steps: int = 0
    armed_at: float | None = None
    armed_steps: int | None = None

    def arm(self) -> None:
        self.armed_at = self.armed_steps = None

    def hit(self, violation: InvariantViolation | None = None) -> None:
        if self.armed_at is None:
            self.armed_at = perf_counter() - self.started
            self.armed_steps = self.steps


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
    seconds_to_report: float | None = None
    """From the chase's start to the trace it hands over: shrunk, where the chase shrinks."""
    seconds_total: float = 0.0
    examples: int = 0
    engine: str = ""
    """Which engine reported the expected invariant (``walk`` or ``hypothesis``)."""
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

    namespace = {"do": do, "teardown": teardown, "__module__": machine.__module__, "_hypothesis_internal_use_seed": seed}
    return type(machine.__name__, (machine,), namespace)


def fuzz_settings(*, examples: int = CHUNK_EXAMPLES, steps: int = STEPS_PER_EXAMPLE, shrink: bool = True) -> Any:
    """The ``selfcheck`` profile: random generation (the seed fixes it), no database, quiet."""
    phases = [Phase.generate, Phase.target] + ([Phase.shrink] if shrink else [])
    return build_settings("selfcheck", max_examples=examples, stateful_step_count=steps, phases=phases)


class Chase:
    """One canary, one seed: alternate the engines until the expected invariant is reported or time is up."""

    def __init__(self, name: str, *, seconds: float, seed: int, engine: str, shrink: bool) -> None:
        self.canary = CANARIES[name]
        self.outcome = Outcome(name, self.canary, "missed")
        self.seconds, self.seed, self.engine, self.shrink = seconds, seed, engine, shrink
        self.started = perf_counter()
        self.probe = Probe(self.started)
        self.chunks = self.bursts = 0

    def left(self) -> float:
        return self.seconds - (perf_counter() - self.started)

    def run(self) -> Outcome:
        outcome, canary = self.outcome, self.canary
        missing = machine_available(canary.family)
        if missing is not None:
            outcome.status, outcome.detail = "unavailable", missing
            return outcome
        try:
            machine = canary_machine(outcome.name) if self.engine != "walk" else None
            walk = (
                None
                if self.engine == "hypothesis"
                else WalkRun(canary.family, self.seed, spec=canary.spec, driver=canary.driver or "", shrink=False)
            )
        except UnknownTargetError as exc:
            outcome.status, outcome.detail = "error", str(exc)
            return outcome
        while self.left() > 0 and outcome.status == "missed":
            if walk is not None:
                burst = WALK_BURSTS[min(self.bursts, len(WALK_BURSTS) - 1)]
                self.bursts += 1
                self.walk_burst(walk, self.left() if machine is None else min(self.left(), burst))
            if machine is not None and outcome.status == "missed" and self.left() > 0:
                self.hypothesis_chunk(machine)
        outcome.examples = self.chunks * CHUNK_EXAMPLES + (walk.episodes if walk is not None else 0)
        outcome.seconds_total = perf_counter() - self.started
        if outcome.status == "missed":
            outcome.status = "wrong-invariant" if outcome.first_invariant else "missed"
            outcome.invariant = outcome.first_invariant
            outcome.detail = f"not caught by {canary.invariant} in {outcome.seconds_total:.1f} s ({self.probe.steps} steps)"
        return outcome

    def walk_burst(self, walk: WalkRun, seconds: float) -> None:
        """Walk for ``seconds``; a violation of another invariant ends only its episode."""
        ends = perf_counter() + seconds
        while self.outcome.status == "missed" and perf_counter() < ends:
            before = walk.steps
            finding = walk.run(seconds=ends - perf_counter())
            self.probe.steps += walk.steps - before
            if finding is None:
                return
            self.probe.arm()
            self.probe.hit()
            self.found(finding.error, "walk", finding)

    def hypothesis_chunk(self, machine: type[PoolMachine]) -> None:
        self.probe.arm()
        chunk = probed(machine, self.probe, self.seed + self.chunks)
        self.chunks += 1
        try:
            run_machine(chunk, settings=fuzz_settings(shrink=self.shrink), note=f"selfcheck canary {self.outcome.name}")
        except Exception as exc:  # noqa: BLE001 - the report says what it was
            self.found(exc, "hypothesis")

    def found(self, exc: BaseException, engine: str, finding: Finding | None = None) -> None:
        """A failure: the end of the chase if it names the expected invariant (or is no violation at all)."""
        outcome = self.outcome
        violation = violation_of(exc)
        if violation is None:
            outcome.status, outcome.engine = "error", engine
            outcome.detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return
        outcome.first_invariant = outcome.first_invariant or violation.invariant_id
        if violation.invariant_id != self.canary.invariant:
            return
        outcome.status, outcome.invariant, outcome.engine = "caught", violation.invariant_id, engine
        outcome.seconds_to_detect, outcome.steps_to_detect = self.probe.armed_at, self.probe.armed_steps
        outcome.detail = violation.detail
        trace = finding.trace if finding is not None else failure_trace(exc)
        if finding is not None and self.shrink:
            trace = shrink_trace(finding.trace, invariant_id=violation.invariant_id, target=self.canary.spec, max_seconds=SHRINK_SECONDS)
        outcome.shrunk_steps = len(trace.steps) if trace is not None else None
        outcome.seconds_to_report = perf_counter() - self.started


def check_canary(name: str, *, seconds: float = DEFAULT_SECONDS, seed: int = 0, engine: str = "mixed", shrink: bool = True) -> Outcome:
    """Chase one canary under one seed (see the module docstring)."""
    return Chase(name, seconds=seconds, seed=seed, engine=engine, shrink=shrink).run()


def run_selfcheck(names: Sequence[str], *, seconds: float = DEFAULT_SECONDS, seed: int = 0, engine: str = "mixed") -> list[Outcome]:
    return [check_canary(name, seconds=seconds, seed=seed, engine=engine) for name in names]


def _fmt(value: float | int | None, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def report(outcomes: Sequence[Outcome]) -> str:
    """The per-canary table and a summary line."""
    name_w = max([len("canary"), *(len(o.name) for o in outcomes)])
    fam_w = max([len("family"), *(len(o.canary.family) for o in outcomes)])
    header = (
        f"{'canary':{name_w}}  {'family':{fam_w}}  {'result':18}  {'invariant':26}  {'detect s':>8}  "
        f"{'steps':>6}  {'shrunk':>6}  {'total s':>7}  engine      first"
    )
    lines = [header, "-" * len(header)]
    for o in outcomes:
        result = o.status if o.status != "wrong-invariant" else f"wrong (want {o.canary.invariant})"
        first = o.first_invariant if o.first_invariant not in (None, o.invariant) else ""
        lines.append(
            f"{o.name:{name_w}}  {o.canary.family:{fam_w}}  {result:18}  {o.invariant or '-':26}  "
            f"{_fmt(o.seconds_to_detect, '.2f'):>8}  {_fmt(o.steps_to_detect):>6}  {_fmt(o.shrunk_steps):>6}  "
            f"{o.seconds_total:7.1f}  {o.engine or '-':10}  {first}".rstrip()
        )
        if o.status in ("missed", "error", "unavailable"):
            lines.append(f"{'':{name_w}}  {o.detail}")
    detected = [o.seconds_to_detect for o in outcomes if o.caught and o.seconds_to_detect is not None]
    caught = sum(o.status == "caught" for o in outcomes)
    median = f", median time to detect {statistics.median(detected):.2f} s" if detected else ""
    lines.append(f"{caught}/{len(outcomes)} canaries caught by their expected invariant{median}")
    return "\n".join(lines)


@dataclass(frozen=True)
class SeedSummary:
    """One canary across seeds: how many caught, and the median and worst time to detect."""

    name: str
    family: str
    caught: int
    seeds: int
    median: float | None
    worst: float | None
    walk_share: float
    """Fraction of the catches the walk made."""


def summarise(name: str, outcomes: Sequence[Outcome]) -> SeedSummary:
    times = [o.seconds_to_detect for o in outcomes if o.status == "caught" and o.seconds_to_detect is not None]
    caught = sum(o.status == "caught" for o in outcomes)
    by_walk = sum(o.engine == "walk" for o in outcomes if o.status == "caught")
    worst = max(times) if times and caught == len(outcomes) else None
    return SeedSummary(
        name,
        outcomes[0].canary.family,
        caught,
        len(outcomes),
        statistics.median(times) if times else None,
        worst,
        by_walk / caught if caught else 0.0,
    )


def seeds_report(summaries: Sequence[SeedSummary], outcomes: Sequence[Outcome], budget: float) -> str:
    """Per canary: caught in how many seeds, median and worst time to detect; then the overall figures."""
    name_w = max([len("canary"), *(len(s.name) for s in summaries)])
    header = f"{'canary':{name_w}}  {'family':20}  {'caught':>7}  {'median s':>8}  {'worst s':>8}  {'by walk':>7}"
    lines = [header, "-" * len(header)]
    for s in summaries:
        worst = _fmt(s.worst, ".2f") if s.caught == s.seeds else f">{budget:g}"
        lines.append(
            f"{s.name:{name_w}}  {s.family:20}  {f'{s.caught}/{s.seeds}':>7}  {_fmt(s.median, '.2f'):>8}  {worst:>8}  {s.walk_share:7.0%}"
        )
    times = [o.seconds_to_detect for o in outcomes if o.status == "caught" and o.seconds_to_detect is not None]
    every = sum(s.caught == s.seeds for s in summaries)
    if times:
        lines.append(
            f"{every}/{len(summaries)} canaries caught by their expected invariant under every seed; "
            f"over all {len(outcomes)} chases median {statistics.median(times):.2f} s, "
            f"worst {max(times):.2f} s" + ("" if len(times) == len(outcomes) else f" (of {len(times)} caught)")
        )
    return "\n".join(lines)


def _median_worst(values: Sequence[float]) -> str:
    return f"{statistics.median(values):8.2f}  {max(values):8.2f}" if values else f"{'-':>8}  {'-':>8}"


def family_report(outcomes: Sequence[Outcome], *, shrunk: bool) -> str:
    """Per family, over its canaries' chases: median and worst time to detect, and (``shrunk``) to the report."""
    families = list(dict.fromkeys(o.canary.family for o in outcomes))
    fam_w = max([len("family"), *(len(f) for f in families)])
    header = f"{'family':{fam_w}}  {'chases':>6}  {'caught':>6}  {'detect median':>13}  {'worst':>6}"
    header += f"  {'report median':>13}  {'worst':>6}" if shrunk else ""
    lines = [header, "-" * len(header)]
    for name in families:
        mine = [o for o in outcomes if o.canary.family == name]
        caught = [o for o in mine if o.status == "caught"]
        detect = [o.seconds_to_detect for o in caught if o.seconds_to_detect is not None]
        row = f"{name:{fam_w}}  {len(mine):6}  {len(caught):6}  {_median_worst(detect):>21}"
        if shrunk:
            row += f"  {_median_worst([o.seconds_to_report for o in caught if o.seconds_to_report is not None]):>21}"
        lines.append(row)
    return "\n".join(lines)


def exit_status(outcomes: Sequence[Outcome]) -> int:
    if any(o.status in ("missed", "error", "wrong-invariant") for o in outcomes):
        return 1
    return 2 if any(o.status == "unavailable" for o in outcomes) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog("selfcheck"), description=summary(__doc__))
    parser.add_argument(
        "--seconds-per-canary",
        type=float,
        default=DEFAULT_SECONDS,
        metavar="N",
        help=f"fuzzing budget per canary and seed (default {DEFAULT_SECONDS:g})",
    )
    parser.add_argument(
        "--canary",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME",
        choices=sorted(CANARIES),
        help="check only these canaries (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument(
        "--seeds", type=int, default=1, metavar="N", help="chase each canary under N seeds and report median and worst time to detect"
    )
    parser.add_argument(
        "--shrink", action="store_true", help="with --seeds, shrink every finding too and report the time to the shrunk report"
    )
    parser.add_argument(
        "--engine", choices=ENGINES, default="mixed", help="walk bursts alternating with hypothesis chunks (default), or one engine alone"
    )
    parser.add_argument("--list", action="store_true", help="list the canaries and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name, c in CANARIES.items():
            print(f"{name:32} {c.family:20} {c.invariant:26} {c.upstream}: {c.bug}")
        return 0
    names = args.canary or list(CANARIES)
    shrink = args.seeds <= 1 or args.shrink
    outcomes: list[Outcome] = []
    summaries: list[SeedSummary] = []
    for name in names:
        chases = []
        for seed in range(args.seed, args.seed + max(1, args.seeds)):
            outcome = check_canary(name, seconds=args.seconds_per_canary, seed=seed, engine=args.engine, shrink=shrink)
            chases.append(outcome)
            reported = f", reported at {outcome.seconds_to_report:.2f} s" if shrink and outcome.seconds_to_report else ""
            print(
                f"  {name} (seed {seed}): {outcome.status} in {_fmt(outcome.seconds_to_detect, '.2f')} s{reported} "
                f"({outcome.seconds_total:.1f} s)",
                flush=True,
            )
        outcomes += chases
        summaries.append(summarise(name, chases))
    print(report(outcomes) if args.seeds <= 1 else seeds_report(summaries, outcomes, args.seconds_per_canary))
    print()
    print(family_report(outcomes, shrunk=shrink))
    return exit_status(outcomes)


if __name__ == "__main__":
    raise SystemExit(main())

"""``bench`` sections on finding bugs fast: time to detect every canary, and steps/s of the two engines.

* Time to detect: ``selfcheck --seeds`` (:mod:`poolfuzz.harness.canaries.selfcheck`) on
  every canary, the engines alternating as in a worker; median and worst per
  canary and overall, against the targets (each canary caught in every seed
  within :data:`DETECT_LIMIT_S`, overall median at most :data:`MEDIAN_TARGET_S`).
* Routes: checked driver steps per second of one worker, per family, under
  the walk engine (:mod:`poolfuzz.harness.fuzz.walk`) and under hypothesis (the family's
  machine with the nightly round settings), timed in alternating slices; then
  real one-worker ``fuzz`` runs of ``req_to_token`` and ``paged_kv``,
  hypothesis only against the default mix, against the throughput targets.
  Every step of every route runs the same driver checks and audit schedule.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from poolfuzz.harness.bench.timing import Section, verdict
from poolfuzz.harness.canaries import CANARIES
from poolfuzz.harness.canaries.selfcheck import Outcome, check_canary, summarise
from poolfuzz.harness.fuzz.options import FuzzOptions, select_targets
from poolfuzz.harness.fuzz.protocol import StopRound
from poolfuzz.harness.fuzz.session import FuzzRun
from poolfuzz.harness.fuzz.walk import WALK_SHARE, WalkRun
from poolfuzz.harness.judge.families import FAMILIES
from poolfuzz.harness.machines import PoolMachine, build_settings, make_machine, run_machine

DETECT_LIMIT_S = 10.0
MEDIAN_TARGET_S = 1.0


# ------------------------------------------------------------------ time to detect
def bench_time_to_detect(quick: bool) -> Section:
    seeds = 2 if quick else 5
    section = Section(
        f"Time to detect: every canary under {seeds} seeds (selfcheck --seeds {seeds}, one worker)",
        ["canary", "family", "caught", "median s", "worst s", "by walk"],
    )
    outcomes: list[Outcome] = []
    for name in CANARIES:
        chases = [check_canary(name, seconds=DETECT_LIMIT_S, seed=seed, shrink=False) for seed in range(seeds)]
        if any(o.status == "unavailable" for o in chases):
            section.rows.append([name, CANARIES[name].family, "unavailable", "-", "-", "-"])
            continue
        outcomes += chases
        s = summarise(name, chases)
        section.rows.append(
            [
                name,
                s.family,
                f"{s.caught}/{s.seeds}",
                _seconds(s.median),
                _seconds(s.worst) if s.worst is not None else f">{DETECT_LIMIT_S:g}",
                f"{s.walk_share:.0%}",
            ]
        )
    times = [o.seconds_to_detect for o in outcomes if o.status == "caught" and o.seconds_to_detect is not None]
    every = all(o.status == "caught" for o in outcomes) and bool(outcomes)
    median = statistics.median(times) if times else float("inf")
    section.notes.append(
        f"Target: every canary caught by its expected invariant in each seed within "
        f"{DETECT_LIMIT_S:g} s: {len(times)}/{len(outcomes)} chases, worst "
        f"{max(times, default=float('inf')):.2f} s, {verdict(every)}."
    )
    section.notes.append(
        f"Target: median time to detect at most {MEDIAN_TARGET_S:g} s: {median:.2f} s, {verdict(median <= MEDIAN_TARGET_S)}."
    )
    section.notes.append(
        "Each chase alternates walk bursts (0.25 s, 0.5 s, then 1 s) with chunks of 20 hypothesis examples, as a "
        "worker alternates its rounds; a violation of another invariant first does not end it, so "
        "the time is to the canary's own invariant.  No shrinking: it does not count towards detection.  "
        "`by walk` is the share of seeds in which the walk, not hypothesis, reported it."
    )
    return section


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# ------------------------------------------------------------------ routes
@dataclass
class _Slice:
    """One slice's deadline and the driver steps counted in it."""

    deadline: float
    steps: int = 0


class _Deadline(PoolMachine):
    """A family machine that counts driver steps into :attr:`tally` and ends the run at its deadline
    (hypothesis lets :class:`~poolfuzz.harness.fuzz.protocol.StopRound` through).

    The count lives in a shared object read through the class: hypothesis runs a subclass
    (``run_machine`` wraps the machine for its shrink budget), and ``type(self).steps += n`` would
    count on that subclass, leaving the class the bench reads at zero: the hypothesis column read
    0 steps/s that way until 2026-12-06."""

    tally = _Slice(deadline=0.0)

    def do(self, op: str, **args: Any) -> Any:
        tally = self.tally
        if perf_counter() >= tally.deadline:
            raise StopRound()
        before = self.driver.steps if self.driver is not None else 0
        try:
            return super().do(op, **args)
        finally:
            tally.steps += (self.driver.steps if self.driver is not None else 0) - before


def hypothesis_rate_slice(machine: type[_Deadline], seconds: float, seed: int) -> tuple[int, float]:
    """``(steps, seconds)`` of one slice of hypothesis on ``machine`` (nightly round settings, no database)."""
    tally = machine.tally = _Slice(deadline=perf_counter() + seconds)
    machine._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
    started = perf_counter()
    try:
        run_machine(machine, settings=build_settings("fuzz-round", database=None, max_examples=10**6))
    except StopRound:
        pass
    return tally.steps, perf_counter() - started


def route_rates(name: str, seconds: float, slices: int) -> tuple[float, float] | str:
    """Checked steps/s of ``name`` under the walk and under hypothesis, in alternating slices; or why skipped."""
    try:
        base = make_machine(name)
    except Exception as exc:  # noqa: BLE001 - a family whose machine does not import is reported, not fatal
        return f"skipped: {exc}"
    machine = type(base.__name__, (_Deadline, base), {"__module__": base.__module__})
    walk = WalkRun(name, 0, shrink=False)
    totals = {"walk": [0, 0.0], "hypothesis": [0, 0.0]}
    for index in range(slices):
        before, started = walk.steps, perf_counter()
        if walk.run(seconds=seconds / slices) is not None:
            return "skipped: the production pool failed its walk"
        totals["walk"][0] += walk.steps - before
        totals["walk"][1] += perf_counter() - started
        steps, spent = hypothesis_rate_slice(machine, seconds / slices, seed=index)
        totals["hypothesis"][0] += steps
        totals["hypothesis"][1] += spent
    return totals["walk"][0] / totals["walk"][1], totals["hypothesis"][0] / totals["hypothesis"][1]


def fuzz_rate(name: str, seconds: float, walk_share: float | None) -> float:
    """Steps/s of a real one-worker ``fuzz`` run of ``name`` (``walk_share`` 0: hypothesis only)."""
    targets, _ = select_targets([name])
    with tempfile.TemporaryDirectory(prefix="poolfuzz-bench-") as scratch:
        options = FuzzOptions(
            targets=targets,
            seconds=seconds,
            workers=1,
            seed=11,
            corpus=Path(scratch, "corpus"),
            database=str(Path(scratch, "db")),
            walk_share=walk_share,
            progress_every=1e9,
        )
        with open(Path(scratch, "progress.log"), "w") as err:
            report = FuzzRun(options, err=err).run()
    return float(report["totals"]["steps_per_second"])


def bench_routes(quick: bool) -> Section:
    seconds, fuzz_seconds = (2.0, 6.0) if quick else (6.0, 20.0)
    section = Section(
        "Fuzzing routes: checked steps/s of one worker, walk engine and hypothesis side by side",
        ["family", "walk steps/s", "hypothesis steps/s", "walk / hypothesis", f"worker mix ({WALK_SHARE:.0%} walk)"],
    )
    for name in FAMILIES:
        rates = route_rates(name, seconds, slices=3)
        if isinstance(rates, str):
            section.rows.append([name, rates, "-", "-", "-"])
            continue
        walk, hypothesis = rates
        mix = WALK_SHARE * walk + (1 - WALK_SHARE) * hypothesis
        section.rows.append([name, f"{walk:,.0f}", f"{hypothesis:,.0f}", f"{walk / hypothesis:.1f}x", f"{mix:,.0f}"])
    for name, target in ((f.name, f.rate_target) for f in FAMILIES.values() if f.rate_target):
        alone, mixed = fuzz_rate(name, fuzz_seconds, 0.0), fuzz_rate(name, fuzz_seconds, None)
        section.notes.append(
            f"Target: `fuzz --target {name} --workers 1` at least {target:,} checked steps/s: {mixed:,.0f} with the "
            f"walk ({alone:,.0f} hypothesis only, {mixed / alone:.1f}x), {verdict(mixed >= target)}."
        )
    section.notes.append(
        f"Walk and hypothesis are timed in alternating slices of {seconds / 3:g} s on the production pools (seed 0); "
        "the walk draws fresh configurations every episode (tiny and boundary pools included), hypothesis runs the "
        f"family's machine with the nightly round settings ({build_settings('fuzz-round').stateful_step_count} steps "
        "an example, no database).  The worker mix is the time-weighted rate of a worker's alternation.  The fuzz "
        f"runs are real one-worker `fuzz` sessions of {fuzz_seconds:g} s, their report's steps/s."
    )
    section.notes.append(
        "Both routes call the same driver operations, with the same per-call checks and a full audit every 8 "
        "steps and at the end of each episode or example: no invariant is checked less often on the walk.  What "
        "the walk saves is hypothesis's engine per step (choice sequences, bundles, rule selection).  The KV "
        "families stay slower: one `alloc_extend` costs hundreds of microseconds of small torch operations in the "
        "pool itself (the bare-pool column of the harness table)."
    )
    return section

"""Seeding the corpus with regression traces found on canaries (our pools with one historical bug put back).

:func:`seed_trace` fuzzes a canary with the normal machine, lets the runner
shrink what it finds, and commits the trace as a regression test for *our*
pool: ``implementation`` is the family default, and ``expect`` records the
violation on the canary::

    {"outcome": "violation", "invariant": "empty-pool-guard",
     "implementation": "poolfuzz.harness.kits.rows.canaries:NegativeZeroSlice"}

so ``poolfuzz replay corpus/`` expects it to pass, and
``--target FAMILY=<canary>`` expects the recorded invariant.  Before writing,
both are checked by replay; a trace that fails either is refused.

Run ``python -m poolfuzz.harness.canaries.seeding`` to (re)seed every bug in :data:`SEEDS`
whose canary exists; seeding is derandomised, so a rerun names the same files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hypothesis import settings as Settings

from poolfuzz.harness.helptext import prog, summary
from poolfuzz.harness.judge.families import UnknownTargetError, family, parse_overrides
from poolfuzz.harness.judge.trace import Trace, fill_provenance
from poolfuzz.harness.machines import build_settings, failure_trace, make_machine, run_machine, violation_of
from poolfuzz.harness.traces.corpus import DEFAULT_CORPUS, save_trace
from poolfuzz.harness.traces.replay import matches_expectation, replay_trace
from poolfuzz.harness.traces.schema import load_trace

SEEDS = (
    "negative-zero-slice",
    "row-zero-handed-out",
    "alloc-size-mismatch",
    "generation-zeroed-on-clear",
    "group-end-leak",
    "extend-without-empty-guard",
    "free-group-aliasing",
)
"""Names in :data:`poolfuzz.harness.canaries.CANARIES` of the bugs the corpus must keep fixed (issue 5)."""


class SeedError(RuntimeError):
    """A canary that fuzzing did not break, or whose trace does not replay as a regression test."""


def seeding_settings(max_examples: int = 500) -> Settings:
    """Derandomised and bounded (the ``seeding`` profile), so a rerun names the same files."""
    return build_settings("seeding", max_examples=max_examples)


def find_violation(family_name: str, canary: str, *, settings: Settings | None = None, device: str = "cpu") -> Trace:
    """Fuzz ``canary`` until it breaks; the shrunk trace, expecting the violation on ``canary``."""
    machine = make_machine(family_name, canary, device=device)
    try:
        run_machine(machine, settings=settings or seeding_settings())
    except Exception as exc:
        trace, violation = failure_trace(exc), violation_of(exc)
        if trace is None or violation is None:
            raise SeedError(f"{canary} failed without an invariant violation: {type(exc).__name__}: {exc}") from exc
        return trace
    raise SeedError(f"fuzzing found no violation in {canary}")


def regression_trace(found: Trace, canary: str, note: str) -> Trace:
    """The corpus form: replayed against our pool by default, the violation expected on ``canary`` only."""
    trace = Trace(
        family=found.family,
        implementation=family(found.family).default,
        config=dict(found.config),
        steps=list(found.steps),
        expect={"outcome": "violation", "invariant": found.expect["invariant"], "implementation": canary},
        audit_period=found.audit_period,
    )
    return fill_provenance(trace, note=note)


def verify_seed(trace: Trace) -> None:
    """Raise :class:`SeedError` unless ``trace`` passes on its implementation and fails as recorded on the canary."""
    canary = trace.expect["implementation"]
    for target in (None, canary):
        result = replay_trace(trace, target=target)
        if not matches_expectation(result, trace):
            raise SeedError(
                f"trace does not replay as a regression test against {result.implementation}: got {result.describe()}\n{trace.steps_text()}"
            )


def seed_trace(
    family_name: str, canary: str, note: str, *, corpus: Path = DEFAULT_CORPUS, settings: Settings | None = None, device: str = "cpu"
) -> Path:
    """Fuzz ``canary``, shrink, verify and save the regression trace under ``corpus/<family>/``."""
    trace = regression_trace(find_violation(family_name, canary, settings=settings, device=device), canary, note)
    verify_seed(trace)
    return save_trace(trace, corpus)


def main(argv: list[str] | None = None) -> int:
    """``python -m poolfuzz.harness.canaries.seeding [NAME | FAMILY=module:attr ...] [--corpus DIR] [--note TEXT]``."""
    parser = argparse.ArgumentParser(prog=prog("seed-corpus"), description=summary(__doc__))
    parser.add_argument(
        "seeds",
        nargs="*",
        metavar="NAME|FAMILY=module:attr",
        help=f"canary names, as `poolfuzz selfcheck` lists them (default: {', '.join(SEEDS)}) or explicit specs",
    )
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--note", default="", help="provenance note for explicit FAMILY=module:attr seeds")
    args = parser.parse_args(argv)
    jobs: list[tuple[str, str, str, str | None]] = []  # family, spec, note, invariant the canary declares
    from poolfuzz.harness.canaries import CANARIES

    for item in args.seeds or SEEDS:
        if "=" in item:
            for family_name, spec in parse_overrides([item]).items():
                jobs.append((family_name, spec, args.note or f"seeded from {spec}", None))
        elif item in CANARIES:
            c = CANARIES[item]
            jobs.append((c.family, c.spec, f"{c.bug} ({c.upstream}); canary {item}", c.invariant))
        else:
            print(f"MISSING {item}: no such canary in poolfuzz.harness.canaries", file=sys.stderr)
    failures = 0
    for family_name, spec, note, declared in jobs:
        try:
            path = seed_trace(family_name, spec, note, corpus=args.corpus)
        except (SeedError, UnknownTargetError) as exc:
            print(f"FAILED  {spec}: {exc}", file=sys.stderr)
            failures += 1
            continue
        print(f"SEEDED  {path}  ({spec})")
        if declared is not None:
            invariant = load_trace(path).expect["invariant"]
            if invariant != declared:
                print(f"  note: caught by [{invariant}], the canary declares [{declared}]")
    return 1 if failures or len(jobs) < len(args.seeds or SEEDS) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

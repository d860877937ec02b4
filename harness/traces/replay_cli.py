"""``poolfuzz replay`` (``poolfuzz replay``): replay trace files and check each against its expectation.

One line per trace (docs/corpus.md has them all): ``PASS``, ``OK`` (the expected
violation fired), ``FIXED`` / ``NOT FIXED`` (``--expect fixed``), ``MARKED``
(``--mark-regression``), ``KNOWN`` (an unexpected violation that is a known upstream
finding of ``corpus/known.toml``: recorded, not failed unless ``--strict``), ``POSSIBLY
FIXED`` (a known finding's trace that no longer reproduces on its upstream target,
:mod:`poolfuzz.harness.traces.known_replay`), ``FAIL``, ``SKIP``, ``MISS`` (the implementation cannot
be imported here) and ``BAD`` (an invalid file, or sizes beyond the limits of
:mod:`poolfuzz.harness.judge.limits`); then one summary line of counts.

Exit status: 0 every trace matched (or was skipped), 1 some did not, 2 a usage
error, an invalid trace or a missing implementation (``--skip-missing`` turns
those into skips), 130 on SIGINT and 143 on SIGTERM, within a second, after the
counts of what was replayed so far (:mod:`poolfuzz.harness.traces.interrupt`).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from poolfuzz.harness.judge.families import UnknownTargetError, check_target, family, load_factory, parse_overrides
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.across import main_across
from poolfuzz.harness.traces.corpus import DEFAULT_CORPUS, rewrite_trace
from poolfuzz.harness.traces.interrupt import Interrupted, SignalGuard
from poolfuzz.harness.traces.known_replay import committed_finding, known_of, label, possibly_fixed_line, violation_known
from poolfuzz.harness.traces.replay import (
    ReplayResult,
    expected_outcome,
    old_implementation,
    plural,
    regression_of,
    replay_trace,
    same_implementation,
    trace_files,
)
from poolfuzz.harness.traces.schema import TraceError, load_trace
from poolfuzz.harness.upstream.known import KnownFinding, KnownFindingsError

STATUSES = ("matched", "failed", "skipped", "missing", "invalid")
Verdict = tuple[str, list[str]]
"""A status of :data:`STATUSES` and the lines printed for one trace."""


@dataclass(frozen=True)
class Options:
    overrides: dict[str, str]
    device: str | None = None
    steps: bool = False
    fixed: bool = False
    skip_missing: bool = False
    mark: bool = False
    fixed_by: str | None = None
    strict: bool = False
    """``--strict``: a violation the trace did not expect fails even when it is a known upstream finding."""
    known_file: Path | None = None
    known: tuple[KnownFinding, ...] = ()


# --------------------------------------------------------------- one trace
def judge(path: Path, options: Options) -> Verdict:
    """Replay one file and say whether it did what it expects (or, with ``fixed``, whether the fix holds)."""
    try:
        trace = load_trace(path)
    except TraceError as exc:
        return "invalid", [f"BAD  {exc}"]
    target = options.overrides.get(trace.family)
    result = replay_trace(trace, target=target, device=options.device)
    notes: list[str] = []
    old = old_implementation(trace)
    regression = regression_of(trace)
    if regression is not None and target is None and not options.fixed and result.outcome == "pass":
        if old is None:
            notes.append(f"regression of [{regression['invariant']}], fixed in place")
        else:
            on_old = replay_trace(trace, target=old, device=options.device)
            if on_old.outcome == "unavailable":
                notes.append(f"regression: the old {old} is unavailable here, not checked")
            elif on_old.outcome == "violation" and on_old.invariant == regression["invariant"]:
                notes.append(f"regression: the old {old} still breaks [{on_old.invariant}] {on_old.where}")
            else:
                line = f"FAIL {path} regression: expected [{regression['invariant']}] on the old {old}, got {on_old.describe()}"
                return "failed", [line, *_steps(trace, options)]
    known = violation_known(trace, path, result, options.known)
    if known is not None:
        notes.append(label(known))
    status, line = verdict(path, trace, result, fixed=options.fixed, skip_missing=options.skip_missing, notes=notes)
    if status == "failed" and known is not None and not options.fixed:
        if options.strict:
            line += "; --strict: a known finding fails"
        else:
            status, line = "matched", f"KNOWN {path}: [{result.invariant}] {result.where}, {label(known)}: recorded, not a new finding"
    elif status == "failed" and not options.fixed:
        line = possibly_fixed_line(path, trace, result, committed_finding(path, trace, options.known, options.known_file)) or line
    return status, [line, *_steps(trace, options)]


def verdict(
    path: Path | str, trace: Trace, result: ReplayResult, *, fixed: bool = False, skip_missing: bool = False, notes: list[str] | None = None
) -> tuple[str, str]:
    """``(status, line)`` for one replayed trace.

    With ``fixed`` a violation the trace expects of the replayed implementation
    is flipped: it must now pass (``FIXED``), and reproducing it is ``NOT FIXED``.
    """
    notes = list(notes or [])
    if result.outcome == "invalid":
        return "invalid", f"BAD  {path}: {result.message}"
    if result.outcome == "unavailable":
        if skip_missing:
            return "skipped", f"SKIP {path}: {result.describe()}"
        return "missing", f"MISS {path}: {result.describe()} (--skip-missing skips such traces)"
    if not same_implementation(trace, trace.implementation, result.implementation):
        notes.insert(0, f"against {result.implementation}")
    recorded = trace.recorded_device
    if recorded != result.device:
        notes.insert(0, f"recorded on {recorded}, replayed on {result.device}")
    suffix = f" [{'; '.join(notes)}]" if notes else ""
    outcome, invariant = expected_outcome(trace, result.implementation)
    if fixed and outcome == "violation":
        if result.outcome == "pass":
            return "matched", f"FIXED {path}: [{invariant}] no longer reproduces ({plural(result.steps, 'step')}){suffix}"
        if result.outcome == "violation" and result.invariant == invariant:
            return "failed", f"NOT FIXED {path}: still [{invariant}] {result.where}{suffix}"
        outcome, invariant = "pass", None
    if result.outcome == outcome == "pass":
        return "matched", f"PASS {path} ({plural(result.steps, 'step')}){suffix}"
    if result.outcome == outcome and result.invariant == invariant:
        return "matched", f"OK   {path} reproduced expected [{invariant}] {result.where}{suffix}"
    wanted = "pass" if outcome == "pass" else f"[{invariant}]"
    return "failed", f"FAIL {path} expected {wanted}, got {result.describe()}{suffix}"


def mark(path: Path, options: Options) -> Verdict:
    """Rewrite a trace that recorded a violation as a regression trace, once the fix is proven by replay.

    The fixed pool (``--fixed-by``, else the trace's own implementation) must
    pass; the old one (where the violation was recorded) must still break the
    recorded invariant when it is another importable implementation.  Otherwise
    the file is left as it was.
    """
    try:
        trace = load_trace(path)
    except TraceError as exc:
        return "invalid", [f"BAD  {exc}"]
    regression = regression_of(trace)
    if regression is not None:
        line = f"SKIP {path}: already a regression trace of [{regression['invariant']}] on {regression['implementation']}"
        return "skipped", [line]
    if trace.expect.get("outcome") != "violation":
        return "skipped", [f"SKIP {path}: records no violation, nothing to mark"]
    invariant = str(trace.expect["invariant"])
    default = family(trace.family).default
    old = trace.expect.get("implementation") or trace.implementation or default
    new = options.fixed_by or trace.implementation or default
    marked = replace(
        trace,
        implementation=options.fixed_by or trace.implementation,
        expect={"outcome": "pass", "regression": {"invariant": invariant, "implementation": old}},
    )
    on_new = replay_trace(marked, device=options.device)
    if on_new.outcome == "violation" and on_new.invariant == invariant:
        return "failed", [f"NOT FIXED {path}: still [{invariant}] {on_new.where} on {new}; file unchanged", *_steps(trace, options)]
    if on_new.outcome != "pass":
        status, line = verdict(path, marked, on_new, skip_missing=options.skip_missing)
        return status, [line + ("; file unchanged" if status == "failed" else ""), *_steps(trace, options)]
    note = "fixed in place"
    if old_implementation(marked) is not None:
        on_old = replay_trace(marked, target=old, device=options.device)
        if on_old.outcome == "unavailable":
            note = f"the old {old} is unavailable here, not checked"
        elif on_old.outcome == "violation" and on_old.invariant == invariant:
            note = f"the old {old} still breaks it {on_old.where}"
        else:
            line = (
                f"FAIL {path}: the old {old} no longer breaks [{invariant}] (got {on_old.describe()}), "
                "so the trace would guard nothing; file unchanged"
            )
            return "failed", [line, *_steps(trace, options)]
    rewrite_trace(marked, path)
    return "matched", [f"MARKED {path}: regression trace of [{invariant}]: passes on {new}; {note}", *_steps(trace, options)]


def _steps(trace: Trace, options: Options) -> list[str]:
    """The readable steps under a trace's line, with ``--steps``, whatever the outcome."""
    if not options.steps:
        return []
    return [trace.steps_text() if trace.steps else "  (no steps)"]


# ----------------------------------------------------------------------- CLI
def summary(counts: dict[str, int]) -> str:
    """``4 traces: 3 matched, 1 failed, 0 skipped, 0 missing, 0 invalid``."""
    return f"{plural(sum(counts.values()), 'trace')}: " + ", ".join(f"{n} {k}" for k, n in counts.items())


def exit_status(counts: dict[str, int]) -> int:
    """2 for an invalid trace or a missing implementation, else 1 for a failure, else 0."""
    return 2 if counts["invalid"] or counts["missing"] else 1 if counts["failed"] else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poolfuzz replay",
        description="Replay trace files through the pool drivers, without hypothesis, and check that each one "
        "does what it expects: pass, or break the invariant it recorded.",
        epilog="Exit status: 0 every trace matched (or was skipped), 1 some did not, 2 a usage error, an invalid "
        "trace or an implementation that cannot be imported here, 130 interrupted (SIGINT), "
        "143 terminated (SIGTERM). The trace format is in docs/corpus.md.",
    )
    parser.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH", help=f"trace files, or folders searched for .json files (default: {DEFAULT_CORPUS}/)"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="FAMILY=module:attr",
        help="replay the traces of a family against another implementation (repeatable)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], help="replay on this device instead of the recorded one")
    parser.add_argument("--steps", action="store_true", help="print the steps of every trace under its line")
    parser.add_argument(
        "--expect",
        choices=["recorded", "fixed"],
        default="recorded",
        help="recorded (the default): each trace must do what its file expects; fixed: the pool was "
        "fixed, so a trace that recorded a violation on it must now pass",
    )
    parser.add_argument(
        "--skip-missing", action="store_true", help="skip a trace whose implementation cannot be imported here, instead of exit status 2"
    )
    parser.add_argument(
        "--mark-regression",
        action="store_true",
        help="rewrite each given trace that recorded a violation as a regression trace, after "
        "checking that it passes on the fixed pool and still fails on the old one",
    )
    parser.add_argument(
        "--across",
        metavar="PACKAGE==LOW..HIGH",
        help="replay the traces against each release of sglang or vllm in the range (or a list: "
        "PACKAGE==V1,V2), each fetched once with pip download --no-deps, and say on which "
        "ones each trace reproduces (harness/traces/across.py)",
    )
    parser.add_argument(
        "--across-cache",
        type=Path,
        metavar="DIR",
        help="with --across: where the unzipped releases are kept (default ~/.cache/poolfuzz/releases)",
    )
    parser.add_argument(
        "--fixed-by",
        metavar="module:attr",
        help="with --mark-regression: the fixed pool (default: the trace's own implementation, fixed in place)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="a violation the trace did not expect fails even when it is a known upstream finding (corpus/known.toml); "
        "by default it is KNOWN: recorded, exit 0",
    )
    parser.add_argument("--known", type=Path, metavar="FILE.toml", help="the reviewed list of known findings (default corpus/known.toml)")
    return parser


def options_from(args: argparse.Namespace) -> Options:
    """Check the combination of arguments; :class:`UnknownTargetError` or ``ValueError`` for a usage error."""
    overrides = parse_overrides(args.target)
    for name, spec in overrides.items():
        check_target(name, spec)  # a class of another family is a usage error, not a FAIL
    if args.fixed_by is not None:
        if not args.mark_regression:
            raise ValueError("--fixed-by goes with --mark-regression")
        load_factory(args.fixed_by)
    if args.mark_regression:
        if overrides or args.expect == "fixed":
            raise ValueError("--mark-regression checks the fix itself: give the fixed pool with --fixed-by, not --target or --expect")
        if not args.paths:
            raise ValueError("--mark-regression rewrites files: name the traces to mark")
    if args.across_cache is not None and args.across is None:
        raise ValueError("--across-cache goes with --across")
    if args.across is not None and (args.target or args.mark_regression or args.expect == "fixed" or args.device):
        raise ValueError(
            "--across replays each trace as recorded against each release: it takes no --target, "
            "--expect fixed, --mark-regression or --device"
        )
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda, but no CUDA device is available here")
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        raise ValueError(f"no such file or directory: {', '.join(missing)}")
    if args.known is not None and not args.known.is_file():
        raise ValueError(f"--known {args.known}: no such file")
    return Options(
        overrides,
        args.device,
        args.steps,
        args.expect == "fixed",
        args.skip_missing,
        args.mark_regression,
        args.fixed_by,
        strict=args.strict,
        known_file=args.known,
        known=known_of(args.known),
    )


def main(argv: list[str] | None = None, *, exit_on_signal: bool = True) -> int:
    """``poolfuzz replay [PATH ...] [--target FAMILY=module:attr] [--expect fixed] [--mark-regression] ...``.

    Interrupted (SIGINT, SIGTERM), it prints the counts so far and, with
    ``exit_on_signal``, ends the process there (``os._exit``): the interpreter's
    own teardown with torch loaded takes about a second, which would break the
    promise to stop within one.  ``exit_on_signal=False`` returns 130 or 143 instead.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the usage error (or the help)
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        options = options_from(args)
    except (UnknownTargetError, ValueError, KnownFindingsError) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    if args.across is not None:
        return main_across(args.paths or [DEFAULT_CORPUS], args.across, args.across_cache)
    counts = dict.fromkeys(STATUSES, 0)
    each = mark if options.mark else judge
    with SignalGuard(lambda name: f"interrupted by {name}: {summary(counts)}") as guard:
        try:
            for path in trace_files(args.paths or [DEFAULT_CORPUS]):
                status, lines = each(path, options)
                for line in lines:
                    print(line, flush=True)
                counts[status] += 1
            print(summary(counts), flush=True)
        except Interrupted as stop:
            if guard.claim():
                print(f"interrupted by {stop.name}: {summary(counts)}", flush=True)
            if exit_on_signal and guard.active:
                sys.stderr.flush()
                os._exit(stop.status)
            return stop.status
    return exit_status(counts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

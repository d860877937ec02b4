"""``poolfuzz ci``: replay the committed upstream corpus against a checkout, then walk each upstream target it
supports for a fixed, seeded number of steps; JUnit XML, a JSON report and the new traces under ``--out``.

Exit status: 0 nothing new (known findings are recorded), 1 a new finding (a committed trace that no longer
does what it records, a new violation, or an exception in a target), 2 bad input (no checkout named, a folder
that is not one, an unknown distribution or target, an unreadable known list, an output that cannot be
written, or no upstream target that loads from the checkout), 130 interrupted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import sys
import time
from pathlib import Path

from poolfuzz.harness.arguments import positive
from poolfuzz.harness.child_processes import worker_context
from poolfuzz.harness.ci.outputs import REPORT_SCHEMA, finding_text, is_new, keep_new_traces, target_status, write_junit, write_report
from poolfuzz.harness.ci.plan import (
    DEFAULT_CORPUS,
    DISTRIBUTIONS,
    MAX_SECONDS,
    STEPS,
    CiInputError,
    CiTarget,
    committed_traces,
    locate,
    named_distributions,
    refusal,
    upstream_targets,
)
from poolfuzz.harness.ci.records import CopyRecord, Finding, Plan, Report, WalkRecord
from poolfuzz.harness.helptext import PROG

EXIT_OK, EXIT_NEW, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
SOURCE_OPTION = {"sglang": "--sglang-src", "vllm": "--vllm-src"}


def _budgets() -> str:
    """The slow targets' step budgets for ``--help``, by target name: ``PagedKV 10,000, ...``."""
    return ", ".join(f"{spec.rpartition(':')[2]} {steps:,}" for spec, steps in STEPS.items())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} ci",
        description="CI mode over an engine's checkout (--sglang-src PATH / --vllm-src PATH, before or after 'ci'): "
        "replay the committed upstream corpus against it, then walk every upstream target it supports for a fixed "
        "number of seeded steps (the same commit gives the same result); write JUnit XML, a JSON report and every "
        "new trace under --out. Exit 0: nothing new (known findings recorded); 1: a new finding; 2: bad input.",
    )
    parser.add_argument("--distribution", action="append", default=[], metavar="NAME",
                        help=f"test this distribution ({', '.join(DISTRIBUTIONS)}; repeatable); default: each one "
                             "named by --sglang-src / --vllm-src; without those, NAME's installed copy")  # fmt: skip
    parser.add_argument("--target", action="append", default=[], metavar="FAMILY|module:attr",
                        help="walk only these upstream targets (repeatable; default every one the checkout supports)")  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the schedule: each target's walk seed derives from it and the target (default 0)"
    )
    parser.add_argument("--scale", type=positive(float), default=1.0, metavar="F",
                        help=f"multiply every target's step budget (default 1: {_budgets()} steps for the slow targets, "
                             "20,000 for the others; about 2-3 minutes on 2 cores for SGLang)")  # fmt: skip
    parser.add_argument(
        "--workers", type=positive(int), default=2, metavar="N", help="targets walked at once, one process each (default 2)"
    )
    parser.add_argument("--out", type=Path, default=Path("poolfuzz-ci"), metavar="DIR",
                        help="artifacts folder: report.json, junit.xml, corpus/ (every trace found), new/ (the new ones)")  # fmt: skip
    parser.add_argument("--junit", type=Path, metavar="FILE.xml", help="JUnit XML path (default DIR/junit.xml)")
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="JSON report path (default DIR/report.json)")
    parser.add_argument("--corpus", type=Path, default=None, metavar="DIR",
                        help=f"the committed corpus whose upstream traces are replayed (default {DEFAULT_CORPUS})")  # fmt: skip
    parser.add_argument("--traces", type=Path, action="append", default=[], metavar="DIR|FILE",
                        help="more committed traces to replay: the engine's own (repeatable)")  # fmt: skip
    parser.add_argument("--known", type=Path, metavar="FILE.toml", help="the reviewed known findings (default CORPUS/known.toml)")
    parser.add_argument("--no-replay", dest="replay", action="store_false", help="skip the replay phase")
    parser.add_argument("--max-seconds", type=positive(float), default=MAX_SECONDS, metavar="S",
                        help=f"guard per target: a walk still running after S seconds stops, reported cut_off (default {MAX_SECONDS:.0f})")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        plan = prepare(args)
    except CiInputError as exc:
        print(f"poolfuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run(args, plan)
    except KeyboardInterrupt:
        print("poolfuzz: ci interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def prepare(args: argparse.Namespace) -> Plan:
    """Every check of the input, before anything runs: :class:`CiInputError` (exit 2) on the first problem."""
    from poolfuzz.harness.fuzz.outputs import OutputError, check_file, check_folder
    from poolfuzz.harness.upstream.known import KnownFindingsError, load_known

    names = named_distributions(args.distribution)
    copies = [locate(name) for name in names]
    corpus = args.corpus if args.corpus is not None else DEFAULT_CORPUS
    for folder, flag in [(corpus, "--corpus"), *((t, "--traces") for t in args.traces)]:
        if not folder.exists():
            raise CiInputError(f"{flag} {folder}: no such folder")
    known_file = args.known if args.known is not None else corpus / "known.toml"
    if args.known is not None and not args.known.is_file():
        raise CiInputError(f"--known {args.known}: no such file")
    try:
        known = load_known(known_file)
        check_folder(args.out, "--out")
        check_file(args.junit or args.out / "junit.xml", "--junit")
        check_file(args.report or args.out / "report.json", "--report")
    except (KnownFindingsError, OutputError) as exc:
        raise CiInputError(str(exc)) from None
    targets = upstream_targets(names, seed=args.seed, scale=args.scale)
    if args.target:
        unknown = [t for t in args.target if not any(t in (c.family, c.spec, c.key) for c in targets)]
        if unknown:
            raise CiInputError(
                f"--target {unknown[0]}: no upstream target of {', '.join(names)} (they are: {', '.join(c.key for c in targets)})"
            )
        targets = [c for c in targets if any(t in (c.family, c.spec, c.key) for t in args.target)]
    refused = {c.key: refusal(c.spec) for c in targets}
    if all(refused.values()):
        reasons = "; ".join(f"{key}: {why}" for key, why in refused.items())
        raise CiInputError(f"no upstream target loads from this copy ({reasons})")
    traces = committed_traces([corpus, *args.traces], names) if args.replay else []
    return {"copies": copies, "known": known, "known_file": known_file, "targets": targets, "refused": refused, "traces": traces}


def run(args: argparse.Namespace, plan: Plan) -> int:
    from poolfuzz.harness.ci.replays import replay_traces

    started = time.monotonic()
    out: Path = args.out
    for copy in plan["copies"]:
        print(f"poolfuzz ci: {copy.name} {copy.version} from {copy.site} ({copy.origin}); seed {args.seed}, scale {args.scale:g}")
    replays = replay_traces(plan["traces"], plan["known"], plan["known_file"])
    for replayed in replays:
        print(f"  replay {replayed['status'].upper():<14} {replayed['line']}")
    targets = walk_all(plan["targets"], plan["refused"], out / "corpus", plan["known_file"], args)
    kept = keep_new_traces(targets, replays, out / "new")
    sources = {c.name: c.site for c in plan["copies"]}
    for record in targets:
        for finding in record.get("findings", []):
            trace = finding.get("artifact") or finding.get("trace")
            if trace:
                source = sources.get(record["distribution"])
                finding["replay"] = f"{PROG} {SOURCE_OPTION[record['distribution']]} {source} replay {trace}" if source else None
    new = sum(1 for r in replays if r["status"] == "failed") + sum(1 for t in targets for f in t.get("findings", []) if is_new(f))
    status = EXIT_NEW if new else EXIT_OK
    report: Report = {
        "schema": REPORT_SCHEMA,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": [PROG, "ci", *(sys.argv[2:] if sys.argv[1:2] == ["ci"] else [])],
        "seed": args.seed,
        "scale": args.scale,
        "workers": args.workers,
        "copies": [CopyRecord(name=c.name, version=c.version, site=c.site, origin=c.origin) for c in plan["copies"]],
        "known_file": str(plan["known_file"]),
        "replay": replays,
        "targets": targets,
        "new_traces": kept,
        "totals": {
            "replayed": len(replays),
            "replay_failed": sum(1 for r in replays if r["status"] == "failed"),
            "possibly_fixed": sum(1 for r in replays if r["status"] == "possibly_fixed"),
            "targets": len(targets),
            "targets_skipped": sum(1 for t in targets if target_status(t) == "skipped"),
            "steps": sum(t.get("steps", 0) for t in targets),
            "known": sum(1 for t in targets for f in t.get("findings", []) if not is_new(f)),
            "new": new,
        },
        "seconds": round(time.monotonic() - started, 3),
        "exit_status": status,
    }
    report_path, junit_path = args.report or out / "report.json", args.junit or out / "junit.xml"
    write_report(report, report_path)
    write_junit(report, junit_path)
    print(summary(report))
    print(f"report: {report_path}\njunit: {junit_path}" + (f"\nnew traces: {out / 'new'}" if kept else ""))
    return status


def walk_all(
    targets: list[CiTarget], refused: dict[str, str | None], corpus: Path, known_file: Path, args: argparse.Namespace
) -> list[WalkRecord]:
    """Each target's record: skipped ones with the copy's reason, the others walked in processes of their own
    (a fresh interpreter each, so one target's loaded modules never lend state to another's)."""
    from poolfuzz.harness.ci.walks import walk_target

    records: dict[str, WalkRecord] = {}
    runnable = [t for t in targets if not refused[t.key]]
    for t in targets:
        reason = refused[t.key]
        if reason:
            records[t.key] = {"target": t.key, "family": t.family, "spec": t.spec, "distribution": t.distribution, "seed": t.seed,
                              "steps_budget": t.steps, "steps": 0, "skipped": True, "reason": reason, "findings": []}  # fmt: skip
            print(f"  fuzz   SKIPPED        {t.key}: {reason}")
    runnable.sort(key=lambda t: t.spec not in STEPS)  # the slow targets first: two cores finish together
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.workers, mp_context=worker_context(), max_tasks_per_child=1) as pool:
        futures = {pool.submit(walk_target, t, str(corpus), str(known_file), args.max_seconds): t for t in runnable}
        for future in concurrent.futures.as_completed(futures):
            t = futures[future]
            try:
                record = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker that died is this target's failure
                died: Finding = {"kind": "error", "invariant": None, "message": f"worker died: {type(exc).__name__}: {exc}",
                                 "trace": None, "steps": 0, "known": None, "steps_text": ""}  # fmt: skip
                record = {"target": t.key, "family": t.family, "spec": t.spec, "distribution": t.distribution, "seed": t.seed,
                          "steps_budget": t.steps, "steps": 0, "seconds": 0.0, "cut_off": False, "known_again": 0,
                          "findings": [died]}  # fmt: skip
            records[t.key] = record
            print(f"  fuzz   {target_status(record).upper():<14} {line(record)}")
    return [records[t.key] for t in targets]


def line(record: WalkRecord) -> str:
    parts = [
        f"{record['target']}: {record['steps']}/{record['steps_budget']} steps, seed {record['seed']}, {record.get('seconds', 0):.1f} s"
    ]
    if record.get("cut_off"):
        parts.append("cut off by --max-seconds (not the same result as an uncut run)")
    for finding in record.get("findings", []):
        known = finding.get("known")
        if known:
            parts.append(f"KNOWN [{finding['invariant']}] finding {known['number']} {known['key']}")
        else:
            parts.append(f"NEW {finding_text(finding)}; trace {finding.get('artifact') or finding.get('trace')}")
    return "; ".join(parts)


def summary(report: Report) -> str:
    totals = report["totals"]
    verdict = f"{totals['new']} new finding(s): exit 1" if totals["new"] else "nothing new: exit 0"
    return (
        f"poolfuzz ci: {totals['replayed']} traces replayed ({totals['replay_failed']} failed, {totals['possibly_fixed']} possibly fixed), "
        f"{totals['targets'] - totals['targets_skipped']} targets walked ({totals['targets_skipped']} skipped), {totals['steps']} steps, "
        f"{totals['known']} known finding(s) recorded; {verdict} ({report['seconds']:.1f} s)"
    )

"""``poolfuzz mutate``: plant mutants in ``pools/`` and report which ones the machines kill.

Order of a run: generate the mutants (parent, AST only); start the workers;
trace every target once, unmutated (abort if any fails); run every reached
mutant in the workers under the watchdog; print the table and the survivors;
write ``--json``.  Exit status: 0 the run completed (whatever survived), 1 the
baseline failed or a worker could not start (when a replacement worker fails
mid-run, the mutants judged so far are still reported), 2 usage error, 130
interrupted (the mutants judged so far are still reported).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from poolfuzz import harness
from poolfuzz.harness.helptext import prog
from poolfuzz.harness.mutate.mutants import ModuleSource, Mutant, generate
from poolfuzz.harness.mutate.plan import Baseline, BaselineFailed
from poolfuzz.harness.mutate.report import KILLS, not_run_text, survivors_text, table_text, to_json, write_json, wrong_equivalents_text
from poolfuzz.harness.mutate.runner import Job, WorkerFailed, WorkerPool
from poolfuzz.harness.mutate.targets import target_names
from poolfuzz.harness.mutate.worker import Outcome, WorkerSetup

ROOT = Path(harness.__file__).resolve().parent.parent
EXCLUDED = ("pools/page_alloc/triton.py",)
"""Left out by default: Triton kernel bodies run as Python only under the slow CPU interpreter, which no
CPU machine draws (the scheduler machine runs Triton only when pinned, and on a GPU it is compiled)."""
BASELINE_LIMIT = 600.0
EXIT_BASELINE, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    from poolfuzz.harness.arguments import positive
    from poolfuzz.harness.cli import usable_cores

    parser = argparse.ArgumentParser(
        prog=prog("mutate"),
        description="Plant mutants in the pools and report which ones the fuzzer's state machines kill "
        "(only the machines count as killers; docs/mutation.md).",
    )
    parser.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="PATH",
        help=f"mutate this file (repeatable; default: every pools/ module except {', '.join(EXCLUDED)})",
    )
    parser.add_argument(
        "--family", action="append", default=[], metavar="FAMILY", help="run only this family's machines (repeatable; default: all)"
    )
    parser.add_argument(
        "--match", action="append", default=[], metavar="TEXT", help="only mutants whose id contains TEXT (repeatable: any of them)"
    )
    parser.add_argument(
        "--rerun",
        type=Path,
        metavar="PATH",
        help="only the behavioural mutants a previous --json run left alive (survived or not "
        "reached), by id; ids of lines that have since moved are not found",
    )
    parser.add_argument("--limit", type=positive(int), metavar="N", help="only the first N mutants (quick runs)")
    parser.add_argument(
        "--workers", type=positive(int), default=usable_cores(), metavar="N", help="worker processes (default: usable cores)"
    )
    parser.add_argument(
        "--timeout",
        type=positive(float),
        metavar="SECONDS",
        help="time limit per mutant (default: 10 s + 3x the traced baseline time of the machines it runs)",
    )
    parser.add_argument("--examples", type=positive(int), metavar="N", help="examples per machine run (default: the ci profile's)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--list", action="store_true", help="list the selected mutants and exit")
    return parser


def select_modules(paths: Sequence[str]) -> list[ModuleSource]:
    """The modules named (relative to the working directory or the repository root), or the default set."""
    if not paths:
        files = [f for f in sorted((ROOT / "pools").rglob("*.py")) if f.relative_to(ROOT).as_posix() not in EXCLUDED]
    else:
        files = []
        for path in paths:
            candidates = [Path(path), ROOT / path]
            found = next((c.resolve() for c in candidates if c.is_file()), None)
            if found is None or not found.is_relative_to(ROOT) or found.suffix != ".py":
                raise ValueError(f"--module {path}: not a Python file of this repository ({ROOT})")
            files.append(found)
    return [ModuleSource.load(f, ROOT) for f in dict.fromkeys(files)]


def alive_in(path: Path) -> set[str]:
    """Ids of the behavioural mutants that survived (or were not reached) in a previous ``--json`` file."""
    try:
        document = json.loads(path.read_text())
        return {m["id"] for m in document["mutants"] if m["kind"] == "behavioural" and m["status"] in ("survived", "not-reached")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--rerun {path}: not a mutation JSON file ({exc})") from None


def select_mutants(modules: Sequence[ModuleSource], match: Sequence[str], limit: int | None, only: set[str] | None = None) -> list[Mutant]:
    mutants = [m for module in modules for m in generate(module)]
    if only is not None:
        mutants = [m for m in mutants if m.id in only]
    if match:
        mutants = [m for m in mutants if any(text in m.id for text in match)]
    return mutants[:limit] if limit else mutants


class Progress:
    """A line on stderr every ``every`` seconds: how many mutants are judged, killed, and the time left."""

    def __init__(self, total: int, every: float = 15.0) -> None:
        self.total, self.every = total, every
        self.started = self.last = time.monotonic()
        self.counts: Counter[str] = Counter()

    def add(self, outcome: Outcome) -> None:
        self.counts[outcome.status] += 1
        now = time.monotonic()
        done = sum(self.counts.values())
        if now - self.last >= self.every or done == self.total:
            self.last = now
            elapsed = now - self.started
            left = elapsed / done * (self.total - done)
            kills = sum(self.counts[s] for s in KILLS)
            print(
                f"[mutate] {done}/{self.total} run: {kills} killed ({self.counts['timeout']} by timeout), "
                f"{self.counts['survived']} survived, {self.counts['not-run']} not run; "
                f"{elapsed / 60:.1f} min elapsed, about {left / 60:.1f} min left",
                file=sys.stderr,
                flush=True,
            )


def run_baseline(pool: WorkerPool, targets: list[str]) -> Baseline:
    baseline = Baseline(targets)

    def traced(job: Job, reply: tuple[Any, ...]) -> None:
        if reply[0] == "traced":
            baseline.record(reply[1], reply[2], reply[3], reply[4])
        else:
            baseline.record(job.message[1], 0.0, {}, f"the baseline run {reply[0]} ({reply[1]})")

    pool.run([Job(f"trace:{t}", ("trace", t), BASELINE_LIMIT) for t in targets], traced)
    baseline.check()
    return baseline


def run_mutants(pool: WorkerPool, mutants: list[Mutant], baseline: Baseline, timeout: float | None, outcomes: dict[str, Outcome]) -> None:
    """Judge ``mutants`` into ``outcomes`` (filled as they finish, so an interrupted run keeps what it judged)."""
    jobs = []
    for mutant in mutants:
        reaching = baseline.reaching(mutant)
        if not reaching:
            outcomes[mutant.id] = Outcome(mutant.id, "not-reached", detail="no machine executes this line")
        else:
            jobs.append(Job(mutant.id, ("mutant", mutant.id, reaching), baseline.limit(reaching, timeout)))
    print(
        f"[mutate] {len(mutants)} mutants: {len(outcomes)} on lines no machine executes, {len(jobs)} to run on {pool.workers} worker(s)",
        file=sys.stderr,
        flush=True,
    )
    progress = Progress(len(jobs))

    def finished(job: Job, reply: tuple[Any, ...]) -> None:
        if reply[0] == "result":
            outcome: Outcome = reply[1]
        else:  # the watchdog's timeout or a dead worker: both kills
            targets = tuple(job.message[2])
            detail = f"over the {job.limit:.0f} s limit" if reply[0] == "timeout" else f"worker exit code {reply[1]}"
            outcome = Outcome(job.key, reply[0], "", detail, job.limit if reply[0] == "timeout" else 0.0, targets)
        outcomes[job.key] = outcome
        progress.add(outcome)

    try:
        pool.run(jobs, finished)
    finally:
        pool.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        modules = select_modules(args.module)
        targets = target_names(args.family)
        only = alive_in(args.rerun) if args.rerun is not None else None
    except ValueError as exc:
        print(f"poolfuzz mutate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    mutants = select_mutants(modules, args.match, args.limit, only)
    if only is not None and len(mutants) < len(only) and not (args.match or args.limit):
        print(
            f"[mutate] --rerun: {len(only) - len(mutants)} of {len(only)} ids are no longer generated from the "
            "selected modules (their lines moved or the modules were not selected)",
            file=sys.stderr,
        )
    if args.list:
        for m in mutants:
            print(f"{m.id}  [{m.kind}]  {m.description}")
        return 0
    if not mutants:
        print("poolfuzz mutate: error: no mutant selected", file=sys.stderr)
        return EXIT_USAGE
    used = sorted({m.path for m in mutants})
    setup = WorkerSetup(str(ROOT), tuple((mod.path, mod.digest) for mod in modules if mod.path in used), args.examples)
    pool = WorkerPool(setup, args.workers)
    started = time.monotonic()
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    outcomes: dict[str, Outcome] = {}
    status = 0
    try:
        print(f"[mutate] baseline: tracing {len(targets)} machine(s), unmutated", file=sys.stderr, flush=True)
        baseline = run_baseline(pool, targets)
        print(f"[mutate] baseline clean in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    except (BaselineFailed, WorkerFailed, KeyboardInterrupt) as exc:
        pool.close()
        if isinstance(exc, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        print(f"poolfuzz mutate: error: {exc}", file=sys.stderr)
        return EXIT_BASELINE
    try:
        run_mutants(pool, mutants, baseline, args.timeout, outcomes)
    except WorkerFailed as exc:  # a replacement worker could not start (a mutated file changed on disk, say)
        print(f"poolfuzz mutate: error: {exc}\n[mutate] reporting the {len(outcomes)} mutants judged before", file=sys.stderr)
        status = EXIT_BASELINE
    except KeyboardInterrupt:
        print(f"[mutate] interrupted: reporting the {len(outcomes)} mutants judged so far", file=sys.stderr)
        status = EXIT_INTERRUPTED
    wall = time.monotonic() - started
    pairs = [(m, outcomes[m.id]) for m in mutants if m.id in outcomes]
    print(table_text(pairs))
    print()
    print(survivors_text(pairs, status="survived", title="surviving behavioural mutants"))
    print()
    print(survivors_text(pairs, status="not-reached", title="behavioural mutants no machine reaches"))
    wrong = wrong_equivalents_text(pairs)
    if wrong:
        print(f"\n{wrong}")
    skipped = not_run_text(pairs)
    if skipped:
        print(f"\n{skipped}")
    print(
        f"\n{len(pairs)} of {len(mutants)} mutants judged in {wall / 60:.1f} min on {args.workers} worker(s) "
        f"({pool.restarts} worker restart(s))"
    )
    if args.json is not None:
        run = {
            "started": stamp,
            "modules": [mod.path for mod in modules],
            "targets": targets,
            "workers": args.workers,
            "examples": args.examples,
            "timeout": args.timeout,
            "wall_seconds": round(wall, 1),
            "baseline_seconds": {t: round(s, 2) for t, s in baseline.seconds.items()},
            "complete": status == 0,
            "worker_restarts": pool.restarts,
        }
        write_json(to_json(pairs, run), args.json)
        print(f"json: {args.json}")
    return status

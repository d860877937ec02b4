"""``poolfuzz`` (also ``poolfuzz``): fuzz | list | dashboard | replay | selfcheck | bench | mutate.

``fuzz``, ``list`` and ``dashboard`` are parsed here (``list`` runs in :mod:`poolfuzz.harness.list_command`); ``replay``, ``selfcheck``,
``seed-corpus``, ``bench`` and ``mutate`` are handed their remaining arguments
(``<module>.main(argv)``), imported only when asked for.  Every failure to start is one line on stderr and exit
status 2, never a traceback.  Every help text names the program :data:`PROG` (``poolfuzz COMMAND``).

Exit status of ``fuzz``: 0 nothing found, 1 a counterexample (or a crashed
worker) was found, 2 usage error, 130 interrupted (Ctrl-C) and 143 terminated
(SIGTERM) before anything was found.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from poolfuzz.harness.arguments import positive
from poolfuzz.harness.helptext import PROG

if TYPE_CHECKING:
    from poolfuzz.harness.dashboard import LiveDashboard

DISPATCHED = {
    "replay": ("poolfuzz.harness.traces.replay_cli", "replay corpus traces through the drivers, without hypothesis"),
    "selfcheck": ("poolfuzz.harness.canaries.selfcheck", "prove the harness catches every canary bug"),
    "report": ("poolfuzz.harness.traces.issue_report", "an upstream-ready Markdown issue for a trace of an upstream target"),
    "ci": ("poolfuzz.harness.ci.command", "CI mode over an engine's checkout: replay the upstream corpus, walk its targets, JUnit"),
    "seed-corpus": ("poolfuzz.harness.canaries.seeding", "fuzz canaries and save their shrunk regression traces"),
    "bench": ("poolfuzz.harness.bench.run", "benchmark the pools and the page-index kernels"),
    "mutate": ("poolfuzz.harness.mutate.command", "plant mutants in pools/ and report which ones the machines kill"),
    "coverage": ("poolfuzz.harness.bench.coverage", "branch coverage of pools/ reached by the machine tests alone"),
}
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(ValueError):
    """Arguments that parse but cannot be honoured here."""


# ------------------------------------------------------------------ parser
def usable_cores() -> int:
    """Cores this process may run on (CPU affinity, as in containers and CI), not all the machine has."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _workers(value: str) -> int:
    if value == "auto":
        return usable_cores()
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', not {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', not {value!r}")
    return number


def _add_fuzz_arguments(fuzz: argparse.ArgumentParser) -> None:
    from poolfuzz.harness.fuzz.database import DEFAULT_DATABASE

    fuzz.add_argument("--target", action="append", default=[], metavar="FAMILY[=module:attr]",
                      help="fuzz this family (repeatable), optionally with another implementation; "
                           "default: every family whose machine imports")
    budget = fuzz.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=positive(float), metavar="N",
                        help="fuzzing time in seconds, counted once the workers have started (default 60)")
    budget.add_argument("--minutes", type=positive(float), metavar="N", help="fuzzing time in minutes")
    fuzz.add_argument("--workers", type=_workers, default="auto", metavar="N|auto",
                      help="worker processes (default auto: one per usable core)")
    fuzz.add_argument("--seed", type=int, help="seed of the whole run (default: random, printed and reported)")
    fuzz.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where pools allocate (default cpu)")
    fuzz.add_argument("--corpus", type=Path, default=Path("corpus/found"), metavar="DIR",
                      help="where counterexample traces are saved (default corpus/found)")
    fuzz.add_argument("--report", type=Path, metavar="FILE.json",
                      help="JSON report path (default reports/poolfuzz-<UTC time>-seed<SEED>.json)")
    fuzz.add_argument("--steps", type=positive(int), default=200, metavar="N",
                      help="steps per example, hypothesis's stateful_step_count (default 200)")
    fuzz.add_argument("--no-misuse", dest="misuse", action="store_false",
                      help="issue valid calls only (for targets that do not validate their input)")
    fuzz.add_argument("--coverage", action="store_true",
                      help="measure branch coverage of pools/ in the workers and add it to the report")
    fuzz.add_argument("--database", default=DEFAULT_DATABASE, metavar="LAYER[,LAYER...]|none",
                      help="hypothesis example database shared by all workers: comma-separated layers, each a "
                           "DIR or redis://HOST:PORT[/DB], prefixed 'readonly:' to read without writing "
                           f"(default {DEFAULT_DATABASE})")
    fuzz.add_argument("--grace", type=float, default=60.0, metavar="SECONDS",
                      help="how long a failure still being shrunk may outlive the budget (default 60)")
    fuzz.add_argument("--progress-every", type=positive(float), metavar="SECONDS",
                      help="progress interval (default 0.5 on a terminal, 5 otherwise)")
    fuzz.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    fuzz.add_argument("--dashboard", type=Path, metavar="FILE.html",
                      help="keep an HTML dashboard of this run: rewritten every few seconds while it runs (the page "
                           "reloads itself), final when it ends (needs the dashboard extra)")
    fuzz.add_argument("--series-every", type=positive(float), metavar="SECONDS",
                      help="time-series sampling interval of the report (default: budget/100, at least 1 s)")
    fuzz.add_argument("--round-seconds", type=positive(float), default=2.0, metavar="SECONDS",
                      help=argparse.SUPPRESS)
    _add_known_arguments(fuzz)


def _add_known_arguments(parser: argparse.ArgumentParser) -> None:
    """``--strict`` and ``--known FILE``: how a known upstream finding counts (``fuzz``; ``replay``, ``selfcheck``)."""
    parser.add_argument("--strict", action="store_true",
                        help="a known upstream finding (corpus/known.toml) fails the run as a new one does "
                             "(default: recorded as known, exit 0, and fuzzing of its target goes on)")
    parser.add_argument("--known", type=Path, metavar="FILE.toml",
                        help="the reviewed list of known findings (default: the checkout's corpus/known.toml)")


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--sglang-src`` / ``--vllm-src``, for the help text: :func:`take_source_options` takes them before parsing."""
    sources = parser.add_argument_group("upstream sources (any command, replay included)")
    sources.add_argument("--sglang-src", metavar="PATH",
                         help="load SGLang's files from PATH (a checkout's python/ folder or an unzipped wheel) instead "
                              "of the installed sglang; same as POOLFUZZ_SGLANG_SRC=PATH (docs/compatibility.md)")
    sources.add_argument("--vllm-src", metavar="PATH",
                         help="load vLLM's files from PATH instead of the installed vllm; same as POOLFUZZ_VLLM_SRC=PATH")


def version() -> str:
    """The installed distribution's version; a checkout run without installing it has none to read."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("poolfuzz")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="poolfuzz: invariant checking and stateful fuzzing of LLM-serving memory pools "
                    "(also run as 'poolfuzz').",
        epilog=f"Run '{PROG} COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    _add_source_arguments(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fuzz = commands.add_parser("fuzz", help="fuzz every target for a time budget, on all cores, and report",
                               description="Fuzz pool implementations for a time budget and write a report. "
                                           "Exit 0: nothing found; 1: counterexample or crashed worker; "
                                           "2: usage error; 130: interrupted (Ctrl-C); 143: terminated (SIGTERM).")
    _add_fuzz_arguments(fuzz)
    _add_source_arguments(fuzz)
    listing = commands.add_parser("list", help="families, implementations, operations, invariants and kernels")
    listing.add_argument("--target", action="append", default=[], metavar="FAMILY=module:attr",
                         help="show this substitution as active (repeatable)")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument("--contracts", action="store_true",
                         help="the caller contract of each upstream target: the calls upstream's own callers make, "
                              "with the lines that make them (docs/contracts.md)")
    _add_source_arguments(listing)
    from poolfuzz.harness.dashboard import add_arguments as add_dashboard_arguments

    dashboard = commands.add_parser("dashboard", help="one self-contained HTML page of fuzz reports",
                                    description="Build one offline HTML page from fuzz reports: targets, failures "
                                                "with replay commands, behaviour curves, trends across runs "
                                                "(or nights, with --by-night).")
    add_dashboard_arguments(dashboard)
    for name, (_, summary) in DISPATCHED.items():
        sub = commands.add_parser(name, help=summary, add_help=False)
        sub.add_argument("args", nargs=argparse.REMAINDER)
    return parser


# -------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run_command(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # Ctrl-C before a command installed its own handling (imports, start-up)
        print("poolfuzz: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


SOURCE_OPTIONS = {"--sglang-src": "POOLFUZZ_SGLANG_SRC", "--vllm-src": "POOLFUZZ_VLLM_SRC"}
"""Options every command takes (before or after its name): the folder of upstream files to load, set as the
environment variable the loaders read, so fuzz and replay workers inherit it (harness/upstream/loading.py)."""


def take_source_options(args_list: list[str]) -> list[str]:
    """``args_list`` without ``--sglang-src PATH`` / ``--vllm-src PATH`` (or ``=PATH``), each exported to its variable.

    Taken from anywhere before a ``--``, so ``poolfuzz --sglang-src P replay ...`` and
    ``poolfuzz fuzz --sglang-src P ...`` both work, dispatched commands included.  A folder that
    does not exist is a :class:`UsageError`; what is in it is checked when a target loads.
    """
    rest: list[str] = []
    items = iter(args_list)
    for item in items:
        if item == "--":
            rest.append(item)
            rest.extend(items)
            break
        option, eq, value = item.partition("=")
        if option not in SOURCE_OPTIONS:
            rest.append(item)
            continue
        if not eq:
            value = next(items, "")
        if not value or value.startswith("-"):
            raise UsageError(f"{option} needs a PATH (the folder that holds the package's files)")
        if not Path(value).expanduser().is_dir():
            raise UsageError(f"{option} {value}: no such folder")
        os.environ[SOURCE_OPTIONS[option]] = str(Path(value).expanduser().resolve())
    return rest


def run_command(args_list: list[str]) -> int:
    try:
        args_list = take_source_options(args_list)
    except UsageError as exc:
        print(f"poolfuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args_list and args_list[0] in DISPATCHED:
        return dispatch(args_list[0], args_list[1:])
    try:
        args = build_parser().parse_args(args_list)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    from poolfuzz.harness.fuzz.database import DatabaseError
    from poolfuzz.harness.fuzz.outputs import OutputError
    from poolfuzz.harness.judge.families import UnknownTargetError
    from poolfuzz.harness.upstream.known import KnownFindingsError

    try:
        if args.command == "list":
            from poolfuzz.harness.list_command import cmd_list

            return cmd_list(args)
        if args.command == "dashboard":
            from poolfuzz.harness.dashboard import run as run_dashboard

            return run_dashboard(args)
        return cmd_fuzz(args)
    except (UnknownTargetError, DatabaseError, OutputError, UsageError, KnownFindingsError) as exc:
        print(f"poolfuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def dispatch(command: str, argv: list[str]) -> int:
    module_name = DISPATCHED[command][0]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = isinstance(exc, ModuleNotFoundError) and exc.name == module_name
        why = f"{module_name} is missing" if missing else f"importing {module_name} failed: {exc}"
        print(f"poolfuzz: error: '{command}' is not available in this install ({why})", file=sys.stderr)
        return EXIT_USAGE
    entry = getattr(module, "main", None)
    if entry is None:
        print(f"poolfuzz: error: {module_name} has no main(argv)", file=sys.stderr)
        return EXIT_USAGE
    try:
        status = entry(argv)
    except SystemExit as exc:  # an argparse inside the command: --help (0) or a usage error (2)
        status = exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return int(status or 0)


# -------------------------------------------------------------------- fuzz
def check_outputs(args: argparse.Namespace, report: Path) -> None:
    """Every place the run writes, checked before any worker starts: a found counterexample must
    have somewhere to go (:mod:`poolfuzz.harness.fuzz.outputs`)."""
    from poolfuzz.harness.fuzz.database import check_database
    from poolfuzz.harness.fuzz.outputs import check_file, check_folder, folder_to_make

    check_folder(args.corpus, "--corpus")
    check_file(report, "--report")
    if args.dashboard is not None:
        check_file(args.dashboard, "--dashboard")
    check_database(args.database)
    named = [(args.dashboard, "--dashboard", True), (args.report, "--report", True)]
    if args.corpus != Path("corpus/found"):  # the default is made quietly, as on every fresh clone
        named.append((args.corpus, "--corpus", False))
    for path, flag, is_file in named:
        made = folder_to_make(path, flag, is_file=is_file) if path is not None else None
        if made is not None:
            print(f"poolfuzz: {made}", file=sys.stderr)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from poolfuzz.harness.fuzz import FuzzOptions, FuzzRun
    from poolfuzz.harness.fuzz.options import select_targets_apart
    from poolfuzz.harness.fuzz.report import summary_text, write_report
    from poolfuzz.harness.upstream.known import load_known

    if args.known is not None and not args.known.is_file():
        raise UsageError(f"--known {args.known}: no such file")
    load_known(args.known)  # a malformed list is a usage error before any worker starts
    targets, skipped = select_targets_apart(args.target)
    for s in skipped:
        print(f"poolfuzz: warning: skipping {s['family']}: {s['reason']}", file=sys.stderr)
    if not targets:
        raise UsageError("no target can be fuzzed (see the warnings above)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available here")
    if args.coverage:
        try:
            import coverage  # noqa: F401
        except ImportError:
            raise UsageError("--coverage needs coverage.py (pip install 'poolfuzz[test]')") from None
    seconds = args.seconds if args.seconds is not None else (args.minutes * 60 if args.minutes else 60.0)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**32)
    live = sys.stderr.isatty() and not args.plain
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    report_path = args.report or Path("reports") / f"poolfuzz-{stamp}-seed{seed}.json"
    check_outputs(args, report_path)
    options = FuzzOptions(
        targets=targets, seconds=seconds, workers=args.workers, seed=seed, device=args.device, corpus=args.corpus,
        database=args.database, steps=args.steps, misuse=args.misuse, coverage=args.coverage, grace=args.grace,
        round_seconds=args.round_seconds, progress_every=args.progress_every or (0.5 if live else 5.0), live=live,
        logs=report_path.with_suffix(".logs"), skipped=skipped, series_every=args.series_every, report=report_path,
        strict=args.strict, known_file=args.known,
    )
    live = live_dashboard(args.dashboard, report_path)
    report = FuzzRun(options, err=sys.stderr, live=live.update if live is not None else None).run()
    write_report(report, report_path)
    print(summary_text(report))
    print(f"\nreport: {report_path}")
    if live is not None:
        try:
            live.finish(report)
            print(f"dashboard: {args.dashboard}")
        except Exception as exc:  # noqa: BLE001 - the run's result stands without its page
            print(f"poolfuzz: warning: no dashboard: {type(exc).__name__}: {exc}", file=sys.stderr)
    return int(report["exit_status"])


def live_dashboard(path: Path | None, report_path: Path) -> LiveDashboard | None:
    """The live page of ``fuzz --dashboard FILE`` (rewritten every few seconds while the run goes on,
    reloading itself; final when it ends), or ``None`` without one or without plotly (a warning)."""
    if path is None:
        return None
    try:
        from poolfuzz.harness.dashboard import LiveDashboard

        return LiveDashboard(path, report_path=report_path)
    except ImportError as exc:
        print(f"poolfuzz: warning: no dashboard: {exc}", file=sys.stderr)
        return None

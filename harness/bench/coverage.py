"""``poolfuzz coverage``: the branch coverage of ``pools/`` that the machine tests alone reach.

The fuzzer is the product, so the number that matters is what its state
machines reach, not what hand-written unit tests do.  "The machine tests" are
:data:`MACHINE_TESTS`:

* ``tests/test_machines.py``: every family's machine (``FAMILIES``), with misuse
  on and with valid calls only;
* ``tests/test_scheduler_machine.py``: the scheduler machine under each page
  kernel, at page size 1, over hybrid rows, with the prefix cache and with the
  sliding window, and its two planted-leak hunts (which drive the same machine).

Left out on purpose: the pools' unit tests, the canary and teeth tests (they run
broken pools), the differential kernel tests and the upstream tests.

Each file runs in its own ``coverage run --branch --source=pools -m pytest``
subprocess with ``CI=true`` (the derandomised ``ci`` profile), up to ``--jobs``
at once; the data files are then combined and reported per file.  Lines that
cannot run on a CPU are excluded where they stand (``# pragma: no cover``, with
the reason beside it) or by a pattern in ``pyproject.toml``'s
``[tool.coverage.report]``, each with its reason.  ``--fail-under`` turns the
total into an exit status.  The suite holds the machine tests at :data:`REQUIRED` as it runs them
(``tests/machine_coverage.py``: :func:`combined` and :func:`record_imports` serve both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poolfuzz import harness
from poolfuzz.harness.helptext import prog, summary

ROOT = Path(harness.__file__).resolve().parent.parent
MACHINE_TESTS = ("tests/test_scheduler_machine.py", "tests/test_machines.py")
"""The slower file first, so two jobs finish together."""
REQUIRED = 97.0
"""Percent of the CPU-reachable branches of ``pools/`` the machine tests must reach."""


@dataclass(frozen=True)
class FileCoverage:
    """One module of ``pools/``: statements and branches, and how many of each the machines reached."""

    path: str
    statements: int
    missing_statements: int
    branches: int
    missing_branches: int
    missing: str
    """The missed lines and arcs, e.g. ``94, 98-103, 352->354``."""

    @property
    def percent(self) -> float:
        total = self.statements + self.branches
        return 100.0 * (total - self.missing_statements - self.missing_branches) / total if total else 100.0


@dataclass(frozen=True)
class Measurement:
    files: tuple[FileCoverage, ...]
    seconds: float

    @property
    def total(self) -> float:
        units = sum(f.statements + f.branches for f in self.files)
        missed = sum(f.missing_statements + f.missing_branches for f in self.files)
        return 100.0 * (units - missed) / units if units else 100.0

    def table(self, *, missing: bool = False) -> str:
        """The per-file table as Markdown (``docs/benchmarks.md`` carries it), ``missing`` adding the missed lines."""
        head = "| file | statements | missed | branches | missed branches | branch coverage |"
        rule = "|---|---:|---:|---:|---:|---:|"
        if missing:
            head, rule = head + " missed lines and arcs |", rule + "---|"
        rows = [head, rule]
        for f in self.files:
            row = f"| `{f.path}` | {f.statements} | {f.missing_statements} | {f.branches} | {f.missing_branches} | {f.percent:.1f}% |"
            rows.append(row + (f" {f.missing} |" if missing else ""))
        statements = sum(f.statements for f in self.files)
        branches = sum(f.branches for f in self.files)
        missed = sum(f.missing_statements for f in self.files)
        partial = sum(f.missing_branches for f in self.files)
        rows.append(f"| **total** | {statements} | {missed} | {branches} | {partial} | **{self.total:.1f}%** |" + (" |" if missing else ""))
        return "\n".join(rows)


def _run_one(test_file: str, data_dir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CI": "true", "COVERAGE_FILE": str(data_dir / ".coverage")}
    for name in ("HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS", "POOLFUZZ_TARGETS"):
        env.pop(name, None)  # the ci profile and the default targets, whatever the caller's
    command = [
        sys.executable,
        "-m",
        "coverage",
        "run",
        "--branch",
        "--source=pools",
        "--parallel-mode",
        f"--rcfile={ROOT / 'pyproject.toml'}",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        test_file,
    ]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def measure(*, jobs: int = 2, tests: Sequence[str] = MACHINE_TESTS) -> Measurement:
    """Run ``tests`` under coverage, ``jobs`` files at a time; raise ``RuntimeError`` if a test file fails."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="poolfuzz-coverage-") as tmp:
        data_dir = Path(tmp)
        pending, failures = list(tests), []
        running: list[tuple[str, subprocess.Popen[bytes]]] = []
        while pending or running:
            while pending and len(running) < max(1, jobs):
                name = pending.pop(0)
                running.append((name, _run_one(name, data_dir)))
            name, process = running.pop(0)
            output, _ = process.communicate()
            if process.returncode != 0:
                failures.append(f"{name} (exit {process.returncode}):\n{output.decode(errors='replace')[-3000:]}")
        if failures:
            raise RuntimeError("the machine tests failed, so their coverage means nothing:\n" + "\n".join(failures))
        return combined(data_dir, time.monotonic() - start)


def combined(data_dir: Path, seconds: float) -> Measurement:
    """Combine the coverage data files in ``data_dir`` (``.coverage.*``) into one measurement of ``pools/``."""
    import coverage

    cov = coverage.Coverage(data_file=str(data_dir / ".coverage"), config_file=str(ROOT / "pyproject.toml"))
    cov.combine([str(data_dir)])
    report = data_dir / "coverage.json"
    cov.json_report(outfile=str(report))
    data = json.loads(report.read_text())
    files = (_file_coverage(path, entry) for path, entry in sorted(data["files"].items()))
    return Measurement(tuple(f for f in files if f is not None), seconds)


def record_imports(data_dir: Path) -> None:
    """Record, in a fresh process, the lines ``pools/`` runs when its modules are imported.

    The suite measures each machine test while it runs (``tests/machine_coverage.py``), but a worker
    imported ``pools`` during collection, before any test: module-level lines (imports, ``def`` and
    ``class`` headers, import-time branches) ran untraced there.  A fresh process importing every
    module of ``pools`` under coverage records them, as ``coverage run`` does for :func:`measure`, then asks
    the package for each public name and for one it lacks: ``pools/__init__`` resolves its names on first
    use (PEP 562), which the workers also did during collection.
    """
    script = (
        "import importlib, pkgutil, coverage\n"
        f"cov = coverage.Coverage(data_file={str(data_dir / '.coverage')!r}, data_suffix=True, branch=True, "
        f"source=[{str(ROOT / 'pools')!r}], config_file={str(ROOT / 'pyproject.toml')!r})\n"
        "cov.start()\n"
        "import poolfuzz.pools as pools\n"
        "for info in pkgutil.walk_packages(pools.__path__, 'poolfuzz.pools.'):\n"
        "    try:\n"
        "        importlib.import_module(info.name)\n"
        "    except ImportError:\n"
        "        pass  # an optional extra missing here (triton): its module is not measured, as in the tests\n"
        "for name in pools.__all__:\n"
        "    getattr(pools, name)\n"
        "assert not hasattr(pools, 'no_such_name')\n"
        "cov.stop()\n"
        "cov.save()\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=300)


def _ranges(lines: list[int]) -> list[str]:
    """``[94, 98, 99, 100]`` as ``["94", "98-100"]``."""
    out: list[str] = []
    for line in sorted(lines):
        if out and "-" not in out[-1] and int(out[-1]) == line - 1:
            out[-1] = f"{out[-1]}-{line}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == line - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{line}"
        else:
            out.append(str(line))
    return out


def _file_coverage(path: str, entry: dict[str, Any]) -> FileCoverage | None:
    """One file of coverage's JSON report, if it is a module of ``pools/``."""
    name = Path(os.path.relpath(Path(path).resolve(), ROOT)).as_posix()
    if not name.startswith("pools/"):
        return None
    summary = entry["summary"]
    lines = set(entry["missing_lines"])
    arcs = [f"{a}->{b if b > 0 else 'exit'}" for a, b in entry.get("missing_branches", []) if a not in lines]
    return FileCoverage(
        name,
        summary["num_statements"],
        summary["missing_lines"],
        summary.get("num_branches", 0),
        summary.get("missing_branches", 0),
        ", ".join(_ranges(sorted(lines)) + arcs),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("coverage"), description=summary(__doc__))
    parser.add_argument("--jobs", type=int, default=2, help="test files run at once (default 2)")
    parser.add_argument("--missing", action="store_true", help="list the missed lines and arcs of each file")
    parser.add_argument(
        "--fail-under",
        type=float,
        default=None,
        metavar="PERCENT",
        help=f"exit 1 when the total is below PERCENT (the coverage test uses {REQUIRED})",
    )
    args = parser.parse_args(argv)
    try:
        result = measure(jobs=args.jobs)
    except RuntimeError as exc:
        print(f"poolfuzz coverage: {exc}", file=sys.stderr)
        return 1
    print(f"Branch coverage of pools/ by the machine tests ({', '.join(MACHINE_TESTS)}; CI=true, {result.seconds:.0f} s):\n")
    print(result.table(missing=args.missing))
    if args.fail_under is not None and result.total < args.fail_under:
        print(f"\npoolfuzz coverage: {result.total:.1f}% is below {args.fail_under}%", file=sys.stderr)
        return 1
    return 0

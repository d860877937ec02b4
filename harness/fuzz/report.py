"""The nightly run's results: per-target tallies, the JSON report and the summary a person reads.

The JSON report is the contract with whatever collects nightly runs
(``docs/nightly.md`` documents every field); :func:`summary_text` renders a
report dict, so a summary can be regenerated from a saved report as well.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPORT_SCHEMA = 1


@dataclass
class TargetStats:
    """What the workers reported about one target, summed over workers and rounds."""

    key: str
    family: str
    implementation: str
    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    rounds: int = 0
    events: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)
    crashes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def steps_per_second(self) -> float:
        """Speed of this target's machine while it was being fuzzed (summed over workers)."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def status(self) -> str:
        if self.failures:
            return "failed"
        if self.crashes:
            return "crashed"
        return "ok"

    def add_progress(self, payload: dict[str, Any]) -> None:
        self.steps += int(payload["steps"])
        self.examples += int(payload["examples"])
        self.seconds += float(payload["seconds"])
        self.events.update(payload["events"])

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.key,
            "family": self.family,
            "implementation": self.implementation,
            "status": self.status,
            "examples": self.examples,
            "steps": self.steps,
            "fuzz_seconds": round(self.seconds, 3),
            "steps_per_second": round(self.steps_per_second, 1),
            "rounds": self.rounds,
            "events": dict(sorted(self.events.items())),
            "failures": self.failures,
            "crashes": self.crashes,
        }


# ------------------------------------------------------------------ context
def versions() -> dict[str, str | None]:
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("poolfuzz", "hypothesis", "torch", "triton", "coverage", "redis"):
        found[dist] = version(dist)
    return found


def machine_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python_executable": sys.executable,
    }


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------- coverage
def combine_coverage(data_dir: Path) -> dict[str, Any] | None:
    """Combine the workers' parallel coverage files; per-file branch coverage of ``pools/``."""
    import coverage

    if not any(data_dir.glob(".coverage.*")):
        return None
    cov = coverage.Coverage(data_file=str(data_dir / ".coverage"), branch=True, source_pkgs=["pools"])
    cov.combine([str(data_dir)])
    cov.save()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(out))
        data = json.loads(out.read_text())
    root = Path.cwd()
    files: dict[str, Any] = {}
    for path, entry in sorted(data["files"].items()):
        summary = entry["summary"]
        try:
            name = str(Path(path).resolve().relative_to(root))
        except ValueError:
            name = path
        files[name] = {
            "percent": round(summary["percent_covered"], 1),
            "statements": summary["num_statements"],
            "missing_statements": summary["missing_lines"],
            "branches": summary.get("num_branches", 0),
            "partial_branches": summary.get("num_partial_branches", 0),
        }
    return {"branch": True, "percent": round(data["totals"]["percent_covered"], 1), "files": files}


# ------------------------------------------------------------------ summary
def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def summary_text(report: dict[str, Any]) -> str:
    """The end-of-run summary: one row per target, then failures, crashes, events and coverage."""
    run = report["run"]
    targets = report["targets"]
    failures = sum(len(t["failures"]) for t in targets)
    head = (f"poolfuzz fuzz: {report['duration_s']:.1f} s, {run['workers']} worker(s), seed {run['seed']}, "
            f"device {run['device']}, {len(targets)} target(s), {failures} failure(s), "
            f"{len(report['crashes'])} crash(es)" + (" — INTERRUPTED" if report["interrupted"] else ""))
    rows = [["target", "examples", "steps", "steps/s", "events", "failures", "status"]]
    for t in targets:
        ids = ",".join(sorted({f["invariant"] or f["kind"] for f in t["failures"]})) or "-"
        rows.append([t["target"], f"{t['examples']:,}", f"{t['steps']:,}", _rate(t["steps_per_second"]),
                     str(len(t["events"])), ids, t["status"]])
    total = report["totals"]
    rows.append(["total", f"{total['examples']:,}", f"{total['steps']:,}", _rate(total["steps_per_second"]), "",
                 str(failures), ""])
    lines = [head, ""] + ["  " + line for line in _table(rows, right={1, 2, 3, 4})]
    if failures:
        lines += ["", "failures (each target stops being fuzzed after its first failure):"]
        for t in targets:
            for f in t["failures"]:
                first = f["message"].strip().splitlines()[0] if f["message"].strip() else ""
                shrunk = "" if f.get("shrunk", True) else " (partially shrunk)"
                lines.append(f"  {t['target']}: {first}")
                if f["trace"]:
                    lines.append(f"    trace{shrunk}: {f['trace']}  ({f['steps']} steps)")
                    lines.append(f"    replay: python -m harness replay {f['trace']}")
    if report["crashes"]:
        lines += ["", "crashed workers (their target is not fuzzed further in this run):"]
        for c in report["crashes"]:
            lines.append(f"  {c['worker']} on {c['target'] or '(no target yet)'}: {c['reason']}  log: {c['log']}")
    reached = [t for t in targets if t["events"]]
    if reached:
        lines += ["", "events reached:"]
        for t in reached:
            shown = ", ".join(f"{label} ({count:,})" for label, count in t["events"].items())
            lines.append(f"  {t['target']}: {shown}")
    if report.get("skipped"):
        lines += ["", "skipped families:"] + [f"  {s['family']}: {s['reason']}" for s in report["skipped"]]
    coverage = report.get("coverage")
    if coverage:
        lines += ["", f"coverage of pools/ (branch): {coverage['percent']:.1f}%"]
        lines += ["  " + line for line in _table(
            [[name, f"{entry['percent']:.1f}%"] for name, entry in coverage["files"].items()], right={1})]
    return "\n".join(lines)


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)

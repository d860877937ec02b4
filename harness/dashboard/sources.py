"""Finding reports on disk: files and folders in, validated runs out, each run once, oldest first.

Folders are searched recursively for ``*.json`` (hidden folders skipped); JSON
that is not a poolfuzz report there (corpus traces) is passed over, a corrupt
report is an error.  A run is told apart by :attr:`~poolfuzz.harness.dashboard.reports.Run.run_id`
(start, box, seed), not by its file: the same run in two files (a report copied
into an archive, an earlier snapshot of it) is one run, the most complete file
kept (the longest ``duration_s``), and two runs on one date stay two runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from poolfuzz.harness.dashboard.report_check import TOOL, NoReportsError, ReportError
from poolfuzz.harness.dashboard.reports import Run, parse_report


def _candidates(sources: Iterable[Path]) -> list[tuple[Path, bool]]:
    """``(file, named)``: files named on the command line, then ``*.json`` under named folders (hidden ones skipped)."""
    found: list[tuple[Path, bool]] = []
    for source in sources:
        if source.is_dir():
            found += [
                (p, False) for p in sorted(source.rglob("*.json")) if not any(part.startswith(".") for part in p.relative_to(source).parts)
            ]
        elif source.exists():
            found.append((source, True))
        else:
            raise ReportError(source, "", "no such file or folder")
    return found


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ReportError(path, "", "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ReportError(path, "", f"not valid JSON (truncated?): {exc.msg} at line {exc.lineno}") from None


def one_per_run(runs: Iterable[Run]) -> list[Run]:
    """Each :attr:`~Run.run_id` once: the file that fuzzed longest (then the first path), the others its ``copies``."""
    by_id: dict[str, list[Run]] = {}
    for run in runs:
        by_id.setdefault(run.run_id, []).append(run)
    kept = []
    for same in by_id.values():
        best = min(same, key=lambda r: (-r.duration_s, str(r.source)))
        copies = tuple(sorted((r.source for r in same if r is not best), key=str))
        kept.append(dataclasses.replace(best, copies=copies) if copies else best)
    return kept


def load_runs(sources: Sequence[Path], *, nights: int | None = None, last: int | None = None) -> list[Run]:
    """Every run in ``sources``, oldest first (by ``started``, then path); each file and each run once.

    A file named directly must be a report.  Inside a folder, JSON that is not a
    poolfuzz report (corpus traces, other tools' output) is passed over, but a
    corrupt file or an unknown report schema is still an error: a run must not
    silently vanish from the trend.  ``nights`` keeps every run of the N most
    recent UTC start dates (:attr:`Run.night`), however many boxes wrote them;
    ``last`` keeps the N most recent runs.
    """
    runs: dict[Path, Run] = {}
    for path, named in _candidates(sources):
        if path.resolve() in runs:
            continue
        decoded = _read_json(path)
        if not named and not (isinstance(decoded, dict) and decoded.get("tool") == TOOL):
            continue
        runs[path.resolve()] = parse_report(decoded, path)
    if not runs:
        raise NoReportsError(sources)
    ordered = sorted(one_per_run(runs.values()), key=lambda r: (r.started, str(r.source)))
    if nights is not None:
        kept = set(sorted({r.night for r in ordered})[-nights:])
        ordered = [r for r in ordered if r.night in kept]
    if last is not None:
        ordered = ordered[-last:]
    return ordered


def load_reports(sources: Sequence[Path]) -> list[dict[str, Any]]:
    """The validated report dicts of :func:`load_runs`, oldest first."""
    return [run.report for run in load_runs(sources)]

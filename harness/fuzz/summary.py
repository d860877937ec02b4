"""The summary a person reads at the end of a run, rendered from the report dict.

:func:`summary_text` works on the JSON report (``RunReport.to_json()``), not on the
coordinator's objects, so a summary can be regenerated from a saved report as well.
A failure shows its two moments apart (:func:`failure_lines`): the first failing step,
reported at once with its unshrunk trace, and the shrunk report that followed, or why
the shrink is partial.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def _rate(value: float) -> str:
    return f"{value:,.0f}"


NOT_REACHED = "not reached"


def shown_status(target: dict[str, Any]) -> str:
    """A report target's ``status`` as a person reads it: ``not reached`` for an ``ok`` target that ran no step.

    Such a target (the run ended, or every worker was busy elsewhere, before it got
    a round) was never checked: ``ok`` would claim it passed.
    """
    return NOT_REACHED if target["status"] == "ok" and target["steps"] == 0 else str(target["status"])


def is_failing(failure: dict[str, Any], run: dict[str, Any]) -> bool:
    """Whether a report's failure fails the run: a new one, or a known one (``known``) under ``--strict``."""
    return not failure.get("known") or bool(run.get("strict"))


def upstream_text(target: Mapping[str, Any]) -> str:
    """``upstream SGLang 0.5.23`` for a target that runs upstream's code (its ``upstream`` record), else ``""``."""
    code: dict[str, Any] = target.get("upstream") or {}
    if not code:
        return ""
    origin = code.get("origin") or "installed"
    return f"upstream {code.get('title') or code.get('distribution')} {code.get('version')}" + (
        "" if origin == "installed" else f" ({origin})"
    )


def summary_text(report: dict[str, Any]) -> str:
    """The end-of-run summary: one row per target, then failures, known findings, crashes, events and coverage."""
    run = report["run"]
    targets = report["targets"]
    failures = sum(is_failing(f, run) for t in targets for f in t["failures"])
    known = sum(not is_failing(f, run) for t in targets for f in t["failures"])
    head = (
        f"poolfuzz fuzz: {report['duration_s']:.1f} s, {run['workers']} worker(s), seed {run['seed']}, "
        f"device {run['device']}, {len(targets)} target(s), {failures} failure(s), "
        + (f"{known} known finding(s), " if known else "")
        + f"{len(report['crashes'])} crash(es)"
        + (" — INTERRUPTED" if report["interrupted"] else "")
    )
    rows = [["target", "examples", "steps", "steps/s", "events", "failures", "status"]]
    for t in targets:
        ids = ",".join(sorted({f["invariant"] or f["kind"] for f in t["failures"]})) or "-"
        code = upstream_text(t)
        rows.append(
            [
                t["target"] + (f" ({code})" if code else ""),
                f"{t['examples']:,}",
                f"{t['steps']:,}",
                _rate(t["steps_per_second"]),
                str(len(t["events"])),
                ids,
                shown_status(t),
            ]
        )
    total = report["totals"]
    rows.append(["total", f"{total['examples']:,}", f"{total['steps']:,}", _rate(total["steps_per_second"]), "", str(failures), ""])
    lines = [head, ""] + ["  " + line for line in _table(rows, right={1, 2, 3, 4})]
    if failures:
        lines += ["", "failures (each target stops being fuzzed after its first failure):"]
        for t in targets:
            for f in t["failures"]:
                if is_failing(f, run):
                    lines += failure_lines(t["target"], f)
    if known:
        lines += ["", "known findings (corpus/known.toml: recorded, and fuzzing went on past them; --strict fails on them):"]
        for t in targets:
            for f in t["failures"]:
                if not is_failing(f, run):
                    lines += failure_lines(t["target"], f)
    if report["crashes"]:
        lines += ["", "crashed workers (their target is not fuzzed further in this run):"]
        for c in report["crashes"]:
            lines.append(f"  {c['worker']} on {c['target'] or '(no target yet)'}: {c['reason']}  log: {c['log']}")
    lines += events_summary(targets)
    if report.get("skipped"):
        lines += ["", "skipped families:"] + [f"  {s['family']}: {s['reason']}" for s in report["skipped"]]
    coverage = report.get("coverage")
    if coverage:
        lines += ["", f"coverage of pools/ (branch): {coverage['percent']:.1f}%"]
        lines += [
            "  " + line for line in _table([[name, f"{entry['percent']:.1f}%"] for name, entry in coverage["files"].items()], right={1})
        ]
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


def failure_lines(target: str, f: dict[str, Any]) -> list[str]:
    """One failure of the summary: its headline, when its first failing step came (with the unshrunk
    trace), when its shrunk report did (or why the shrink is partial), and the replay command.

    Reports of schema 2 and older have no ``found_at`` or ``shrink``: their failure keeps the one
    ``trace`` line it always had.
    """
    first = f["message"].strip().splitlines()[0] if f["message"].strip() else ""
    lines = [f"  {target}: {first}"]
    known: dict[str, Any] = f.get("known") or {}
    if known:
        lines.append(f"    KNOWN: finding {known['number']} {known['key']}, {known['upstream']} ({known['document']})")
    classified: dict[str, Any] = f.get("classification") or {}
    if classified:
        lines.append(f"    {classified['kind'].upper()}: {classified['note']}")
    found_at: dict[str, Any] = f.get("found_at") or {}
    shrink: dict[str, Any] = f.get("shrink") or {}
    if found_at:
        since = found_at.get("since_start_s")
        when = _seconds(found_at["after_s"]) + " of fuzzing" + (f", {_seconds(since)} since start" if since is not None else "")
        unshrunk = f"unshrunk trace {found_at['trace']} ({found_at['steps']} steps)" if found_at["trace"] else "no trace"
        lines.append(f"    found at {when}: {unshrunk}")
    state = shrink.get("state")
    if state == "running":
        lines.append("    shrink: still running")
    elif state == "done":
        lines.append(
            f"    shrunk at {_seconds(shrink['after_s'])} of fuzzing (shrinking took {_seconds(shrink['seconds'])}): "
            f"{f['trace']} ({f['steps']} steps)"
        )
    elif state == "partial":
        took = f" after {_seconds(shrink['seconds'])}" if shrink.get("seconds") is not None else ""
        lines.append(f"    shrink PARTIAL{took}: {shrink['note']}")
        if f["trace"] and f["trace"] != found_at.get("trace"):
            lines.append(f"    smallest failing trace seen: {f['trace']} ({f['steps']} steps)")
    elif f["trace"]:
        partial = "" if f.get("shrunk", True) else " (partially shrunk)"
        lines.append(f"    trace{partial}: {f['trace']}  ({f['steps']} steps)")
    if f["trace"]:
        lines.append(f"    replay: {f.get('replay') or 'poolfuzz replay ' + shlex.quote(f['trace'])}")
    realistic: dict[str, Any] = f.get("realistic") or {}
    if realistic:
        shows = f", shows as [{realistic['invariant']}]" if realistic["invariant"] != f.get("invariant") else ""
        lines.append(
            f"    realistic trace (pools and requests a server builds{shows}): "
            f"{realistic['trace'] or 'not saved'} ({realistic['steps']} steps)"
        )
    return lines


SUMMARY_WIDTH = 100
TOP_EVENTS = 8


def events_summary(targets: list[dict[str, Any]], *, top: int = TOP_EVENTS, width: int = SUMMARY_WIDTH) -> list[str]:
    """The events block, as hypothesis's statistics show them: per target, its most frequent labels
    with their counts, one a line, cut to ``width`` columns; the rest counted, not listed (the
    report's ``targets[].events`` has them all)."""
    reached = [t for t in targets if t["events"]]
    if not reached:
        return []
    lines = ["", f"events (the {top} most frequent per target; all of them are in the JSON report):"]
    for t in reached:
        ranked = sorted(t["events"].items(), key=lambda item: (-item[1], item[0]))
        total = sum(count for _, count in ranked)
        lines.append(f"  {t['target']}: {len(ranked)} distinct, {total:,} in all")
        digits = len(f"{ranked[0][1]:,}")
        for label, count in ranked[:top]:
            line = f"    {count:>{digits},}  {label}"
            lines.append(line if len(line) <= width else line[: width - 1] + "…")
        if len(ranked) > top:
            rest = sum(count for _, count in ranked[top:])
            lines.append(f"    {'':>{digits}}  and {len(ranked) - top} more ({rest:,} in all)")
    return lines

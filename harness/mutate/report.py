"""What a mutation run found: tables per module and kind, the survivors, and the JSON record.

Statuses (see :class:`~poolfuzz.harness.mutate.worker.Outcome`): *killed* counts mutants a
machine failed on, *timeout* those the watchdog stopped (also kills: the mutant
made a machine hang), *crashed* those whose worker died (kills as well), *survived*
those every reaching machine ran clean on, *not reached* those no machine
executes (survivors too, with the plainer reason), *not run* those whose code
could not be swapped in.  The score is the share of run mutants that were
killed, timed out or crashed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from poolfuzz.harness.mutate.mutants import Mutant
from poolfuzz.harness.mutate.worker import Outcome

STATUSES = ("killed", "timeout", "crashed", "survived", "not-reached", "not-run")
KILLS = frozenset({"killed", "timeout", "crashed"})
KINDS = ("behavioural", "equivalent", "self-check", "message-only")


def score(counts: Counter[str]) -> float | None:
    """Share of run mutants that were killed (timeouts and crashes included); ``None`` if none ran."""
    run = sum(counts.values()) - counts["not-run"]
    return sum(counts[s] for s in KILLS) / run if run else None


def tally(pairs: Iterable[tuple[Mutant, Outcome]]) -> dict[str, dict[str, Counter[str]]]:
    """``path -> kind -> status -> count``, modules in the order first seen."""
    table: dict[str, dict[str, Counter[str]]] = {}
    for mutant, outcome in pairs:
        table.setdefault(mutant.path, {kind: Counter() for kind in KINDS})[mutant.kind][outcome.status] += 1
    return table


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table_text(pairs: Sequence[tuple[Mutant, Outcome]]) -> str:
    """One row per module and kind, then the totals."""
    table = tally(pairs)
    width = max([len("module"), len("all modules"), *map(len, table)])
    header = (
        f"{'module':{width}}  {'kind':12} {'total':>6} {'killed':>7} {'timeout':>8} {'crashed':>8} "
        f"{'survived':>9} {'not-reached':>12} {'not-run':>8} {'score':>6}"
    )
    rows = [header, "-" * len(header)]
    totals = {kind: Counter[str]() for kind in KINDS}
    for path, kinds in table.items():
        for index, kind in enumerate(KINDS):
            counts = kinds[kind]
            totals[kind].update(counts)
            rows.append(_row(path if index == 0 else "", kind, counts, width))
    rows.append("-" * len(header))
    for index, kind in enumerate(KINDS):
        rows.append(_row("all modules" if index == 0 else "", kind, totals[kind], width))
    return "\n".join(rows)


def _row(label: str, kind: str, counts: Counter[str], width: int) -> str:
    cells = " ".join(f"{counts[s]:>{w}}" for s, w in zip(STATUSES, (7, 8, 8, 9, 12, 8)))
    return f"{label:{width}}  {kind:12} {sum(counts.values()):>6} {cells} {_percent(score(counts)):>6}"


def survivors_text(pairs: Sequence[tuple[Mutant, Outcome]], *, status: str, title: str) -> str:
    """The behavioural mutants with ``status``, by module and line, each with its source line."""
    chosen = [(m, o) for m, o in pairs if o.status == status and m.kind == "behavioural"]
    if not chosen:
        return f"{title}: none"
    lines = [f"{title} ({len(chosen)}):"]
    current = ""
    for mutant, outcome in sorted(chosen, key=lambda p: (p[0].path, p[0].line, p[0].col, p[0].id)):
        if mutant.path != current:
            current = mutant.path
            lines.append(f"  {current}")
        ran = f"  [ran {', '.join(outcome.targets_run)}]" if outcome.targets_run else ""
        lines.append(f"    {mutant.line}:{mutant.col} {mutant.function} {mutant.operator}: {mutant.description}{ran}")
        lines.append(f"        | {mutant.source}")
    return "\n".join(lines)


def wrong_equivalents_text(pairs: Sequence[tuple[Mutant, Outcome]]) -> str:
    """Mutants listed as equivalent that a machine killed: each entry's argument was wrong (empty when none)."""
    chosen = [(m, o) for m, o in pairs if m.kind == "equivalent" and o.status in KILLS]
    if not chosen:
        return ""
    lines = [f"listed as equivalent in harness/mutate/equivalents/ but killed ({len(chosen)}): remove them"]
    lines += [f"  {m.id}: {m.description}  [{o.status} by {o.killer or '?'}]" for m, o in chosen]
    return "\n".join(lines)


def not_run_text(pairs: Sequence[tuple[Mutant, Outcome]]) -> str:
    chosen = [(m, o) for m, o in pairs if o.status == "not-run"]
    if not chosen:
        return ""
    return "\n".join([f"not run ({len(chosen)}):", *(f"  {m.id}: {o.detail}" for m, o in chosen)])


def to_json(pairs: Sequence[tuple[Mutant, Outcome]], run: dict[str, Any]) -> dict[str, Any]:
    """The whole run as one JSON document: settings, baseline, per-module counts and every mutant."""
    table = tally(pairs)
    modules = {
        path: {
            kind: {**{s: kinds[kind][s] for s in STATUSES}, "total": sum(kinds[kind].values()), "score": score(kinds[kind])}
            for kind in KINDS
        }
        for path, kinds in table.items()
    }
    mutants = []
    for mutant, outcome in pairs:
        record = mutant.to_json()
        record.update({k: v for k, v in asdict(outcome).items() if k != "mutant"})
        record["targets_run"] = list(outcome.targets_run)
        mutants.append(record)
    return {"run": run, "modules": modules, "mutants": mutants}


def write_json(document: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")

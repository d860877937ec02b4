"""The page's sections that are plain HTML: wording, the run line, cards, the targets table, failures.

Every string that comes from a report goes through :func:`esc`.  What a step
of the page is (a run, or a night) comes in as a
:class:`~poolfuzz.harness.dashboard.groups.Grouping`, so the wording follows it.
"""

from __future__ import annotations

import datetime
import html
from collections import Counter
from collections.abc import Sequence
from typing import Any

from poolfuzz.harness.dashboard.groups import Grouping
from poolfuzz.harness.dashboard.reports import NOT_REACHED, Failure, Run, TargetRun

STATUS_ORDER = {"failed": 0, "crashed": 1, "known": 2, NOT_REACHED: 2, "ok": 3}
PILL_TONES = {"ok": "ok", "failed": "failed", "crashed": "crashed", "known": "other"}


# ----------------------------------------------------------------- wording
def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def big_number(value: float) -> str:
    for divisor, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if value >= divisor:
            return f"{value / divisor:.1f}{suffix}"
    return f"{value:,.0f}"


def when(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _text(mapping: Any, *keys: str) -> str | None:
    """A nested optional string of the report (machine, versions), tolerated when absent."""
    for key in keys:
        mapping = mapping.get(key) if isinstance(mapping, dict) else None
    return mapping if isinstance(mapping, str) and mapping else None


# ---------------------------------------------------------------- sections
def run_context(run: Run) -> str:
    """One line naming how a run was made: when, how long, where, with what."""
    host = _text(run.report, "machine", "hostname")
    parts = [f"host {host}"] if host else []
    parts += [f"started {when(run.started)}", f"fuzzed {duration(run.duration_s)}"]
    if run.workers is not None:
        parts.append(f"{run.workers} worker{'s' if run.workers != 1 else ''}")
    parts.append(f"device {run.device}")
    if run.database is not None:
        parts.append(f"database {run.database}")
    if run.seed is not None:
        parts.append(f"seed {run.seed}")
    for dist in ("poolfuzz", "torch", "hypothesis"):
        version = _text(run.report, "versions", dist)
        if version:
            parts.append(f"{dist} {version}")
    if run.coverage is not None:
        parts.append(f"branch coverage of pools/ (whole run) {run.coverage:.1f}%")
    return " · ".join(esc(p) for p in parts)


def notes(latest_runs: Sequence[Run]) -> list[str]:
    found = []
    for run in latest_runs:
        if not run.has_series:
            found.append(
                f"<code>{esc(run.source)}</code> is a schema-1 report: it has no time series, so its targets "
                "have no behaviour curve and their <em>no new behaviour for</em> is unknown (—)."
            )
        if run.interrupted:
            why = _text(run.report, "ended_because")
            because = f" ({esc(why)})" if why and why != "interrupted" else ""
            found.append(f"<code>{esc(run.source)}</code> was interrupted{because}: its numbers cover part of the budget.")
        found += [f"Not fuzzed in the run of {esc(when(run.started))}: {esc(s)}" for s in run.skipped]
    return [f'<div class="note">{n}</div>' for n in found]


def cards(rows: Sequence[tuple[Run, TargetRun]], steps: int, grouping: Grouping) -> str:
    """Counts over the targets (a target several boxes fuzzed is one), sums over every row."""
    keys = {t.key for _, t in rows}
    failing = len({t.key for _, t in rows if t.failing})
    crashed = sum(t.crashes for _, t in rows)
    unreached = len(keys - {t.key for _, t in rows if t.reached})
    items = [
        (str(len(keys)), "targets", ""),
        (str(failing), "targets failing" if failing != 1 else "target failing", "bad" if failing else "good"),
        (big_number(sum(t.steps for _, t in rows)), "steps fuzzed", ""),
        (big_number(sum(t.examples for _, t in rows)), "examples", ""),
        (str(steps), _loaded(steps, grouping), ""),
    ]
    if crashed:
        items.insert(2, (str(crashed), "worker crashes", "bad"))
    if unreached:
        items.insert(
            2, (str(unreached), "targets not reached (no step ran)" if unreached != 1 else "target not reached (no step ran)", "bad")
        )
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card {tone}"><div class="value">{esc(value)}</div><div class="label">{esc(label)}</div></div>'
            for value, label, tone in items
        )
        + "</div>"
    )


def _loaded(count: int, grouping: Grouping) -> str:
    if grouping.by_night:
        return "nights loaded (UTC start dates)" if count != 1 else "night loaded (UTC start date)"
    return "runs loaded" if count != 1 else "run loaded"


def _pill(status: str) -> str:
    tone = PILL_TONES.get(status, "other")
    return f'<span class="pill {tone}">{esc(status)}</span>'


def _coverage_cell(target: TargetRun) -> str:
    if not target.reached:
        return esc(NOT_REACHED)
    return "—" if target.coverage is None else f"{target.coverage:.1f}%"


def worst_first(rows: Sequence[tuple[Run, TargetRun]]) -> list[tuple[Run, TargetRun]]:
    """Targets by their worst row (failed, crashed, not reached, ok), each target's rows (boxes) kept together."""
    worst: dict[str, int] = {}
    for _, t in rows:
        rank = STATUS_ORDER.get(t.shown_status, 2)
        worst[t.key] = min(rank, worst.get(t.key, rank))
    first_seen = {key: i for i, key in enumerate(worst)}
    return sorted(rows, key=lambda row: (worst[row[1].key], first_seen[row[1].key]))


def targets_table(rows: Sequence[tuple[Run, TargetRun]], colours: dict[str, str]) -> str:
    several_runs = len({run.source for run, _ in rows}) > 1
    head = [
        "target",
        "family",
        "implementation",
        "status",
        "examples",
        "steps",
        "steps/s",
        "distinct events",
        "branch coverage",
        "failures",
        "no new behaviour for",
    ] + (["box", "run started"] if several_runs else [])
    numeric = {"examples", "steps", "steps/s", "distinct events", "branch coverage", "failures", "no new behaviour for"}
    titles = {
        "steps/s": "steps per second while this target was fuzzed, summed over workers",
        "distinct events": "distinct event labels reached: rare pool states the drivers flag (hover a number)",
        "branch coverage": "branch coverage of pools/ by this target's runs (fuzz with --coverage)",
        "no new behaviour for": "fuzzing time at the end of the run in which no new event label and no new "
        "covered branch appeared: long means the strategies have stopped finding anything",
    }
    out = ['<div class="table-wrap"><table class="targets"><thead><tr>']
    out += [f'<th class="{"num" if h in numeric else ""}" title="{esc(titles.get(h, ""))}">{esc(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for run, t in worst_first(rows):
        quiet = t.quiet_seconds()
        events = "\n".join(f"{label}: {count:,}" for label, count in t.events.items()) or "none reached"
        cells = [
            (f'<td class="key"><span class="swatch" style="background:{colours[t.key]}"></span><code>{esc(t.key)}</code></td>'),
            f"<td>{esc(t.family)}</td>",
            f'<td class="impl mono">{esc(t.implementation)}'
            + (f'<br><span class="upstream" title="upstream code under test">{esc(t.upstream)}</span>' if t.upstream else "")
            + "</td>",
            f"<td>{_pill(t.shown_status)}</td>",
            f'<td class="num">{t.examples:,}</td>',
            f'<td class="num">{t.steps:,}</td>',
            f'<td class="num">{t.steps_per_second:,.0f}</td>',
            f'<td class="num" title="{esc(events)}">{len(t.events)}</td>',
            f'<td class="num">{_coverage_cell(t)}</td>',
            f'<td class="num{" bad" if t.failing else ""}">{t.failing}'
            + (f' <span class="context">+{len(t.failures) - t.failing} known</span>' if len(t.failures) > t.failing else "")
            + "</td>",
            f'<td class="num">{"—" if quiet is None else esc(duration(quiet))}</td>',
        ]
        if several_runs:
            # only the start's date and time may go on two lines, so the table fits the page
            cells += [
                f'<td class="box">{esc(run.box)}</td>',
                (f'<td><span class="nowrap">{run.started:%Y-%m-%d}</span> <span class="nowrap">{run.started:%H:%M} UTC</span></td>'),
            ]
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    out.append(
        '<p class="legend"><em>No new behaviour for</em>: time since the last new event label or newly covered '
        "branch, up to the end of this target's fuzzing (its failure, or the end of the run). "
        "Long means the strategies have stopped finding anything new here. "
        "<em>Not reached</em>: the target ran no step in that run (the run ended before a worker got to it), "
        "so nothing about it was checked or measured.</p>"
    )
    return "".join(out)


def failure_list(rows: Sequence[tuple[Run, TargetRun]], grouping: Grouping) -> str:
    items = []
    for run, target in rows:
        for f in target.failures:
            what = f.invariant or f.kind
            facts = failure_facts(f)
            if f.known:
                known = f.known
                facts.insert(
                    0,
                    (
                        "known",
                        esc(f"finding {known.get('number', '?')} {known['key']}, {known.get('upstream', '')}")
                        + (f" (<code>{esc(known['document'])}</code>)" if known.get("document") else ""),
                    ),
                )
            if target.upstream:
                facts.insert(0, ("code", esc(target.upstream)))
            if f.replay:
                where = f' <span class="context">from <code>{esc(run.cwd)}</code></span>' if run.cwd else ""
                facts.append(("replay", f'<code class="command">{esc(f.replay)}</code>{where}'))
            found = f", after {duration(f.found_after_s)} of fuzzing" if f.found_after_s is not None else ""
            if f.first_seen_after_s is not None:
                found = ""  # both times have facts of their own
            facts.append(("found", esc(f"on {run.box}, in the run started {when(run.started)}{found}")))
            items.append(
                f'<div class="failure"><div class="title"><code>{esc(target.key)}</code> · '
                f'<span class="invariant">{esc(what)}</span>' + (' · <span class="pill other">known</span>' if f.known else "") + "</div>"
                f'<div class="message mono">{esc(f.headline)}</div><dl>'
                + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)
                + f"</dl><details><summary>full message</summary><pre>{esc(f.message.strip())}</pre></details></div>"
            )
    if not items:
        where = "in the latest night of any target, on any box" if grouping.by_night else "in the latest run of any target"
        return f'<div class="empty">No failures: no invariant violation or error {where}.</div>'
    return "".join(items)


def failure_facts(f: Failure) -> list[tuple[str, str]]:
    """A failure's trace facts: its first failing step (time to it, and the unshrunk trace), then its shrink
    (time to the shrunk report and how long shrinking took, or that it is still running or was cut off)."""
    facts: list[tuple[str, str]] = []
    if f.first_seen_after_s is not None:
        unshrunk = ""
        if f.unshrunk_trace is not None:
            steps = f" ({f.unshrunk_steps} steps)" if f.unshrunk_steps is not None else ""
            unshrunk = f": unshrunk trace <code>{esc(f.unshrunk_trace)}</code>{esc(steps)}"
        facts.append(("first failing step", esc(f"after {duration(f.first_seen_after_s)} of fuzzing") + unshrunk))
    if f.shrink_state == "running":
        facts.append(("shrunk report", "not yet: still shrinking when this report was written"))
    elif f.shrink_state == "partial":
        took = f" after {duration(f.shrink_s)}" if f.shrink_s is not None else ""
        facts.append(("shrunk report", esc(f"none, the shrink is partial{took}: {f.shrink_note or 'cut off'}")))
    elif f.found_after_s is not None and f.first_seen_after_s is not None:
        took = f" (shrinking took {duration(f.shrink_s)})" if f.shrink_s is not None else ""
        facts.append(("shrunk report", esc(f"after {duration(f.found_after_s)} of fuzzing{took}")))
    if f.trace is not None:
        steps = f" ({f.steps} steps)" if f.steps is not None else ""
        if f.shrink_state is None:
            steps = (
                f" ({f.steps} steps{'' if f.shrunk else ', only partially shrunk (the run ended while shrinking)'})"
                if f.steps is not None
                else ""
            )
        label = "shrunk trace" if f.shrunk else ("trace" if f.trace == f.unshrunk_trace else "smallest failing trace")
        facts.append((label, f"<code>{esc(f.trace)}</code>{esc(steps)}"))
    else:
        facts.append(("trace", "none: an exception that is not an invariant violation; see the message"))
    return facts


def row_names(rows: Sequence[tuple[Run, TargetRun]]) -> list[str]:
    """Each row's name in the plots: its target, with the box when several reports of the step fuzzed it."""
    repeated = {key for key, count in Counter(t.key for _, t in rows).items() if count > 1}
    names = [f"{t.key} · {run.box}" if t.key in repeated else t.key for run, t in rows]
    clashing = {name for name, count in Counter(names).items() if count > 1}  # one box, two runs that night
    return [f"{name} {run.started:%H:%M}" if name in clashing else name for name, (run, _) in zip(names, rows)]

"""One self-contained HTML page from typed runs: summary, targets table, failures, curves, trends.

The page needs nothing at view time: the stylesheet, plotly.js (once) and the
figures are inline, so it can be mailed, attached to a CI run or opened from a
file share offline.  Every string from a report is escaped; the figures' JSON
is escaped by plotly.  The same reports always give the same bytes (no
"generated at" stamp, fixed plot ids), so a rebuilt page diffs clean.
"""

from __future__ import annotations

import datetime
import html
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.dashboard import figures
from harness.dashboard.nights import latest_rows, night_label, nights_of
from harness.dashboard.reports import NOT_REACHED, Run, TargetRun, load_runs
from harness.dashboard.style import CSS, ERROR_CATCHER

STATUS_ORDER = {"failed": 0, "crashed": 1, NOT_REACHED: 2, "ok": 3}
PILL_TONES = {"ok": "ok", "failed": "failed", "crashed": "crashed"}


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
            found.append(f"<code>{esc(run.source)}</code> is a schema-1 report: it has no time series, so its targets "
                         "have no behaviour curve and their <em>no new behaviour for</em> is unknown (—).")
        if run.interrupted:
            why = _text(run.report, "ended_because")
            because = f" ({esc(why)})" if why and why != "interrupted" else ""
            found.append(f"<code>{esc(run.source)}</code> was interrupted{because}: "
                         "its numbers cover part of the budget.")
        found += [f"Not fuzzed in the run of {esc(when(run.started))}: {esc(s)}" for s in run.skipped]
    return [f'<div class="note">{n}</div>' for n in found]


def cards(rows: Sequence[tuple[Run, TargetRun]], nights: int) -> str:
    """Counts over the targets (a target several boxes fuzzed is one), sums over every row."""
    keys = {t.key for _, t in rows}
    failing = len({t.key for _, t in rows if t.failures})
    crashed = sum(t.crashes for _, t in rows)
    unreached = len(keys - {t.key for _, t in rows if t.reached})
    items = [
        (str(len(keys)), "targets", ""),
        (str(failing), "targets failing" if failing != 1 else "target failing", "bad" if failing else "good"),
        (big_number(sum(t.steps for _, t in rows)), "steps fuzzed", ""),
        (big_number(sum(t.examples for _, t in rows)), "examples", ""),
        (str(nights), "nights loaded (UTC start dates)" if nights != 1 else "night loaded (UTC start date)", ""),
    ]
    if crashed:
        items.insert(2, (str(crashed), "worker crashes", "bad"))
    if unreached:
        items.insert(2, (str(unreached), "targets not reached (no step ran)" if unreached != 1
                         else "target not reached (no step ran)", "bad"))
    return '<div class="cards">' + "".join(
        f'<div class="card {tone}"><div class="value">{esc(value)}</div><div class="label">{esc(label)}</div></div>'
        for value, label, tone in items) + "</div>"


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
    head = ["target", "family", "implementation", "status", "examples", "steps", "steps/s", "distinct events",
            "branch coverage", "failures", "no new behaviour for"] + (["box", "run started"] if several_runs else [])
    numeric = {"examples", "steps", "steps/s", "distinct events", "branch coverage", "failures",
               "no new behaviour for"}
    titles = {
        "steps/s": "steps per second while this target was fuzzed, summed over workers",
        "distinct events": "distinct event labels reached: rare pool states the drivers flag (hover a number)",
        "branch coverage": "branch coverage of pools/ by this target's runs (fuzz with --coverage)",
        "no new behaviour for": "fuzzing time at the end of the run in which no new event label and no new "
                                    "covered branch appeared: long means the strategies have stopped finding anything",
    }
    out = ['<table class="targets"><thead><tr>']
    out += [f'<th class="{"num" if h in numeric else ""}" title="{esc(titles.get(h, ""))}">{esc(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for run, t in worst_first(rows):
        quiet = t.quiet_seconds()
        events = "\n".join(f"{label}: {count:,}" for label, count in t.events.items()) or "none reached"
        cells = [
            f'<td class="key"><span class="swatch" style="background:{colours[t.key]}"></span>'
            f"<code>{esc(t.key)}</code></td>",
            f"<td>{esc(t.family)}</td>", f'<td class="impl mono">{esc(t.implementation)}</td>',
            f"<td>{_pill(t.shown_status)}</td>",
            f'<td class="num">{t.examples:,}</td>', f'<td class="num">{t.steps:,}</td>',
            f'<td class="num">{t.steps_per_second:,.0f}</td>',
            f'<td class="num" title="{esc(events)}">{len(t.events)}</td>',
            f'<td class="num">{_coverage_cell(t)}</td>',
            f'<td class="num{" bad" if t.failures else ""}">{len(t.failures)}</td>',
            f'<td class="num">{"—" if quiet is None else esc(duration(quiet))}</td>',
        ]
        if several_runs:
            # only the start's date and time may go on two lines, so the table fits the page
            cells += [f'<td class="box">{esc(run.box)}</td>',
                      f'<td><span class="nowrap">{run.started:%Y-%m-%d}</span> '
                      f'<span class="nowrap">{run.started:%H:%M} UTC</span></td>']
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    out.append('<p class="legend"><em>No new behaviour for</em>: time since the last new event label or newly covered '
               "branch, up to the end of this target's fuzzing (its failure, or the end of the run). "
               "Long means the strategies have stopped finding anything new here. "
               "<em>Not reached</em>: the target ran no step in that run (the run ended before a worker got to it), "
               "so nothing about it was checked or measured.</p>")
    return "".join(out)


def failure_list(rows: Sequence[tuple[Run, TargetRun]]) -> str:
    items = []
    for run, target in rows:
        for f in target.failures:
            what = f.invariant or f.kind
            facts: list[tuple[str, str]] = []
            if f.trace is not None:
                shrunk = "" if f.shrunk else ", only partially shrunk (the run ended while shrinking)"
                steps = f" ({f.steps} steps{shrunk})" if f.steps is not None else ""
                facts.append(("shrunk trace", f"<code>{esc(f.trace)}</code>{esc(steps)}"))
            else:
                facts.append(("trace", "none: an exception that is not an invariant violation; see the message"))
            if f.replay:
                where = f' <span class="context">from <code>{esc(run.cwd)}</code></span>' if run.cwd else ""
                facts.append(("replay", f'<code class="command">{esc(f.replay)}</code>{where}'))
            found = f", after {duration(f.found_after_s)} of fuzzing" if f.found_after_s is not None else ""
            facts.append(("found", esc(f"on {run.box}, in the run started {when(run.started)}{found}")))
            items.append(
                f'<div class="failure"><div class="title"><code>{esc(target.key)}</code> · '
                f'<span class="invariant">{esc(what)}</span></div>'
                f'<div class="message mono">{esc(f.headline)}</div><dl>'
                + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)
                + f"</dl><details><summary>full message</summary><pre>{esc(f.message.strip())}</pre></details></div>")
    if not items:
        return ('<div class="empty">No failures: no invariant violation or error in the latest night of any target, '
                "on any box.</div>")
    return "".join(items)


def row_names(rows: Sequence[tuple[Run, TargetRun]]) -> list[str]:
    """Each row's name in the plots: its target, with the box when several reports of the night fuzzed it."""
    repeated = {key for key, count in Counter(t.key for _, t in rows).items() if count > 1}
    names = [f"{t.key} · {run.box}" if t.key in repeated else t.key for run, t in rows]
    clashing = {name for name, count in Counter(names).items() if count > 1}  # one box, two runs that night
    return [f"{name} {run.started:%H:%M}" if name in clashing else name for name, (run, _) in zip(names, rows)]


def behaviour_section(rows: Sequence[tuple[Run, TargetRun]], colours: dict[str, str]) -> str:
    named = list(zip(row_names(rows), rows))
    plotted = [(name, t) for name, (_, t) in named if t.series]
    missing = [name for name, (run, _) in named if not run.has_series]
    parts = ['<p class="explain">Distinct event labels (rare pool states the drivers flag, such as '
             "<em>pool exactly full</em>) and branch coverage of <code>pools/</code> reached so far in each report "
             "of the latest night, against fuzzing time; a target several boxes fuzzed has a line per box. "
             "A curve that flattens early means the strategies stopped reaching new states; "
             "a red ✕ marks a failure (the target is not fuzzed after it).</p>"]
    if missing:
        parts.append(f'<div class="note">No curve for {esc(", ".join(missing))}: their report has no time series '
                     "(schema 1).</div>")
    if plotted:
        if all(s.coverage is None for _, t in plotted for s in t.series or ()):
            parts.append('<p class="explain">Branch coverage was not measured in this run (fuzz with '
                         "<code>--coverage</code> to add it).</p>")
        parts.append(f'<div class="plot">{figures.behaviour_figure(plotted, colours, "behaviour-plot")}</div>')
    return "".join(parts)


def trend_section(runs: Sequence[Run], keys: Sequence[str], colours: dict[str, str]) -> str:
    if len(nights_of(runs)) < 2:
        return ('<div class="note">Only one night loaded (one UTC start date, however many boxes reported it): '
                "pass several nights' reports (or the folder that holds them) to see each target's trend.</div>")
    return ('<p class="explain">One point per target and night. A night is the UTC date a report started on: '
            "every report started that date, from any box, is the same night, so a target several boxes fuzzed is "
            "one point: the event labels any of them reached, the best coverage, their steps over their fuzzing "
            "time, and all their failures. Coverage is per target and needs schema-2 reports from runs with "
            "<code>--coverage</code>.</p>"
            f'<div class="plot">{figures.trend_figure(runs, keys, colours, "trend-plot")}</div>')


def sources_footer(runs: Sequence[Run]) -> str:
    rows = "".join(f"<tr><td>night {esc(night_label(r.night))}</td><td>started {esc(when(r.started))}</td>"
                   f"<td>schema {r.schema}</td><td>{len(r.targets)} targets</td>"
                   f"<td><code>{esc(r.source)}</code></td></tr>" for r in reversed(runs))
    return ("<footer><div>Reports loaded, newest first (a report's night is the UTC date it started on):</div>"
            f"<table>{rows}</table></footer>")


# -------------------------------------------------------------------- page
def render(runs: Sequence[Run]) -> str:
    """The whole page for ``runs`` (oldest first, as :func:`load_runs` returns them)."""
    rows = latest_rows(runs)
    keys = list(dict.fromkeys(t.key for _, t in rows))
    colours = figures.target_colours(keys)
    latest_runs = sorted({id(run): run for run, _ in rows}.values(), key=lambda run: (run.started, str(run.source)))
    newest = max(run.night for run in runs)
    nights = len(nights_of(runs))
    plots = nights > 1 or any(t.series for _, t in rows)
    contexts = "".join(f'<div class="context">{run_context(run)}</div>' for run in latest_runs)
    body = [
        "<h1>poolfuzz nightly at a glance</h1>",
        '<p class="lede">Stateful fuzzing of the memory pools of LLM serving engines: every target is a pool '
        "implementation checked step by step against its model; a failure is an invariant violation with a "
        "shrunk, replayable trace.</p>",
        contexts, cards(rows, nights), *notes(latest_runs),
        "<h2>Targets in the latest night</h2>",
        '<p class="explain">Each target in every report of the most recent night that fuzzed it (a night is a UTC '
        "start date): a row per box when several boxes fuzzed it that night.</p>",
        targets_table(rows, colours),
        "<h2>Failures</h2>", failure_list(rows),
        "<h2>Behaviour over the latest night</h2>", behaviour_section(rows, colours),
        "<h2>Across nights</h2>", trend_section(runs, keys, colours),
        sources_footer(runs),
    ]
    plotly_js = f"<script>{figures.plotly_js()}</script>" if plots else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>poolfuzz nightly — {esc(night_label(newest))}</title><style>{CSS}</style></head><body>"
        f'<div id="script-errors" hidden></div><script>{ERROR_CATCHER}</script>{plotly_js}'
        f"<main>{''.join(body)}</main></body></html>\n"
    )


def build_dashboard(sources: Sequence[Path], output: Path, *, nights: int | None = None) -> Path:
    """Write the dashboard for the reports in ``sources`` (files or folders) to ``output``; returns ``output``.

    Raises :class:`~harness.dashboard.reports.DashboardError` for a corrupt or
    unknown report or when no report is found, and
    :class:`~harness.dashboard.figures.PlotlyMissingError` without plotly, both
    before anything is written.
    """
    page = render(load_runs(sources, nights=nights))
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.tmp")
    partial.write_text(page, encoding="utf-8")
    partial.replace(output)
    return output

"""One HTML page from typed runs: summary, targets table, failures, curves, trends.

The page needs nothing at view time: the stylesheet, plotly.js (once, the
smallest bundle that draws it: :mod:`~poolfuzz.harness.dashboard.bundle`) and the figures
are inline, so it can be mailed, attached to a CI run or opened from a file
share offline; with ``bundle="shared"`` plotly.js is one file beside the page
instead.  Every string from a report is escaped; the figures' JSON is escaped by
plotly.  The same reports always give the same bytes (no "generated at" stamp,
fixed plot ids), so a rebuilt page diffs clean.  What the page calls a step (a
run, or with ``by_night`` a night) is :class:`~poolfuzz.harness.dashboard.groups.Grouping`.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from poolfuzz.harness.dashboard import figures
from poolfuzz.harness.dashboard.bundle import Bundle, bundle_for, script_tag, write_shared
from poolfuzz.harness.dashboard.groups import Grouping, latest_rows
from poolfuzz.harness.dashboard.reports import Run, TargetRun
from poolfuzz.harness.dashboard.sections import cards, duration, esc, failure_list, notes, row_names, run_context, targets_table, when
from poolfuzz.harness.dashboard.sources import load_runs
from poolfuzz.harness.dashboard.style import CSS, ERROR_CATCHER
from poolfuzz.harness.dashboard.writing import write_atomically


def behaviour_section(rows: Sequence[tuple[Run, TargetRun]], colours: dict[str, str], grouping: Grouping, plots: list[figures.Plot]) -> str:
    named = list(zip(row_names(rows), rows))
    plotted = [(name, t) for name, (_, t) in named if t.series]
    missing = [name for name, (run, _) in named if not run.has_series]
    boxes = "; a target several boxes fuzzed has a line per box" if grouping.by_night else ""
    parts = [
        (
            '<p class="explain">Distinct event labels (rare pool states the drivers flag, such as '
            "<em>pool exactly full</em>) and branch coverage of <code>pools/</code> reached so far in the latest "
            f"{grouping.noun} of each target, against fuzzing time{boxes}. Both curves only rise: each point is "
            "the most reached up to then (coverage is measured against the <code>pools/</code> modules a target "
            "has entered so far, so entering a new one can lower the measured percentage; the curve keeps the "
            "best and the hover says when a sample was lower). A curve that flattens early means the strategies "
            "stopped reaching new states; a red ✕ marks a failure (the target is not fuzzed after it).</p>"
        )
    ]
    if missing:
        parts.append(f'<div class="note">No curve for {esc(", ".join(missing))}: their report has no time series (schema 1).</div>')
    if plotted:
        if all(s.coverage is None for _, t in plotted for s in t.series or ()):
            parts.append(
                '<p class="explain">Branch coverage was not measured in this run (fuzz with <code>--coverage</code> to add it).</p>'
            )
        plots.append(figures.behaviour_figure(plotted, colours, "behaviour-plot"))
        parts.append(f'<div class="plot">{plots[-1].html}</div>')
    return "".join(parts)


def trend_section(runs: Sequence[Run], keys: Sequence[str], colours: dict[str, str], grouping: Grouping, plots: list[figures.Plot]) -> str:
    if len(grouping.keys(runs)) < 2:
        if grouping.by_night:
            return (
                '<div class="note">Only one night loaded (one UTC start date, however many boxes reported it): '
                "pass several nights' reports (or the folder that holds them) to see each target's trend.</div>"
            )
        return (
            '<div class="note">Only one run loaded: pass several runs\' reports (or the folder that holds them) '
            "to see each target's trend.</div>"
        )
    if grouping.by_night:
        what = (
            "One point per target and night. A night is the UTC date a report started on: every report started "
            "that date, from any box, is the same night, so a target several boxes fuzzed is one point: the event "
            "labels any of them reached, the best coverage, their steps over their fuzzing time, and all their "
            "failures."
        )
    else:
        what = (
            "One point per target and run: each report is its own run (its start, box and seed), so two runs "
            "on one date are two points (<code>--by-night</code> groups them by UTC start date)."
        )
    plots.append(figures.trend_figure(runs, keys, colours, "trend-plot", grouping))
    return (
        f'<p class="explain">{what} Coverage is per target and needs schema-2 reports from runs with '
        f'<code>--coverage</code>.</p><div class="plot">{plots[-1].html}</div>'
    )


def sources_footer(runs: Sequence[Run], grouping: Grouping) -> str:
    labels = grouping.labels(runs)
    rows = "".join(
        f"<tr><td>{esc(grouping.noun)} {esc(labels[grouping.key(r)])}</td>{_started(r, grouping)}"
        f"<td>schema {r.schema}</td><td>{len(r.targets)} targets</td>"
        f"<td><code>{esc(r.source)}</code>{_copies(r)}</td></tr>"
        for r in reversed(runs)
    )
    return f"<footer><div>Reports loaded, newest first ({esc(grouping.rule)}):</div><table>{rows}</table></footer>"


def _started(run: Run, grouping: Grouping) -> str:
    """A night's footer row names the run's start; a run's label already is its start."""
    return f"<td>started {esc(when(run.started))}</td>" if grouping.by_night else ""


def _copies(run: Run) -> str:
    if not run.copies:
        return ""
    named = ", ".join(f"<code>{esc(path)}</code>" for path in run.copies)
    return f' <span class="copies">(the same run is also in {named}: read once)</span>'


# -------------------------------------------------------------------- page
@dataclass(frozen=True)
class Live:
    """The page of a run still going on: it reloads itself every ``refresh_s`` seconds (see ``live.py``)."""

    refresh_s: float


#: Reloads a live page every ``%(ms)d`` ms (Chrome and Firefox keep the reader's scroll position across
#: ``location.reload()``), unless its last update is over ``%(stale_ms)d`` ms old by the viewer's clock: a run that
#: died without finishing its page then shows a note instead of reloading a stale page forever.
LIVE_SCRIPT = """
(function () {
  var updated = %(updated_ms)s, stale = %(stale_ms)d;
  if (updated !== null && Date.now() - updated > stale) {
    document.addEventListener("DOMContentLoaded", function () {
      var note = document.getElementById("live-stale");
      if (note) note.hidden = false;
    });
    return;
  }
  setTimeout(function () { location.reload(); }, %(ms)d);
})();
"""
STALE_AFTER_S = 600.0
"""A live page stops reloading once its last update is older than this, or than 20 reload periods if that is
longer, by the viewer's clock."""


def live_script(runs: Sequence[Run], live: Live) -> str:
    updated = _updated(runs[-1])
    stale = max(STALE_AFTER_S, 20 * live.refresh_s)
    return LIVE_SCRIPT % {
        "ms": round(live.refresh_s * 1000),
        "stale_ms": round(stale * 1000),
        "updated_ms": "null" if updated is None else str(round(updated.timestamp() * 1000)),
    }


def _updated(run: Run) -> datetime.datetime | None:
    """When the report was taken: its ``finished`` (the runner's clock), else its start plus its duration."""
    text = run.report.get("finished")
    try:
        moment = datetime.datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        moment = None
    if moment is None:
        return run.started + datetime.timedelta(seconds=run.duration_s)
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def live_banner(runs: Sequence[Run], live: Live) -> str:
    run = runs[-1]
    updated = _updated(run)
    since = f" since {when(updated)}" if updated else ""
    return (
        f'<div class="live">Live: this run is still going on ({esc(duration(run.duration_s))} fuzzed so far); '
        f"the page reloads itself every {live.refresh_s:g} s and stops once the run has ended."
        f'<div id="live-stale" hidden>No update{esc(since)}: the run seems to have stopped without writing its '
        "final page, so this page no longer reloads.</div></div>"
    )


@dataclass(frozen=True)
class Page:
    """The page's text and the plotly.js bundle it needs (``None`` without a plot)."""

    html: str
    bundle: Bundle | None


BY_RUN = Grouping(by_night=False)


def render(runs: Sequence[Run], *, grouping: Grouping = BY_RUN, bundle_mode: str = "inline", live: Live | None = None) -> Page:
    """The whole page for ``runs`` (oldest first, as :func:`load_runs` returns them)."""
    rows = latest_rows(runs, grouping)
    keys = list(dict.fromkeys(t.key for _, t in rows))
    colours = figures.target_colours(keys)
    latest_runs = sorted({id(run): run for run, _ in rows}.values(), key=lambda run: (run.started, str(run.source)))
    newest = max(run.started for run in runs)
    steps = len(grouping.keys(runs))
    plots: list[figures.Plot] = []
    contexts = "".join(f'<div class="context">{run_context(run)}</div>' for run in latest_runs)
    latest = (
        "each target in every report of the most recent night that fuzzed it (a night is a UTC start date): "
        "a row per box when several boxes fuzzed it that night"
        if grouping.by_night
        else "each target in the most recent run that fuzzed it (every report is its own run; "
        "<code>--by-night</code> puts the reports of one UTC date together)"
    )
    body = [
        "<h1>poolfuzz nightly at a glance</h1>",
        (
            '<p class="lede">Stateful fuzzing of the memory pools of LLM serving engines: every target is a pool '
            "implementation checked step by step against its model; a failure is an invariant violation with a "
            "shrunk, replayable trace.</p>"
        ),
        live_banner(runs, live) if live else "",
        contexts,
        cards(rows, steps, grouping),
        *notes(latest_runs),
        f"<h2>Targets in the latest {grouping.noun}</h2>",
        f'<p class="explain">{latest[0].upper()}{latest[1:]}.</p>',
        targets_table(rows, colours),
        "<h2>Failures</h2>",
        failure_list(rows, grouping),
        f"<h2>Behaviour over the latest {grouping.noun}</h2>",
        behaviour_section(rows, colours, grouping, plots),
        f"<h2>Across {grouping.nouns}</h2>",
        trend_section(runs, keys, colours, grouping, plots),
        sources_footer(runs, grouping),
    ]
    bundle = bundle_for(set().union(*(plot.trace_types for plot in plots))) if plots else None
    plotly_js = script_tag(bundle, bundle_mode) if bundle else ""
    reload = f"<script>{live_script(runs, live)}</script>" if live else ""
    title = newest.strftime("%Y-%m-%d %H:%M UTC") if not grouping.by_night else newest.date().isoformat()
    return Page(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>poolfuzz {'live' if live else 'nightly'} — {esc(title)}</title><style>{CSS}</style>{reload}"
        f'</head><body><div id="script-errors" hidden></div><script>{ERROR_CATCHER}</script>{plotly_js}'
        f"<main>{''.join(body)}</main></body></html>\n",
        bundle,
    )


def write_page(page: Page, output: Path, bundle_mode: str) -> Path:
    """Write ``page`` to ``output`` atomically, and its shared bundle beside it first when ``bundle_mode`` is shared."""
    if page.bundle is not None and bundle_mode == "shared":
        write_shared(page.bundle, output.parent)
    write_atomically(output, page.html)
    return output


def build_dashboard(
    sources: Sequence[Path],
    output: Path,
    *,
    nights: int | None = None,
    last: int | None = None,
    by_night: bool = False,
    bundle: str = "inline",
) -> Path:
    """Write the dashboard for the reports in ``sources`` (files or folders) to ``output``; returns ``output``.

    Each report is its own run unless ``by_night`` groups them by UTC start
    date; ``nights`` and ``last`` keep the runs of the N most recent dates, or
    the N most recent runs.  ``bundle`` is ``inline`` (one self-contained file)
    or ``shared`` (plotly.js in one file beside the page, written when absent).
    Raises :class:`~poolfuzz.harness.dashboard.reports.DashboardError` for a corrupt or
    unknown report or when no report is found, and
    :class:`~poolfuzz.harness.dashboard.figures.PlotlyMissingError` without plotly, both
    before anything is written.
    """
    page = render(load_runs(sources, nights=nights, last=last), grouping=Grouping(by_night), bundle_mode=bundle)
    return write_page(page, output, bundle)

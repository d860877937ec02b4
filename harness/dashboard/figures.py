"""The dashboard's plots (plotly): behaviour over the latest run, and each target across runs (or nights).

Every function returns a :class:`Plot`: an HTML fragment (a ``div`` and the
script that draws it) without plotly's JavaScript, and the trace types it
draws, from which the page picks the smallest bundle that draws them all
(:func:`~poolfuzz.harness.dashboard.bundle.bundle_for`) and includes it once.  Every
target keeps one colour in every plot (:func:`target_colours`), and clicking a
legend entry hides that target in all panels of a plot.

Curves of what was reached *so far* are running maxima by construction
(:func:`~poolfuzz.harness.dashboard.reports.so_far`), so they never fall even where
the runner's samples do.

Layout (:func:`_style`): the legend sits at the bottom of the figure with
``yref="container"``, which makes plotly *reserve* its height as margin and
push the axis titles and tick labels above it, at any width; panels carry
their subject in their title, not in a y-axis title squeezed between panels.
``tests/test_dashboard.py`` measures, in Chromium at 1400 and 800 px, that no
legend, title or tick label overlaps another.

plotly is imported here only, so ``poolfuzz.harness.dashboard`` imports (and the CLI
lists the command) without it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from poolfuzz.harness.dashboard.groups import Grouping, target_groups
from poolfuzz.harness.dashboard.reports import Run, TargetRun, so_far
from poolfuzz.harness.fuzz.report import SeriesPoint

PLOT_CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}
FONT = "system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif"


class PlotlyMissingError(ImportError):
    """plotly is not installed: the dashboard needs the ``dashboard`` extra."""

    def __init__(self) -> None:
        super().__init__("the dashboard needs plotly: pip install 'poolfuzz[dashboard]' (or pip install 'plotly>=5')")


def _plotly() -> Any:
    try:
        import plotly
    except ImportError:
        raise PlotlyMissingError() from None
    return plotly


@dataclass(frozen=True)
class Plot:
    """One figure for the page: its ``div`` and drawing script, and the plotly trace types it uses."""

    html: str
    trace_types: frozenset[str]


def target_colours(keys: Sequence[str]) -> dict[str, str]:
    _plotly()
    from plotly.colors import qualitative

    palette = qualitative.D3 + qualitative.Dark2
    return {key: palette[i % len(palette)] for i, key in enumerate(keys)}


def time_unit(seconds: float) -> tuple[float, str]:
    """Divisor and unit name so that a run's time axis reads in small numbers (a 7 h night in hours)."""
    if seconds > 2 * 3600:
        return 3600.0, "hours"
    if seconds > 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


TEMPLATE = "plotly_white"


@functools.cache
def _template() -> dict[str, Any]:
    """The figures' template as plain JSON, validated once per process."""
    import plotly.io as pio

    return dict(pio.templates[TEMPLATE].to_plotly_json())


def _figure(**subplots: Any) -> Any:
    """``make_subplots`` on a figure without a template: the template is added as JSON by :func:`_plot`.

    Assigning a template to a plotly figure validates and deep-copies all of it,
    which was two thirds of a live update's time; the page draws the same.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    return make_subplots(figure=go.Figure(layout={"template": {}}), **subplots)


def _plot(figure: Any, div_id: str) -> Plot:
    import plotly.io as pio

    drawn = figure.to_dict()
    drawn["layout"]["template"] = _template()
    html = str(pio.to_html(drawn, validate=False, full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG))
    return Plot(html, frozenset(str(trace.get("type", "scatter")) for trace in drawn["data"]))


LEGEND = {"orientation": "h", "xref": "paper", "x": 0, "xanchor": "left", "yref": "container", "y": 0, "yanchor": "bottom"}
"""Below everything: ``yref="container"`` reserves the legend's height (however many rows it wraps to) as
bottom margin, so the x-axis titles are laid out above it instead of under it."""


def _style(figure: Any, *, height: int) -> None:
    figure.update_layout(
        height=height, font={"family": FONT, "size": 13}, margin={"l": 50, "r": 20, "t": 50, "b": 10}, hovermode="closest", legend=LEGEND
    )
    figure.update_xaxes(automargin=True)
    figure.update_yaxes(automargin=True)
    figure.update_annotations(font_size=15)  # the subplot titles


def _failure_points(series: Sequence[SeriesPoint], target: TargetRun) -> list[tuple[float, int, str]]:
    """``(t, events reached by then, label)`` for each failure of a target, on its *so far* curve."""
    points = []
    first_failing = next((s.t for s in series if s.failures > 0), series[-1].t)
    for failure in target.failures:
        # At its first failing step when the report has it (the failure counts from then on), else at its report.
        t = next((x for x in (failure.first_seen_after_s, failure.found_after_s) if x is not None), first_failing)
        before = [s for s in series if s.t <= t] or [series[0]]
        points.append((t, before[-1].events, failure.invariant or failure.kind))
    return points


DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
"""Line styles of one target's curves when several reports of the step fuzzed it (one colour per target)."""

BEHAVIOUR_TITLES = ("Distinct event labels reached so far", "Branch coverage of pools/, best so far")


def behaviour_figure(lines: Sequence[tuple[str, TargetRun]], colours: Mapping[str, str], div_id: str) -> Plot:
    """Distinct event labels, and branch coverage when measured, reached so far against fuzzing time.

    One line per ``(name, target)``: a target's colour is its own, and a second
    report of the same target (another box) gets the next dash style.  Both
    curves are :func:`~poolfuzz.harness.dashboard.reports.so_far`: running maxima that
    never fall; a coverage point below the best so far says so in its hover.
    """
    _plotly()
    import plotly.graph_objects as go

    with_series = [(name, t, so_far(t.series)) for name, t in lines if t.series]
    covered = any(s.coverage is not None for _, _, series in with_series for s in series)
    scale, unit = time_unit(max((series[-1].t for _, _, series in with_series), default=0.0))
    titles = BEHAVIOUR_TITLES if covered else BEHAVIOUR_TITLES[:1]
    figure = _figure(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.1)
    drawn: dict[str, int] = {}
    for name, target, series in with_series:
        assert target.series
        dash = DASHES[drawn.get(target.key, 0) % len(DASHES)]
        drawn[target.key] = drawn.get(target.key, 0) + 1
        times = [s.t / scale for s in series]
        common = {
            "mode": "lines",
            "line": {"color": colours[target.key], "width": 2, "shape": "hv", "dash": dash},
            "legendgroup": name,
            "name": name,
        }
        figure.add_trace(
            go.Scatter(
                x=times,
                y=[s.events for s in series],
                showlegend=True,
                hovertemplate=f"{name}<br>%{{x:.2f}} {unit}: %{{y}} distinct events so far<extra></extra>",
                **common,
            ),
            row=1,
            col=1,
        )
        if covered:
            figure.add_trace(
                go.Scatter(
                    x=times,
                    y=[s.coverage for s in series],
                    showlegend=False,
                    connectgaps=False,
                    customdata=[_measured_note(raw.coverage, best.coverage) for raw, best in zip(target.series, series)],
                    hovertemplate=f"{name}<br>%{{x:.2f}} {unit}: %{{y:.1f}}% of branches, best so far%{{customdata}}<extra></extra>",
                    **common,
                ),
                row=1,
                col=2,
            )
        if target.failures:
            points = _failure_points(series, target)
            figure.add_trace(
                go.Scatter(
                    x=[t / scale for t, _, _ in points],
                    y=[events for _, events, _ in points],
                    mode="markers",
                    marker={"symbol": "x", "size": 13, "color": "#c62828", "line": {"width": 1, "color": "#7f0000"}},
                    legendgroup=name,
                    showlegend=False,
                    name=f"{name} failure",
                    hovertemplate=[f"{name}<br>failure: {label}<br>after %{{x:.2f}} {unit}<extra></extra>" for _, _, label in points],
                ),
                row=1,
                col=1,
            )
    figure.update_xaxes(title_text=f"fuzzing time ({unit})", rangemode="tozero")
    figure.update_yaxes(rangemode="tozero", row=1, col=1)
    if covered:
        figure.update_yaxes(ticksuffix="%", row=1, col=2)
    _style(figure, height=460)
    return _plot(figure, div_id)


def _measured_note(measured: float | None, best: float | None) -> str:
    """Hover text for a coverage sample below the best so far (the runner's denominator grew)."""
    if measured is None or best is None or measured >= best:
        return ""
    return f"<br>(measured {measured:.1f}%: a newly reached module added its branches)"


TREND_PANELS = ("Distinct event labels reached", "Branch coverage of pools/ (%)", "Fuzzing speed (steps per second)", "Failures")


def trend_figure(runs: Sequence[Run], keys: Sequence[str], colours: Mapping[str, str], div_id: str, grouping: Grouping) -> Plot:
    """Per target and step (run, or night): events reached, coverage, steps/s and failures; one category a step.

    The four panels share their x axis, so only the bottom row names the steps
    (long run labels rotated there never run into the panels above).  By night,
    the reports of several boxes that night are one point per target
    (:class:`~poolfuzz.harness.dashboard.groups.TargetGroup`).
    """
    _plotly()
    import plotly.graph_objects as go

    labels = grouping.labels(runs)
    if not grouping.by_night:  # "2026-01-03 22:00 fuzzbox-1" as two lines under its point: the date, then the rest
        labels = {key: label.replace(" ", "<br>", 1) for key, label in labels.items()}
    figure = _figure(rows=2, cols=2, subplot_titles=TREND_PANELS, shared_xaxes=True, vertical_spacing=0.1, horizontal_spacing=0.1)
    any_coverage = any_failure = False
    for key in keys:
        points = target_groups(runs, key, grouping)
        common = {"legendgroup": key, "name": key, "x": [labels[point.group] for point in points]}
        line = {"mode": "lines+markers", "line": {"color": colours[key], "width": 2}, "marker": {"size": 8}}
        values: list[tuple[list[Any], str]] = [
            ([point.events for point in points], "%{y} distinct events"),
            ([point.coverage for point in points], "%{y:.1f}% of branches"),
            ([point.steps_per_second for point in points], "%{y:,.0f} steps/s"),
        ]
        any_coverage = any_coverage or any(v is not None for v in values[1][0])
        for panel, (ys, what) in enumerate(values):
            figure.add_trace(
                go.Scatter(y=ys, showlegend=panel == 0, **common, **line, hovertemplate=f"{key}<br>%{{x}}: {what}<extra></extra>"),
                row=panel // 2 + 1,
                col=panel % 2 + 1,
            )
        any_failure = any_failure or any(point.failures for point in points)
        figure.add_trace(
            go.Bar(
                y=[point.failures for point in points],
                marker_color=colours[key],
                showlegend=False,
                hovertemplate=f"{key}<br>%{{x}}: %{{y}} failure(s)<extra></extra>",
                **common,
            ),
            row=2,
            col=2,
        )
    categories = list(labels.values())
    for panel in range(4):
        row, col = panel // 2 + 1, panel % 2 + 1
        figure.update_xaxes(type="category", categoryorder="array", categoryarray=categories, row=row, col=col)
        figure.update_yaxes(rangemode="tozero" if panel != 1 else "normal", row=row, col=col)
    figure.update_yaxes(ticksuffix="%", row=1, col=2)
    figure.update_yaxes(dtick=1, row=2, col=2)
    what = "night (UTC start date)" if grouping.by_night else "run (start, UTC)"
    figure.update_xaxes(title_text=what, row=2)
    for empty, text, axes in (
        (not any_coverage, "not measured (fuzz with --coverage)", "2"),
        (not any_failure, f"no failures in any {grouping.noun}", "4"),
    ):
        if empty:
            figure.add_annotation(
                text=text, showarrow=False, font={"color": "#777", "size": 14}, xref=f"x{axes} domain", yref=f"y{axes} domain", x=0.5, y=0.5
            )
    figure.update_layout(barmode="group")
    _style(figure, height=660)
    return _plot(figure, div_id)

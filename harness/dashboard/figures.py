"""The dashboard's plots (plotly): behaviour over one run, and each target across nights.

Every function returns an HTML fragment (a ``div`` and the script that draws
it) without plotly's JavaScript: the page inlines that bundle once
(:func:`plotly_js`), so a page with five plots is not five copies of 4 MB.
Every target keeps one colour in every plot (:func:`target_colours`), and
clicking a legend entry hides that target in all panels of a plot.

plotly is imported here only, so ``harness.dashboard`` imports (and the CLI
lists the command) without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.dashboard.nights import night_label, nights_of, target_nights
from harness.dashboard.reports import Run, TargetRun

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


def plotly_js() -> str:
    """plotly.js, minified, for one inline ``<script>`` per page (no network when the page is viewed)."""
    _plotly()
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


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


def _html(figure: Any, div_id: str) -> str:
    return str(figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG))


def _style(figure: Any, *, height: int) -> None:
    figure.update_layout(
        template="plotly_white", height=height, font={"family": FONT, "size": 13},
        margin={"l": 60, "r": 20, "t": 50, "b": 40}, hovermode="closest",
        legend={"orientation": "h", "yanchor": "top", "y": -0.14, "xanchor": "left", "x": 0},
    )
    figure.update_annotations(font_size=15)  # the subplot titles


def _failure_points(target: TargetRun) -> list[tuple[float, int, str]]:
    """``(t, events then, label)`` for each failure of a target with a series."""
    assert target.series
    points = []
    first_failing = next((s.t for s in target.series if s.failures > 0), target.series[-1].t)
    for failure in target.failures:
        t = failure.found_after_s if failure.found_after_s is not None else first_failing
        before = [s for s in target.series if s.t <= t] or [target.series[0]]
        points.append((t, before[-1].events, failure.invariant or failure.kind))
    return points


DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
"""Line styles of one target's curves when several boxes fuzzed it the same night (one colour per target)."""


def behaviour_figure(lines: Sequence[tuple[str, TargetRun]], colours: Mapping[str, str], div_id: str) -> str:
    """Distinct event labels, and branch coverage when measured, against fuzzing time.

    One line per ``(name, target)``: a target's colour is its own, and a second
    report of the same target (another box, that night) gets the next dash style.
    """
    _plotly()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    with_series = [(name, t) for name, t in lines if t.series]
    covered = any(s.coverage is not None for _, t in with_series for s in t.series or ())
    scale, unit = time_unit(max((t.series[-1].t for _, t in with_series if t.series), default=0.0))
    titles = ("Distinct events reached", "Branch coverage of pools/ (%)") if covered else ("Distinct events reached",)
    figure = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.08)
    drawn: dict[str, int] = {}
    for name, target in with_series:
        assert target.series
        dash = DASHES[drawn.get(target.key, 0) % len(DASHES)]
        drawn[target.key] = drawn.get(target.key, 0) + 1
        times = [s.t / scale for s in target.series]
        common = {"mode": "lines", "line": {"color": colours[target.key], "width": 2, "shape": "hv", "dash": dash},
                  "legendgroup": name, "name": name}
        figure.add_trace(go.Scatter(
            x=times, y=[s.events for s in target.series], showlegend=True,
            hovertemplate=f"{name}<br>%{{x:.2f}} {unit}: %{{y}} distinct events<extra></extra>", **common,
        ), row=1, col=1)
        if covered:
            figure.add_trace(go.Scatter(
                x=times, y=[s.coverage for s in target.series], showlegend=False, connectgaps=False,
                hovertemplate=f"{name}<br>%{{x:.2f}} {unit}: %{{y:.1f}}% of branches<extra></extra>", **common,
            ), row=1, col=2)
        if target.failures:
            points = _failure_points(target)
            figure.add_trace(go.Scatter(
                x=[t / scale for t, _, _ in points], y=[events for _, events, _ in points], mode="markers",
                marker={"symbol": "x", "size": 13, "color": "#c62828", "line": {"width": 1, "color": "#7f0000"}},
                legendgroup=name, showlegend=False, name=f"{name} failure",
                hovertemplate=[f"{name}<br>failure: {label}<br>after %{{x:.2f}} {unit}<extra></extra>"
                               for _, _, label in points],
            ), row=1, col=1)
    figure.update_xaxes(title_text=f"fuzzing time ({unit})", rangemode="tozero")
    figure.update_yaxes(title_text="distinct event labels", rangemode="tozero", row=1, col=1)
    if covered:
        figure.update_yaxes(title_text="branches covered (%)", ticksuffix="%", row=1, col=2)
    _style(figure, height=440)
    return _html(figure, div_id)


TREND_PANELS = (
    ("Distinct events reached", "event labels"),
    ("Branch coverage of pools/ (%)", "branches covered (%)"),
    ("Fuzzing speed (steps per second)", "steps/s"),
    ("Failures per night", "failures"),
)


def trend_figure(runs: Sequence[Run], keys: Sequence[str], colours: Mapping[str, str], div_id: str) -> str:
    """Per target and night: events reached, coverage, steps/s and failures; the x axis is one category a night.

    A night is a UTC start date; the reports of several boxes that night are one point
    per target (:class:`~harness.dashboard.nights.TargetNight`).
    """
    _plotly()
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    categories = [night_label(night) for night in nights_of(runs)]
    figure = make_subplots(rows=2, cols=2, subplot_titles=[title for title, _ in TREND_PANELS],
                           vertical_spacing=0.16, horizontal_spacing=0.08)
    any_coverage = any_failure = False
    for key in keys:
        points = target_nights(runs, key)
        common = {"legendgroup": key, "name": key, "x": [night_label(point.night) for point in points]}
        line = {"mode": "lines+markers", "line": {"color": colours[key], "width": 2}, "marker": {"size": 8}}
        values: list[tuple[list[Any], str]] = [
            ([point.events for point in points], "%{y} distinct events"),
            ([point.coverage for point in points], "%{y:.1f}% of branches"),
            ([point.steps_per_second for point in points], "%{y:,.0f} steps/s"),
        ]
        any_coverage = any_coverage or any(v is not None for v in values[1][0])
        for panel, (ys, what) in enumerate(values):
            figure.add_trace(go.Scatter(y=ys, showlegend=panel == 0, **common, **line,
                                        hovertemplate=f"{key}<br>%{{x}}: {what}<extra></extra>"),
                             row=panel // 2 + 1, col=panel % 2 + 1)
        any_failure = any_failure or any(point.failures for point in points)
        figure.add_trace(go.Bar(y=[point.failures for point in points], marker_color=colours[key], showlegend=False,
                                hovertemplate=f"{key}<br>%{{x}}: %{{y}} failure(s)<extra></extra>", **common),
                         row=2, col=2)
    for panel, (_, unit) in enumerate(TREND_PANELS):
        row, col = panel // 2 + 1, panel % 2 + 1
        figure.update_xaxes(type="category", categoryorder="array", categoryarray=categories, row=row, col=col)
        figure.update_yaxes(title_text=unit, rangemode="tozero" if panel != 1 else "normal", row=row, col=col)
    figure.update_yaxes(dtick=1, row=2, col=2)
    figure.update_xaxes(title_text="night (UTC start date)", row=2)
    for empty, text, axes in ((not any_coverage, "not measured (fuzz with --coverage)", "2"),
                              (not any_failure, "no failures on any night", "4")):
        if empty:
            figure.add_annotation(text=text, showarrow=False, font={"color": "#777", "size": 14},
                                  xref=f"x{axes} domain", yref=f"y{axes} domain", x=0.5, y=0.5)
    figure.update_layout(barmode="group")
    _style(figure, height=640)
    return _html(figure, div_id)

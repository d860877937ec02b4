"""The dashboard: reading reports strictly, runs and nights, the numbers it derives, the page, the CLI,
the plotly bundle, the live page, and a real browser.

Reports are fabricated by :func:`night_report` (realistic shapes: saturating
event and coverage curves, a failure that retires its target) rather than made
by fuzzing, so these tests are fast and exact.  The browser tests render pages
in headless Chromium with the network blocked, each page in an iframe of a
given width inside one wrapper page (one browser start for every page and
width), and read what a probe script injected into each page measured: script
errors, the boxes of the legend, titles and tick labels plotly drew, and how
often the page loaded; they skip without Chromium.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import html as html_module
import json
import math
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("plotly", reason="the dashboard needs plotly (the 'dashboard' extra)")

from poolfuzz.harness.dashboard import (
    LiveDashboard,
    NoReportsError,
    ReportError,
    add_arguments,
    build_dashboard,
    load_reports,
    load_runs,
    run,
)
from poolfuzz.harness.dashboard.bundle import BASIC_TRACES, basic_bundle, bundle_for, full_bundle
from poolfuzz.harness.dashboard.groups import Grouping, latest_rows, target_groups
from poolfuzz.harness.dashboard.report_check import TOOL
from poolfuzz.harness.dashboard.reports import Run, parse_report, so_far
from poolfuzz.harness.fuzz.report import RunReport, SeriesPoint, TargetStats

#: (target, implementation, event labels it can reach, time constant of its saturation in s, steps/s)
TARGETS = [
    (
        "req_to_token",
        "poolfuzz.pools:ReqToTokenPool",
        ["alloc needing no row", "alloc refused: pool short", "pool exactly full"],
        120.0,
        900.0,
    ),
    (
        "mamba_slots",
        "poolfuzz.pools:MambaSlotAllocator",
        [
            "group opened with a reservation",
            "group reservation exhausted",
            "group end returned slots",
            "alloc refused: pool short",
            "pool exactly full",
        ],
        400.0,
        610.0,
    ),
    (
        "paged_kv",
        "poolfuzz.pools:PagedTokenToKVPoolAllocator",
        [
            "alloc refused: pool short",
            "pool exactly full",
            "free group released pages",
            "alloc while pages are staged",
            "double free rejected",
            "extend/decode refused: pool short",
            "extend/decode filled the pool exactly",
        ],
        700.0,
        380.0,
    ),
    (
        "scheduler",
        "poolfuzz.harness.kits.scheduler.driver:build_scheduler_pools",
        ["extend refused: KV short", "KV exactly full", "retract mid-page", "admission rolled back: KV short"],
        1500.0,
        150.0,
    ),
]
DURATION_S = 3600.0
INTERVAL_S = 60.0
TRACE = "corpus/found/paged_kv/paged_kv-3f2a9c1e07b4d5a6.json"
FAILURE_AT_S = 1260.0


def _curve(t: float, top: float, tau: float) -> float:
    return top * (1.0 - math.exp(-t / tau))


def _target(
    name: str, impl: str, labels: list[str], tau: float, speed: float, *, night: int, fails_at: float | None, coverage: bool
) -> dict[str, Any]:
    """One target's entry: cumulative samples that saturate, and stop growing once the target failed."""
    series: list[dict[str, Any]] = []
    for i in range(int(DURATION_S / INTERVAL_S) + 1):
        t = i * INTERVAL_S
        active = min(t, fails_at) if fails_at is not None else t
        series.append(
            {
                "t": t,
                "steps": int(active * speed),
                "examples": int(active * speed / 200),
                "events": round(_curve(active, len(labels) - (night < 2), tau)),
                "coverage": round(40 + _curve(active, 35 + 3 * night, tau * 1.5), 1) if coverage else None,
                "failures": int(fails_at is not None and t >= fails_at),
            }
        )
    reached = labels[: series[-1]["events"]]
    failures: list[dict[str, Any]] = []
    if fails_at is not None:
        failures.append(
            {
                "target": name,
                "family": name,
                "implementation": impl,
                "kind": "violation",
                "invariant": "conservation",
                "trace": TRACE,
                "steps": 7,
                "shrunk": True,
                "round": 31,
                "seed": 2966120417,
                "worker": "w2",
                "found_after_s": fails_at,
                "replay": f"poolfuzz replay {TRACE}",
                "message": "[conservation] free pages differ from the model: pool 14 free, model 15 (page 9 lost)\n"
                "  step 1: alloc_extend(prefix_lens=[0], seq_lens=[9])\n  step 2: free_group_begin()",
            }
        )
    last = series[-1]
    return {
        "target": name,
        "family": name,
        "implementation": impl,
        "status": "failed" if failures else "ok",
        "examples": last["examples"],
        "steps": last["steps"],
        "fuzz_seconds": DURATION_S,
        "steps_per_second": round(speed * (1 + 0.05 * night), 1),
        "rounds": 1800,
        "events": {label: 40 * (k + 1) for k, label in enumerate(reached)},
        "failures": failures,
        "crashes": [],
        "series": series,
        "coverage": last["coverage"],
    }


def night_report(night: int, *, failing: tuple[str, ...] = (), coverage: bool = True, schema: int = 2) -> dict[str, Any]:
    """Night ``night`` (0, 1, 2: January 1st to 3rd, 2026) as ``poolfuzz fuzz`` writes it."""
    targets = [_target(*spec, night=night, fails_at=FAILURE_AT_S if spec[0] in failing else None, coverage=coverage) for spec in TARGETS]
    failures = [f for t in targets for f in t["failures"]]
    report: dict[str, Any] = {
        "schema": schema,
        "tool": TOOL,
        "started": f"2026-01-0{night + 1}T22:00:03+00:00",
        "finished": f"2026-01-0{night + 1}T23:00:09+00:00",
        "duration_s": DURATION_S,
        "startup_s": 4.2,
        "interrupted": False,
        "ended_because": "time is up",
        "exit_status": 1 if failures else 0,
        "run": {
            "seed": 20260101 + night,
            "budget_s": DURATION_S,
            "workers": 16,
            "device": "cpu",
            "steps_per_example": 200,
            "misuse": True,
            "database": ".hypothesis/poolfuzz",
            "corpus": "corpus/found",
            "grace_s": 60.0,
            "coverage": coverage,
            "cwd": "/srv/poolfuzz",
            "logs": None,
        },
        "machine": {
            "hostname": "fuzzbox-1",
            "platform": "Linux-6.8-x86_64",
            "machine": "x86_64",
            "cpu_count": 16,
            "python_executable": "/srv/poolfuzz/.venv/bin/python",
            "accelerators": [],
        },
        "versions": {
            "python": "3.11.9",
            "poolfuzz": "0.1.0",
            "hypothesis": "6.130.0",
            "torch": "2.13.0",
            "triton": None,
            "coverage": "7.6.0",
            "redis": None,
        },
        "totals": {
            "examples": sum(t["examples"] for t in targets),
            "steps": sum(t["steps"] for t in targets),
            "steps_per_second": 2100.0,
            "failures": len(failures),
            "crashes": 0,
        },
        "series_interval_s": INTERVAL_S,
        "targets": targets,
        "failures": failures,
        "crashes": [],
        "workers": [{"worker": f"w{i}", "pid": 1000 + i, "exit_code": 0, "rounds": 112} for i in range(16)],
        "skipped": [],
        "coverage": {"branch": True, "percent": 71.3, "files": {}} if coverage else None,
    }
    return schema_1(report) if schema == 1 else report


def schema_1(report: dict[str, Any]) -> dict[str, Any]:
    """The same report as a schema-1 runner wrote it: no series, no per-target coverage, no replay."""
    old = copy.deepcopy(report)
    old["schema"] = 1
    del old["series_interval_s"]
    for target in old["targets"]:
        del target["series"], target["coverage"]
        for failure in target["failures"]:
            del failure["replay"]
    return old


def on_box(report: dict[str, Any], host: str, started: str) -> dict[str, Any]:
    """``report`` as fleet box ``host`` wrote it, started at ``started`` (ISO 8601, any offset)."""
    report["machine"]["hostname"] = host
    report["started"] = started
    return report


def write(folder: Path, name: str, report: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(report if isinstance(report, str) else json.dumps(report, indent=1))
    return path


def write_three_nights(folder: Path) -> Path:
    """Three nights of reports in ``folder``; the last found a conservation violation in paged_kv."""
    for night in range(3):
        write(folder, f"nightly-2026-01-0{night + 1}.json", night_report(night, failing=("paged_kv",) * (night == 2)))
    return folder


@pytest.fixture
def three_nights(tmp_path: Path) -> Path:
    return write_three_nights(tmp_path / "reports")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three nights' dashboard, built once for the tests that only read it."""
    folder = write_three_nights(tmp_path_factory.mktemp("reports"))
    return build_dashboard([folder], folder / "site" / "dashboard.html")


@pytest.fixture(scope="module")
def page(built: Path) -> str:
    return built.read_text()


def dashboard_of(tmp_path: Path, *reports: dict[str, Any], by_night: bool = False) -> str:
    """The page built from ``reports``, one file each (each its own run unless ``by_night``)."""
    for i, report in enumerate(reports):
        write(tmp_path / "in", f"night-{i}.json", report)
    return build_dashboard([tmp_path / "in"], tmp_path / "d.html", by_night=by_night).read_text()


def parsed(report: dict[str, Any]) -> Run:
    return parse_report(report, Path("r.json"))


# ---------------------------------------------------------------- reading
def test_reports_come_back_oldest_first_and_each_file_once(three_nights: Path) -> None:
    newest = three_nights / "nightly-2026-01-03.json"
    reports = load_reports([newest, three_nights])
    assert [r["started"][:10] for r in reports] == ["2026-01-01", "2026-01-02", "2026-01-03"]


def test_a_folder_passes_over_json_that_is_not_a_report_but_a_named_file_must_be_one(three_nights: Path) -> None:
    trace = write(three_nights / "corpus", "paged_kv-3f2a.json", {"schema": 1, "family": "paged_kv", "steps": []})
    assert len(load_reports([three_nights])) == 3
    with pytest.raises(ReportError, match="not a 'poolfuzz fuzz' report") as caught:
        load_reports([trace])
    assert caught.value.source == trace


@pytest.mark.parametrize(
    ("edit", "field", "problem"),
    [
        (lambda r: r.update(schema=4), "schema", "schema 4 is not one this dashboard reads"),
        (lambda r: r.pop("series_interval_s"), "series_interval_s", "missing"),
        (lambda r: r["targets"][1]["series"][2].update(t="soon"), "targets[1].series[2].t", "expected a number"),
        (lambda r: r["targets"][0].update(steps=True), "targets[0].steps", "expected an integer, got a boolean"),
        (lambda r: r["targets"][2]["failures"].append({"kind": "violation"}), "targets[2].failures[0].message", "missing"),
        (lambda r: r.update(started="last night"), "started", "not an ISO 8601 time"),
    ],
)
def test_a_bad_field_is_one_error_naming_the_file_and_the_field(
    tmp_path: Path, edit: Callable[[dict[str, Any]], Any], field: str, problem: str
) -> None:
    report = night_report(0)
    edit(report)
    path = write(tmp_path, "bad.json", report)
    with pytest.raises(ReportError, match=problem) as caught:
        load_reports([tmp_path])
    assert (caught.value.source, caught.value.field) == (path, field)
    assert "\n" not in str(caught.value)


def test_a_truncated_report_is_an_error_even_inside_a_folder(three_nights: Path) -> None:
    text = (three_nights / "nightly-2026-01-02.json").read_text()
    write(three_nights, "nightly-2026-01-02.json", text[: len(text) // 2])
    with pytest.raises(ReportError, match="not valid JSON"):
        load_reports([three_nights])


def test_a_folder_without_reports_and_a_missing_path_are_errors(tmp_path: Path) -> None:
    with pytest.raises(NoReportsError):
        load_reports([tmp_path])
    with pytest.raises(ReportError, match="no such file"):
        load_reports([tmp_path / "absent.json"])


def test_keys_a_newer_runner_adds_are_ignored() -> None:
    report = night_report(1)
    report["gpu_seconds"] = 12.5
    report["targets"][0]["series"][0]["rss_mb"] = 812
    assert parsed(report).targets[0].series is not None


def test_a_failure_without_replay_gets_one_built_from_its_trace() -> None:
    old = schema_1(night_report(2, failing=("paged_kv",)))
    old["targets"][2]["failures"][0]["trace"] = "corpus/found/my dir/t.json"
    failure = parsed(old).targets[2].failures[0]
    assert failure.replay == "poolfuzz replay 'corpus/found/my dir/t.json'"
    assert failure.headline.startswith("[conservation] free pages differ")


Samples = list[tuple[float, int, int, float | None]]  # (t, steps, distinct events, coverage)


@pytest.mark.parametrize(
    ("samples", "quiet"),
    [
        pytest.param(
            [(0, 0, 0, None), (60, 100, 2, None), (120, 200, 3, None), (180, 300, 3, None), (240, 400, 3, None)],
            120,
            id="from-the-last-new-event-label-to-the-end",
        ),
        pytest.param(
            [(0, 0, 0, 10.0), (60, 100, 2, 20.0), (120, 200, 2, 20.0), (180, 300, 2, 20.5), (240, 400, 2, 20.5)],
            60,
            id="new-coverage-is-new-behaviour-too",
        ),
        pytest.param(
            [(0, 0, 0, None), (60, 100, 2, None), (120, 150, 2, None), (180, 150, 2, None), (240, 150, 2, None)],
            60,
            id="a-retired-target-is-quiet-only-until-its-steps-stop",
        ),
    ],
)
def test_quiet_time_is_fuzzing_time_since_the_last_new_behaviour(samples: Samples, quiet: float) -> None:
    report = night_report(0)
    report["targets"][0]["series"] = [
        {"t": t, "steps": steps, "examples": steps // 200, "events": events, "coverage": coverage, "failures": 0}
        for t, steps, events, coverage in samples
    ]
    assert parsed(report).targets[0].quiet_seconds() == quiet


def test_a_target_without_series_has_no_quiet_time() -> None:
    assert parsed(night_report(0, schema=1)).targets[0].quiet_seconds() is None


def test_nights_keeps_the_most_recent_start_dates(three_nights: Path) -> None:
    assert [r.started.day for r in load_runs([three_nights], nights=2)] == [2, 3]


def test_a_night_is_a_utc_start_date_so_every_box_of_the_last_night_is_kept(tmp_path: Path) -> None:
    write(tmp_path, "a-jan2.json", on_box(night_report(1), "fuzzbox-1", "2026-01-02T22:00:03+00:00"))
    write(tmp_path, "b-jan2.json", on_box(night_report(1), "fuzzbox-2", "2026-01-02T22:07:41+00:00"))
    # 00:30 in UTC+2 is 22:30 UTC the day before: the same night as the two above, not the next one
    write(tmp_path, "c-jan2.json", on_box(night_report(1), "fuzzbox-3", "2026-01-03T00:30:00+02:00"))
    write(tmp_path, "d-jan1.json", on_box(night_report(0), "fuzzbox-1", "2026-01-01T22:00:03+00:00"))
    kept = load_runs([tmp_path], nights=1)
    assert sorted(r.source.name for r in kept) == ["a-jan2.json", "b-jan2.json", "c-jan2.json"]
    assert {r.night for r in kept} == {datetime.date(2026, 1, 2)}
    assert len(load_runs([tmp_path], nights=2)) == 4


def test_by_night_two_boxes_on_one_night_are_one_night_and_the_page_says_how_nights_are_counted(tmp_path: Path) -> None:
    html = dashboard_of(
        tmp_path,
        on_box(night_report(2), "fuzzbox-1", "2026-01-03T22:00:03+00:00"),
        on_box(night_report(2), "fuzzbox-2", "2026-01-03T22:01:15+00:00"),
        by_night=True,
    )
    assert '<div class="value">1</div><div class="label">night loaded (UTC start date)</div>' in html
    assert "Only one night loaded (one UTC start date" in html and 'id="trend-plot"' not in html
    assert "a night is the UTC date a report started on: every report started that date, from any box" in html


def test_by_night_the_trend_has_one_category_per_utc_date(tmp_path: Path) -> None:
    html = dashboard_of(
        tmp_path,
        night_report(0),
        night_report(1),
        on_box(night_report(2), "fuzzbox-1", "2026-01-03T22:00:03+00:00"),
        on_box(night_report(2), "fuzzbox-2", "2026-01-03T22:00:59+00:00"),
        by_night=True,
    )
    assert '"categoryarray":["2026-01-01","2026-01-02","2026-01-03"]' in html
    assert "A night is the UTC date a report started on" in html


def test_by_night_a_target_fuzzed_by_several_boxes_in_one_night_is_one_combined_trend_point() -> None:
    first, second = night_report(2, failing=("paged_kv",)), night_report(2, failing=("paged_kv",))
    first["targets"][2].update(
        events={"pool exactly full": 3, "double free rejected": 1}, coverage=61.5, steps=1000, steps_per_second=100.0
    )
    second["targets"][2].update(
        events={"pool exactly full": 9, "alloc refused: pool short": 2}, coverage=64.0, steps=3000, steps_per_second=300.0
    )
    runs = [
        parse_report(on_box(first, "fuzzbox-1", "2026-01-03T22:00:03+00:00"), Path("a.json")),
        parse_report(on_box(second, "fuzzbox-2", "2026-01-03T22:00:30+00:00"), Path("b.json")),
    ]
    [point] = target_groups(runs, "paged_kv", Grouping(by_night=True))
    assert point.group == "2026-01-03" and len(point.runs) == 2
    assert (point.events, point.coverage, point.failures) == (3, 64.0, 2)
    assert point.steps_per_second == 4000 / (10 + 10)  # all steps over all fuzzing seconds


# ------------------------------------------------------------------- runs
def two_runs_on_one_date() -> list[dict[str, Any]]:
    """One box, one UTC date, two runs: a morning one with small step counts, and an evening one that failed."""
    morning = on_box(night_report(2), "fuzzbox-1", "2026-01-03T09:00:03+00:00")
    morning["run"]["seed"] = 11
    for target in morning["targets"]:
        target["steps"] //= 10
    evening = on_box(night_report(2, failing=("paged_kv",)), "fuzzbox-1", "2026-01-03T21:30:00+00:00")
    evening["run"]["seed"] = 12
    return [morning, evening]


def test_two_runs_on_one_date_are_two_runs_not_one_night_with_doubled_rows_and_summed_steps(tmp_path: Path) -> None:
    from poolfuzz.harness.dashboard.sections import big_number

    morning, evening = two_runs_on_one_date()
    html = dashboard_of(tmp_path, morning, evening)
    assert '<div class="value">2</div><div class="label">runs loaded</div>' in html
    table = html[html.index('<table class="targets"') : html.index("</table>")]
    assert table.count('<tr><td class="key">') == 4  # the latest run's targets, once each
    steps = big_number(sum(t["steps"] for t in evening["targets"]))
    assert f'<div class="value">{steps}</div><div class="label">steps fuzzed</div>' in html
    _, layout = figure_of(html, "trend-plot")  # two points per target in the trend, each run's date over its time
    assert layout["xaxis3"]["categoryarray"] == ["2026-01-03<br>09:00", "2026-01-03<br>21:30"]
    assert "run 2026-01-03 21:30" in html and "run 2026-01-03 09:00" in html  # the footer tells them apart
    merged = dashboard_of(tmp_path, morning, evening, by_night=True)
    assert '<div class="value">1</div><div class="label">night loaded (UTC start date)</div>' in merged
    merged_table = merged[merged.index('<table class="targets"') : merged.index("</table>")]
    assert merged_table.count('<tr><td class="key">') == 8


def test_a_run_is_its_start_box_and_seed_and_labels_add_only_what_tells_runs_apart() -> None:
    def at(box: str, started: str, seed: int) -> Run:
        report = on_box(night_report(2), box, started)
        report["run"]["seed"] = seed
        return parsed(report)

    runs = [
        at("fuzzbox-1", "2026-01-03T22:00:03+00:00", 1),
        at("fuzzbox-1", "2026-01-03T22:00:41+00:00", 2),
        at("fuzzbox-1", "2026-01-03T22:00:41+00:00", 3),
        at("fuzzbox-2", "2026-01-03T22:10:00+00:00", 4),
    ]
    assert runs[0].run_id == "2026-01-03T22:00:03Z fuzzbox-1 seed 1"
    assert list(Grouping().labels(runs).values()) == [
        "2026-01-03 22:00:03 fuzzbox-1",
        "2026-01-03 22:00:41 fuzzbox-1 seed 2",
        "2026-01-03 22:00:41 fuzzbox-1 seed 3",
        "2026-01-03 22:10 fuzzbox-2",
    ]
    assert list(Grouping().labels(runs[3:]).values()) == ["2026-01-03 22:10"]  # one box: no box in the label
    assert list(Grouping(by_night=True).labels(runs).values()) == ["2026-01-03"]


def test_the_same_run_in_two_files_is_read_once_keeping_the_longest(tmp_path: Path) -> None:
    final = night_report(2)
    snapshot = copy.deepcopy(final)
    snapshot["duration_s"] = 600.0
    write(tmp_path / "reports", "tonight.json", final)
    write(tmp_path / "archive", "tonight.json", final)
    write(tmp_path / "archive", "tonight-at-10-min.json", snapshot)
    [kept] = load_runs([tmp_path])
    assert kept.source == tmp_path / "archive" / "tonight.json" and kept.duration_s == DURATION_S
    assert kept.copies == (tmp_path / "archive" / "tonight-at-10-min.json", tmp_path / "reports" / "tonight.json")
    html = build_dashboard([tmp_path], tmp_path / "d.html").read_text()
    assert html.count("<tr><td>run ") == 1 and "the same run is also in" in html


def test_runs_keeps_the_most_recent_reports(tmp_path: Path) -> None:
    for i, report in enumerate([night_report(0), *two_runs_on_one_date()]):
        write(tmp_path, f"r{i}.json", report)
    assert [r.seed for r in load_runs([tmp_path], last=2)] == [11, 12]
    assert [r.seed for r in load_runs([tmp_path], nights=1)] == [11, 12]


# --------------------------------------------------------------- so far
def dropping_samples(report: dict[str, Any]) -> dict[str, Any]:
    """req_to_token's samples as the runner can write them: coverage 54.0 then 51.5 (the target stepped into
    another pools/ module, whose arcs joined the denominator), and an event count that fell back."""
    samples = [(0, 0, None), (60, 3, 40.0), (120, 5, 54.0), (180, 4, 51.5), (240, 5, 52.0), (300, 6, 55.0)]
    report["targets"][0]["series"] = [
        {"t": t, "steps": int(t * 900), "examples": int(t * 4.5), "events": events, "coverage": coverage, "failures": 0}
        for t, events, coverage in samples
    ]
    return report


def test_so_far_is_a_running_maximum_that_keeps_not_measured_until_measured() -> None:
    raw = [
        SeriesPoint(0.0, 0, 0, 0, None, 0),
        SeriesPoint(1.0, 5, 1, 2, 54.0, 0),
        SeriesPoint(2.0, 9, 2, 1, 51.5, 0),
        SeriesPoint(3.0, 12, 3, 3, None, 1),
    ]
    assert [(s.events, s.coverage, s.failures) for s in so_far(raw)] == [(0, None, 0), (2, 54.0, 0), (2, 54.0, 0), (3, 54.0, 1)]


def test_the_reached_so_far_curves_never_fall_even_where_the_samples_do(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, dropping_samples(night_report(2)))
    data, layout = figure_of(html, "behaviour-plot")
    events, coverage = (
        next(t for t in data if t["name"] == "req_to_token" and t["xaxis"] == axis and t["mode"] == "lines") for axis in ("x", "x2")
    )
    assert events["y"] == [0, 3, 5, 5, 5, 6]
    assert coverage["y"] == [None, 40.0, 54.0, 54.0, 54.0, 55.0]
    assert "measured 51.5%" in coverage["customdata"][3] and coverage["customdata"][2] == ""
    for trace in data:  # every curve of the plot
        ys = [y for y in trace["y"] if y is not None]
        assert ys == sorted(ys), trace["name"]
    assert [a["text"] for a in layout["annotations"]] == ["Distinct event labels reached so far", "Branch coverage of pools/, best so far"]


# ------------------------------------------------------------------- page
def without_plotly_js(page: str) -> str:
    """The page as written by us: plotly's bundles (which name URLs of their own) cut out."""
    basic = basic_bundle()
    return page.replace(full_bundle().text, "").replace(basic.text if basic else "\0", "")


def test_the_basic_bundle_is_inlined_once_and_nothing_is_loaded_from_the_network(page: str) -> None:
    basic = basic_bundle()
    assert basic is not None and basic.kind == "basic" and basic.version == full_bundle().version
    assert page.count(basic.text[:400]) == 1 and full_bundle().text[:400] not in page
    ours = without_plotly_js(page)
    assert page.count('class="plotly-graph-div"') == 2
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", ours)
    assert "<script src" not in ours and "<link" not in ours
    assert len(page.encode()) < 1_400_000  # it was 4.86 MB with the full bundle


def figure_of(page: str, div_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The data and layout of the plot ``div_id`` as the page hands them to ``Plotly.newPlot``."""
    found = re.search(rf'Plotly\.newPlot\(\s*"{re.escape(div_id)}",\s*', page)
    assert found is not None, div_id
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(page, found.end())
    after_comma = page[page.index(",", end) + 1 :]
    layout, _ = decoder.raw_decode(page, len(page) - len(after_comma.lstrip()))
    return data, layout


def test_every_trace_the_pages_draw_is_in_the_basic_bundle(page: str) -> None:
    drawn = {trace["type"] for plot in ("behaviour-plot", "trend-plot") for trace in figure_of(page, plot)[0]}
    assert drawn == {"scatter", "bar"} and drawn <= BASIC_TRACES
    assert bundle_for({"scatter", "bar"}).kind == "basic"
    assert bundle_for({"scatter", "heatmap"}).kind == "full"  # a figure the basic bundle cannot draw


def test_without_a_usable_basic_bundle_the_page_inlines_the_full_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from poolfuzz.harness.dashboard import bundle

    try:
        old = write(tmp_path, "old.js", "/**\n* plotly.js (basic - minified) v2.35.2")
        for missing in (tmp_path / "absent.js", old):
            monkeypatch.setattr(bundle, "BASIC_FILE", missing)
            bundle.basic_bundle.cache_clear()
            assert bundle.basic_bundle() is None  # missing, or of another major version than the plotly installed
            html = dashboard_of(tmp_path, night_report(2))
            assert html.count(full_bundle().text[:400]) == 1
    finally:
        bundle.basic_bundle.cache_clear()  # the next test reads the real one again


def test_a_shared_bundle_is_one_file_beside_the_pages_and_each_page_references_it(three_nights: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    first = build_dashboard([three_nights], site / "index.html", bundle="shared")
    basic = basic_bundle()
    assert basic is not None
    shared = site / basic.file_name
    assert shared.name == f"plotly-basic-{basic.version}.min.js" and shared.read_text() == basic.text
    html = first.read_text()
    assert f'<script src="{shared.name}" onerror=' in html and basic.text[:400] not in html
    assert len(html.encode()) < 100_000
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", without_plotly_js(html))
    written = shared.stat().st_mtime_ns
    second = build_dashboard([three_nights / "nightly-2026-01-02.json"], site / "jan-2.html", bundle="shared")
    assert shared.stat().st_mtime_ns == written  # the same bundle: left as it is
    assert f'<script src="{shared.name}"' in second.read_text()
    shared.write_text("torn")
    build_dashboard([three_nights], site / "index.html", bundle="shared")
    assert shared.read_text() == basic.text
    assert sorted(p.name for p in site.iterdir()) == ["index.html", "jan-2.html", shared.name]  # no temp file left


def test_every_target_has_a_row_and_the_failure_shows_its_id_trace_and_replay_command(page: str) -> None:
    for name, *_ in TARGETS:
        assert f"<code>{name}</code></td>" in page
    assert '<span class="invariant">conservation</span>' in page
    assert f"<code>{TRACE}</code> (7 steps)" in page
    assert f'<code class="command">poolfuzz replay {TRACE}</code>' in page
    assert "[conservation] free pages differ from the model: pool 14 free, model 15 (page 9 lost)" in page


def test_a_failure_shows_when_its_first_failing_step_came_and_when_its_shrunk_report_did(tmp_path: Path) -> None:
    report = night_report(2, failing=("paged_kv",))
    (failure,) = report["failures"]
    for record in (failure, *(f for t in report["targets"] for f in t["failures"])):
        record.update(first_seen_after_s=12.5, unshrunk_steps=91)
    html = without_plotly_js(dashboard_of(tmp_path, report))
    assert "<dt>first failing step</dt><dd>after 12 s of fuzzing</dd>" in html
    assert "<dt>shrunk report</dt><dd>after 21 min of fuzzing</dd>" in html
    assert "first failing step" not in without_plotly_js(dashboard_of(tmp_path, night_report(2, failing=("paged_kv",))))


@pytest.mark.parametrize("state", ["done", "running", "partial"])
def test_a_schema_3_failure_shows_its_unshrunk_trace_time_to_first_failing_step_and_its_shrink(tmp_path: Path, state: str) -> None:
    report = night_report(2, failing=("paged_kv",), schema=3)
    unshrunk = "corpus/found/unshrunk/paged_kv/paged_kv-0123456789abcdef.json"
    found_at = {
        "after_s": 12.5,
        "since_start_s": 15.0,
        "invariant": "conservation",
        "message": "[conservation] ...",
        "trace": unshrunk,
        "steps": 91,
        "worker": "w2",
        "replay": f"poolfuzz replay {unshrunk}",
    }
    shrink = {
        "state": state,
        "after_s": None if state == "running" else 70.5,
        "seconds": None if state == "running" else 58.0,
        "note": "cut off (the run was interrupted): the smallest failing trace seen was saved" if state == "partial" else None,
    }
    for record in (*report["failures"], *(f for t in report["targets"] for f in t["failures"])):
        record.update(
            first_seen_after_s=12.5,
            unshrunk_steps=91,
            found_at=found_at,
            shrink=shrink,
            shrunk=state == "done",
            found_after_s=None if state == "running" else 70.5,
        )
        if state == "running":
            record.update(trace=unshrunk, steps=91)
    html = without_plotly_js(dashboard_of(tmp_path, report))
    assert f"after 12 s of fuzzing: unshrunk trace <code>{unshrunk}</code> (91 steps)" in html
    shown = {
        "done": "after 70 s of fuzzing (shrinking took 58 s)",
        "running": "not yet: still shrinking",
        "partial": "none, the shrink is partial after 58 s: cut off (the run was interrupted)",
    }[state]
    assert shown in html


def test_a_run_without_failures_says_so(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, night_report(1))
    assert "No failures: no invariant violation or error in the latest run of any target." in html
    assert 'class="failure"' not in html
    by_night = dashboard_of(tmp_path, night_report(1), by_night=True)
    assert "No failures: no invariant violation or error in the latest night of any target, on any box." in by_night


def fleet_reports() -> list[dict[str, Any]]:
    """Night 2 on two boxes: fuzzbox-1 found the paged_kv violation, fuzzbox-2 (whose report is read last) did not;
    night 1 on fuzzbox-1 only, where the scheduler also failed."""
    return [
        on_box(night_report(1, failing=("scheduler",)), "fuzzbox-1", "2026-01-02T22:00:03+00:00"),
        on_box(night_report(2, failing=("paged_kv",)), "fuzzbox-1", "2026-01-03T22:00:03+00:00"),
        on_box(night_report(2), "fuzzbox-2", "2026-01-03T22:00:41+00:00"),
    ]


def fleet_night(tmp_path: Path) -> str:
    return dashboard_of(tmp_path, *fleet_reports(), by_night=True)


def test_by_night_every_boxs_failure_is_shown_even_when_another_box_reported_the_target_later(tmp_path: Path) -> None:
    html = without_plotly_js(fleet_night(tmp_path))
    assert html.count('class="failure"') == 1 and "on fuzzbox-1, in the run started 2026-01-03 22:00 UTC" in html
    assert '<div class="value">1</div><div class="label">target failing</div>' in html
    assert '<div class="value">4</div><div class="label">targets</div>' in html  # a target on two boxes is one


def test_by_night_every_box_of_the_latest_night_has_its_row_run_line_and_curve(tmp_path: Path) -> None:
    html = fleet_night(tmp_path)
    paged_kv = re.findall(r'<tr><td class="key"><span[^>]*></span><code>paged_kv</code>.*?</tr>', html, re.DOTALL)
    assert len(paged_kv) == 2
    assert ">failed<" in paged_kv[0] and '<td class="box">fuzzbox-1</td>' in paged_kv[0]
    assert ">ok<" in paged_kv[1] and '<td class="box">fuzzbox-2</td>' in paged_kv[1]
    order = re.findall(r'<tr><td class="key"><span[^>]*></span><code>([^<]*)</code>', html)
    assert order == [key for key in ("paged_kv", "req_to_token", "mamba_slots", "scheduler") for _ in range(2)]
    assert "host fuzzbox-1" in html and "host fuzzbox-2" in html
    assert all(f'"name":{json.dumps(f"paged_kv · {box}")}' in html for box in ("fuzzbox-1", "fuzzbox-2"))
    table = html[html.index('<table class="targets"') :]
    table = table[: table.index("</table>")]
    assert table.count('<tr><td class="key">') == 8  # four targets on each box of the latest night
    assert "2026-01-02" not in table  # the older night is in the trend, not in the table


def test_by_night_a_target_the_latest_night_did_not_fuzz_keeps_the_rows_of_its_own_latest_night() -> None:
    older = on_box(night_report(1), "fuzzbox-1", "2026-01-02T22:00:03+00:00")
    sharded = [on_box(night_report(2), box, f"2026-01-03T22:00:0{i}+00:00") for i, box in enumerate(("a", "b"))]
    for report in sharded:
        report["targets"] = [t for t in report["targets"] if t["target"] != "req_to_token"]
    rows = latest_rows([parsed(older), parsed(sharded[0]), parsed(sharded[1])], Grouping(by_night=True))
    assert [(run.box, t.key) for run, t in rows] == [("fuzzbox-1", "req_to_token")] + [
        (box, key) for key in ("mamba_slots", "paged_kv", "scheduler") for box in ("a", "b")
    ]


def test_several_runs_draw_a_trend_and_a_single_run_says_how_to_get_one(page: str, tmp_path: Path) -> None:
    assert 'id="trend-plot"' in page
    single = dashboard_of(tmp_path, night_report(2))
    assert 'id="trend-plot"' not in single and "Only one run loaded" in single
    assert "Only one night loaded" in dashboard_of(tmp_path, night_report(2), by_night=True)


def test_a_schema_1_report_gets_its_table_and_a_note_instead_of_curves(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, night_report(0, schema=1, failing=("paged_kv",)))
    assert "is a schema-1 report: it has no time series" in html
    assert "No curve for req_to_token, mamba_slots, paged_kv, scheduler" in html
    assert "plotly-graph-div" not in html and "Plotly" not in html  # no plot, so no 4 MB of plotly.js
    assert f"poolfuzz replay {TRACE}" in html


def test_schema_1_nights_still_count_in_the_trend_next_to_a_schema_2_night(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, night_report(0, schema=1), night_report(1))
    assert 'id="behaviour-plot"' in html and 'id="trend-plot"' in html and "schema-1 report" not in html


def test_a_run_without_coverage_has_no_coverage_panel_and_says_how_to_measure_it(page: str, tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, night_report(1, coverage=False))
    assert "Branch coverage was not measured in this run" in html
    assert "Branch coverage of pools" in page and "Branch coverage of pools" not in without_plotly_js(html)


def test_strings_from_a_report_cannot_inject_markup(tmp_path: Path) -> None:
    report = night_report(2, failing=("paged_kv",))
    hostile = "<img src=x onerror=alert(1)>"
    report["targets"][0]["target"] = hostile
    report["targets"][2]["failures"][0]["message"] = hostile
    html = without_plotly_js(dashboard_of(tmp_path, report))
    assert hostile not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def never_ran(report: dict[str, Any], index: int) -> dict[str, Any]:
    """Target ``index`` as a runner before the fix wrote one that got no round: ``ok``, 0 steps, 0.0% coverage."""
    entry = report["targets"][index]
    entry.update(examples=0, steps=0, steps_per_second=0.0, events={}, coverage=0.0)
    entry["series"] = [{**sample, "steps": 0, "examples": 0, "events": 0, "coverage": 0.0} for sample in entry["series"]]
    return report


def target_row(html: str, key: str) -> str:
    """The targets table's row of ``key`` (a hover title may hold newlines)."""
    row = rf'<tr><td class="key"><span[^>]*></span><code>{re.escape(key)}</code>.*?</tr>'
    return re.findall(row, html, re.DOTALL)[0]


def test_a_target_that_never_ran_is_not_reached_instead_of_ok_at_zero_percent(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, never_ran(night_report(1), 3))
    row = target_row(html, "scheduler")
    assert '<span class="pill other">not reached</span>' in row
    assert "0.0%" not in row and ">ok<" not in row
    assert '<div class="value">1</div><div class="label">target not reached (no step ran)</div>' in html
    assert ">ok<" in target_row(html, "req_to_token")  # a target that ran keeps its status and its number
    assert parsed(never_ran(night_report(1), 3)).targets[3].coverage is None


def test_a_redis_password_in_an_older_report_is_shown_as_stars(tmp_path: Path) -> None:
    report = night_report(1)
    report["run"]["database"] = ".hypothesis/poolfuzz,readonly:redis://fuzz:hunter2@fleet-db:6379/0"
    html = without_plotly_js(dashboard_of(tmp_path, report))
    assert "hunter2" not in html
    assert "database .hypothesis/poolfuzz,readonly:redis://fuzz:***@fleet-db:6379/0" in html


def test_the_same_reports_give_the_same_bytes(three_nights: Path, tmp_path: Path) -> None:
    first = build_dashboard([three_nights], tmp_path / "a.html").read_bytes()
    assert build_dashboard([three_nights], tmp_path / "b.html").read_bytes() == first


# -------------------------------------------------------------------- CLI
def dashboard_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="poolfuzz dashboard")
    add_arguments(parser)
    return run(parser.parse_args(list(argv)))


def test_the_command_writes_the_page_and_names_it(three_nights: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "site" / "index.html"
    assert dashboard_cli(str(three_nights), "-o", str(output), "--nights", "1") == 0
    assert capsys.readouterr().out == f"dashboard: {output}\n"
    assert 'id="trend-plot"' not in output.read_text()


def test_a_bad_report_is_one_error_line_and_exit_status_2(three_nights: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(three_nights, "nightly-2026-01-04.json", {**night_report(2), "schema": 9})
    output = tmp_path / "d.html"
    assert dashboard_cli(str(three_nights), "-o", str(output)) == 2
    err = capsys.readouterr().err
    assert err == f"poolfuzz: error: {bad}: field 'schema': report schema 9 is not one this dashboard reads (1, 2, 3)\n"
    assert not output.exists()


def test_nights_must_be_a_positive_count(three_nights: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        dashboard_cli(str(three_nights), "--nights", "0")
    assert caught.value.code == 2


def test_by_night_runs_and_bundle_reach_the_page_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i, report in enumerate(two_runs_on_one_date()):
        write(tmp_path / "in", f"r{i}.json", report)
    site = tmp_path / "site"
    assert dashboard_cli(str(tmp_path / "in"), "-o", str(site / "a.html"), "--by-night") == 0
    assert "night loaded (UTC start date)" in (site / "a.html").read_text()
    assert dashboard_cli(str(tmp_path / "in"), "-o", str(site / "b.html"), "--runs", "1", "--bundle", "shared") == 0
    page_b = (site / "b.html").read_text()
    assert '<div class="value">1</div><div class="label">run loaded</div>' in page_b
    assert '<script src="plotly-basic-' in page_b and any(site.glob("plotly-basic-*.min.js"))
    with pytest.raises(SystemExit):
        dashboard_cli(str(tmp_path / "in"), "--bundle", "cdn")
    assert "invalid choice: 'cdn'" in capsys.readouterr().err


# ------------------------------------------------------------------- live
def live_report(seconds: int, *, finished: str = "2026-01-03T22:10:00+00:00") -> dict[str, Any]:
    """What the coordinator hands :class:`LiveDashboard`: ``RunReport.to_json()`` of two targets ``seconds`` in."""
    targets = []
    for key, impl, speed in (
        ("req_to_token", "poolfuzz.pools:ReqToTokenPool", 900),
        ("mamba_slots", "poolfuzz.pools:MambaSlotAllocator", 600),
    ):
        stats = TargetStats(key=key, family=key, implementation=impl)
        for t in range(0, seconds + 1, 5):
            stats.steps, stats.examples, stats.seconds = t * speed, t * speed // 200, float(t)
            stats.events.update({f"label {i}": 1 for i in range(t // 5)})
            stats.sample(float(t))
        targets.append(stats)
    return RunReport(
        started="2026-01-03T22:00:03+00:00",
        finished=finished,
        duration_s=float(seconds),
        startup_s=1.5,
        interrupted=False,
        ended_because="time is up",
        exit_status=0,
        run={"seed": 7, "budget_s": 3600.0, "workers": 2, "device": "cpu", "database": None, "cwd": "/srv/poolfuzz"},
        machine={"hostname": "fuzzbox-1"},
        versions={"python": "3.11.9"},
        series_interval_s=5.0,
        targets=tuple(targets),
        crashes=(),
        workers=(),
        skipped=(),
        coverage=None,
    ).to_json()


def test_a_live_page_reloads_itself_while_the_run_goes_on_and_the_final_page_does_not(tmp_path: Path) -> None:
    from poolfuzz.harness.fuzz.report import write_report

    page, report_path = tmp_path / "site" / "live.html", tmp_path / "reports" / "tonight.json"
    live = LiveDashboard(page, refresh_s=2, report_path=report_path)
    live.update(live_report(10))
    first, inode = page.read_text(), page.stat().st_ino
    assert "location.reload()" in first and "}, 2000);" in first
    assert "Live: this run is still going on (10 s fuzzed so far)" in first
    live.update(live_report(20))
    second = page.read_text()
    assert "location.reload()" in second and "(20 s fuzzed so far)" in second and live.updates == 2
    assert page.stat().st_ino != inode  # a new file replaced the page (os.replace), not a rewrite in place
    final = live_report(30)
    live.finish(final)
    done = page.read_text()
    assert "location.reload" not in done and 'class="live"' not in done and "poolfuzz nightly" in done
    write_report(final, report_path)
    assert done == build_dashboard([report_path], tmp_path / "built.html").read_text()  # what dashboard builds
    assert sorted(p.name for p in page.parent.iterdir()) == ["live.html"]  # no temp file left behind
    with pytest.raises(RuntimeError, match="already finished"):
        live.update(final)


def test_a_live_update_takes_well_under_a_second_and_reads_no_bundle_from_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from poolfuzz.harness.dashboard import bundle

    live = LiveDashboard(tmp_path / "live.html")
    live.update(live_report(60))  # the first update may read the bundle
    reads: list[Path] = []
    read_text = Path.read_text

    def spy(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", spy)
    times = []
    for seconds in (65, 70, 75):
        live.update(live_report(seconds))
        times.append(live.last_write_s)
    assert bundle.BASIC_FILE not in reads and not [p for p in reads if p.suffix == ".js"]
    assert min(times) < 0.5, times  # about 0.06 s on a 2-core box


def test_a_live_page_can_share_its_bundle_and_bad_settings_are_refused(tmp_path: Path) -> None:
    live = LiveDashboard(tmp_path / "live.html", bundle="shared")
    live.update(live_report(10))
    live.update(live_report(15))
    assert '<script src="plotly-basic-' in (tmp_path / "live.html").read_text()
    assert len(list(tmp_path.glob("plotly-basic-*.min.js"))) == 1
    with pytest.raises(ValueError, match="refresh_s"):
        LiveDashboard(tmp_path / "x.html", refresh_s=0)
    with pytest.raises(ValueError, match="bundle mode"):
        LiveDashboard(tmp_path / "x.html", bundle="cdn")


# ---------------------------------------------------------------- browser
def find_chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))), None)


CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")

#: Injected into the ``<head>`` of a copy of each page.  It posts every load of the page to the wrapper, and once
#: plotly has drawn: the page's width and scroll width, its script errors (``#script-errors``), whether a live
#: page's "stale" note shows, and per plot the boxes of its legend, axis titles, panel titles and tick labels.
PROBE = """<script>
(function () {
  var frame = Number(location.hash.slice(1)), tries = 0;
  function box(el) { var r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }
  function post(message) { message.frame = frame; parent.postMessage(message, "*"); }
  function measure() {
    var plots = {};
    document.querySelectorAll(".plotly-graph-div").forEach(function (div) {
      var items = [];
      function add(kind, el) { items.push({kind: kind, text: el.textContent, box: box(el)}); }
      div.querySelectorAll("g.legend").forEach(function (el) { add("legend", el); });
      div.querySelectorAll(".infolayer text").forEach(function (el) {
        if (/^[xy][0-9]*title$/.test(el.getAttribute("class") || "")) add("axis title", el);
      });
      div.querySelectorAll("g.annotation").forEach(function (el) { add("panel title", el); });
      div.querySelectorAll(".xaxislayer-above text, .yaxislayer-above text").forEach(function (el) {
        if (el.textContent) add("tick", el); });
      var svg = div.querySelector(".main-svg");
      plots[div.id] = {svg: svg ? box(svg) : null, items: items};
    });
    var stale = document.getElementById("live-stale");
    post({kind: "layout", width: document.documentElement.clientWidth, plots: plots,
          scrollWidth: document.documentElement.scrollWidth, stale: !!stale && !stale.hidden,
          errors: Array.prototype.map.call(document.querySelectorAll(".script-error"), function (e) {
            return e.textContent; })});
  }
  function drawn() {
    return Array.prototype.every.call(document.querySelectorAll(".plotly-graph-div"), function (div) {
      return div.querySelector(".main-svg") && div._fullLayout; });
  }
  function later() {
    try { if (drawn() || ++tries > 50) measure(); else setTimeout(later, 100); }
    catch (e) { post({kind: "layout", errors: ["probe: " + e]}); }
  }
  post({kind: "load"});
  window.addEventListener("load", function () { setTimeout(later, 200); });
})();
</script>"""

#: Shows each ``[page, width, loads]`` in an iframe of that width; a frame is done once it posted its layout and
#: loaded ``loads`` times (a live page), or, with ``loads`` 1, after a further ``hold`` ms (so a page that should
#: not reload had time to); then every frame's loads and layout go into ``#results``, which ``--dump-dom`` prints.
WRAPPER = """<!DOCTYPE html><html><body><pre id="results"></pre><script>
var frames = %(frames)s, hold = %(hold)d, loads = {}, layouts = {}, since = {}, done = false;
function finish() {
  if (done) return;
  done = true;
  frames.forEach(function (_, i) { var f = document.getElementById("f" + i); if (f) f.remove(); });
  document.getElementById("results").textContent = JSON.stringify({loads: loads, layouts: layouts});
}
function check() {
  frames.forEach(function (frame, i) {
    var f = document.getElementById("f" + i);
    if (f && layouts[i] && (frame[2] > 1 ? loads[i] >= frame[2] : Date.now() - since[i] >= hold)) f.remove();
  });
  if (frames.every(function (_, i) { return !document.getElementById("f" + i); })) finish();
}
window.addEventListener("message", function (event) {
  var m = event.data;
  if (m.kind === "load") loads[m.frame] = (loads[m.frame] || 0) + 1;
  if (m.kind === "layout") { layouts[m.frame] = m; since[m.frame] = Date.now(); }
});
setInterval(check, 100);
setTimeout(finish, 60000);
frames.forEach(function (frame, i) {
  var f = document.createElement("iframe");
  f.id = "f" + i; f.src = frame[0] + "#" + i;
  f.style.cssText = "display: block; border: 0; height: 2600px; width: " + frame[1] + "px";
  document.body.appendChild(f);
});
</script></body></html>
"""


def browse(folder: Path, frames: list[tuple[Path, int, int]], *, hold_ms: int = 0) -> dict[str, Any]:
    """Open every ``(page, width px, loads)`` in one headless Chromium, host names unresolvable; the probes' reports."""
    assert CHROMIUM is not None
    folder.mkdir(parents=True, exist_ok=True)
    shown = []
    for i, (page, width, loads) in enumerate(frames):
        probed = page.with_name(f"probed-{i}-{page.name}")  # beside the page, so a shared bundle is found
        probed.write_text(page.read_text().replace("</head>", PROBE + "</head>", 1))
        shown.append([probed.as_uri(), width, loads])
    wrapper = folder / "wrapper.html"
    wrapper.write_text(WRAPPER % {"frames": json.dumps(shown), "hold": hold_ms})
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={folder / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--window-size=1500,1000",
            "--virtual-time-budget=70000",
            "--dump-dom",
            wrapper.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = re.search(r'<pre id="results">(.*?)</pre>', done.stdout, flags=re.DOTALL)
    assert found is not None and found.group(1), done.stdout[-2000:]
    results: dict[str, Any] = json.loads(html_module.unescape(found.group(1)))
    return results


def overlaps(items: list[dict[str, Any]]) -> list[str]:
    """Every pair of drawn labels whose boxes intersect (tick labels among themselves are plotly's business)."""
    clashes = []
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            if a["kind"] == b["kind"] == "tick":
                continue
            (al, at, ar, ab), (bl, bt, br, bb) = a["box"], b["box"]
            if min(ar, br) - max(al, bl) > 0.5 and min(ab, bb) - max(at, bt) > 0.5:
                clashes.append(f"{a['kind']} {a['text']!r} overlaps {b['kind']} {b['text']!r}")
    return clashes


def outside(plot: dict[str, Any]) -> list[str]:
    """Legends and titles drawn (partly) outside their figure, where they would be cut off."""
    left, top, right, bottom = plot["svg"]
    return [
        f"{item['kind']} {item['text']!r}"
        for item in plot["items"]
        if item["kind"] != "tick"
        and (item["box"][0] < left - 0.5 or item["box"][1] < top - 0.5 or item["box"][2] > right + 0.5 or item["box"][3] > bottom + 0.5)
    ]


@needs_chromium
def test_pages_render_offline_with_every_plot_drawn_and_nothing_overlapping_at_1400_and_800_px(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page by run (three runs) and a fleet by night (eight legend entries, the longest names), at both widths;
    and, to show the check has teeth, the legend where the page used to put it (y = -0.14 of the plot)."""
    from poolfuzz.harness.dashboard import figures

    fleet = tmp_path / "fleet.html"
    fleet.write_text(fleet_night(tmp_path))
    monkeypatch.setattr(figures, "LEGEND", {**figures.LEGEND, "yref": "paper", "y": -0.14, "yanchor": "top"})
    old = tmp_path / "old-legend.html"
    old.write_text(dashboard_of(tmp_path, night_report(2)))
    frames = [(built, 1400, 1), (built, 800, 1), (fleet, 1400, 1), (fleet, 800, 1), (old, 1400, 1)]
    layouts = browse(tmp_path / "browser", frames)["layouts"]
    for i, (shown, width, _) in enumerate(frames[:4]):
        layout = layouts[str(i)]
        where = f"{shown.name} at {width} px"
        assert layout["errors"] == [], where
        assert layout["width"] == width and layout["scrollWidth"] <= width, where  # no sideways scrolling
        assert layout["plots"].keys() == {"behaviour-plot", "trend-plot"}, where
        for plot_id, plot in layout["plots"].items():
            kinds = Counter(item["kind"] for item in plot["items"])
            assert kinds["legend"] == 1 and kinds["axis title"] >= 2 and kinds["tick"] > 10, (where, plot_id, kinds)
            assert overlaps(plot["items"]) == [], (where, plot_id)
            assert outside(plot) == [], (where, plot_id)
    assert any("legend" in clash and "fuzzing time" in clash for clash in overlaps(layouts["4"]["plots"]["behaviour-plot"]["items"])), (
        layouts["4"]
    )


@needs_chromium
def test_in_a_browser_a_live_page_reloads_a_stale_or_final_one_does_not_and_a_shared_bundle_loads(tmp_path: Path) -> None:
    """Live, stale and final pages sharing one bundle; a shared page without its bundle, and a broken script, are
    reported in the page's error box."""
    now = datetime.datetime.now(datetime.UTC)
    site = tmp_path / "site"
    LiveDashboard(site / "live.html", refresh_s=0.3, bundle="shared").update(live_report(20, finished=now.isoformat(timespec="seconds")))
    LiveDashboard(site / "stale.html", refresh_s=0.3, bundle="shared").update(
        live_report(20, finished=(now - datetime.timedelta(hours=2)).isoformat(timespec="seconds"))
    )
    LiveDashboard(site / "final.html", refresh_s=0.3, bundle="shared").finish(live_report(30))
    lone = tmp_path / "elsewhere" / "final.html"  # a shared page copied without its bundle
    lone.parent.mkdir()
    lone.write_text((site / "final.html").read_text())
    broken = write(
        tmp_path,
        "broken.html",
        without_plotly_js((site / "final.html").read_text()).replace("</main>", "<script>notAFunction()</script></main>"),
    )
    frames = [(site / "live.html", 800, 3), (site / "stale.html", 800, 1), (site / "final.html", 800, 1), (lone, 800, 1), (broken, 800, 1)]
    results = browse(tmp_path / "browser", frames, hold_ms=1500)
    loads, layouts = results["loads"], results["layouts"]
    assert loads["0"] >= 3 and not layouts["0"]["stale"]  # it reloaded itself, again and again
    assert loads["1"] == 1 and layouts["1"]["stale"]  # two hours without an update: it stopped, and says why
    assert loads["2"] == 1 and not layouts["2"]["stale"]  # the final page stays put
    for i in "012":
        assert layouts[i]["errors"] == [] and layouts[i]["plots"]["behaviour-plot"]["svg"], i
    assert any("did not load: plotly-basic-" in error for error in layouts["3"]["errors"]), layouts["3"]
    assert any("notAFunction" in error for error in layouts["4"]["errors"]), layouts["4"]  # the catcher has teeth

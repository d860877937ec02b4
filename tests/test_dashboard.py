"""The nightly dashboard: reading reports strictly, the numbers it derives, the page, the CLI, a real browser.

Reports are fabricated by :func:`night_report` (realistic shapes: saturating
event and coverage curves, a failure that retires its target) rather than made
by fuzzing, so these tests are fast and exact.  The browser test renders the
page in headless Chromium with the network blocked and reads script errors
and plotly's rendered SVG from the dumped DOM; it skips without Chromium.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("plotly", reason="the dashboard needs plotly (the 'dashboard' extra)")

from harness.dashboard import (  # noqa: E402 - after the plotly skip
    NoReportsError, ReportError, add_arguments, build_dashboard, load_reports, load_runs, run,
)
from harness.dashboard.nights import latest_rows, target_nights  # noqa: E402
from harness.dashboard.reports import TOOL, Run, parse_report  # noqa: E402

#: (target, implementation, event labels it can reach, time constant of its saturation in s, steps/s)
TARGETS = [
    ("req_to_token", "pools:ReqToTokenPool", ["alloc needing no row", "alloc refused: pool short", "pool exactly full"],
     120.0, 900.0),
    ("mamba_slots", "pools:MambaSlotAllocator",
     ["group opened with a reservation", "group reservation exhausted", "group end returned slots",
      "alloc refused: pool short", "pool exactly full"], 400.0, 610.0),
    ("paged_kv", "pools:PagedTokenToKVPoolAllocator",
     ["alloc refused: pool short", "pool exactly full", "free group released pages", "alloc while pages are staged",
      "double free rejected", "extend/decode refused: pool short", "extend/decode filled the pool exactly"],
     700.0, 380.0),
    ("scheduler", "harness.judge.drivers.scheduler:build_scheduler_pools",
     ["extend refused: KV short", "KV exactly full", "retract mid-page", "admission rolled back: KV short"],
     1500.0, 150.0),
]
DURATION_S = 3600.0
INTERVAL_S = 60.0
TRACE = "corpus/found/paged_kv/paged_kv-3f2a9c1e07b4d5a6.json"
FAILURE_AT_S = 1260.0


def _curve(t: float, top: float, tau: float) -> float:
    return top * (1.0 - math.exp(-t / tau))


def _target(name: str, impl: str, labels: list[str], tau: float, speed: float, *, night: int,
            fails_at: float | None, coverage: bool) -> dict[str, Any]:
    """One target's entry: cumulative samples that saturate, and stop growing once the target failed."""
    series: list[dict[str, Any]] = []
    for i in range(int(DURATION_S / INTERVAL_S) + 1):
        t = i * INTERVAL_S
        active = min(t, fails_at) if fails_at is not None else t
        series.append({
            "t": t, "steps": int(active * speed), "examples": int(active * speed / 200),
            "events": round(_curve(active, len(labels) - (night < 2), tau)),
            "coverage": round(40 + _curve(active, 35 + 3 * night, tau * 1.5), 1) if coverage else None,
            "failures": int(fails_at is not None and t >= fails_at),
        })
    reached = labels[:series[-1]["events"]]
    failures: list[dict[str, Any]] = []
    if fails_at is not None:
        failures.append({
            "target": name, "family": name, "implementation": impl, "kind": "violation", "invariant": "conservation",
            "trace": TRACE, "steps": 7, "shrunk": True, "round": 31, "seed": 2966120417, "worker": "w2",
            "found_after_s": fails_at, "replay": f"python -m harness replay {TRACE}",
            "message": "[conservation] free pages differ from the model: pool 14 free, model 15 (page 9 lost)\n"
                       "  step 1: alloc_extend(prefix_lens=[0], seq_lens=[9])\n  step 2: free_group_begin()",
        })
    last = series[-1]
    return {
        "target": name, "family": name, "implementation": impl, "status": "failed" if failures else "ok",
        "examples": last["examples"], "steps": last["steps"], "fuzz_seconds": DURATION_S,
        "steps_per_second": round(speed * (1 + 0.05 * night), 1), "rounds": 1800,
        "events": {label: 40 * (k + 1) for k, label in enumerate(reached)}, "failures": failures, "crashes": [],
        "series": series, "coverage": last["coverage"],
    }


def night_report(night: int, *, failing: tuple[str, ...] = (), coverage: bool = True,
                 schema: int = 2) -> dict[str, Any]:
    """Night ``night`` (0, 1, 2: January 1st to 3rd, 2026) as ``python -m harness fuzz`` writes it."""
    targets = [_target(*spec, night=night, fails_at=FAILURE_AT_S if spec[0] in failing else None, coverage=coverage)
               for spec in TARGETS]
    failures = [f for t in targets for f in t["failures"]]
    report: dict[str, Any] = {
        "schema": schema, "tool": TOOL, "started": f"2026-01-0{night + 1}T22:00:03+00:00",
        "finished": f"2026-01-0{night + 1}T23:00:09+00:00", "duration_s": DURATION_S, "startup_s": 4.2,
        "interrupted": False, "ended_because": "time is up", "exit_status": 1 if failures else 0,
        "run": {"seed": 20260101 + night, "budget_s": DURATION_S, "workers": 16, "device": "cpu",
                "steps_per_example": 200, "misuse": True, "database": ".hypothesis/poolfuzz",
                "corpus": "corpus/found", "grace_s": 60.0, "coverage": coverage, "cwd": "/srv/poolfuzz", "logs": None},
        "machine": {"hostname": "fuzzbox-1", "platform": "Linux-6.8-x86_64", "machine": "x86_64", "cpu_count": 16,
                    "python_executable": "/srv/poolfuzz/.venv/bin/python", "accelerators": []},
        "versions": {"python": "3.11.9", "poolfuzz": "0.1.0", "hypothesis": "6.130.0", "torch": "2.13.0",
                     "triton": None, "coverage": "7.6.0", "redis": None},
        "totals": {"examples": sum(t["examples"] for t in targets), "steps": sum(t["steps"] for t in targets),
                   "steps_per_second": 2100.0, "failures": len(failures), "crashes": 0},
        "series_interval_s": INTERVAL_S, "targets": targets, "failures": failures, "crashes": [],
        "workers": [{"worker": f"w{i}", "pid": 1000 + i, "exit_code": 0, "rounds": 112} for i in range(16)],
        "skipped": [], "coverage": {"branch": True, "percent": 71.3, "files": {}} if coverage else None,
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


def dashboard_of(tmp_path: Path, *reports: dict[str, Any]) -> str:
    """The page built from ``reports``, one file each."""
    for i, report in enumerate(reports):
        write(tmp_path / "in", f"night-{i}.json", report)
    return build_dashboard([tmp_path / "in"], tmp_path / "d.html").read_text()


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


@pytest.mark.parametrize(("edit", "field", "problem"), [
    (lambda r: r.update(schema=3), "schema", "schema 3 is not one this dashboard reads"),
    (lambda r: r.pop("series_interval_s"), "series_interval_s", "missing"),
    (lambda r: r["targets"][1]["series"][2].update(t="soon"), "targets[1].series[2].t", "expected a number"),
    (lambda r: r["targets"][0].update(steps=True), "targets[0].steps", "expected an integer, got a boolean"),
    (lambda r: r["targets"][2]["failures"].append({"kind": "violation"}), "targets[2].failures[0].message", "missing"),
    (lambda r: r.update(started="last night"), "started", "not an ISO 8601 time"),
])
def test_a_bad_field_is_one_error_naming_the_file_and_the_field(
        tmp_path: Path, edit: Callable[[dict[str, Any]], Any], field: str, problem: str) -> None:
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
    assert failure.replay == "python -m harness replay 'corpus/found/my dir/t.json'"
    assert failure.headline.startswith("[conservation] free pages differ")


Samples = list[tuple[float, int, int, float | None]]  # (t, steps, distinct events, coverage)


@pytest.mark.parametrize(("samples", "quiet"), [
    pytest.param([(0, 0, 0, None), (60, 100, 2, None), (120, 200, 3, None), (180, 300, 3, None), (240, 400, 3, None)],
                 120, id="from-the-last-new-event-label-to-the-end"),
    pytest.param([(0, 0, 0, 10.0), (60, 100, 2, 20.0), (120, 200, 2, 20.0), (180, 300, 2, 20.5), (240, 400, 2, 20.5)],
                 60, id="new-coverage-is-new-behaviour-too"),
    pytest.param([(0, 0, 0, None), (60, 100, 2, None), (120, 150, 2, None), (180, 150, 2, None), (240, 150, 2, None)],
                 60, id="a-retired-target-is-quiet-only-until-its-steps-stop"),
])
def test_quiet_time_is_fuzzing_time_since_the_last_new_behaviour(samples: Samples, quiet: float) -> None:
    report = night_report(0)
    report["targets"][0]["series"] = [{"t": t, "steps": steps, "examples": steps // 200, "events": events,
                                       "coverage": coverage, "failures": 0} for t, steps, events, coverage in samples]
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


def test_two_boxes_on_one_night_are_one_night_and_the_page_says_how_nights_are_counted(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, on_box(night_report(2), "fuzzbox-1", "2026-01-03T22:00:03+00:00"),
                        on_box(night_report(2), "fuzzbox-2", "2026-01-03T22:01:15+00:00"))
    assert '<div class="value">1</div><div class="label">night loaded (UTC start date)</div>' in html
    assert "Only one night loaded (one UTC start date" in html and 'id="trend-plot"' not in html
    assert "a report's night is the UTC date it started on" in html


def test_the_trend_has_one_category_per_utc_date(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, night_report(0), night_report(1),
                        on_box(night_report(2), "fuzzbox-1", "2026-01-03T22:00:03+00:00"),
                        on_box(night_report(2), "fuzzbox-2", "2026-01-03T22:00:59+00:00"))
    assert '"categoryarray":["2026-01-01","2026-01-02","2026-01-03"]' in html
    assert "A night is the UTC date a report started on" in html


def test_a_target_fuzzed_by_several_boxes_in_one_night_is_one_combined_trend_point() -> None:
    first, second = night_report(2, failing=("paged_kv",)), night_report(2, failing=("paged_kv",))
    first["targets"][2].update(events={"pool exactly full": 3, "double free rejected": 1}, coverage=61.5,
                               steps=1000, steps_per_second=100.0)
    second["targets"][2].update(events={"pool exactly full": 9, "alloc refused: pool short": 2}, coverage=64.0,
                                steps=3000, steps_per_second=300.0)
    runs = [parse_report(on_box(first, "fuzzbox-1", "2026-01-03T22:00:03+00:00"), Path("a.json")),
            parse_report(on_box(second, "fuzzbox-2", "2026-01-03T22:00:30+00:00"), Path("b.json"))]
    [point] = target_nights(runs, "paged_kv")
    assert point.night == datetime.date(2026, 1, 3) and len(point.runs) == 2
    assert (point.events, point.coverage, point.failures) == (3, 64.0, 2)
    assert point.steps_per_second == 4000 / (10 + 10)  # all steps over all fuzzing seconds


# ------------------------------------------------------------------- page
def without_plotly_js(page: str) -> str:
    """The page as written by us: plotly's bundle (which names URLs of its own) cut out."""
    from plotly.offline import get_plotlyjs

    return page.replace(get_plotlyjs(), "")


def test_plotly_js_is_inlined_once_and_nothing_is_loaded_from_the_network(page: str) -> None:
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()[:400]) == 1
    ours = without_plotly_js(page)
    assert page.count('class="plotly-graph-div"') == 2
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", ours)
    assert "<script src" not in ours and "<link" not in ours


def test_every_target_has_a_row_and_the_failure_shows_its_id_trace_and_replay_command(page: str) -> None:
    for name, *_ in TARGETS:
        assert f"<code>{name}</code></td>" in page
    assert '<span class="invariant">conservation</span>' in page
    assert f"<code>{TRACE}</code> (7 steps)" in page
    assert f'<code class="command">python -m harness replay {TRACE}</code>' in page
    assert "[conservation] free pages differ from the model: pool 14 free, model 15 (page 9 lost)" in page


def test_a_night_without_failures_says_so(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, night_report(1))
    assert "No failures: no invariant violation or error in the latest night of any target, on any box." in html
    assert 'class="failure"' not in html


def fleet_night(tmp_path: Path) -> str:
    """Night 2 on two boxes: fuzzbox-1 found the paged_kv violation, fuzzbox-2 (whose report is read last) did not;
    night 1 on fuzzbox-1 only, where the scheduler also failed."""
    return dashboard_of(
        tmp_path, on_box(night_report(1, failing=("scheduler",)), "fuzzbox-1", "2026-01-02T22:00:03+00:00"),
        on_box(night_report(2, failing=("paged_kv",)), "fuzzbox-1", "2026-01-03T22:00:03+00:00"),
        on_box(night_report(2), "fuzzbox-2", "2026-01-03T22:00:41+00:00"))


def test_every_boxs_failure_of_the_latest_night_is_shown_even_when_another_box_reported_the_target_later(
        tmp_path: Path) -> None:
    html = without_plotly_js(fleet_night(tmp_path))
    assert html.count('class="failure"') == 1 and "on fuzzbox-1, in the run started 2026-01-03 22:00 UTC" in html
    assert '<div class="value">1</div><div class="label">target failing</div>' in html
    assert '<div class="value">4</div><div class="label">targets</div>' in html  # a target on two boxes is one


def test_every_box_of_the_latest_night_has_its_row_run_line_and_curve(tmp_path: Path) -> None:
    html = fleet_night(tmp_path)
    paged_kv = re.findall(r'<tr><td class="key"><span[^>]*></span><code>paged_kv</code>.*?</tr>', html, re.S)
    assert len(paged_kv) == 2
    assert ">failed<" in paged_kv[0] and '<td class="box">fuzzbox-1</td>' in paged_kv[0]
    assert ">ok<" in paged_kv[1] and '<td class="box">fuzzbox-2</td>' in paged_kv[1]
    order = re.findall(r'<tr><td class="key"><span[^>]*></span><code>([^<]*)</code>', html)
    assert order == [key for key in ("paged_kv", "req_to_token", "mamba_slots", "scheduler") for _ in range(2)]
    assert "host fuzzbox-1" in html and "host fuzzbox-2" in html
    assert all(f'"name":{json.dumps(f"paged_kv · {box}")}' in html for box in ("fuzzbox-1", "fuzzbox-2"))
    table = html[html.index('<table class="targets"'):]
    table = table[:table.index("</table>")]
    assert table.count('<tr><td class="key">') == 8  # four targets on each box of the latest night
    assert "2026-01-02" not in table  # the older night is in the trend, not in the table


def test_a_target_the_latest_night_did_not_fuzz_keeps_the_rows_of_its_own_latest_night() -> None:
    older = on_box(night_report(1), "fuzzbox-1", "2026-01-02T22:00:03+00:00")
    sharded = [on_box(night_report(2), box, f"2026-01-03T22:00:0{i}+00:00") for i, box in enumerate(("a", "b"))]
    for report in sharded:
        report["targets"] = [t for t in report["targets"] if t["target"] != "req_to_token"]
    rows = latest_rows([parsed(older), parsed(sharded[0]), parsed(sharded[1])])
    assert [(run.box, t.key) for run, t in rows] == [("fuzzbox-1", "req_to_token")] + [
        (box, key) for key in ("mamba_slots", "paged_kv", "scheduler") for box in ("a", "b")]


def test_several_nights_draw_a_trend_and_a_single_night_says_how_to_get_one(page: str, tmp_path: Path) -> None:
    assert 'id="trend-plot"' in page
    single = dashboard_of(tmp_path, night_report(2))
    assert 'id="trend-plot"' not in single and "Only one night loaded" in single


def test_a_schema_1_report_gets_its_table_and_a_note_instead_of_curves(tmp_path: Path) -> None:
    html = dashboard_of(tmp_path, night_report(0, schema=1, failing=("paged_kv",)))
    assert "is a schema-1 report: it has no time series" in html
    assert "No curve for req_to_token, mamba_slots, paged_kv, scheduler" in html
    assert "plotly-graph-div" not in html and "Plotly" not in html  # no plot, so no 4 MB of plotly.js
    assert f"python -m harness replay {TRACE}" in html


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
    entry["series"] = [{**sample, "steps": 0, "examples": 0, "events": 0, "coverage": 0.0}
                       for sample in entry["series"]]
    return report


def target_row(html: str, key: str) -> str:
    """The targets table's row of ``key`` (a hover title may hold newlines)."""
    return re.findall(rf'<tr><td class="key"><span[^>]*></span><code>{re.escape(key)}</code>.*?</tr>', html, re.S)[0]


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
    parser = argparse.ArgumentParser(prog="python -m harness dashboard")
    add_arguments(parser)
    return run(parser.parse_args(list(argv)))


def test_the_command_writes_the_page_and_names_it(three_nights: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "site" / "index.html"
    assert dashboard_cli(str(three_nights), "-o", str(output), "--nights", "1") == 0
    assert capsys.readouterr().out == f"dashboard: {output}\n"
    assert 'id="trend-plot"' not in output.read_text()


def test_a_bad_report_is_one_error_line_and_exit_status_2(three_nights: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(three_nights, "nightly-2026-01-04.json", {**night_report(2), "schema": 9})
    output = tmp_path / "d.html"
    assert dashboard_cli(str(three_nights), "-o", str(output)) == 2
    err = capsys.readouterr().err
    assert err == f"poolfuzz: error: {bad}: field 'schema': report schema 9 is not one this dashboard reads (1, 2)\n"
    assert not output.exists()


def test_nights_must_be_a_positive_count(three_nights: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        dashboard_cli(str(three_nights), "--nights", "0")
    assert caught.value.code == 2


# ---------------------------------------------------------------- browser
def find_chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))),
                None)


CHROMIUM = find_chromium()


def script_errors(dom: str) -> list[str]:
    """What the page's error catcher wrote into ``#script-errors`` (see ``harness.dashboard.style``)."""
    return re.findall(r'<div class="script-error">(.*?)</div>', dom, flags=re.S)


def svgs_per_plot(dom: str) -> dict[str, int]:
    """``main-svg`` elements plotly drew, per plot div (the text from one plot's div to the next one's)."""
    chunks = re.split(r'<div id="([\w-]+)" class="plotly-graph-div', dom)
    return {plot_id: chunk.count('class="main-svg"') for plot_id, chunk in zip(chunks[1::2], chunks[2::2])}


def headless(page: Path, profile: Path, *actions: str) -> str:
    """Open ``page`` in headless Chromium with every host name unresolvable; its stdout (the DOM when asked)."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1400,2000", "--virtual-time-budget=5000",
         *actions, page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_the_page_renders_in_a_browser_offline_with_every_plot_drawn_and_no_script_error(
        built: Path, page: str, tmp_path: Path) -> None:
    light = without_plotly_js(page)  # plotly's bundle is not needed to prove the catcher works
    broken = write(tmp_path, "broken.html", light.replace("</main>", "<script>notAFunction()</script></main>"))
    shot = tmp_path / "dashboard.png"
    with ThreadPoolExecutor(2) as pool:
        good = pool.submit(headless, built, tmp_path / "profile-a", "--dump-dom", f"--screenshot={shot}")
        bad = pool.submit(headless, broken, tmp_path / "profile-b", "--dump-dom")
        dom, broken_dom = good.result(), bad.result()
    assert script_errors(dom) == []
    drawn = svgs_per_plot(dom)
    assert drawn.keys() == {"behaviour-plot", "trend-plot"} and all(n >= 1 for n in drawn.values()), drawn
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    # the catcher has teeth: an error in any script on the page lands in the DOM the test reads
    assert any("notAFunction" in error for error in script_errors(broken_dom)), broken_dom[-2000:]

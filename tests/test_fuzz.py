"""The nightly runner: target selection, rounds, the display, the report, and real runs with workers.

Runs go through ``poolfuzz.harness.cli.main`` in this process (the workers are real
spawned processes), with the database, corpus and report under ``tmp_path``.
Broken pools live in :mod:`tests.fuzz_planted`, never in ``pools/``.  Budgets
count from the first worker being ready, so a loaded machine slows these tests
down but does not make them miss.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness import cli
from poolfuzz.harness.canaries import CANARIES
from poolfuzz.harness.fuzz import EXIT_FOUND, EXIT_INTERRUPTED, EXIT_OK, exit_status, select_targets
from poolfuzz.harness.fuzz.counted import EventLog
from poolfuzz.harness.fuzz.options import FuzzOptions
from poolfuzz.harness.fuzz.progress import Progress, clock, compact
from poolfuzz.harness.fuzz.report import FailureRecord, TargetStats, events_summary, summary_text
from poolfuzz.harness.fuzz.rounds import FIRST_ROUND_EXAMPLES, MAX_ROUND_EXAMPLES, next_round_size, round_seed
from poolfuzz.harness.fuzz.session import FuzzRun
from poolfuzz.harness.judge.families import FAMILIES, UnknownTargetError
from poolfuzz.harness.judge.kit import Family
from poolfuzz.harness.traces.schema import load_trace
from tests.redis_server import free_port, throwaway_redis

REPO = Path(__file__).resolve().parent.parent
LEAKY = "req_to_token=tests.fuzz_planted:ForgetfulFree"
#: A row missing from the free list shows as a mismatch in the audit, or as an alloc refused with room left.
LEAK_INVARIANTS = {"conservation", "empty-pool-guard"}


def fuzz(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str, str]:
    """Run ``poolfuzz fuzz`` in-process with everything it writes under ``tmp_path``."""
    report = tmp_path / "report.json"
    code = cli.main(["fuzz", "--database", str(tmp_path / "db"), "--corpus", str(tmp_path / "corpus"),
                     "--report", str(report), "--seed", "7", *args])
    out, err = capsys.readouterr()
    return code, json.loads(report.read_text()), out, err


# ------------------------------------------------------------ target selection
def test_no_target_named_means_every_registered_family() -> None:
    targets, skipped = select_targets([])
    order = list(FAMILIES)  # skipped families (an upstream default not installed here) are listed after the rest
    assert sorted([t.family for t in targets] + [s["family"] for s in skipped], key=order.index) == order
    assert [t.index for t in targets] == list(range(len(targets)))


def test_a_substituted_target_is_keyed_by_family_and_implementation() -> None:
    targets, _ = select_targets([LEAKY, "decode_req_to_token", "decode_req_to_token"])
    assert [(t.key, t.spec) for t in targets] == [
        (LEAKY, "tests.fuzz_planted:ForgetfulFree"),
        ("decode_req_to_token", "poolfuzz.pools:DecodeReqToTokenPool"),
    ]


@pytest.mark.parametrize("item", ["no_such_family", "req_to_token=tests.fuzz_planted:Missing",
                                  "req_to_token=no.such.module:Pool", "req_to_token="])
def test_a_named_target_that_does_not_resolve_is_an_error(item: str) -> None:
    with pytest.raises(UnknownTargetError):
        select_targets([item])


def test_an_environment_substitution_that_does_not_resolve_is_an_error_not_a_skip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POOLFUZZ_TARGETS", "req_to_token=no.such.module:Pool")
    with pytest.raises(UnknownTargetError, match="no.such.module"):
        select_targets([])


def test_a_family_whose_machine_does_not_import_is_skipped_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    ghost = Family(name="ghost", summary="not written yet", default="poolfuzz.pools:ReqToTokenPool",
                   driver="poolfuzz.harness.kits.ghost.driver:GhostDriver", moves="poolfuzz.harness.kits.ghost.moves:table",
                   limits=FAMILIES["req_to_token"].limits)
    monkeypatch.setitem(FAMILIES, "ghost", ghost)
    targets, skipped = select_targets([])
    assert "ghost" not in {t.family for t in targets}
    assert [s["family"] for s in skipped if "poolfuzz.harness.kits.ghost" in s["reason"]] == ["ghost"]


# ---------------------------------------------------------------- round logic
def test_round_seeds_are_reproducible_and_distinct_per_worker_restart_and_round() -> None:
    seeds = {round_seed(7, w, g, r) for w in range(3) for g in range(2) for r in range(5)}
    assert len(seeds) == 30
    assert round_seed(7, 1, 0, 2) == round_seed(7, 1, 0, 2) != round_seed(8, 1, 0, 2)


def test_rounds_are_sized_to_last_about_the_round_time_within_bounds() -> None:
    assert next_round_size(0, 0.0, 2.0) == FIRST_ROUND_EXAMPLES
    assert next_round_size(50, 1.0, 2.0) == 100
    assert next_round_size(1, 100.0, 2.0) == 5
    assert next_round_size(10**6, 1.0, 2.0) == MAX_ROUND_EXAMPLES


def test_the_event_log_counts_every_label_the_driver_appends() -> None:
    counts: Counter[str] = Counter()
    log = EventLog(counts)
    for label in ["pool exactly full", "alloc refused", "pool exactly full"]:
        log.append(label)
    log.clear()
    assert counts == {"pool exactly full": 2, "alloc refused": 1}


def test_exit_status_is_1_for_any_finding_and_130_for_a_clean_interruption() -> None:
    assert exit_status(False, False) == EXIT_OK == 0
    assert exit_status(True, False) == exit_status(True, True) == EXIT_FOUND == 1
    assert exit_status(False, True) == EXIT_INTERRUPTED == 130


# -------------------------------------------------------------------- display
def stats() -> list[TargetStats]:
    busy = TargetStats("req_to_token", "req_to_token", "poolfuzz.pools:ReqToTokenPool", examples=1200, steps=54_321,
                       seconds=10.0, events=Counter({"pool exactly full": 3}))
    failed = TargetStats(LEAKY, "req_to_token", "tests.fuzz_planted:ForgetfulFree", examples=3, steps=40, seconds=1.0)
    failed.failures.append(FailureRecord(
        target=LEAKY, family="req_to_token", implementation="tests.fuzz_planted:ForgetfulFree", kind="violation",
        invariant="conservation", trace="corpus/found/req_to_token/x.json", steps=2,
        message="[conservation] free rows differ from the model\n  more", shrunk=True, round=0, seed=1, realistic=None,
        worker="w0", found_after_s=0.5))
    return [busy, failed]


def test_plain_progress_is_one_line_with_totals_and_every_target() -> None:
    stream = io.StringIO()
    progress = Progress(stream, live=False, every=5.0, started=100.0, deadline=130.0)
    progress.fuzzing_from(100.0, 130.0)
    progress.tick(stats(), now=110.0)
    progress.tick(stats(), now=111.0)
    (line,) = stream.getvalue().splitlines()
    assert "0:00:10 elapsed, 0:00:20 left" in line
    assert "steps 54.4k" in line and "failures 1" in line
    assert f"{LEAKY} 40!" in line and "\x1b" not in line


def test_the_elapsed_clock_never_goes_back_when_start_up_ends() -> None:
    stream = io.StringIO()
    progress = Progress(stream, live=False, every=0.1, started=100.0, deadline=120.0)
    progress.tick([], now=104.0)
    progress.fuzzing_from(105.0, 125.0)
    progress.tick([], now=106.0)
    starting, fuzzing = stream.getvalue().splitlines()
    assert "0:00:04 elapsed, 0:00:20 left, starting workers" in starting
    assert "0:00:06 elapsed, 0:00:19 left, fuzzing, start-up 5.0 s" in fuzzing


def test_the_live_table_redraws_in_place_and_keeps_announcements() -> None:
    stream = io.StringIO()
    progress = Progress(stream, live=True, every=0.5, started=100.0, deadline=130.0)
    progress.tick(stats(), now=101.0)
    progress.note("FAILURE something")
    progress.tick(stats(), now=102.0)
    text = stream.getvalue()
    assert text.count("\x1b[5F\x1b[J") == 1  # the note erased the 5-line table once; the redraw follows it
    assert "FAILURE something\n" in text
    assert "54,321" in text and "5,432" in text  # steps and steps/s of the busy target


def test_the_events_summary_lists_the_most_frequent_labels_within_100_columns() -> None:
    labels = {f"label {n:02d} " + "x" * (120 if n == 0 else 0): 1000 - n for n in range(12)}
    target = {"target": "paged_kv", "events": labels}
    lines = events_summary([target, {"target": "quiet", "events": {}}])
    assert lines[2] == "  paged_kv: 12 distinct, 11,934 in all"
    assert lines[3].startswith("    1,000  label 00 x") and lines[3].endswith("…")
    assert [line.split("  ")[-1] for line in lines[4:11]] == [f"label {n:02d} " for n in range(1, 8)]
    assert lines[11].strip() == "and 4 more (3,962 in all)"
    assert len(lines) == 12 and all(len(line) <= 100 for line in lines)


def test_clock_and_compact_numbers_read_well() -> None:
    assert clock(3725) == "1:02:05"
    assert [compact(n) for n in (999, 1500, 2_500_000)] == ["999", "1.5k", "2.5M"]


def test_the_summary_names_failures_with_their_trace_and_how_to_replay_it() -> None:
    report: dict[str, Any] = {
        "duration_s": 20.0, "interrupted": False, "crashes": [], "skipped": [], "coverage": None,
        "run": {"workers": 2, "seed": 7, "device": "cpu"},
        "totals": {"examples": 1203, "steps": 54_361, "steps_per_second": 2718.0},
        "targets": [s.to_json() for s in stats()],
    }
    text = summary_text(report)
    assert "1 failure(s)" in text
    assert f"{LEAKY}: [conservation] free rows differ from the model" in text
    assert "poolfuzz replay corpus/found/req_to_token/x.json" in text
    assert "    3  pool exactly full" in text.splitlines()


# ------------------------------------------------------------------ real runs
def test_fuzzing_our_pools_finds_nothing_and_reports_coverage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, out, err = fuzz(tmp_path, capsys, "--seconds", "3", "--workers", "2", "--coverage",
                                  "--target", "req_to_token", "--target", "decode_req_to_token",
                                  "--progress-every", "1")
    assert code == 0 and report["exit_status"] == 0, out + err
    assert report["totals"]["steps"] > 0 and report["failures"] == [] and report["crashes"] == []
    assert {t["target"] for t in report["targets"]} == {"req_to_token", "decode_req_to_token"}
    assert report["run"]["seed"] == 7 and report["versions"]["hypothesis"]
    # Importing the module alone reaches 20%; what three seconds add depends on the box's load (39% on a loaded one).
    assert report["coverage"]["files"]["pools/req_to_token.py"]["percent"] > 30
    assert "coverage of pools/ (branch)" in out
    assert "[poolfuzz " in err  # plain progress lines: stderr is not a terminal here
    assert any(tmp_path.joinpath("db").iterdir())  # the shared example database was used
    assert not (tmp_path / "report.logs").exists()  # worker logs are kept only after a crash


def test_a_planted_bug_exits_1_and_its_shrunk_trace_lands_in_the_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, out, err = fuzz(tmp_path, capsys, "--seconds", "6", "--workers", "1", "--steps", "20",
                                  "--target", LEAKY, "--target", "decode_req_to_token")
    assert code == 1, out + err
    (failure,) = report["failures"]
    assert failure["shrunk"] is True and failure["invariant"] in LEAK_INVARIANTS
    trace = load_trace(failure["trace"])
    assert Path(failure["trace"]).parent == tmp_path / "corpus" / "req_to_token"
    assert trace.expect["invariant"] == failure["invariant"]
    assert trace.implementation == "tests.fuzz_planted:ForgetfulFree"
    assert "no more fuzzing of this target" in err
    assert f"replay: poolfuzz replay {failure['trace']}" in out
    healthy = next(t for t in report["targets"] if t["target"] == "decode_req_to_token")
    assert healthy["status"] == "ok" and healthy["steps"] > 0  # the run went on with the other target


def test_a_canary_is_reported_at_its_first_failing_step_then_shrunk_and_its_unshrunk_trace_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    canary = CANARIES["silent-double-free-rows"]
    target = f"{canary.family}={canary.spec}"
    code, report, out, err = fuzz(tmp_path, capsys, "--seconds", "6", "--workers", "1", "--steps", "40",
                                  "--plain", "--target", target)
    assert code == 1, out + err
    (failure,) = report["failures"]
    found_at, shrink = failure["found_at"], failure["shrink"]
    assert found_at["invariant"] == failure["invariant"] == canary.invariant
    assert shrink["state"] == "done" and failure["shrunk"]
    assert found_at["after_s"] <= shrink["after_s"] == pytest.approx(failure["found_after_s"], abs=0.1)
    assert found_at["since_start_s"] >= found_at["after_s"] and shrink["seconds"] >= 0
    unshrunk, shrunk = Path(found_at["trace"]), Path(failure["trace"])
    assert unshrunk.parent == tmp_path / "corpus" / "unshrunk" / canary.family and shrunk.parent.name == canary.family
    assert len(load_trace(shrunk).steps) <= found_at["steps"] == len(load_trace(unshrunk).steps)
    announced = err.index(f"FAILURE FOUND {target} [{canary.invariant}]")  # printed at once, before shrinking
    assert announced < err.index(f"unshrunk trace ({found_at['steps']} steps): {unshrunk}") < err.index("FAILURE SHRUNK")
    assert out.index(f"found at {found_at['after_s']:.1f} s of fuzzing") < out.index("shrunk at ")
    capsys.readouterr()
    assert cli.main(["replay", str(unshrunk)]) == 0, capsys.readouterr()  # the unshrunk trace reproduces it, as found
    assert cli.main(["replay", str(shrunk)]) == 0, capsys.readouterr()


def test_a_failure_still_shrinking_when_time_is_up_is_saved_partially_shrunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, out, err = fuzz(tmp_path, capsys, "--seconds", "8", "--grace", "0.5", "--steps", "12",
                                  "--workers", "1", "--target", "req_to_token=tests.fuzz_planted:SlowForgetfulFree")
    assert code == 1, out + err
    (failure,) = report["failures"]
    assert failure["invariant"] in LEAK_INVARIANTS
    assert load_trace(failure["trace"]).expect["invariant"] == failure["invariant"]
    if not failure["shrunk"]:
        assert failure["shrink"]["state"] == "partial" and "shrink PARTIAL" in out
    assert load_trace(failure["found_at"]["trace"]).expect["invariant"] == failure["invariant"]


def test_a_crashing_worker_is_reported_and_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crashing = "req_to_token=tests.fuzz_planted:SegfaultOnFreeRows"
    code, report, out, err = fuzz(tmp_path, capsys, "--seconds", "3", "--workers", "1",
                                  "--target", crashing, "--target", "decode_req_to_token")
    assert code == 1, out + err
    crash = report["crashes"][0]
    assert {c["target"] for c in report["crashes"]} == {crashing}
    assert (crash["exit_code"], crash["reason"]) == (-signal.SIGSEGV, "killed by SIGSEGV")
    assert crash["log_tail"].startswith("Fatal Python error: Segmentation fault")
    assert Path(crash["log"]).parent == tmp_path / "report.logs" == Path(report["run"]["logs"])
    assert f"{crash['worker']}.1" in {w["worker"] for w in report["workers"]}  # its replacement
    healthy = next(t for t in report["targets"] if t["target"] == "decode_req_to_token")
    assert healthy["steps"] > 0 and healthy["status"] == "ok"
    assert f"CRASH worker {crash['worker']}" in err


def test_a_worker_hit_by_a_cuda_error_reports_it_and_is_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    poisoning = "req_to_token=tests.fuzz_planted:CudaErrorOnFreeRows"
    code, report, out, err = fuzz(tmp_path, capsys, "--seconds", "5", "--workers", "1", "--steps", "20",
                                  "--target", poisoning, "--target", "decode_req_to_token")
    assert code == 1, out + err
    assert report["crashes"] == []
    failure = report["failures"][0]
    assert failure["target"] == poisoning
    # Raised inside a valid call, the error is also a [valid-call-accepted] violation; either way it is named.
    assert "RuntimeError: CUDA error: an illegal memory access" in failure["message"]
    replaced = failure["worker"]
    assert f"{replaced}.1" in {w["worker"] for w in report["workers"]}
    assert f"worker {replaced}: CUDA error on {poisoning}; replacing the process" in err


def test_ctrl_c_stops_the_run_with_a_partial_report(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr.txt"
    report = tmp_path / "report.json"
    with stderr.open("w") as err_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "poolfuzz.harness", "fuzz", "--seconds", "300", "--workers", "1", "--target", "req_to_token",
             "--progress-every", "0.5", "--database", str(tmp_path / "db"), "--corpus", str(tmp_path / "corpus"),
             "--report", str(report)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=err_file, text=True, start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while ", fuzzing, start-up" not in stderr.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
            os.killpg(process.pid, signal.SIGINT)  # as a terminal does: the whole process group
            out, _ = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 130, stderr.read_text()
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["exit_status"] == 130 and data["totals"]["steps"] > 0
    assert "INTERRUPTED" in out
    for worker in data["workers"]:
        assert not Path(f"/proc/{worker['pid']}").exists()


# ---------------------------------------------------------------------- redis
@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A throwaway ``redis-server`` on loopback, started by the test run itself."""
    with throwaway_redis(tmp_path) as url:
        yield url


def test_a_redis_database_receives_what_the_workers_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    import redis

    report = tmp_path / "report.json"
    code = cli.main(["fuzz", "--database", redis_url, "--corpus", str(tmp_path / "corpus"), "--report", str(report),
                     "--seconds", "3", "--workers", "1", "--steps", "20", "--seed", "7", "--target", LEAKY])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert json.loads(report.read_text())["run"]["database"] == redis_url
    assert redis.Redis.from_url(redis_url).keys(b"hypothesis-example:*")  # the failing example, shared
    assert not (tmp_path / "db").exists()


def test_an_unreachable_redis_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("redis", reason="the redis package is missing (pip install 'poolfuzz[redis]')")
    code = cli.main(["fuzz", "--database", f"redis://127.0.0.1:{free_port()}", "--seconds", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("poolfuzz: error: --database redis://127.0.0.1:") and "cannot reach" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_live_page_gets_the_report_so_far_and_a_broken_page_never_ends_the_run(tmp_path: Path) -> None:
    targets, _ = select_targets(["req_to_token"])
    pages: list[dict[str, Any]] = []
    run = FuzzRun(FuzzOptions(targets=targets, seconds=1, workers=1, seed=7, corpus=tmp_path), err=io.StringIO(),
                  live=pages.append, live_every=5.0)
    live = run.snapshots
    live.update_live(100.0)
    live.update_live(101.0)  # not due yet
    live.update_live(105.0)
    assert len(pages) == 2 and pages[0]["targets"][0]["target"] == "req_to_token"
    assert pages[0]["ended_because"] is None  # the report so far: the run has not ended

    def broken(report: dict[str, Any]) -> None:
        raise OSError("disk full")

    live.live, live.next_live = broken, 0.0
    live.update_live(200.0)
    assert live.live is None and "the live dashboard stopped: OSError: disk full" in run.progress.stream.getvalue()

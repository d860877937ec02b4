"""A found counterexample survives: written before shrinking, kept when the corpus cannot be written,
reported when the worker never finishes shrinking, and a run stopped by a signal says which."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase

from poolfuzz.harness.canaries import CANARIES
from poolfuzz.harness.fuzz.options import FuzzOptions, select_targets
from poolfuzz.harness.fuzz.protocol import FailureFound, FailureSeen, Shared, WorkerPlan
from poolfuzz.harness.fuzz.run_report import exit_status
from poolfuzz.harness.fuzz.session import FuzzRun
from poolfuzz.harness.fuzz.summary import summary_text
from poolfuzz.harness.fuzz.walk import WalkRun
from poolfuzz.harness.fuzz.worker import Worker
from poolfuzz.harness.fuzz.worker_reports import UNSHRUNK_FOLDER
from poolfuzz.harness.judge.families import FAMILIES, check_target
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.machines import make_machine, pinned_settings, run_machine
from poolfuzz.harness.traces.keep import FALLBACK_FOLDER, keep_trace
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.harness.traces.shrink import shrink_trace
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError

REPO = Path(__file__).resolve().parent.parent
LEAKY = "req_to_token=tests.fuzz_planted:ForgetfulFree"


def leaky_trace(steps: int = 3) -> Trace:
    trace = Trace("req_to_token", "tests.fuzz_planted:ForgetfulFree", {"size": 4, "max_context_len": 8, "device": "cpu"})
    for _ in range(steps):
        trace.record("alloc_rows", {"need_size": 1})
    return trace


class Pipe:
    """The worker's end of its pipe to the parent, kept in a list."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, message: Any) -> None:
        self.sent.append(message)


def worker_in(tmp_path: Path) -> tuple[Worker, Pipe]:
    (target,), _ = select_targets([LEAKY])
    plan = WorkerPlan(
        worker=0,
        generation=0,
        targets=(target,),
        seed=7,
        deadline=time.time() + 60,
        steps=20,
        misuse=True,
        device="cpu",
        corpus=str(tmp_path / "corpus"),
        database="none",
        log_path=str(tmp_path / "w.log"),
    )
    shared = Shared(go=threading.Event(), stop=threading.Event(), retired=bytearray(1))
    pipe = Pipe()
    worker = Worker(plan, pipe, shared, {"now": False})
    worker.target = target
    return worker, pipe


def violation_with(trace: Trace) -> InvariantViolation:
    violation = InvariantViolation("conservation", "free rows differ from the model", missing=[2])
    violation.trace = trace
    return violation


# --------------------------------------------------------------- first sighting
def test_the_first_failing_step_is_on_disk_and_announced_before_shrinking(tmp_path: Path) -> None:
    worker, pipe = worker_in(tmp_path)
    worker.saw(violation_with(leaky_trace(5)))
    worker.saw(violation_with(leaky_trace(2)))  # a smaller one while shrinking: no second announcement
    (seen,) = pipe.sent
    assert isinstance(seen, FailureSeen)
    assert (seen.invariant, seen.steps, seen.problem) == ("conservation", 5, "")
    saved = load_trace(Path(seen.trace or ""))
    assert len(saved.steps) == 5 and saved.expect["invariant"] == "conservation"
    assert "unshrunk" in saved.provenance["note"]
    assert worker.retired[0] == 1


def test_the_unshrunk_trace_stays_apart_from_the_shrunk_one_and_both_replay(tmp_path: Path) -> None:
    worker, pipe = worker_in(tmp_path)
    worker.saw(violation_with(leaky_trace(5)))
    unshrunk = Path(pipe.sent[0].trace)
    assert unshrunk.parent == tmp_path / "corpus" / UNSHRUNK_FOLDER / "req_to_token"
    shrunk = keep_trace(leaky_trace(1), tmp_path / "corpus").path
    assert worker.target is not None and shrunk is not None
    worker.found(
        worker.target, "conservation", "[conservation] ...", path=shrunk, trace=leaky_trace(1), shrunk=True, where={"round": 0, "seed": 1}
    )
    assert isinstance(pipe.sent[-1], FailureFound) and unshrunk.exists() and shrunk.exists()
    assert len(load_trace(unshrunk).steps) == 5 and len(load_trace(shrunk).steps) == 1


def test_a_trace_already_in_the_corpus_is_left_alone_by_a_sighting(tmp_path: Path) -> None:
    worker, pipe = worker_in(tmp_path)
    trace = leaky_trace(5)
    trace.expect = {"outcome": "violation", "invariant": "conservation", "implementation": trace.implementation}
    committed = keep_trace(trace, tmp_path / "corpus").path
    assert committed is not None
    before = committed.read_text()
    worker.saw(violation_with(leaky_trace(5)))
    assert pipe.sent[0].trace != str(committed) and committed.read_text() == before


def test_a_walk_announces_its_failure_before_shrinking_it() -> None:
    seen: list[int] = []
    walk = WalkRun(
        "req_to_token", 3, spec="tests.fuzz_planted:ForgetfulFree", on_found=lambda violation, trace: seen.append(len(trace.steps))
    )
    finding = walk.run(max_steps=20_000)
    assert finding is not None and finding.violation is not None
    assert seen == [finding.found_steps] and len(finding.trace.steps) <= finding.found_steps


# ------------------------------------------------------------------- fallback
def test_a_corpus_that_cannot_be_written_falls_back_to_the_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    blocked = tmp_path / "notes.txt"
    blocked.write_text("a file where the corpus should be\n")
    kept = keep_trace(leaky_trace(), blocked)
    assert kept.path is not None and kept.path.is_relative_to(tmp_path / "tmp" / FALLBACK_FOLDER)
    assert load_trace(kept.path).steps == leaky_trace().steps
    assert str(blocked) in kept.problem and "saved under" in kept.problem


# ------------------------------------------------------------- the coordinator
def test_a_failure_whose_worker_never_finished_shrinking_is_still_reported(tmp_path: Path) -> None:
    targets, _ = select_targets([LEAKY])
    run = FuzzRun(FuzzOptions(targets=targets, seconds=1, workers=1, seed=7, corpus=tmp_path), err=io.StringIO())

    seen = sighting(tmp_path)
    run.on_seen(Slot(), seen)  # type: ignore[arg-type]
    run.findings.unreported()
    report = run.build_report().to_json()
    (failure,) = report["targets"][0]["failures"]
    assert (failure["trace"], failure["steps"], failure["shrunk"]) == (seen.trace, 40, False)
    assert failure["first_seen_after_s"] == failure["found_at"]["after_s"] and failure["unshrunk_steps"] == 40
    assert failure["found_after_s"] is None and failure["shrink"]["state"] == "partial"
    assert "before it reported a shrunk trace" in failure["shrink"]["note"]
    assert report["exit_status"] == 1
    assert f"unshrunk trace (40 steps): {seen.trace}" in run.progress.stream.getvalue()  # type: ignore[attr-defined]
    assert "shrink PARTIAL" in summary_text(report)


# ---------------------------------------------------------- report at find time
def sighting(tmp_path: Path, steps: int = 40) -> FailureSeen:
    return FailureSeen(
        target=LEAKY,
        family="req_to_token",
        implementation="tests.fuzz_planted:ForgetfulFree",
        invariant="conservation",
        trace=str(tmp_path / "unshrunk.json"),
        steps=steps,
        message="[conservation] free rows differ",
        round=2,
        seed=9,
    )


def shrunk_report(tmp_path: Path, *, shrunk: bool = True) -> FailureFound:
    return FailureFound(
        target=LEAKY,
        family="req_to_token",
        implementation="tests.fuzz_planted:ForgetfulFree",
        kind="violation",
        invariant="conservation",
        trace=str(tmp_path / "shrunk.json"),
        steps=3,
        message="[conservation] free rows differ\n  step 1: ...",
        shrunk=shrunk,
        round=2,
        seed=9,
        realistic=None,
    )


class Slot:
    name = "w0"


def test_a_first_failing_step_is_in_the_report_file_at_once_and_its_shrunk_report_follows(tmp_path: Path) -> None:
    targets, _ = select_targets([LEAKY])
    path = tmp_path / "report.json"
    pages: list[dict[str, Any]] = []
    run = FuzzRun(
        FuzzOptions(targets=targets, seconds=1, workers=1, seed=7, corpus=tmp_path, report=path), err=io.StringIO(), live=pages.append
    )
    run.started = run.fuzz_started = time.time() - 3.0  # three seconds into fuzzing
    run.on_seen(Slot(), sighting(tmp_path))  # type: ignore[arg-type]
    at_once = json.loads(path.read_text())
    assert at_once["ended_because"] is None and at_once["exit_status"] is None and pages[-1] == at_once
    (failure,) = at_once["failures"]
    assert failure["found_at"]["trace"] == failure["trace"] == str(tmp_path / "unshrunk.json")
    assert (failure["found_at"]["invariant"], failure["found_at"]["steps"]) == ("conservation", 40)
    assert failure["found_at"]["after_s"] >= 3.0 and failure["shrink"] == {
        "state": "running",
        "after_s": None,
        "seconds": None,
        "note": None,
    }
    assert failure["found_after_s"] is None and at_once["targets"][0]["status"] == "failed"
    run.started = run.fuzz_started = run.fuzz_started - 2.0  # the shrunk report comes two seconds later
    run.on_failure(Slot(), shrunk_report(tmp_path))  # type: ignore[arg-type]
    (failure,) = json.loads(path.read_text())["failures"]
    assert failure["found_at"] == at_once["failures"][0]["found_at"]  # the first record stays, unshrunk trace and all
    assert (failure["trace"], failure["steps"], failure["shrunk"]) == (str(tmp_path / "shrunk.json"), 3, True)
    shrink = failure["shrink"]
    assert shrink["state"] == "done" and shrink["after_s"] >= failure["found_at"]["after_s"] + 2.0
    assert shrink["seconds"] == pytest.approx(shrink["after_s"] - failure["found_at"]["after_s"], abs=0.02)
    text = run.progress.stream.getvalue()  # type: ignore[attr-defined]
    assert text.index("FAILURE FOUND") < text.index("FAILURE SHRUNK")
    final = run.build_report().to_json()
    summary = summary_text(final)
    assert summary.index("found at ") < summary.index("shrunk at ") and "unshrunk trace" in summary
    schema_validator().validate(final)
    schema_validator().validate(at_once)


def test_a_shrink_cut_off_by_the_grace_is_reported_partial_with_why(tmp_path: Path) -> None:
    targets, _ = select_targets([LEAKY])
    run = FuzzRun(FuzzOptions(targets=targets, seconds=1, workers=1, seed=7, corpus=tmp_path, grace=0.5), err=io.StringIO())
    run.on_seen(Slot(), sighting(tmp_path))  # type: ignore[arg-type]
    run.stop_reason = "time is up"
    run.on_failure(Slot(), shrunk_report(tmp_path, shrunk=False))  # type: ignore[arg-type]
    (failure,) = run.build_report().to_json()["failures"]
    assert failure["shrink"]["state"] == "partial" and not failure["shrunk"]
    assert "--grace of 0.5 s ran out" in failure["shrink"]["note"]
    assert "FAILURE SHRINK PARTIAL" in run.progress.stream.getvalue()  # type: ignore[attr-defined]


def test_a_second_workers_sighting_of_a_retired_target_adds_nothing(tmp_path: Path) -> None:
    targets, _ = select_targets([LEAKY])
    run = FuzzRun(FuzzOptions(targets=targets, seconds=1, workers=1, seed=7, corpus=tmp_path), err=io.StringIO())
    run.on_seen(Slot(), sighting(tmp_path))  # type: ignore[arg-type]
    run.on_seen(Slot(), sighting(tmp_path, steps=12))  # type: ignore[arg-type]
    (failure,) = run.build_report().to_json()["failures"]
    assert failure["found_at"]["steps"] == 40


def schema_validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "harness" / "fuzz" / "report.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_clean_run_exits_with_128_plus_the_signal(signum: int, status: int) -> None:
    assert exit_status(False, True, signum) == status
    assert exit_status(True, True, signum) == 1


def test_sigterm_stops_a_run_within_seconds_writes_its_report_and_exits_143(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    command = [
        sys.executable,
        "-m",
        "poolfuzz.harness",
        "fuzz",
        "--target",
        "req_to_token",
        "--seconds",
        "120",
        "--workers",
        "1",
        "--plain",
        "--progress-every",
        "0.2",
        "--database",
        "none",
        "--corpus",
        str(tmp_path / "corpus"),
        "--report",
        str(report),
    ]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert process.stderr is not None
    for line in process.stderr:
        if ", fuzzing" in line:
            break
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, out + err
    assert time.monotonic() - sent < 5  # about 0.7 s here: half a second of grace, the report, the exit
    written = json.loads(report.read_text())
    assert written["interrupted"] and written["exit_status"] == 143


# ------------------------------------------------------------------- targets
def test_every_shipped_implementation_and_canary_fits_its_family() -> None:
    specs = {(name, spec) for name, fam in FAMILIES.items() for spec in (fam.default, *fam.upstream)}
    specs |= {(c.family, c.spec) for c in CANARIES.values()}
    for name, spec in sorted(specs):
        try:
            check_target(name, spec)
        except UpstreamUnavailableError:  # an upstream target whose package is not installed here
            assert spec.startswith("poolfuzz.harness.upstream:"), (name, spec)
        except Exception as exc:  # noqa: BLE001 - one whose module cannot be imported here
            assert spec.startswith("poolfuzz.harness.upstream:") and "cannot import" in str(exc), (name, spec, exc)


# ------------------------------------------------------------- shrink budget
def steps_after_the_first_violation(
    shrink_seconds: float, tmp_path: Path, stall_seconds: float = float("inf")
) -> tuple[int, InvariantViolation]:
    """Run the leaky pool's machine; how many steps ran after its first violation, and what was raised."""
    calls: list[bool] = []

    class Watched(make_machine("req_to_token", "tests.fuzz_planted:ForgetfulFree")):  # type: ignore[misc]
        def do(self, op: str, **args: Any) -> Any:
            try:
                result = super().do(op, **args)
            except InvariantViolation:
                calls.append(True)
                raise
            calls.append(False)
            return result

    with pytest.raises(InvariantViolation) as raised:
        run_machine(
            Watched, settings=pinned_settings(max_examples=50), corpus=tmp_path, shrink_seconds=shrink_seconds, stall_seconds=stall_seconds
        )
    return len(calls) - 1 - calls.index(True), raised.value


def test_hypothesis_stops_shrinking_when_its_budget_is_spent_and_the_shortest_trace_goes_on(tmp_path: Path) -> None:
    cut, violation = steps_after_the_first_violation(0.0, tmp_path)
    unbounded, _ = steps_after_the_first_violation(3.0, tmp_path)  # three seconds of shrinking run thousands of steps
    assert cut == 0 and unbounded > 10  # with no budget no step runs after the first violation, with one many do
    assert violation.invariant_id in ("conservation", "valid-call-accepted") and violation.trace_path is not None
    assert load_trace(violation.trace_path).expect["invariant"] == violation.invariant_id
    assert "shrunk by replay to" in str(violation)


def test_an_unshrunk_run_keeps_and_prints_the_trace_hypothesis_reported(tmp_path: Path) -> None:
    """``shrink=False``: no replay shrinking, the saved trace is the reported one, and the message says so."""
    settings = pinned_settings(max_examples=50, phases=[Phase.explicit, Phase.generate])
    with pytest.raises(InvariantViolation) as raised:
        run_machine(make_machine("req_to_token", "tests.fuzz_planted:ForgetfulFree"), settings=settings, corpus=tmp_path, shrink=False)
    violation = raised.value
    assert violation.trace is not None and violation.trace_path is not None
    found = len(violation.trace.steps)
    assert f"the {found}-step trace hypothesis reported, unshrunk:" in str(violation)
    assert "shrunk by replay" not in str(violation)
    assert len(load_trace(violation.trace_path).steps) == found
    shrunk = shrink_trace(violation.trace, invariant_id=violation.invariant_id, target="tests.fuzz_planted:ForgetfulFree")
    assert len(shrunk.steps) < found  # so the replay shrinker, had it run, would have cut it


def test_hypothesis_stops_shrinking_once_the_shortest_trace_has_stalled_however_long_its_budget(tmp_path: Path) -> None:
    stalled, violation = steps_after_the_first_violation(30.0, tmp_path, stall_seconds=0.0)
    assert stalled == 0  # not a step after the first violation: it was the shortest, and nothing shorter came at once
    assert violation.trace_path is not None and "shrunk by replay to" in str(violation)


@pytest.mark.parametrize(
    "phases", [[Phase.explicit, Phase.generate], [Phase.explicit, Phase.generate, Phase.shrink]], ids=["no-shrink", "shrink"]
)
def test_a_budget_spent_while_hypothesis_replays_the_failing_example_still_reports_the_violation(
    tmp_path: Path, phases: list[Phase]
) -> None:
    """Hypothesis runs the failing example again before it reports it; a budget spent by then cuts that run short on a
    prefix its data tree has seen end later, and hypothesis raises its ``Flaky`` error instead of our interrupt (the
    vLLM engine canary on a loaded box, whose examples outlast the half-second stall).  The violation seen stands."""
    settings = pinned_settings(max_examples=50, phases=phases)
    with pytest.raises(InvariantViolation) as raised:
        run_machine(
            make_machine("req_to_token", "tests.fuzz_planted:ForgetfulFree"),
            settings=settings,
            corpus=tmp_path,
            shrink=False,
            shrink_seconds=0.0,
            stall_seconds=0.0,
        )
    assert raised.value.invariant_id in ("conservation", "valid-call-accepted")

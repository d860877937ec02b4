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

from harness.canaries import CANARIES
from harness.fuzz.options import FuzzOptions, select_targets
from harness.fuzz.protocol import FailureFound, FailureSeen, Shared, WorkerPlan
from harness.fuzz.session import FuzzRun, exit_status
from harness.fuzz.walk import WalkRun
from harness.fuzz.worker import Worker
from harness.judge.families import FAMILIES, check_target
from harness.judge.invariants import InvariantViolation
from harness.judge.trace import Trace
from harness.machines import make_machine, pinned_settings, run_machine
from harness.traces.keep import FALLBACK_FOLDER, keep_trace
from harness.traces.schema import load_trace

REPO = Path(__file__).resolve().parent.parent
LEAKY = "req_to_token=tests.fuzz_planted:ForgetfulFree"


def leaky_trace(steps: int = 3) -> Trace:
    trace = Trace("req_to_token", "tests.fuzz_planted:ForgetfulFree", {"size": 4, "max_context_len": 8,
                                                                      "device": "cpu"})
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
    plan = WorkerPlan(worker=0, generation=0, targets=(target,), seed=7, deadline=time.time() + 60, steps=20,
                      misuse=True, device="cpu", corpus=str(tmp_path / "corpus"), database="none",
                      log_path=str(tmp_path / "w.log"))
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


def test_the_unshrunk_trace_gives_way_to_the_shrunk_one(tmp_path: Path) -> None:
    worker, pipe = worker_in(tmp_path)
    worker.saw(violation_with(leaky_trace(5)))
    unshrunk = Path(pipe.sent[0].trace)
    shrunk = keep_trace(leaky_trace(1), tmp_path / "corpus").path
    assert worker.target is not None and shrunk is not None
    worker.found(worker.target, "conservation", "[conservation] ...", path=shrunk, trace=leaky_trace(1), shrunk=True,
                 where={"round": 0, "seed": 1})
    assert isinstance(pipe.sent[-1], FailureFound) and not unshrunk.exists() and shrunk.exists()


def test_a_trace_already_in_the_corpus_is_never_removed_as_unshrunk(tmp_path: Path) -> None:
    worker, pipe = worker_in(tmp_path)
    trace = leaky_trace(5)
    trace.expect = {"outcome": "violation", "invariant": "conservation", "implementation": trace.implementation}
    committed = keep_trace(trace, tmp_path / "corpus").path
    worker.saw(violation_with(leaky_trace(5)))
    assert pipe.sent[0].trace == str(committed)
    shrunk = keep_trace(leaky_trace(1), tmp_path / "corpus").path
    assert worker.target is not None and committed is not None
    worker.found(worker.target, "conservation", "...", path=shrunk, trace=None, shrunk=True, where={"round": 0, "seed": 1})
    assert committed.exists()


def test_a_walk_announces_its_failure_before_shrinking_it() -> None:
    seen: list[int] = []
    walk = WalkRun("req_to_token", 3, spec="tests.fuzz_planted:ForgetfulFree",
                   on_found=lambda violation, trace: seen.append(len(trace.steps)))
    finding = walk.run(max_steps=20_000)
    assert finding is not None and finding.violation is not None
    assert seen == [finding.found_steps] and len(finding.trace.steps) <= finding.found_steps


# ------------------------------------------------------------------- fallback
def test_a_corpus_that_cannot_be_written_falls_back_to_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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

    class Slot:
        name = "w0"

    seen = FailureSeen(target=LEAKY, family="req_to_token", implementation="tests.fuzz_planted:ForgetfulFree",
                       invariant="conservation", trace=str(tmp_path / "t.json"), steps=40,
                       message="[conservation] free rows differ", round=2, seed=9)
    run.on_seen(Slot(), seen)  # type: ignore[arg-type]
    run.findings.unreported()
    report = run.build_report().to_json()
    (failure,) = report["targets"][0]["failures"]
    assert (failure["trace"], failure["steps"], failure["shrunk"]) == (seen.trace, 40, False)
    assert failure["first_seen_after_s"] == failure["found_after_s"] and failure["unshrunk_steps"] == 40
    assert report["exit_status"] == 1
    assert f"unshrunk trace (40 steps): {seen.trace}" in run.progress.stream.getvalue()  # type: ignore[attr-defined]


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_clean_run_exits_with_128_plus_the_signal(signum: int, status: int) -> None:
    assert exit_status(False, True, signum) == status
    assert exit_status(True, True, signum) == 1


def test_sigterm_stops_a_run_within_seconds_writes_its_report_and_exits_143(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "harness", "fuzz", "--target", "req_to_token", "--seconds", "120",
               "--workers", "1", "--plain", "--progress-every", "0.2", "--database", "none",
               "--corpus", str(tmp_path / "corpus"), "--report", str(report)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
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
        except Exception as exc:  # noqa: BLE001 - an upstream target whose package is not installed here
            assert spec.startswith("harness.upstream:") and "cannot import" in str(exc), (name, spec, exc)


# ------------------------------------------------------------- shrink budget
def steps_after_the_first_violation(shrink_seconds: float, tmp_path: Path) -> tuple[int, InvariantViolation]:
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
        run_machine(Watched, settings=pinned_settings(max_examples=50), corpus=tmp_path, shrink_seconds=shrink_seconds)
    return len(calls) - 1 - calls.index(True), raised.value


def test_hypothesis_stops_shrinking_when_its_budget_is_spent_and_the_shortest_trace_goes_on(tmp_path: Path) -> None:
    cut, violation = steps_after_the_first_violation(0.0, tmp_path)
    unbounded, _ = steps_after_the_first_violation(60.0, tmp_path)
    assert cut == 0 and unbounded > 10  # with no budget no step runs after the first violation
    assert violation.invariant_id in ("conservation", "valid-call-accepted") and violation.trace_path is not None
    assert load_trace(violation.trace_path).expect["invariant"] == violation.invariant_id
    assert "shrunk by replay to" in str(violation)

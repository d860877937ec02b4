"""The corpus: committed traces replay as expected, fuzz findings land there, replay and shrinking are sound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as Settings

import poolfuzz.harness.traces.shrink
from poolfuzz.harness.canaries.seeding import SeedError, seed_trace, verify_seed
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.machines import make_machine, run_machine
from poolfuzz.harness.traces.corpus import save_trace, trace_key
from poolfuzz.harness.traces.replay import ReplayResult, matches_expectation, old_implementation, replay_trace, trace_files
from poolfuzz.harness.traces.replay_cli import main
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.harness.traces.shrink import shrink_trace
from poolfuzz.pools import ReqToTokenPool
from poolfuzz.pools.req_to_token import Req
from tests.conftest import CUDA, found_settings
from tests.processes import python

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
FOUND = CORPUS / "found"  # fuzz-run output awaiting triage (gitignored), not the committed corpus
COMMITTED = sorted(p for p in trace_files([CORPUS]) if FOUND not in p.parents) if CORPUS.is_dir() else []
BROKEN = "tests.test_corpus:ClearZeroesGeneration"
DEFAULT = "poolfuzz.pools:ReqToTokenPool"


class ClearZeroesGeneration(ReqToTokenPool):
    """The planted bug: ``clear()`` zeroes ``req_generation`` (fixed upstream in 0.5.23)."""

    def clear(self) -> None:
        super().clear()
        if hasattr(self, "req_generation"):
            self.req_generation.zero_()


class FreeLosesRow(ReqToTokenPool):
    """A second planted bug: ``free(req)`` never puts the row back on the free list (a leak)."""

    def free(self, req: Req) -> None:
        super().free(req)
        self.free_slots.pop()


def fuzz_settings() -> Settings:
    """Deterministic whatever the profile, hypothesis's own shrinking left out (:func:`tests.conftest.found_settings`)."""
    return found_settings(examples=40, steps=8)


Steps = list[tuple[str, dict[str, Any]]]


def rows_trace(
    steps: Steps, *, expect: dict[str, Any] | None = None, implementation: str = DEFAULT, size: int = 3, device: str = "cpu"
) -> Trace:
    return Trace(
        "req_to_token",
        implementation,
        {"size": size, "max_context_len": 4, "device": device},
        [{"op": op, "args": args} for op, args in steps],
        expect or {"outcome": "pass"},
    )


GENERATION_BUG: Steps = [("alloc", {"batch": [None]}), ("clear", {})]
EXPECT_BROKEN = {"outcome": "violation", "invariant": "generation-monotonic", "implementation": BROKEN}


def write(folder: Path, name: str, trace: Trace) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(trace.dumps())
    return path


# ------------------------------------------------------- committed traces
def test_the_corpus_directory_exists() -> None:
    assert CORPUS.is_dir()


if COMMITTED:

    @pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(CORPUS)) for p in COMMITTED])
    def test_committed_trace_replays_as_expected(path: Path) -> None:
        """On its implementation as expected; and, when it records a broken variant (an expected violation
        elsewhere, or the old pool of a regression trace), failing there as recorded."""
        trace = load_trace(path)
        result = replay_trace(trace)
        if result.outcome == "unavailable":
            pytest.skip(result.describe())
        assert matches_expectation(result, trace), result.describe()
        broken = trace.expect.get("implementation") or old_implementation(trace)
        if broken and broken != result.implementation:
            on_broken = replay_trace(trace, target=broken)
            if on_broken.outcome == "unavailable":
                pytest.skip(on_broken.describe())
            assert on_broken.outcome == "violation", on_broken.describe()
            assert matches_expectation(on_broken, trace), on_broken.describe()


# ------------------------------------------------------------ planted bug
def test_a_fuzz_finding_lands_in_the_corpus_and_replays_to_the_same_invariant(tmp_path: Path) -> None:
    with pytest.raises(InvariantViolation) as caught:
        run_machine(make_machine("req_to_token", BROKEN), settings=fuzz_settings(), corpus=tmp_path)
    saved = list((tmp_path / "req_to_token").glob("*.json"))
    assert saved == [caught.value.trace_path]  # type: ignore[attr-defined]
    trace = load_trace(saved[0])
    assert trace.expect == {"outcome": "violation", "invariant": caught.value.invariant_id, "implementation": BROKEN}
    on_broken = replay_trace(trace)
    assert (on_broken.outcome, on_broken.invariant) == ("violation", caught.value.invariant_id)
    assert matches_expectation(on_broken, trace)
    on_ours = replay_trace(trace, target=DEFAULT)
    assert on_ours.outcome == "pass" and matches_expectation(on_ours, trace)
    assert len(trace.steps) == 2 and trace.steps[-1] == {"op": "clear", "args": {}}
    assert "shrunk by replay to" in str(caught.value) and str(saved[0]) in str(caught.value)


def test_finding_the_same_bug_twice_writes_one_file(tmp_path: Path) -> None:
    for _ in range(2):
        with pytest.raises(InvariantViolation):
            run_machine(make_machine("req_to_token", BROKEN), settings=fuzz_settings(), corpus=tmp_path)
    assert len(list((tmp_path / "req_to_token").iterdir())) == 1


# ---------------------------------------------------------------- seeding
def test_seeding_writes_a_trace_our_pool_passes_and_the_broken_variant_fails(tmp_path: Path) -> None:
    path = seed_trace("req_to_token", BROKEN, "planted in the test", corpus=tmp_path, settings=fuzz_settings())
    trace = load_trace(path)
    assert (trace.implementation, trace.expect) == (DEFAULT, EXPECT_BROKEN)
    assert trace.provenance["note"] == "planted in the test"
    assert replay_trace(trace).outcome == "pass"
    assert replay_trace(trace, target=BROKEN).invariant == "generation-monotonic"


def test_seeding_refuses_a_canary_fuzzing_cannot_break(tmp_path: Path) -> None:
    with pytest.raises(SeedError, match="found no violation"):
        seed_trace("req_to_token", DEFAULT, "not broken", corpus=tmp_path, settings=fuzz_settings())
    assert not any(tmp_path.iterdir())


def test_seeding_refuses_a_trace_our_pool_fails_too() -> None:
    trace = rows_trace([("free", {"handle": 3})], expect=EXPECT_BROKEN)
    with pytest.raises(SeedError, match="against poolfuzz.pools:ReqToTokenPool: got error at step 1"):
        verify_seed(trace)


# ----------------------------------------------------------------- replay
def test_replay_reports_the_violated_invariant_and_the_step() -> None:
    trace = rows_trace([*GENERATION_BUG, ("alloc", {"batch": [None]})])
    result = replay_trace(trace, target=BROKEN)
    assert (result.outcome, result.invariant, result.step) == ("violation", "generation-monotonic", 3)
    assert result.describe() == ("[generation-monotonic] at step 3 of 3: row 3 generation after binding (expected=2, actual=1)")


def test_the_step_number_counts_the_trace_as_replayed_skipped_steps_included() -> None:
    """A step the driver skips (a write to a request that holds no row) still counts: step N is the file's Nth."""
    trace = rows_trace(
        [
            ("alloc", {"batch": [None]}),
            ("free", {"handle": 0}),
            ("write", {"handle": 0, "start": 0, "length": 1}),
            ("clear", {}),
            ("alloc", {"batch": [None]}),
            ("alloc", {"batch": []}),
        ]
    )
    result = replay_trace(trace, target=BROKEN)
    assert len(result.recorded) == 4  # the driver skipped the write
    assert (result.invariant, result.step, result.steps, result.total) == ("generation-monotonic", 5, 5, 6)
    assert result.where == "at step 5 of 6"


def test_a_violation_found_only_by_the_final_audit_is_reported_at_teardown() -> None:
    result = replay_trace(rows_trace(GENERATION_BUG), target=BROKEN)
    assert (result.invariant, result.step, result.where) == ("generation-monotonic", None, "at teardown")


@pytest.mark.parametrize(("audit_period", "step"), [(1, 2), (8, None)])
def test_replay_audits_on_the_schedule_the_trace_recorded(audit_period: int, step: int | None) -> None:
    trace = rows_trace([("alloc_rows", {"need_size": 1}), ("clear", {}), ("alloc_rows", {"need_size": 0})])
    trace.audit_period = audit_period
    result = replay_trace(trace, target=BROKEN)
    assert (result.invariant, result.step) == ("generation-monotonic", step)


def test_a_trace_naming_a_request_it_never_made_is_an_error_not_a_traceback() -> None:
    result = replay_trace(rows_trace([("alloc", {"batch": [None]}), ("free", {"handle": 7})]))
    assert (result.outcome, result.step) == ("error", 2)
    assert result.message == "free: KeyError: 7"


def test_a_pool_that_cannot_be_built_is_an_error() -> None:
    trace = Trace("paged_kv", "", {"size": 8, "page_size": 2, "kernel": "no-such-kernel", "device": "cpu"}, [])
    result = replay_trace(trace)
    assert result.outcome == "error" and result.message.startswith("building the pool: UnknownKernelError")


def test_a_size_beyond_the_limits_is_invalid_and_nothing_is_built() -> None:
    result = replay_trace(rows_trace([], size=-1))
    assert (result.outcome, result.message) == ("invalid", "config.size = -1 is below the minimum 0 for req_to_token")
    assert not matches_expectation(result, rows_trace([], size=-1))


def test_an_implementation_that_cannot_be_imported_here_is_unavailable_not_failed() -> None:
    trace = rows_trace(GENERATION_BUG, implementation="tests.nowhere:Pool")
    result = replay_trace(trace)
    assert result.outcome == "unavailable" and not matches_expectation(result, trace)
    assert result.describe().startswith("tests.nowhere:Pool is unavailable here: target 'tests.nowhere:Pool': cannot import")


def _builder_that_loads_upstream_when_it_builds(**config: Any) -> Any:
    from poolfuzz.harness.upstream.sources import UpstreamUnavailableError

    raise UpstreamUnavailableError("upstream SGLang is not installed")


def test_a_builder_that_finds_upstream_missing_as_it_builds_is_unavailable_not_failed() -> None:
    """The embedding and waiting-timeout builders load SGLang when they build, not when they are resolved: a machine
    without it skips their committed traces, as it skips ``poolfuzz.harness.upstream:Engine``'s."""
    trace = rows_trace(GENERATION_BUG, implementation="tests.test_corpus:_builder_that_loads_upstream_when_it_builds")
    result = replay_trace(trace, factory=_builder_that_loads_upstream_when_it_builds)
    assert result.outcome == "unavailable" and "not installed" in result.message


def test_a_trace_saved_before_the_kits_moved_still_replays_under_its_old_module_name() -> None:
    """Canaries and the harness-built defaults moved into ``harness/kits/``; a corpus written before must not rot."""
    old = rows_trace(GENERATION_BUG, implementation="poolfuzz.harness.canaries.rows:GenerationZeroedOnClear")
    new = rows_trace(GENERATION_BUG, implementation="poolfuzz.harness.kits.rows.canaries:GenerationZeroedOnClear")
    assert replay_trace(old).describe() == replay_trace(new).describe()
    assert replay_trace(old).invariant == "generation-monotonic"


def test_a_cuda_trace_replays_on_cpu() -> None:
    trace = rows_trace(GENERATION_BUG, device="cuda")
    result = replay_trace(trace, device="cpu")
    assert (result.outcome, result.device) == ("pass", "cpu")


@CUDA
@pytest.mark.cuda
def test_a_cpu_trace_replays_on_cuda() -> None:
    trace = rows_trace(GENERATION_BUG, expect=EXPECT_BROKEN)
    result = replay_trace(trace, target=BROKEN, device="cuda")
    assert result.device == "cuda" and matches_expectation(result, trace)


@pytest.mark.parametrize(
    ("target", "outcome", "invariant", "matches"),
    [
        (None, "pass", None, True),  # our pool: expected to pass
        (BROKEN, "violation", "generation-monotonic", True),  # the variant the expectation names
    ],
)
def test_an_expectation_applies_to_the_implementation_it_names(
    target: str | None, outcome: str, invariant: str | None, matches: bool
) -> None:
    trace = rows_trace(GENERATION_BUG, expect=EXPECT_BROKEN)
    result = replay_trace(trace, target=target)
    assert (result.outcome, result.invariant, matches_expectation(result, trace)) == (outcome, invariant, matches)


def test_a_violation_expected_without_naming_an_implementation_applies_to_the_traces_own() -> None:
    trace = rows_trace(GENERATION_BUG, implementation=BROKEN, expect={"outcome": "violation", "invariant": "generation-monotonic"})
    assert matches_expectation(replay_trace(trace), trace)
    assert matches_expectation(replay_trace(trace, target=DEFAULT), trace)


def test_an_error_never_matches_an_expectation() -> None:
    trace = rows_trace([("free", {"handle": 0})])
    assert not matches_expectation(replay_trace(trace), trace)
    assert not matches_expectation(ReplayResult("error", DEFAULT, "cpu", 0), trace)


# -------------------------------------------------------------- shrinking
BEFORE: Steps = [
    ("alloc", {"batch": [None, None]}),
    ("alloc_rows", {"need_size": 2}),
    ("write", {"handle": 0, "start": 3, "length": 4}),
    ("free", {"handle": 1}),
]
AFTER: Steps = [("free_rows", {"rows": [3]}), ("alloc_rows", {"need_size": 0}), ("write", {"handle": 0, "start": 0, "length": 2})]
NOISY = [*BEFORE, *GENERATION_BUG, *AFTER]


def test_shrinking_drops_steps_unrelated_to_the_violation() -> None:
    trace = rows_trace(NOISY, size=6, implementation=BROKEN)
    assert replay_trace(trace).invariant == "generation-monotonic"
    shrunk = shrink_trace(trace, invariant_id="generation-monotonic")
    assert len(shrunk.steps) == 2 and shrunk.steps[-1]["op"] == "clear"
    assert shrunk.config["size"] == 1
    assert replay_trace(shrunk).invariant == "generation-monotonic"


def test_shrinking_simplifies_arguments_toward_small_values() -> None:
    trace = rows_trace([("alloc_rows", {"need_size": 3}), ("clear", {})], implementation=BROKEN)
    shrunk = shrink_trace(trace, invariant_id="generation-monotonic")
    assert shrunk.steps == [{"op": "alloc_rows", "args": {"need_size": 1}}, {"op": "clear", "args": {}}]


def test_shrinking_renumbers_request_handles_when_it_drops_the_step_that_made_one() -> None:
    steps: Steps = [("alloc", {"batch": [None]}), ("alloc", {"batch": [None]}), ("free", {"handle": 1})]
    trace = rows_trace(steps, implementation="tests.test_corpus:FreeLosesRow")
    shrunk = shrink_trace(trace, invariant_id="conservation")
    assert shrunk.steps == [{"op": "alloc", "args": {"batch": [None]}}, {"op": "free", "args": {"handle": 0}}]


def test_shrinking_drops_a_batch_admission_by_lowering_later_handles_by_the_batch_length() -> None:
    """An admission of three requests issues three handles: dropping it must lower later handles by three.

    The trace is a 36-step walk finding of ``swa-window-never-released``; shifting by one only, the
    shrinker spent its 10 s budget and left 21 steps (``docs/benchmarks.md``, time to report)."""
    trace = load_trace(Path(__file__).parent / "data" / "scheduler-batch-handles-unshrunk.json")
    shrunk = shrink_trace(trace, invariant_id="scheduler-conservation", max_replays=400)
    assert len(shrunk.steps) <= 5 < len(trace.steps)
    assert replay_trace(shrunk).invariant == "scheduler-conservation"


def test_a_trace_that_does_not_reproduce_is_returned_unchanged() -> None:
    trace = rows_trace(NOISY)
    assert shrink_trace(trace, invariant_id="generation-monotonic") == trace


def test_shrinking_stops_at_its_replay_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counting(*args: Any, **kwargs: Any) -> ReplayResult:
        calls.append(1)
        return replay_trace(*args, **kwargs)

    monkeypatch.setattr(poolfuzz.harness.traces.shrink, "replay_trace", counting)
    trace = rows_trace(NOISY, size=6, implementation=BROKEN)
    shrunk = shrink_trace(trace, invariant_id="generation-monotonic", max_replays=5)
    assert len(calls) == 5
    assert replay_trace(shrunk).invariant == "generation-monotonic"


# ---------------------------------------------------- concurrent writers
WRITER = """
import json, sys, time
from pathlib import Path
from poolfuzz.harness.traces.corpus import save_trace
from poolfuzz.harness.judge.trace import Trace
corpus, name, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
(corpus / f"ready-{name}").touch()
while not go.exists():
    time.sleep(0.001)
for i in range(150):
    steps = [{"op": "alloc_rows", "args": {"need_size": i}}]
    path = save_trace(Trace("req_to_token", "", {"size": 2, "max_context_len": 4, "device": "cpu"}, steps,
                            provenance={"note": f"{name} {i}" * 500}), corpus)
    json.loads(path.read_text())  # the path returned is a complete file, whoever wrote it
"""


def test_two_processes_saving_the_same_traces_leave_one_complete_file_each(tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name, str(go)], env=env) for name in ("a", "b")]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in "ab") and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    files = sorted((tmp_path / "req_to_token").iterdir())
    assert len(files) == 150 and not [f for f in files if f.name.startswith(".")]
    for path in files:
        trace = load_trace(path)
        assert path.name == f"req_to_token-{trace_key(trace)}.json"
        note = trace.provenance["note"]
        assert note in (f"a {trace.steps[0]['args']['need_size']}" * 500, f"b {trace.steps[0]['args']['need_size']}" * 500)


def test_saving_an_existing_trace_returns_its_path_and_keeps_the_first_copy(tmp_path: Path) -> None:
    first = rows_trace(GENERATION_BUG)
    first.provenance = {"note": "first"}
    path = save_trace(first, tmp_path)
    second = rows_trace(GENERATION_BUG)
    second.provenance = {"note": "second"}
    assert save_trace(second, tmp_path) == path
    assert load_trace(path).provenance == {"note": "first"}


# -------------------------------------------------------------------- CLI
@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """A folder with a passing trace and a seeded one (our pool passes, the planted bug fails)."""
    write(tmp_path, "rows/pass.json", rows_trace([("alloc", {"batch": [None, None]}), ("free", {"handle": 1})]))
    write(tmp_path, "rows/nested/seeded.json", rows_trace(GENERATION_BUG, expect=EXPECT_BROKEN))
    write(tmp_path, "rows/.tmp-half-written.json", rows_trace([]))
    (tmp_path / "rows" / "notes.txt").write_text("not a trace")
    return tmp_path


def test_cli_passes_a_corpus_our_pools_pass(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(traces)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"PASS {traces}/rows/nested/seeded.json (2 steps)",
        f"PASS {traces}/rows/pass.json (2 steps)",
        "2 traces: 2 matched, 0 failed, 0 skipped, 0 missing, 0 invalid",
    ]


def test_cli_reproduces_a_seeded_violation_on_the_broken_variant(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(traces / "rows" / "nested"), "--target", f"req_to_token={BROKEN}"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"OK   {traces}/rows/nested/seeded.json reproduced expected [generation-monotonic] at teardown [against {BROKEN}]"
    )


def test_cli_exits_1_when_a_trace_does_not_match(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(traces / "rows" / "pass.json"), "--target", f"req_to_token={BROKEN}"]) == 0
    write(traces, "rows/edited.json", rows_trace([("alloc", {"batch": [None]}), ("free", {"handle": 4})]))
    capsys.readouterr()
    assert main([str(traces / "rows" / "edited.json")]) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        f"FAIL {traces}/rows/edited.json expected pass, got error at step 2 of 2: free: KeyError: 4"
    )


def test_cli_exits_1_when_an_expected_violation_is_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect = {"outcome": "violation", "invariant": "conservation"}
    write(tmp_path, "fixed.json", rows_trace(GENERATION_BUG, expect=expect))
    assert main([str(tmp_path / "fixed.json")]) == 1
    assert "expected [conservation], got pass (2 steps)" in capsys.readouterr().out


def test_cli_skips_a_trace_whose_implementation_is_unavailable_here_with_skip_missing(
    traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(traces, "rows/elsewhere.json", rows_trace(GENERATION_BUG, implementation="tests.nowhere:Pool"))
    assert main([str(traces), "--skip-missing"]) == 0
    out = capsys.readouterr().out
    assert f"SKIP {traces}/rows/elsewhere.json: tests.nowhere:Pool is unavailable here: " in out
    assert out.endswith("3 traces: 2 matched, 0 failed, 1 skipped, 0 missing, 0 invalid\n")


def test_cli_exits_2_on_a_trace_whose_implementation_is_unavailable_here(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(traces, "rows/elsewhere.json", rows_trace(GENERATION_BUG, implementation="tests.nowhere:Pool"))
    assert main([str(traces)]) == 2
    out = capsys.readouterr().out
    assert f"MISS {traces}/rows/elsewhere.json: tests.nowhere:Pool is unavailable here: " in out
    assert "(--skip-missing skips such traces)" in out
    assert out.endswith("3 traces: 2 matched, 0 failed, 0 skipped, 1 missing, 0 invalid\n")


def test_cli_exits_2_on_an_unreadable_trace_naming_file_and_field(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(rows_trace(GENERATION_BUG).dumps())
    document["steps"][1]["op"] = "reset"
    (traces / "rows" / "hand-edited.json").write_text(json.dumps(document))
    assert main([str(traces)]) == 2
    out = capsys.readouterr().out
    assert f"BAD  {traces}/rows/hand-edited.json: field 'steps[1].op': step 2: 'reset' is not an operation" in out
    assert "3 traces: 2 matched, 0 failed, 0 skipped, 0 missing, 1 invalid" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "argv",
    [
        ["nowhere/"],
        ["--target", "req_to_token=poolfuzz.pools:NoSuchPool"],
        ["--target", "rows=poolfuzz.pools:ReqToTokenPool"],
        ["--device", "tpu"],
    ],
)
def test_cli_exits_2_on_usage_errors(traces: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(traces), *argv] if argv[0].startswith("-") else argv) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cli_refuses_cuda_without_a_cuda_device(traces: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    assert main([str(traces), "--device", "cuda"]) == 2


def test_python_dash_m_harness_replay_runs_the_cli_and_returns_its_exit_status(tmp_path: Path) -> None:
    (tmp_path / "cut.json").write_text(rows_trace(GENERATION_BUG).dumps()[:40])
    done = python("-m", "poolfuzz.harness.traces.replay_cli", str(tmp_path), cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout.startswith(f"BAD  {tmp_path}/cut.json: field '(file)': ends early, the file looks truncated")
    assert "Traceback" not in done.stderr

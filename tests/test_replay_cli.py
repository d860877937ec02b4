"""``poolfuzz replay``: bounded input, signals, the fix workflow (--expect fixed, --mark-regression), --steps,
missing implementations and the help text."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.replay_cli import build_parser, main
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.pools import ReqToTokenPool

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
DEFAULT = "poolfuzz.pools:ReqToTokenPool"
BROKEN = "tests.test_corpus:ClearZeroesGeneration"
SAME = "tests.test_replay_cli:SamePool"
INVARIANT = "generation-monotonic"
GENERATION_BUG = [{"op": "alloc", "args": {"batch": [None]}}, {"op": "clear", "args": {}}]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class SamePool(ReqToTokenPool):
    """Our pool under another name: a fixed pool that is not the trace's own implementation."""


class SignalsItself(ReqToTokenPool):
    """Sends ``POOLFUZZ_TEST_SIGNAL`` to its own process while it is built: a signal in the middle of a replay."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        os.kill(os.getpid(), int(os.environ.get("POOLFUZZ_TEST_SIGNAL", signal.SIGINT)))


class StuckPool(ReqToTokenPool):
    """Blocks in native code with the GIL released and ``EINTR`` retried (libc ``system``), as a hung native
    call would: the Python-level handler cannot run until it returns, the watchdog must end the process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        Path(os.environ["POOLFUZZ_TEST_MARK"]).touch()
        ctypes.CDLL(None).system(b"exec sleep 20 </dev/null >/dev/null 2>&1")


def rows(steps: list[dict[str, Any]], *, implementation: str = DEFAULT, expect: dict[str, Any] | None = None,
         size: int = 3) -> Trace:
    return Trace("req_to_token", implementation, {"size": size, "max_context_len": 4, "device": "cpu"}, steps,
                 expect or {"outcome": "pass"})


def write(path: Path, trace: Trace | dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(trace.dumps() if isinstance(trace, Trace) else json.dumps(trace))
    return path


def replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv), exit_on_signal=False)
    return code, capsys.readouterr().out.splitlines()


def found_on(implementation: str) -> dict[str, Any]:
    """A fuzz finding's expectation: the violation on the implementation fuzzed."""
    return {"outcome": "violation", "invariant": INVARIANT, "implementation": implementation}


# ------------------------------------------------------------ bounded input
def huge_block_pool(tmp_path: Path) -> Path:
    document = json.loads((CORPUS / "block_pool").glob("*.json").__next__().read_text())
    document["config"]["num_gpu_blocks"] = 10**12
    return write(tmp_path / "huge.json", document)


def test_a_trillion_block_pool_is_an_invalid_trace_refused_at_once_in_bounded_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = huge_block_pool(tmp_path)
    main([str(CORPUS / "mamba_slots")], exit_on_signal=False)  # imports done, so the timing is the refusal alone
    capsys.readouterr()
    tracemalloc.start()
    started = time.perf_counter()
    code, out = replay(capsys, str(path))
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert code == 2
    assert out == [f"BAD  {path}: config.num_gpu_blocks = 1000000000000 exceeds the limit 1048576 for block_pool",
                   "1 trace: 0 matched, 0 failed, 0 skipped, 0 missing, 1 invalid"]
    assert elapsed < 0.5 and peak < 16 << 20


def test_the_trillion_block_trace_neither_hangs_nor_grows_a_real_process(tmp_path: Path) -> None:
    """The repro as a user runs it, under a memory cap far below what building the pool would take."""
    path = huge_block_pool(tmp_path)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (6 << 30, 6 << 30))

    done = subprocess.run([sys.executable, "-m", "poolfuzz.harness", "replay", str(path)], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=120, preexec_fn=cap, check=False)
    assert done.returncode == 2, done.stderr
    assert "exceeds the limit 1048576 for block_pool" in done.stdout and "Traceback" not in done.stderr


def test_a_negative_page_size_is_an_invalid_trace_not_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(next((CORPUS / "paged_kv").glob("*.json")).read_text())
    document["config"]["page_size"] = -4
    path = write(tmp_path / "negative.json", document)
    code, out = replay(capsys, str(path))
    assert code == 2
    assert out[0] == f"BAD  {path}: config.page_size = -4 is below the minimum 1 for paged_kv"
    assert not any(line.startswith("FAIL") for line in out)


def test_an_alloc_of_a_trillion_tokens_is_an_invalid_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = Trace("token_kv", "", {"size": 4, "device": "cpu"}, [{"op": "alloc", "args": {"need_size": 10**12}}])
    path = write(tmp_path / "alloc.json", trace)
    code, out = replay(capsys, str(path))
    assert code == 2
    assert out[0] == (f"BAD  {path}: steps[0].args.need_size = 1000000000000 exceeds the limit 2097152 "
                      "(in magnitude) for token_kv")


def test_an_unknown_config_key_is_an_invalid_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = Trace("hybrid_req_to_token", "", {"size": 2, "max_context_len": 4, "mamba_size": 2, "dtype": "float16",
                                               "device": "cpu"}, [])
    code, out = replay(capsys, str(write(tmp_path / "dtype.json", trace)))
    assert code == 2 and "config.dtype is not a config field of hybrid_req_to_token" in out[0]


def test_the_committed_corpus_replays_green_within_the_limits(capsys: pytest.CaptureFixture[str]) -> None:
    # corpus/found/ is git-ignored: what local fuzz runs saved, possibly under an older poolfuzz
    committed = [str(folder) for folder in sorted(CORPUS.iterdir()) if folder.is_dir() and folder.name != "found"]
    code, out = replay(capsys, *committed, "--skip-missing")
    assert code == 0, "\n".join(out)
    assert all(f" 0 {status}" in out[-1] for status in ("failed", "missing", "invalid")), out[-1]


# ------------------------------------------------------------------ signals
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_replay_prints_the_counts_so_far_and_exits_128_plus_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, signum: int, status: int
) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed in the main thread")
    monkeypatch.setenv("POOLFUZZ_TEST_SIGNAL", str(int(signum)))
    write(tmp_path / "a.json", rows(GENERATION_BUG))
    write(tmp_path / "b.json", rows(GENERATION_BUG, implementation="tests.test_replay_cli:SignalsItself"))
    write(tmp_path / "c.json", rows(GENERATION_BUG))
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    code, out = replay(capsys, str(tmp_path))
    assert code == status
    name = signal.Signals(signum).name
    assert out == [f"PASS {tmp_path}/a.json (2 steps)",
                   f"interrupted by {name}: 1 trace: 1 matched, 0 failed, 0 skipped, 0 missing, 0 invalid"]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def long_trace(folder: Path) -> Path:
    """Quick traces first, then one of 60 000 steps: seconds of replay, whatever the machine."""
    write(folder / "a-quick.json", rows(GENERATION_BUG))
    write(folder / "b-quick.json", rows([]))
    steps = [step for i in range(30_000) for step in ({"op": "alloc", "args": {"batch": [None]}},
                                                      {"op": "free", "args": {"handle": i}})]
    return write(folder / "c-long.json", rows(steps))


def run_until(argv: list[str], ready: Any, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``poolfuzz replay``; return once ``ready(lines)`` holds for the lines it printed."""
    child = subprocess.Popen([sys.executable, "-m", "poolfuzz.harness", "replay", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env or ENV, start_new_session=True)
    assert child.stdout is not None
    lines: list[str] = []
    while not ready(lines):
        line = child.stdout.readline()
        assert line, f"replay ended early: {lines} {child.stderr.read() if child.stderr else ''}"
        lines.append(line.rstrip("\n"))
    return child, lines


def stop(child: subprocess.Popen[str], signum: int) -> tuple[int, float, list[str]]:
    started = time.monotonic()
    child.send_signal(signum)
    out, _ = child.communicate(timeout=30)
    return child.returncode, time.monotonic() - started, out.splitlines()


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_replay_process_stops_within_a_second_of_a_signal(tmp_path: Path, signum: int, status: int) -> None:
    long_trace(tmp_path)
    child, lines = run_until([str(tmp_path)], lambda lines: len(lines) == 2)
    time.sleep(0.3)  # into the long trace (loading it alone takes longer)
    code, elapsed, rest = stop(child, signum)
    assert code == status and elapsed < 1.0
    assert lines[0].startswith("PASS") and lines[1].startswith("PASS")
    name = signal.Signals(signum).name
    assert rest == [f"interrupted by {name}: 2 traces: 2 matched, 0 failed, 0 skipped, 0 missing, 0 invalid"]


def test_a_replay_stuck_in_native_code_is_ended_by_the_watchdog(tmp_path: Path) -> None:
    mark = tmp_path / "stuck"
    write(tmp_path / "a.json", Trace("mamba_slots", "", {"size": 2, "device": "cpu"}, []))
    write(tmp_path / "b.json", rows([], implementation="tests.test_replay_cli:StuckPool"))
    child, first = run_until([str(tmp_path)], lambda lines: len(lines) == 1,
                             env={**ENV, "POOLFUZZ_TEST_MARK": str(mark)})
    assert first == [f"PASS {tmp_path}/a.json (0 steps)"]
    try:
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        code, elapsed, rest = stop(child, signal.SIGTERM)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the orphaned sleep
        except ProcessLookupError:
            pass
    assert code == 143 and elapsed < 1.0
    assert rest == ["interrupted by SIGTERM: 1 trace: 1 matched, 0 failed, 0 skipped, 0 missing, 0 invalid"]


# ---------------------------------------------------------- --expect fixed
def test_a_fixed_pool_fails_a_plain_replay_and_passes_expect_fixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The trace found the bug on our pool (its own implementation); our pool is now fixed."""
    path = write(tmp_path / "found.json", rows(GENERATION_BUG, expect=found_on(DEFAULT)))
    code, out = replay(capsys, str(path))
    assert code == 1 and out[0] == f"FAIL {path} expected [{INVARIANT}], got pass (2 steps)"
    code, out = replay(capsys, str(path), "--expect", "fixed")
    assert code == 0
    assert out[0] == f"FIXED {path}: [{INVARIANT}] no longer reproduces (2 steps)"


def test_expect_fixed_on_a_pool_still_broken_says_not_fixed_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "found.json", rows([*GENERATION_BUG, GENERATION_BUG[0]], implementation=BROKEN,
                                               expect=found_on(BROKEN)))
    code, out = replay(capsys, str(path), "--expect", "fixed")
    assert code == 1 and out[0] == f"NOT FIXED {path}: still [{INVARIANT}] at step 3 of 3"


def test_expect_fixed_leaves_traces_that_expect_a_pass_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "seeded.json", rows(GENERATION_BUG, expect=found_on(BROKEN)))
    code, out = replay(capsys, str(path), "--expect", "fixed")
    assert code == 0 and out[0] == f"PASS {path} (2 steps)"


# -------------------------------------------------------- regression traces
def test_mark_regression_with_fixed_by_records_both_sides_and_replay_checks_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "found.json", rows(GENERATION_BUG, implementation=BROKEN, expect=found_on(BROKEN)))
    code, out = replay(capsys, "--mark-regression", str(path), "--fixed-by", DEFAULT)
    assert code == 0
    assert out[0] == (f"MARKED {path}: regression trace of [{INVARIANT}]: passes on {DEFAULT}; "
                      f"the old {BROKEN} still breaks it at teardown")
    trace = load_trace(path)
    assert trace.implementation == DEFAULT
    assert trace.expect == {"outcome": "pass", "regression": {"invariant": INVARIANT, "implementation": BROKEN}}
    code, out = replay(capsys, str(path))
    assert code == 0
    assert out[0] == f"PASS {path} (2 steps) [regression: the old {BROKEN} still breaks [{INVARIANT}] at teardown]"
    code, out = replay(capsys, str(path), "--target", f"req_to_token={BROKEN}")
    assert code == 0 and out[0].startswith(f"OK   {path} reproduced expected [{INVARIANT}] at teardown")
    assert replay_trace(trace, target=SAME).outcome == "pass"


def test_mark_regression_of_a_pool_fixed_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "found.json", rows(GENERATION_BUG, expect=found_on(DEFAULT)))
    code, out = replay(capsys, "--mark-regression", str(path))
    assert code == 0
    assert out[0] == f"MARKED {path}: regression trace of [{INVARIANT}]: passes on {DEFAULT}; fixed in place"
    code, out = replay(capsys, str(path))
    assert code == 0 and out[0] == f"PASS {path} (2 steps) [regression of [{INVARIANT}], fixed in place]"


def test_mark_regression_refuses_a_pool_that_is_not_fixed_and_leaves_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "found.json", rows(GENERATION_BUG, implementation=BROKEN, expect=found_on(BROKEN)))
    before = path.read_bytes()
    code, out = replay(capsys, "--mark-regression", str(path))
    assert code == 1
    assert out[0] == f"NOT FIXED {path}: still [{INVARIANT}] at teardown on {BROKEN}; file unchanged"
    assert path.read_bytes() == before


def test_mark_regression_refuses_an_old_pool_that_no_longer_breaks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "found.json", rows(GENERATION_BUG, expect=found_on(DEFAULT)))
    before = path.read_bytes()
    code, out = replay(capsys, "--mark-regression", str(path), "--fixed-by", SAME)
    assert code == 1 and "no longer breaks [generation-monotonic]" in out[0] and "file unchanged" in out[0]
    assert path.read_bytes() == before


def test_a_regression_trace_whose_old_pool_passes_now_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    regression = {"outcome": "pass", "regression": {"invariant": INVARIANT, "implementation": SAME}}
    path = write(tmp_path / "r.json", rows(GENERATION_BUG, expect=regression))
    code, out = replay(capsys, str(path))
    assert code == 1
    assert out[0] == f"FAIL {path} regression: expected [{INVARIANT}] on the old {SAME}, got pass (2 steps)"


def test_a_regression_trace_whose_old_pool_is_gone_still_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    regression = {"outcome": "pass", "regression": {"invariant": INVARIANT, "implementation": "tests.gone:Pool"}}
    path = write(tmp_path / "r.json", rows(GENERATION_BUG, expect=regression))
    code, out = replay(capsys, str(path))
    assert code == 0
    assert out[0] == f"PASS {path} (2 steps) [regression: the old tests.gone:Pool is unavailable here, not checked]"


def test_mark_regression_skips_traces_with_nothing_to_mark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "a.json", rows(GENERATION_BUG))
    code, out = replay(capsys, "--mark-regression", str(tmp_path))
    assert code == 0 and out[0] == f"SKIP {tmp_path}/a.json: records no violation, nothing to mark"


@pytest.mark.parametrize("argv", [
    ["--fixed-by", DEFAULT],
    ["--mark-regression"],
    ["--mark-regression", "--target", f"req_to_token={DEFAULT}"],
    ["--mark-regression", "--expect", "fixed"],
    ["--mark-regression", "--fixed-by", "poolfuzz.pools:NoSuchPool"],
    ["--expect", "later"],
])
def test_fix_workflow_usage_errors_exit_2(tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "t.json", rows(GENERATION_BUG))
    paths = [] if argv == ["--mark-regression"] else [str(path)]
    assert main([*argv, *paths], exit_on_signal=False) == 2
    assert "Traceback" not in capsys.readouterr().err


# -------------------------------------------------------- --steps, missing
def test_steps_are_printed_whatever_the_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "a.json", rows(GENERATION_BUG))
    write(tmp_path / "b.json", rows([]))
    code, out = replay(capsys, str(tmp_path), "--steps")
    assert code == 0
    assert out[:5] == [f"PASS {tmp_path}/a.json (2 steps)", "    1. alloc(batch=[None])", "    2. clear()",
                       f"PASS {tmp_path}/b.json (0 steps)", "  (no steps)"]


def test_a_missing_implementation_is_exit_2_unless_skip_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "a.json", rows(GENERATION_BUG, implementation="tests.nowhere:Pool"))
    code, out = replay(capsys, str(path))
    assert code == 2 and out[0].startswith(f"MISS {path}: tests.nowhere:Pool is unavailable here")
    code, out = replay(capsys, str(path), "--skip-missing")
    assert code == 0 and out[0].startswith(f"SKIP {path}: tests.nowhere:Pool is unavailable here")


# --------------------------------------------------------------------- help
def test_the_help_names_the_command_and_reads_as_plain_words() -> None:
    text = build_parser().format_help()
    assert text.startswith("usage: poolfuzz replay ")
    assert "``" not in text and ":func:" not in text
    for option in ("--expect", "--skip-missing", "--mark-regression", "--fixed-by", "--steps"):
        assert option in text

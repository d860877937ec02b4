"""What a new user meets in a first run (issue 44's smaller items): a target module in the project
they run from, a plugin failure's numbers beside its shrunk steps, and the like.

Each test reproduces what was seen from a scratch folder holding a tiny project of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings as Settings

from poolfuzz.harness.judge.families import UnknownTargetError, load_factory
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.machines import make_machine, run_machine
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.pools import ReqToTokenPool
from tests.conftest import found_settings
from tests.processes import python

REPO = Path(__file__).resolve().parents[1]

SCRATCH_POOL = '''
from poolfuzz.pools.req_to_token import ReqToTokenPool


class ScratchPool(ReqToTokenPool):
    """Our pool under the scratch project's own name."""
'''


class LeaksEveryFreedRow(ReqToTokenPool):
    """``free`` takes the row it gave back off the free list again."""

    def free(self, req):  # type: ignore[no-untyped-def]
        super().free(req)
        self.free_slots.pop()


def _scratch_project(root: Path) -> Path:
    """A project of one module, ``scratchpool_first_run.py``, and nothing that puts it on ``sys.path``."""
    project = root / "project"
    project.mkdir()
    (project / "scratchpool_first_run.py").write_text(SCRATCH_POOL)
    return project


def _without_cwd_env() -> dict[str, str]:
    """This environment, minus anything that would put the project on the path or pick another profile."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON", "HYPOTHESIS_", "POOLFUZZ_"))}
    env.update(CI="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=False, cwd=cwd, env=_without_cwd_env(), capture_output=True, text=True, timeout=240)


def _shown(result: subprocess.CompletedProcess[str]) -> str:
    return f"rc={result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"


# ------------------------------------------------------------ a target module in the current directory
def test_a_target_module_in_the_current_directory_resolves_without_it_on_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _scratch_project(tmp_path)
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(project))])
    monkeypatch.delitem(sys.modules, "scratchpool_first_run", raising=False)
    factory = load_factory("scratchpool_first_run:ScratchPool")
    assert factory.__module__ == "scratchpool_first_run" and isinstance(factory, type) and issubclass(factory, ReqToTokenPool)
    assert sys.path[-1] == str(project)  # appended: the installed packages keep their precedence
    sys.modules.pop("scratchpool_first_run", None)


def test_a_module_that_is_nowhere_is_still_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_scratch_project(tmp_path))
    before = list(sys.path)
    with pytest.raises(UnknownTargetError, match="cannot import 'no_such_module_here'"):
        load_factory("no_such_module_here:Pool")
    assert sys.path == before  # nothing in the directory by that name: the path is left alone


def test_the_poolfuzz_command_fuzzes_and_replays_a_target_module_from_the_project_it_runs_in(tmp_path: Path) -> None:
    """The console script puts its own folder on ``sys.path``, not the current one (``poolfuzz`` does)."""
    project = _scratch_project(tmp_path)
    poolfuzz = Path(sys.executable).parent / "poolfuzz"
    if not poolfuzz.is_file():
        pytest.skip(f"no poolfuzz console script beside {sys.executable}")
    target = "req_to_token=scratchpool_first_run:ScratchPool"
    fuzzed = _run(
        [str(poolfuzz), "fuzz", "--target", target, "--seconds", "2", "--workers", "1", "--report", "report.json", "--corpus", "found"],
        project,
    )
    assert fuzzed.returncode == 0, _shown(fuzzed)
    assert "cannot import" not in fuzzed.stderr, _shown(fuzzed)

    committed = sorted((REPO / "corpus" / "req_to_token").glob("*.json"))[0]
    trace = json.loads(committed.read_text())
    trace.update(implementation="scratchpool_first_run:ScratchPool", expect={"outcome": "pass"})
    (project / "trace.json").write_text(json.dumps(trace))
    replayed = _run([str(poolfuzz), "replay", "trace.json"], project)
    assert replayed.returncode == 0 and replayed.stdout.startswith("PASS "), _shown(replayed)  # was MISS, exit 2


def test_plain_pytest_runs_a_poolfuzz_target_from_the_project_it_runs_in(tmp_path: Path) -> None:
    """``python -P -m pytest`` is plain ``pytest``: the current directory is not put on ``sys.path``."""
    project = _scratch_project(tmp_path)
    load = [] if _plugin_registered() else ["-p", "poolfuzz.harness.pytest_plugin"]
    result = _run(
        [
            sys.executable,
            "-P",
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *load,
            "-q",
            "--poolfuzz-target",
            "req_to_token=scratchpool_first_run:ScratchPool",
            "--poolfuzz-max-examples",
            "3",
            "--poolfuzz-steps",
            "5",
        ],
        project,
    )
    assert result.returncode == 0, _shown(result)  # was a usage error (exit 4): cannot import the module
    assert "1 passed" in result.stdout, _shown(result)


def _plugin_registered() -> bool:
    import importlib.metadata

    return any(ep.name == "poolfuzz" for ep in importlib.metadata.entry_points(group="pytest11"))


# ------------------------------------------------------------ a failure's numbers are its shrunk run's
def _found_long() -> Settings:
    """Deterministic, hypothesis's own shrinking off: the run as found is longer than the shrunk trace."""
    return found_settings(examples=60, steps=25)


def test_a_shrunk_failure_shows_the_numbers_of_the_shrunk_run_beside_its_steps(tmp_path: Path) -> None:
    machine = make_machine("req_to_token", f"{__name__}:LeaksEveryFreedRow")
    with pytest.raises(InvariantViolation) as caught:
        run_machine(machine, settings=_found_long(), corpus=tmp_path)
    text = str(caught.value)
    trace = load_trace(caught.value.trace_path)  # type: ignore[arg-type]
    replayed = replay_trace(trace)
    assert replayed.outcome == "violation" and replayed.invariant == caught.value.invariant_id
    lines = text.splitlines()
    numbers = [f"    {k} = {v!r}" for k, v in replayed.numbers.items()]
    assert lines[: 1 + len(numbers)] == [f"[{replayed.invariant}] {replayed.message}", *numbers], text
    assert f"at step {replayed.step} of the shrunk trace (the numbers are its run's)" in text
    assert f"shrunk by replay to {len(trace.steps)} step" in text
    assert trace.steps_text() in text


# ------------------------------------------------------------ outputs into folders that do not exist yet
def test_a_dashboard_into_a_missing_folder_says_in_one_line_that_the_folder_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from poolfuzz.harness import cli

    monkeypatch.chdir(tmp_path)
    args = cli.build_parser().parse_args(["fuzz", "--dashboard", "out/run.html", "--report", "kept/r.json", "--corpus", "traces"])
    cli.check_outputs(args, args.report)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "poolfuzz: --dashboard out/run.html: out does not exist; it is made when the run first writes there",
        "poolfuzz: --report kept/r.json: kept does not exist; it is made when the run first writes there",
        "poolfuzz: --corpus traces: traces does not exist; it is made when the run first writes there",
    ]
    assert not (tmp_path / "out").exists()  # the check makes nothing: a refused run leaves no folders behind


def test_outputs_into_existing_folders_and_the_default_corpus_are_made_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from poolfuzz.harness import cli

    monkeypatch.chdir(tmp_path)
    args = cli.build_parser().parse_args(["fuzz", "--dashboard", "run.html"])
    cli.check_outputs(args, Path("reports") / "r.json")  # the default report's folder: a fresh clone has none
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------ replay --across says what it fetches
def test_replay_across_prints_a_line_for_each_release_before_it_downloads_or_replays_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A download of a release takes minutes; the table comes at the end, so each release is announced on stderr."""
    import poolfuzz.harness.traces.across as across

    finding = REPO / "corpus" / "upstream" / "mamba_slots-6a8cbaad60810966.json"
    (tmp_path / "sglang-0.5.22" / "sglang").mkdir(parents=True)  # 0.5.22 is cached, 0.5.21 is not
    fetched: list[str] = []

    def fetch(package: str, version: str, cache: Path) -> Path:
        fetched.append(version)
        raise OSError(f"no wheel of {package}=={version} here")

    monkeypatch.setattr(across, "index_versions", lambda package: ["0.5.20", "0.5.21", "0.5.22", "0.5.23"])
    monkeypatch.setattr(across, "fetch_release", fetch)
    assert across.main_across([finding], "sglang==0.5.21..0.5.22", tmp_path) == 1  # neither could be had
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"replay --across: sglang 0.5.21 (1 of 2): downloading into {tmp_path}, then 1 trace",
        f"replay --across: sglang 0.5.22 (2 of 2): cached in {tmp_path}, then 1 trace",
    ]
    assert fetched == ["0.5.21", "0.5.22"] and "not available on 0.5.21-0.5.22" in out


# ------------------------------------------------------------ an engine finding: its realistic trace and its line
def test_an_engine_finding_records_its_shrunk_trace_as_its_realistic_one(tmp_path: Path) -> None:
    """The engine family declares no floors (its configs are server shapes): ``"realistic": null`` was the report's field."""
    from poolfuzz.harness.fuzz.protocol import RealisticTrace
    from poolfuzz.harness.fuzz.realistic import realistic_note
    from poolfuzz.harness.judge.trace import Trace

    shrunk = Trace(family="engine", implementation="poolfuzz.harness.upstream:Engine", config={}, steps=[{"op": "idle", "args": {}}] * 3)
    saved = tmp_path / "engine-1.json"

    def note_for(implementation: str, invariant: str) -> tuple[str, RealisticTrace | None]:
        """The note of the same shrunk engine trace, found against ``implementation``."""
        return realistic_note(
            "engine", implementation, invariant_id=invariant, trace=shrunk, seed=0, corpus=tmp_path, shrunk=(saved, shrunk)
        )

    note, realistic = note_for("poolfuzz.harness.upstream:Engine", "scheduler-progress")
    assert realistic is not None and (realistic.trace, realistic.steps, realistic.invariant) == (str(saved), 3, "scheduler-progress")
    assert note == "\n  realistic trace: the shrunk one (engine declares no floors: every shape and step is a server's)"
    # our own pools are judged on their minimal traces: nothing to record
    assert note_for("poolfuzz.pools:ReqToTokenPool", "conservation") == ("", None)


def test_a_finding_reported_without_a_sighting_first_is_announced_with_the_failure_found_line() -> None:
    """The walk, or the example database replayed at the start, reports a finding already shrunk: it printed ``FAILURE engine:``."""
    from poolfuzz.harness.fuzz.findings import Findings
    from poolfuzz.harness.fuzz.protocol import FailureFound
    from poolfuzz.harness.fuzz.report import TargetStats

    notes: list[str] = []
    findings = Findings({"engine": TargetStats("engine", "engine", "poolfuzz.harness.upstream:Engine")}, notes.append)
    message = FailureFound(
        target="engine",
        family="engine",
        implementation="poolfuzz.harness.upstream:Engine",
        kind="violation",
        invariant="scheduler-progress",
        trace="corpus/found/engine/engine-1.json",
        steps=4,
        message="[scheduler-progress] nothing ran\n    waiting = 1",
        shrunk=True,
        round=0,
        seed=7,
        realistic=None,
    )
    assert findings.found(message, worker="w0", after_s=0.4)
    assert notes[0].splitlines()[0] == "FAILURE FOUND engine [scheduler-progress] after 0.4 s of fuzzing: [scheduler-progress] nothing ran"
    assert "  shrunk trace (4 steps): corpus/found/engine/engine-1.json" in notes[0].splitlines()


# ------------------------------------------------------------ the suite's summary: skips grouped, not repeated
def test_the_suite_summary_groups_repeated_skip_reasons_into_one_line_each() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the CUDA tests run instead of skipping")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = python(
        "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "tests/test_kv_allocator.py", "-k", "cuda", cwd=REPO, env=env, timeout=240
    )
    assert result.returncode == 0, _shown(result)
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("SKIPPED [")], _shown(result)  # no line per skipping test
    grouped = [line for line in lines if line.strip().endswith("needs a CUDA device")]
    assert len(grouped) == 1 and int(grouped[0].split()[0]) > 1, _shown(result)  # one line, with its count

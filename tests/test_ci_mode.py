"""``poolfuzz ci`` over a copy of the installed SGLang 0.5.23 sources (issue 44, item 3).

A pristine copy passes (exit 0, its known findings recorded); the same tree with one planted bug in its
memory glue (``TokenToKVPoolAllocator.free`` dropping an index) fails (exit 1) with the new trace kept under
the artifacts folder and a failing JUnit testcase.  The budget is a tenth of the CI default over two targets,
so each run takes seconds; the command runs as CI runs it, in a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.ci import command
from poolfuzz.harness.ci.plan import CiTarget, target_seed
from poolfuzz.harness.ci.records import WalkRecord
from poolfuzz.harness.upstream import sglang_files
from tests.processes import python
from tests.test_upstream_versions import SGLANG_MISSING, copy_sglang

REPO = Path(__file__).resolve().parents[1]
needs_sglang = pytest.mark.skipif(SGLANG_MISSING is not None, reason=f"installed SGLang unavailable: {SGLANG_MISSING}")
TOKEN_FREE = "        if free_index.numel() == 0:\n            return\n\n        if self.free_group is None:"
PLANTED = "        if free_index.numel() == 0:\n            return\n        free_index = free_index[1:]  # planted: one index is never freed\n\n        if self.free_group is None:"
TARGETS = ["--target", "token_kv", "--target", "mamba_slots"]


def ci(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (sglang_files.SOURCE_ENV, "POOLFUZZ_VLLM_SRC")}
    argv = ["-m", "poolfuzz.harness", "ci", "--sglang-src", str(source), "--scale", "0.1", "--out", str(out), *TARGETS, *extra]
    return python(*argv, cwd=REPO, env=env, timeout=240)


def junit_cases(path: Path) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in ET.parse(path).getroot().iter("testcase")}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if SGLANG_MISSING is not None:
        pytest.skip(f"installed SGLang unavailable: {SGLANG_MISSING}")
    base = tmp_path_factory.mktemp("sglang-copies")
    pristine, planted = copy_sglang(base / "pristine"), copy_sglang(base / "planted")
    token = planted / "sglang" / "srt" / "mem_cache" / "allocator" / "token.py"
    text = token.read_text()
    assert text.count(TOKEN_FREE) == 1, "TokenToKVPoolAllocator.free moved: re-plant the bug"
    token.write_text(text.replace(TOKEN_FREE, PLANTED))
    return {"pristine": pristine, "planted": planted}


@needs_sglang
def test_pristine_copy_passes_with_known_findings_recorded(sources: dict[str, Path], tmp_path: Path) -> None:
    done = ci(sources["pristine"], tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["schema"] == "poolfuzz-ci/1" and report["exit_status"] == 0
    assert report["copies"][0]["site"] == str(sources["pristine"])
    assert report["totals"]["new"] == 0 and report["totals"]["replay_failed"] == 0
    assert report["totals"]["replayed"] >= 7  # corpus/upstream and the engine's committed trace
    walked = {t["target"]: t for t in report["targets"]}
    assert set(walked) == {"token_kv=poolfuzz.harness.upstream:TokenKV", "mamba_slots=poolfuzz.harness.upstream:MambaSlots"}
    assert all(t["steps"] == t["steps_budget"] == 2000 and not t["cut_off"] for t in walked.values())
    mamba = walked["mamba_slots=poolfuzz.harness.upstream:MambaSlots"]
    assert [f["known"]["key"] for f in mamba["findings"]] == ["mamba-clear-keeps-reservation"]
    assert not list((tmp_path / "out").glob("new/**/*.json"))
    cases = junit_cases(tmp_path / "out" / "junit.xml")
    assert not any(case.find("failure") is not None for case in cases.values())
    assert "corpus/upstream/mamba_slots-6a8cbaad60810966.json" in cases
    assert "KNOWN [clear-restores] finding 2" in (cases["mamba_slots=poolfuzz.harness.upstream:MambaSlots"].findtext("system-out") or "")


@needs_sglang
def test_planted_bug_in_the_memory_glue_fails_with_its_trace(sources: dict[str, Path], tmp_path: Path) -> None:
    done = ci(sources["planted"], tmp_path / "out")
    assert done.returncode == 1, done.stdout + done.stderr
    report: dict[str, Any] = json.loads((tmp_path / "out" / "report.json").read_text())
    token = next(t for t in report["targets"] if t["family"] == "token_kv")
    [finding] = token["findings"]
    assert finding["kind"] == "violation" and finding["known"] is None
    kept = Path(finding["artifact"])
    assert kept.is_file() and kept.parent == tmp_path / "out" / "new" / "token_kv"
    assert report["new_traces"] == [str(kept)]
    trace = json.loads(kept.read_text())
    assert trace["implementation"] == "poolfuzz.harness.upstream:TokenKV" and trace["expect"]["outcome"] == "violation"
    assert finding["replay"] == f"poolfuzz --sglang-src {sources['planted']} replay {kept}"
    failure = junit_cases(tmp_path / "out" / "junit.xml")["token_kv=poolfuzz.harness.upstream:TokenKV"].find("failure")
    assert failure is not None and str(kept) in (failure.text or "")
    assert "new finding" in failure.get("message", "")
    assert "NEW [" in done.stdout and "1 new finding(s): exit 1" in done.stdout


@needs_sglang
def test_same_seed_same_walk() -> None:
    """The schedule is fixed by --seed and the target: two walks of one target take the same steps and find the
    same known finding, shrunk the same way (only the seconds differ)."""
    from poolfuzz.harness.ci.walks import walk_target

    target = CiTarget(
        "mamba_slots", "poolfuzz.harness.upstream:MambaSlots", "sglang", target_seed(0, "poolfuzz.harness.upstream:MambaSlots"), 600
    )
    runs: list[WalkRecord] = []
    for corpus in ("a", "b"):
        run = walk_target(target, f"{os.environ.get('TMPDIR', '/tmp')}/poolfuzz-ci-seed-{os.getpid()}-{corpus}", None, 120.0)
        del run["seconds"]
        for finding in run["findings"]:
            assert finding["trace"] is not None
            finding["trace"] = Path(finding["trace"]).name
        runs.append(run)
    assert runs[0] == runs[1] and runs[0]["steps"] == 600
    assert target_seed(0, "poolfuzz.harness.upstream:MambaSlots") != target_seed(1, "poolfuzz.harness.upstream:MambaSlots")


def usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert command.main(argv) == 2
    return capsys.readouterr().err


def test_bad_input_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from poolfuzz.harness.cli import main as cli_main

    monkeypatch.delenv(sglang_files.SOURCE_ENV, raising=False)
    monkeypatch.delenv("POOLFUZZ_VLLM_SRC", raising=False)
    assert "name the checkout" in usage(["--out", str(tmp_path)], capsys)
    assert "unknown distribution 'tensorrt'" in usage(["--distribution", "tensorrt"], capsys)
    assert cli_main(["ci", "--sglang-src", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    monkeypatch.setenv(sglang_files.SOURCE_ENV, str(tmp_path))  # a folder without sglang/srt
    assert "poolfuzz: error:" in usage(["--out", str(tmp_path / "out")], capsys)
    monkeypatch.delenv(sglang_files.SOURCE_ENV)
    if SGLANG_MISSING is None:
        assert "--traces" in usage(["--distribution", "sglang", "--traces", str(tmp_path / "nope")], capsys)
        assert "--target paged" in usage(["--distribution", "sglang", "--target", "paged"], capsys)


def test_docs_workflow_runs_the_command_as_written() -> None:
    """docs/ci.md's workflow: its ``poolfuzz ci`` line parses, points at the checked-out engine and uploads ``--out``."""
    text = (REPO / "docs" / "ci.md").read_text()
    workflow = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    [run] = [line.strip().removeprefix("run: ") for line in workflow.splitlines() if line.strip().startswith("run: poolfuzz ci")]
    argv = run.split()[2:]
    source = argv.pop(argv.index("--sglang-src") + 1)
    argv.remove("--sglang-src")
    args = command.build_parser().parse_args(argv)
    assert source == "sglang/python" and "path: sglang\n" in workflow
    assert f"path: {args.out}/" in workflow and f"report_paths: {args.out}/junit.xml" in workflow
    assert "pip install -e './poolfuzz[upstream]'" in workflow  # editable: the committed corpus comes with it

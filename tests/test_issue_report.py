"""``poolfuzz report TRACE`` (issue 44): each committed upstream finding's report is written and its standalone
reproduction (generated from the trace for an allocator target, the committed hand-written one for the engine's),
run with nothing of poolfuzz imported, exits 1 on the installed SGLang 0.5.23; bad input is one line and exit
status 2.  ``tests/test_repro_script.py`` runs the script generated from every committed upstream trace."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from poolfuzz.harness.cli import run_command
from poolfuzz.harness.traces.issue_report import ReportError, build_report, render, write_repro
from poolfuzz.harness.upstream.known import KNOWN_FILE, load_known
from poolfuzz.harness.upstream.sglang_modules import unavailable_reason
from poolfuzz.harness.upstream.vllm_files import vllm_unavailable_reason
from tests.processes import python

REPO = Path(__file__).resolve().parent.parent
SGLANG_MISSING = unavailable_reason()
VLLM_MISSING = vllm_unavailable_reason()
needs_sglang = pytest.mark.skipif(SGLANG_MISSING is not None, reason=f"SGLang unavailable: {SGLANG_MISSING}")
FINDINGS = {finding.key: KNOWN_FILE.parent / finding.traces[0] for finding in load_known() if finding.traces}


def _installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


@needs_sglang
@pytest.mark.skipif(_installed_version() != "0.5.23", reason="the reproductions are written for sglang 0.5.23")
@pytest.mark.parametrize("key", sorted(FINDINGS))
def test_each_committed_findings_report_carries_a_reproduction_that_fails_on_0_5_23(key: str, tmp_path: Path) -> None:
    report = build_report(FINDINGS[key], check_script=False)  # the command's own run of it: the CLI test below
    text = render(report)
    finding = report.finding
    assert finding is not None and finding.key == key
    assert text.startswith(f"# {finding.title}\n")
    for section in ("Classification and reachability", "Server arguments", "Versions affected", "as upstream calls", "judges'"):
        assert section in text
    assert "-> upstream `" in text, "each step names the upstream call it makes"
    script = write_repro(report, tmp_path / "repro" / "repro.py")
    if finding.family != "engine":  # an allocator: the script generated from the trace, in the issue and in the file
        assert report.script is not None and f"```python\n{report.script.rstrip()}\n```" in text, report.not_generated
        assert script.read_text() == report.script and not (script.parent / "_wheel_allocators.py").exists()
        return  # tests/test_repro_script.py runs the script generated from each committed trace, this one included
    assert report.script is None and "No reproduction is generated for this trace" in text
    assert (script.parent / "_wheel_allocators.py").is_file(), "the committed reproduction with its loader beside it"
    imports = [line for line in script.read_text().splitlines() if line.lstrip().startswith(("import ", "from "))]
    assert not [line for line in imports if "poolfuzz" in line or "harness" in line], imports
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "POOLFUZZ_SGLANG_SRC")}
    done = python("-I", str(script), cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 1 and "REPRODUCED" in done.stdout, done.stdout + done.stderr


@needs_sglang
def test_the_report_command_writes_the_issue_and_the_reproduction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, repro = tmp_path / "issue.md", tmp_path / "repro.py"
    trace = FINDINGS["mamba-clear-keeps-reservation"]
    assert run_command(["report", str(trace), "--out", str(out), "--repro", str(repro)]) == 0
    issue = out.read_text()
    assert issue.startswith("# MambaSlotAllocator.clear() keeps an open group's reservation")
    assert "Checked here, on upstream SGLang 0.5.23: it exits 1: `REPRODUCED: [clear-restores] at step 2: clear()" in issue
    assert repro.read_text().startswith("#!/usr/bin/env python3\n") and "def reproduce()" in repro.read_text()
    assert not (tmp_path / "_wheel_allocators.py").exists(), "the generated script carries its loader"


@needs_sglang
def test_a_generated_script_that_does_not_show_the_violation_gives_way_to_the_committed_one(tmp_path: Path) -> None:
    report = build_report(FINDINGS["paged-decode-page-size-1"], check_script=False)
    assert report.repro is not None
    missed = replace(report, checked=(0, "not reproduced: every check held"))
    text = render(missed)
    assert "it exits 0: `not reproduced: every check held`" in text and "do not show what poolfuzz's driver saw" in text
    assert f"```python\n{report.repro.read_text().rstrip()}\n```" in text, "the hand-written reproduction, in full"
    assert write_repro(missed, tmp_path / "repro.py").read_text() == report.repro.read_text()


@pytest.mark.skipif(VLLM_MISSING is not None, reason=f"upstream vLLM unavailable: {VLLM_MISSING}")
def test_a_target_no_script_is_generated_for_says_why_and_what_one_needs(tmp_path: Path) -> None:
    trace = json.loads((REPO / "corpus" / "block_pool" / "block_pool-3aebae9964e102ae.json").read_text())
    trace |= {"implementation": "poolfuzz.harness.upstream:VllmBlockPool", "expect": {"outcome": "pass"}}
    path = tmp_path / "block_pool.json"
    path.write_text(json.dumps(trace))
    report = build_report(path)
    text = render(report).split("## Standalone reproduction")[1]
    assert report.script is None and report.checked is None and "VllmBlockPool is not an upstream allocator target" in text
    assert "One needs:" in text and "harness/upstream/vllm_files.py" in text
    with pytest.raises(ReportError, match="no standalone reproduction for this trace"):
        write_repro(report, tmp_path / "repro.py")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such file"),
        ("{}", ""),
        ((REPO / "corpus" / "req_to_token" / "req_to_token-4ac078b45798908c.json").read_text(), "no upstream target"),
    ],
    ids=["a missing file", "not a trace", "a trace of our own pool"],
)
def test_bad_input_is_one_line_and_exit_status_2(
    content: str | None, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_text(content)
    assert run_command(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("report: ") and says in err

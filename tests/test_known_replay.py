"""Known upstream findings in replay and the pytest plugin (issue 44): a known violation is labelled with its number
and key, an unexpected one is KNOWN (exit 0) unless --strict, a known finding's trace that stops reproducing on a
fixed copy is POSSIBLY FIXED, and the plugin records a known finding and passes unless --poolfuzz-strict."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.pytest_plugin import KNOWN_PROPERTY, TRACE_PROPERTY, judge_violation
from poolfuzz.harness.traces.replay_cli import main as replay_main
from poolfuzz.harness.upstream.sglang_modules import unavailable_reason
from tests.processes import python

REPO = Path(__file__).resolve().parent.parent
PAGED = REPO / "corpus" / "upstream" / "paged_kv-4032333a04fac5e9.json"
MAMBA = REPO / "corpus" / "upstream" / "mamba_slots-6a8cbaad60810966.json"
SGLANG_MISSING = unavailable_reason()
needs_sglang = pytest.mark.skipif(SGLANG_MISSING is not None, reason=f"SGLang unavailable: {SGLANG_MISSING}")


def _unexpected(tmp_path: Path) -> Path:
    """The paged finding's trace, expecting a pass: its violation is one nobody recorded for this file."""
    data = json.loads(PAGED.read_text())
    data["expect"] = {"outcome": "pass"}
    data["provenance"].pop("finding", None)
    path = tmp_path / "unexpected.json"
    path.write_text(json.dumps(data))
    return path


@needs_sglang
def test_replay_labels_a_committed_trace_with_its_known_finding(capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main([str(PAGED)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("OK ") and "known finding 1 (paged-decode-page-size-1, SGLang" in line


@needs_sglang
def test_an_unexpected_violation_that_is_a_known_finding_is_known_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _unexpected(tmp_path)
    assert replay_main([str(path)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"KNOWN {path}: [empty-pool-guard]") and "known finding 1" in line


@needs_sglang
def test_strict_replay_fails_on_a_known_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main([str(_unexpected(tmp_path)), "--strict"]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("FAIL ") and "--strict: a known finding fails" in line


def test_replay_refuses_a_missing_known_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main([str(PAGED), "--known", str(tmp_path / "none.toml")]) == 2
    assert "--known" in capsys.readouterr().err


@needs_sglang
def test_a_known_finding_that_no_longer_reproduces_on_a_fixed_copy_is_possibly_fixed(tmp_path: Path) -> None:
    from tests.test_upstream_versions import copy_sglang

    site = copy_sglang(tmp_path / "src")
    mamba = site / "sglang" / "srt" / "mem_cache" / "allocator" / "mamba.py"
    text = mamba.read_text()
    assert "    def clear(self):\n" in text, "upstream's clear() moved: the planted fix needs updating"
    mamba.write_text(text.replace("    def clear(self):\n", "    def clear(self):\n        self._alloc_iter = None\n"))
    done = python("-m", "poolfuzz.harness", "--sglang-src", str(site), "replay", str(MAMBA), cwd=REPO, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(f"POSSIBLY FIXED {MAMBA}: finding 2 (mamba-clear-keeps-reservation)"), done.stdout


def _violation(invariant: str, trace: Path) -> InvariantViolation:
    violation = InvariantViolation(invariant, "planted for the test")
    violation.trace_path = trace
    return violation


@needs_sglang
def test_the_plugin_records_a_known_finding_and_passes_unless_strict() -> None:
    node = SimpleNamespace(user_properties=[])
    with pytest.warns(UserWarning, match="known finding 1"):
        failure = judge_violation(node, "paged_kv", "poolfuzz.harness.upstream:PagedKV", "cpu", _violation("empty-pool-guard", PAGED))
    assert failure is None and dict(node.user_properties)[KNOWN_PROPERTY].startswith("[empty-pool-guard] known finding 1")
    strict = SimpleNamespace(user_properties=[])
    failure = judge_violation(
        strict, "paged_kv", "poolfuzz.harness.upstream:PagedKV", "cpu", _violation("empty-pool-guard", PAGED), strict=True
    )
    assert failure is not None and "known finding 1" in failure and "--poolfuzz-strict" in failure
    assert dict(strict.user_properties)[TRACE_PROPERTY] == str(PAGED)


def test_the_plugin_fails_a_new_finding() -> None:
    node = SimpleNamespace(user_properties=[])
    failure = judge_violation(node, "req_to_token", "tests.fuzz_planted:ForgetfulFree", "cpu", _violation("conservation", PAGED))
    assert failure is not None and "broke invariant conservation" in failure and "known finding" not in failure

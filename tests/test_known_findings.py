"""Known upstream findings (corpus/known.toml, issue 44): the checked loader, the fingerprint that survives
reshrinking, and a fuzz run that re-finds a known finding (exit 0, recorded as known), fails on it under
--strict, and still fails on a new bug."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from poolfuzz.harness.upstream.known import KNOWN_FILE, KnownFindingsError, fingerprint, known_finding_of, load_known, match
from tests.processes import python

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "corpus"
ENGINE_TRACE = CORPUS / "engine" / "engine-swa-admission-hangs.json"
PLANTED = "req_to_token=tests.fuzz_planted:ForgetfulFree"


def _sglang_missing() -> str | None:
    from poolfuzz.harness.upstream.sglang_modules import unavailable_reason

    return unavailable_reason()


def test_the_committed_list_loads_and_names_every_committed_upstream_trace() -> None:
    known = load_known()
    assert {f.number for f in known} == {1, 2, 3, 5, 6, 7}
    named = {t for f in known for t in f.traces}
    committed = {str(p.relative_to(CORPUS)) for p in [*(CORPUS / "upstream").glob("*.json"), *(CORPUS / "engine").glob("*.json")]}
    assert named == committed
    from poolfuzz.harness.upstream.findings import FINDINGS_BY_KEY, KNOWN_FINDINGS

    assert {f.key for f in KNOWN_FINDINGS} == set(FINDINGS_BY_KEY) == {f.key for f in known if f.family != "engine"}


@pytest.mark.parametrize(
    ("text", "entry", "field"),
    [
        ("schema = 2\n", "", "schema"),
        ("schema = 1\n[[finding]]\nkey = 'x'\n", "x", "number"),
        ("schema = 1\nwhat = 1\n", "", "what"),
        ("schema = 1\n[[finding]]\nkey = 'x'\nnumber = 'one'\n", "x", "number"),
    ],
)
def test_a_malformed_list_names_file_entry_and_field(tmp_path: Path, text: str, entry: str, field: str) -> None:
    path = tmp_path / "known.toml"
    path.write_text(text)
    with pytest.raises(KnownFindingsError) as caught:
        load_known(path)
    assert (caught.value.path, caught.value.entry, caught.value.field) == (path.resolve(), entry, field)
    assert str(path.resolve()) in str(caught.value)


def test_a_bad_value_is_refused_with_its_field(tmp_path: Path) -> None:
    text = KNOWN_FILE.read_text().replace('classification = "reachable"', 'classification = "maybe"')
    path = CORPUS / "known-test-tmp.toml"  # traces resolve beside the file
    try:
        path.write_text(text)
        with pytest.raises(KnownFindingsError, match="entry engine-swa-admission-hangs, field 'classification'"):
            load_known(path)
        result = python("-m", "poolfuzz.harness", "fuzz", "--known", str(path), "--seconds", "1", cwd=tmp_path, timeout=120)
    finally:
        path.unlink()
    assert result.returncode == 2, result.stderr
    assert "field 'classification'" in result.stderr


def test_different_shrinks_of_one_finding_match_and_another_bug_does_not(tmp_path: Path) -> None:
    known = load_known()
    swa = sorted((CORPUS / "upstream").glob("swa_kv-*.json"))
    paged = sorted((CORPUS / "upstream").glob("paged_kv-*.json"))
    assert len(swa) == 3 and len(paged) == 3  # three shrinks each, of different sizes and step lists
    for path in swa + paged:
        data = json.loads(path.read_text())
        found = known_finding_of(data["family"], data["implementation"], data["expect"]["invariant"], path, known=known)
        assert found is not None and found.key == data["provenance"]["finding"], path.name
    # finding 5 shrinks to one `crowd` (committed) or one `arrive` (a later run): the same finding
    engine = json.loads(ENGINE_TRACE.read_text())
    other_shrink = dict(engine, steps=[{"op": "arrive", "args": {"stem": 0, "length": 0, "tail": 1, "max_new": 0}}])
    (tmp_path / "arrive.json").write_text(json.dumps(other_shrink))
    for path in (ENGINE_TRACE, tmp_path / "arrive.json"):
        found = known_finding_of("engine", "poolfuzz.harness.upstream:Engine", "scheduler-progress", path, known=known)
        assert found is not None and found.number == 5
    # another bug: the same target and invariant but a trace that needs an abort; another invariant; our own pool
    other_bug = dict(engine, steps=[*engine["steps"], {"op": "abort", "args": {"pick": 0}}])
    (tmp_path / "abort.json").write_text(json.dumps(other_bug))
    assert (
        known_finding_of("engine", "poolfuzz.harness.upstream:Engine", "scheduler-progress", tmp_path / "abort.json", known=known) is None
    )
    assert known_finding_of("engine", "poolfuzz.harness.upstream:Engine", "kv-accounting", ENGINE_TRACE, known=known) is None
    ours = fingerprint("paged_kv", "poolfuzz.pools:PagedTokenToKVPoolAllocator", "empty-pool-guard", paged[0])
    assert ours.classification is None and match(ours, known) is None


def _fuzz(tmp_path: Path, name: str, *extra: str, seed_walk: bool = True, workers: int = 1, seconds: int = 2) -> tuple[int, dict, str]:
    """One short fuzz run in its own folder whose database holds finding 5's trace as a saved walk failure (so
    the first round replays it, as the next run after finding it does)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    from poolfuzz.harness.fuzz.saved_walks import save_walk_failure
    from poolfuzz.harness.traces.schema import load_trace

    folder = tmp_path / name
    folder.mkdir()
    if seed_walk:
        save_walk_failure(DirectoryBasedExampleDatabase(str(folder / "db")), "engine", load_trace(ENGINE_TRACE))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [
        "--seconds",
        str(seconds),
        "--workers",
        str(workers),
        "--seed",
        "1",
        "--database",
        "db",
        "--corpus",
        "found",
        "--report",
        "r.json",
        "--grace",
        "30",  # the saved walk's replay loads and builds upstream's scheduler: seconds on a loaded 2-core box
    ]
    result = python("-m", "poolfuzz.harness", "fuzz", *extra, *args, cwd=folder, env=env, timeout=300)
    out = result.stdout + result.stderr
    assert (folder / "r.json").is_file(), f"exit {result.returncode}, no report written:\n{out}"
    return result.returncode, json.loads((folder / "r.json").read_text()), out


@pytest.mark.skipif(_sglang_missing() is not None, reason=f"upstream SGLang unavailable: {_sglang_missing()}")
def test_fuzz_reports_a_known_finding_as_known_and_goes_on(tmp_path: Path) -> None:
    code, report, out = _fuzz(tmp_path, "known", "--target", "engine")
    assert code == 0, out
    (target,) = report["targets"]
    assert target["status"] == "known" and target["upstream"]["title"] == "SGLang"
    (failure,) = target["failures"]
    assert failure["known"]["key"] == "engine-swa-admission-hangs" and failure["known"]["number"] == 5
    assert report["totals"]["failures"] == 0 and report["totals"]["known"] == 1
    assert "KNOWN engine [scheduler-progress]: finding 5" in out and "upstream SGLang" in out
    assert target["rounds"] > 1 and target["steps"] > 0  # fuzzing went on past it

    code, report, out = _fuzz(tmp_path, "strict", "--target", "engine", "--strict")
    assert code == 1, out
    assert report["targets"][0]["status"] == "failed" and report["totals"]["failures"] == 1


@pytest.mark.skipif(_sglang_missing() is not None, reason=f"upstream SGLang unavailable: {_sglang_missing()}")
def test_a_new_bug_still_fails_the_run_beside_a_known_one(tmp_path: Path) -> None:
    code, report, out = _fuzz(tmp_path, "planted", "--target", "engine", "--target", PLANTED, workers=2, seconds=5)
    assert code == 1, out
    by_key = {t["target"]: t for t in report["targets"]}
    assert by_key["engine"]["status"] == "known"
    assert by_key[PLANTED]["status"] == "failed" and by_key[PLANTED]["upstream"] is None
    assert all(f["known"] is None for f in by_key[PLANTED]["failures"])

"""``poolfuzz``: the commands, their listing, dispatch and usage errors (no fuzzing here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from poolfuzz.harness import cli
from poolfuzz.harness.judge.families import FAMILIES
from poolfuzz.harness.judge.invariants import INVARIANTS
from poolfuzz.pools.page_alloc import KERNEL_NAMES
from tests.processes import python

REPO = Path(__file__).resolve().parent.parent


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_usage_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    assert err.startswith("poolfuzz: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


# ----------------------------------------------------------------------- help
def test_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for command in ("fuzz", "list", "replay", "selfcheck", "bench"):
        assert command in out


def test_python_dash_m_poolfuzz_harness_is_the_same_door(tmp_path: Path) -> None:
    result = python("-m", "poolfuzz.harness", "fuzz", "--help", cwd=REPO, timeout=120)
    assert result.returncode == 0
    for option in (
        "--target",
        "--seconds",
        "--minutes",
        "--workers",
        "--seed",
        "--device",
        "--corpus",
        "--report",
        "--steps",
        "--no-misuse",
        "--coverage",
        "--database",
    ):
        assert option in result.stdout


# ----------------------------------------------------------------------- list
def test_list_names_every_family_invariant_and_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    for name, fam in FAMILIES.items():
        assert name in out and fam.default in out
    for invariant in INVARIANTS.values():
        assert re.search(rf"^  {re.escape(invariant.id)} +{re.escape(invariant.statement)}$", out, re.MULTILINE)
    assert f"page-alloc kernels: {', '.join(KERNEL_NAMES)}" in out


def test_list_shows_driver_operations_and_an_active_override(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "list", "--target", "req_to_token=tests.fuzz_planted:ForgetfulFree")
    assert code == 0
    assert "tests.fuzz_planted:ForgetfulFree  override, default poolfuzz.pools:ReqToTokenPool" in out
    assert "operations: alloc, alloc_claiming, alloc_rows, alloc_rows_non_int, clear, construct, free, free_rows, write, write_rows" in out


def test_list_json_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "list", "--json")
    data = json.loads(out)
    assert code == 0
    assert [f["family"] for f in data["families"]] == list(FAMILIES)
    assert [i["id"] for i in data["invariants"]] == list(INVARIANTS)
    assert data["page_alloc"]["kernels"] == list(KERNEL_NAMES)


# ------------------------------------------------------------- usage errors
@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        # targets that do not resolve
        ("no_such_family", "unknown family 'no_such_family'"),
        ("req_to_token=no.such.module:Pool", "cannot import 'no.such.module'"),
        ("req_to_token=tests.fuzz_planted:Nope", "has no attribute 'Nope'"),
        # classes of another family: a usage error, not a finding
        ("paged_kv=poolfuzz.pools:ReqToTokenPool", "does not take paged_kv's configuration"),
        ("token_kv=poolfuzz.pools:MambaSlotAllocator", "is not a token_kv pool: it lacks free_group_begin"),
    ],
)
def test_a_target_that_does_not_resolve_or_is_of_another_family_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str], target: str, fragment: str
) -> None:
    code, _, err = run_cli(capsys, "fuzz", "--target", target, "--seconds", "1")
    assert_one_line_usage_error(code, err, fragment)


def existing_file(tmp_path: Path) -> Path:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a folder\n")
    return notes


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--corpus", "{notes}", "exists and is not a folder"),
        ("--corpus", "{notes}/found", "cannot write there"),
        ("--report", "{tmp}", "is a folder, not a file"),
        ("--report", "{notes}/report.json", "its folder"),
        ("--dashboard", "{tmp}", "is a folder, not a file"),
        ("--database", "{notes}", "exists and is not a folder"),
        ("--database", "bogus://x", "unknown scheme 'bogus://'"),
        ("--database", "{tmp}/db,readonly:ftp://fleet", "unknown scheme 'ftp://'"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_any_worker_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: str, value: str, fragment: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = value.format(notes=existing_file(tmp_path), tmp=tmp_path)
    code, _, err = run_cli(capsys, "fuzz", "--target", "req_to_token", "--seconds", "1", flag, path)
    assert_one_line_usage_error(code, err, flag, fragment)
    assert not (tmp_path / "bogus:").exists() and not (tmp_path / "reports").exists()


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"poolfuzz {version('poolfuzz')}"


@pytest.mark.parametrize("command", ["fuzz", "list", "dashboard", *cli.DISPATCHED])
def test_every_help_names_one_program_in_plain_words(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run_cli(capsys, command, "--help")
    assert code == 0
    assert out.startswith(f"usage: poolfuzz {command}"), out[:80]
    assert "``" not in out and ":func:" not in out and ":class:" not in out and "poolfuzz." not in out


@pytest.mark.parametrize(
    "argv",
    [
        ["fuzz", "--workers", "zero"],
        ["fuzz", "--workers", "0"],
        ["fuzz", "--seconds", "-1"],
        ["fuzz", "--seconds", "1", "--minutes", "1"],
        ["fuzz", "--device", "tpu"],
        ["no-such-command"],
        [],
    ],
)
def test_malformed_arguments_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "usage:" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fuzz", "--device", "cuda", "--target", "req_to_token", "--seconds", "1")
    assert_one_line_usage_error(code, err, "no CUDA device")


# ------------------------------------------------------------------ dispatch
def test_other_commands_get_the_remaining_arguments(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "fake_command.py").write_text("def main(argv):\n    print('fake got', argv)\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.DISPATCHED, "replay", ("fake_command", "a stand-in"))
    code, out, _ = run_cli(capsys, "replay", "corpus/x.json", "--verbose")
    assert (code, out) == (3, "fake got ['corpus/x.json', '--verbose']\n")


def test_a_command_whose_module_is_missing_says_so_and_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.DISPATCHED, "bench", ("harness.no_such_module", "a stand-in"))
    code, _, err = run_cli(capsys, "bench", "--quick")
    assert_one_line_usage_error(code, err, "'bench' is not available", "harness.no_such_module is missing")

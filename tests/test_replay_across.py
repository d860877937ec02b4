"""``replay --across``: one trace against several upstream releases, each in its own process and folder.

The network is never used here: the releases are the installed sglang (as "0.5.23") and
a folder missing the allocator files (as "0.5.22"), handed over by a fake fetcher, and the
index's version list is a fake too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from poolfuzz.harness.traces.across import Across, AcrossError, parse_across, releases, replay_across, report
from poolfuzz.harness.traces.replay_cli import main

REPO = Path(__file__).resolve().parent.parent
MAMBA_FINDING = REPO / "corpus" / "upstream" / "mamba_slots-6a8cbaad60810966.json"
INDEX = ["0.5.18", "0.5.19", "0.5.20rc1", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]


def test_a_range_names_the_indexed_releases_between_its_ends_and_a_list_names_itself() -> None:
    assert releases(parse_across("sglang==0.5.19..0.5.21"), lambda p: INDEX) == ["0.5.19", "0.5.20", "0.5.21"]
    assert releases(parse_across("sglang==0.5.20rc1..0.5.20"), lambda p: INDEX) == ["0.5.20rc1", "0.5.20"]
    assert parse_across("vllm==0.32.0, 0.33.0") == Across("vllm", versions=("0.32.0", "0.33.0"))


@pytest.mark.parametrize("spec", ["sglang", "sglang==", "torch==2.3..2.4", "sglang==0.5.23..0.5.19", "sglang==banana"])
def test_a_malformed_across_is_a_usage_error(spec: str) -> None:
    with pytest.raises(AcrossError):
        parse_across(spec)


def test_a_range_the_index_has_nothing_in_is_a_usage_error() -> None:
    with pytest.raises(AcrossError, match="no sglang release in 0.4.0..0.4.1"):
        releases(parse_across("sglang==0.4.0..0.4.1"), lambda p: INDEX)


def test_across_is_refused_beside_options_it_cannot_honour(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(MAMBA_FINDING), "--across", "sglang==0.5.23", "--expect", "fixed"]) == 2
    assert "--across replays each trace as recorded" in capsys.readouterr().err
    assert main([str(MAMBA_FINDING), "--across-cache", "/tmp"]) == 2


def installed_sglang() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.23)")
    return Path(next(iter(spec.submodule_search_locations))).parent


def test_each_release_is_replayed_in_its_own_folder_and_the_report_says_where_it_reproduces(tmp_path: Path) -> None:
    site = installed_sglang()
    hollow = tmp_path / "sglang-0.5.22"
    (hollow / "sglang" / "srt").mkdir(parents=True)
    folders = {"0.5.22": hollow, "0.5.23": site}
    fetched: list[str] = []

    def fetch(package: str, version: str, cache: Path) -> Path:
        fetched.append(version)
        if version not in folders:
            raise OSError(f"no wheel of {package}=={version} here")
        return folders[version]

    across = parse_across("sglang==0.5.21..0.5.23")
    table = replay_across([MAMBA_FINDING], across, cache=tmp_path, listed=lambda p: INDEX, fetch=fetch)
    rows = table[str(MAMBA_FINDING)]
    assert fetched == ["0.5.21", "0.5.22", "0.5.23"]
    assert [(r.version, r.verdict) for r in rows] == [("0.5.21", "not available"), ("0.5.22", "not loadable"), ("0.5.23", "reproduces")]
    assert rows[2].detail == "[clear-restores] at step 2 of 2"
    lines = report(table, across)
    assert lines[0].endswith("(expects [clear-restores])")
    assert lines[-1] == "  => reproduces on 0.5.23; not loadable on 0.5.22; not available on 0.5.21"

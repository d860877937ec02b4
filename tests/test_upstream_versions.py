"""Version-tolerant loading: another copy of upstream's files (``POOLFUZZ_SGLANG_SRC`` / ``--sglang-src``, ``POOLFUZZ_VLLM_SRC``).

No network: each test builds a fake source folder in ``tmp_path`` from the installed wheel's
own files (a copy, then one file deleted or edited), and checks that the loaders refuse only
the target whose surface moved, with a one-line reason naming it, while the others still load
and run.  Tests that need the installed files skip with the reason when ``sglang`` (``vllm``)
is not installed; the folder-version and CLI tests need neither.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from poolfuzz.harness.cli import take_source_options
from poolfuzz.harness.judge.families import UnknownTargetError, load_factory
from poolfuzz.harness.upstream import sglang_files, vllm_files
from poolfuzz.harness.upstream.sglang_files import locate_sglang
from poolfuzz.harness.upstream.sglang_modules import load_sglang_cache, load_upstream, unavailable_reason
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError, folder_version, source_folder


def _installed_reason(locate: object) -> str | None:
    try:
        locate()  # type: ignore[operator]
    except UpstreamUnavailableError as exc:
        return str(exc)
    return None


SGLANG_MISSING = None if os.environ.get(sglang_files.SOURCE_ENV) is None else f"{sglang_files.SOURCE_ENV} is set for this run"
SGLANG_MISSING = SGLANG_MISSING or _installed_reason(locate_sglang) or unavailable_reason()
VLLM_MISSING = None if os.environ.get(vllm_files.SOURCE_ENV) is None else f"{vllm_files.SOURCE_ENV} is set for this run"
VLLM_MISSING = VLLM_MISSING or vllm_files.vllm_unavailable_reason()
needs_sglang = pytest.mark.skipif(SGLANG_MISSING is not None, reason=f"installed SGLang unavailable: {SGLANG_MISSING}")
needs_vllm = pytest.mark.skipif(VLLM_MISSING is not None, reason=f"installed vLLM unavailable: {VLLM_MISSING}")

REPO = Path(__file__).resolve().parents[1]
_SGLANG_FILES = ("_version.py", "version.py", *(prefix.removeprefix("sglang.").replace(".", "/") for prefix in sglang_files.REAL_PREFIXES))
"""What the loader executes for the SGLang targets (the Rust extension is left out unless asked for)."""


def copy_sglang(destination: Path, *, rust: bool = False) -> Path:
    """A source folder holding the installed ``sglang``'s loader files: ``destination/sglang/...``; returns ``destination``."""
    package = locate_sglang().package
    ignore = shutil.ignore_patterns("__pycache__", *(() if rust else ("*.so",)))
    for rel in _SGLANG_FILES:
        if not (package / rel).exists() and (package / f"{rel}.py").is_file():
            rel = f"{rel}.py"
        source, target = package / rel, destination / "sglang" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, target)
    return destination


@pytest.fixture
def sglang_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the installed loader files, and ``POOLFUZZ_SGLANG_SRC`` pointing at it."""
    site = copy_sglang(tmp_path / "src")
    monkeypatch.setenv(sglang_files.SOURCE_ENV, str(site))
    return site


def _refusal(name: str) -> str | None:
    try:
        load_factory(f"poolfuzz.harness.upstream:{name}")
    except UnknownTargetError as exc:
        return str(exc)
    return None


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path} no longer contains {old!r}: the fake moved surface needs updating"
    path.write_text(text.replace(old, new))


# ------------------------------------------------------------------ where the files are, which version
def test_the_version_is_read_from_the_folder_first_then_the_dist_info_then_pyproject(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    (package / "srt").mkdir(parents=True)
    assert folder_version(package, "sglang") is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.30.dev1"\n')
    assert folder_version(package, "sglang") == "0.5.30.dev1"
    (tmp_path / "sglang-0.5.21.dist-info").mkdir()
    (tmp_path / "sglang-0.5.21.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n")
    assert folder_version(package, "sglang") == "0.5.21"
    (package / "version.py").write_text('try:\n    from x import y\nexcept ImportError:\n    __version__ = "0.0.0.dev0"\n')
    assert folder_version(package, "sglang") == "0.5.21", "an indented fallback is not the folder's version"
    (package / "_version.py").write_text("__version__ = version = '0.5.22'\n__version_tuple__ = (0, 5, 22)\n")
    assert folder_version(package, "sglang") == "0.5.22"


@pytest.mark.parametrize("given", ["site", "package", "checkout"])
def test_a_source_folder_is_found_from_its_site_its_package_or_a_checkout_root(tmp_path: Path, given: str) -> None:
    site = tmp_path / "python"
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "_version.py").write_text("__version__ = '0.5.99'\n")
    path = {"site": site, "package": site / "sglang", "checkout": tmp_path}[given]
    found = source_folder(path, "sglang", env=sglang_files.SOURCE_ENV, probe="srt")
    assert (found.site, found.version) == (site.resolve(), "0.5.99")
    assert found.label == f"sglang 0.5.99 ({sglang_files.SOURCE_ENV}={path})"


def test_a_folder_without_the_package_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UpstreamUnavailableError) as refused:
        source_folder(tmp_path, "sglang", env=sglang_files.SOURCE_ENV, probe="srt")
    assert "\n" not in str(refused.value) and "no sglang/srt/" in str(refused.value)


def test_the_cli_source_options_are_taken_from_any_position_and_exported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(sglang_files.SOURCE_ENV, "")  # so that monkeypatch restores both variables after the test
    monkeypatch.setenv(vllm_files.SOURCE_ENV, "")
    rest = take_source_options(["replay", "--sglang-src", str(tmp_path), "corpus/", f"--vllm-src={tmp_path}", "--", "--sglang-src"])
    assert rest == ["replay", "corpus/", "--", "--sglang-src"]
    assert os.environ[sglang_files.SOURCE_ENV] == os.environ[vllm_files.SOURCE_ENV] == str(tmp_path.resolve())


def test_a_missing_source_folder_is_a_usage_error_before_any_command_runs(tmp_path: Path) -> None:
    from poolfuzz.harness.cli import run_command

    assert run_command(["list", "--sglang-src", str(tmp_path / "nowhere")]) == 2


# ------------------------------------------------------------------ SGLang: one moved surface, one refused target
@needs_sglang
def test_a_copy_of_the_installed_files_loads_from_the_copy(sglang_copy: Path) -> None:
    modules = load_upstream()
    assert modules.root == sglang_copy.resolve() / "sglang/srt/mem_cache/allocator"
    assert modules.version == sglang_files.installed_version() and not modules.problems
    assert [name for name in ("TokenKV", "PagedKV", "MambaSlots", "RadixCache", "SWAKV", "PureSWAKV") if _refusal(name)] == []
    assert not [name for name in sys.modules if name == "sglang" or name.startswith("sglang.")]


@needs_sglang
def test_a_missing_allocator_file_refuses_only_its_target(sglang_copy: Path) -> None:
    (sglang_copy / "sglang/srt/mem_cache/allocator/mamba.py").unlink()
    reason = _refusal("MambaSlots")
    assert reason is not None and "\n" not in reason
    assert re.fullmatch(rf"sglang \S+ \({sglang_files.SOURCE_ENV}=.*\): srt/mem_cache/allocator/ has no mamba\.py", reason)
    assert [name for name in ("TokenKV", "PagedKV") if _refusal(name)] == []
    # memory_pool.py imports allocator/mamba.py, and the caches and SWA allocators import memory_pool.py:
    # the real import graph decides, and each refusal names the file that is missing.
    assert {_refusal(name) for name in ("RadixCache", "SWAKV", "PureSWAKV")} == {reason}


@needs_sglang
def test_a_renamed_class_refuses_only_the_target_that_drives_it(sglang_copy: Path) -> None:
    _edit(sglang_copy / "sglang/srt/mem_cache/allocator/swa.py", "class PureSWATokenToKVPoolAllocator(", "class PureSWAAllocatorRenamed(")
    reason = _refusal("PureSWAKV")
    assert reason is not None and reason.endswith(
        "srt/mem_cache/allocator/swa.py has no PureSWATokenToKVPoolAllocator "
        f"({sglang_files.SUPPORTED_VERSION} has it: renamed, moved or added since)"
    )
    assert _refusal("SWAKV") is None and _refusal("RadixCache") is None


@needs_sglang
def test_an_sglang_name_the_stand_ins_do_not_cover_loads_as_a_placeholder_that_refuses_use(sglang_copy: Path) -> None:
    from poolfuzz.harness.upstream.placeholders import StandInReached

    _edit(
        sglang_copy / "sglang/srt/mem_cache/base_prefix_cache.py",
        "import torch\n",
        "import torch\n\nfrom sglang.srt.utils import helper_added_in_a_later_release\n",
    )
    assert _refusal("RadixCache") is None
    helper = load_sglang_cache().base_prefix_cache.helper_added_in_a_later_release
    with pytest.raises(StandInReached, match="sglang.srt.utils.helper_added_in_a_later_release"):
        helper()


@needs_sglang
def test_a_third_party_import_that_is_missing_refuses_the_file_and_what_depends_on_it(sglang_copy: Path) -> None:
    _edit(
        sglang_copy / "sglang/srt/mem_cache/base_prefix_cache.py",
        "import torch\n",
        "import torch\n\nimport package_added_in_a_later_release\n",
    )
    reason = _refusal("RadixCache")
    assert reason is not None and "\n" not in reason
    assert "srt/mem_cache/base_prefix_cache.py:" in reason and "imports package_added_in_a_later_release, which is not installed" in reason
    assert [name for name in ("TokenKV", "PagedKV", "MambaSlots") if _refusal(name)] == []


@needs_sglang
def test_a_base_allocator_without_get_all_free_pages_refuses_the_targets_that_read_it(sglang_copy: Path) -> None:
    _edit(sglang_copy / "sglang/srt/mem_cache/allocator/base.py", "def get_all_free_pages(", "def _free_pages_gone(")
    reasons = {name: _refusal(name) for name in ("PagedKV", "SWAKV", "PureSWAKV")}
    missing = "srt/mem_cache/allocator/base.py has no BaseTokenToKVPoolAllocator.get_all_free_pages"
    assert all(r and missing in r for r in reasons.values()), reasons
    assert _refusal("TokenKV") is None and _refusal("MambaSlots") is None


@needs_sglang
def test_a_missing_eviction_policy_refuses_the_targets_whose_files_import_it(sglang_copy: Path) -> None:
    _edit(sglang_copy / "sglang/srt/mem_cache/evict_policy.py", "class TLRUStrategy(", "class TimedLRUStrategy(")
    reason = _refusal("RadixCache")
    assert reason is not None and "\n" not in reason, reason
    assert "(ImportError: cannot import name 'TLRUStrategy' from 'sglang.srt.mem_cache.evict_policy'" in reason, reason
    # allocator/swa.py imports mem_cache/utils.py too, which imports every policy
    assert "cannot import name 'TLRUStrategy'" in (_refusal("SWAKV") or "")
    assert _refusal("TokenKV") is None and _refusal("MambaSlots") is None


@needs_sglang
def test_a_base_allocator_that_does_not_load_refuses_every_sglang_target_with_its_reason(sglang_copy: Path) -> None:
    (sglang_copy / "sglang/srt/mem_cache/allocator/base.py").unlink()
    reasons = {name: _refusal(name) for name in ("TokenKV", "PagedKV", "MambaSlots", "RadixCache", "SWAKV", "PureSWAKV")}
    # allocator/__init__.py imports base.py, so no allocator module loads without it (mamba.py included).
    assert set(reasons.values()) == {f"{locate_sglang().label}: srt/mem_cache/allocator/ has no base.py"}


@needs_sglang
def test_a_copy_without_the_rust_extension_refuses_the_rust_core_only(sglang_copy: Path) -> None:
    reason = _refusal("RustTreeCore")
    assert reason is not None and "has no Rust TreeCore for this interpreter" in reason
    assert _refusal("RadixCache") is None


@needs_sglang
def test_a_paged_allocator_without_its_torch_path_refuses_what_runs_over_it_on_cpu(sglang_copy: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("with a CUDA device the Triton-only paged allocator of sglang < 0.5.22 is not refused")
    _edit(sglang_copy / "sglang/srt/mem_cache/allocator/paged.py", "def alloc_decode_naive(", "def alloc_decode_gone(")
    _edit(sglang_copy / "sglang/srt/mem_cache/allocator/__init__.py", "    alloc_decode_naive,\n", "")  # as 0.5.21's package has it
    reasons = {name: _refusal(name) for name in ("PagedKV", "RadixCache", "SWAKV")}  # the copy has no Rust core
    assert all(reason and "paged.py has no alloc_decode_naive (no torch path" in reason for reason in reasons.values()), reasons
    assert reasons["SWAKV"] is not None and reasons["SWAKV"].endswith("SWAKV runs over it above page size 1")
    assert [name for name in ("TokenKV", "MambaSlots", "PureSWAKV") if _refusal(name)] == []


def test_a_rust_binding_missing_a_member_the_adapter_uses_is_named() -> None:
    from types import ModuleType

    from poolfuzz.harness.upstream.rust_core_loader import _RUST_SURFACE, rust_surface_missing

    module = ModuleType("fake_binding")
    for class_name, members in _RUST_SURFACE.items():
        if class_name != "MatchParamsBinding":
            kept = [member for member in members if member != "cache_actions"]
            setattr(module, class_name, type(class_name, (), dict.fromkeys(kept)))
    missing = rust_surface_missing(module)
    assert "MatchParamsBinding" in missing and "EvictDeviceNextNodeResultBinding.cache_actions" in missing
    assert "InsertResultBinding.cache_actions" in missing and "InsertResultBinding.prefix_len" not in missing


@needs_sglang
def test_a_copy_runs_a_target_through_its_walk(sglang_copy: Path) -> None:
    from poolfuzz.harness.fuzz.walk import WalkRun

    _edit(
        sglang_copy / "sglang/srt/mem_cache/allocator/paged.py",
        "\nclass PagedTokenToKVPoolAllocator(",
        "\nPOOLFUZZ_FROM_THE_COPY = True\n\n\nclass PagedTokenToKVPoolAllocator(",
    )
    assert load_upstream().paged.POOLFUZZ_FROM_THE_COPY
    walk = WalkRun("token_kv", 5, spec="poolfuzz.harness.upstream:TokenKV")
    assert walk.run(max_steps=150) is None and walk.steps == 150


@needs_sglang
def test_the_sglang_src_option_reaches_the_fuzz_workers(tmp_path: Path) -> None:
    site = copy_sglang(tmp_path / "src")
    touched = tmp_path / "executed-from-the-copy"
    _edit(
        site / "sglang/srt/mem_cache/allocator/token.py",
        "\nclass TokenToKVPoolAllocator(",
        f"\nopen({str(touched)!r}, 'a').write('token.py\\n')\n\n\nclass TokenToKVPoolAllocator(",
    )
    env = {key: value for key, value in os.environ.items() if key != sglang_files.SOURCE_ENV}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "poolfuzz.harness",
            "fuzz",
            "--sglang-src",
            str(site),
            "--target",
            "token_kv=poolfuzz.harness.upstream:TokenKV",
            "--seconds",
            "2",
            "--workers",
            "1",
            "--plain",
            "--database",
            "none",
            "--corpus",
            str(tmp_path / "corpus"),
            "--report",
            str(tmp_path / "report.json"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert touched.is_file() and len(touched.read_text().splitlines()) >= 2, "parent and worker both load the copy"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_status"] == 0


# ------------------------------------------------------------------ vLLM
@needs_vllm
def test_a_vllm_copy_loads_and_a_missing_block_pool_file_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = vllm_files.locate_vllm().package
    site = tmp_path / "src"
    for prefix in vllm_files.REAL_PREFIXES:  # the files the loader executes (the block pool imports the request's)
        relative = Path(*prefix.split(".")[1:])
        if not (package / relative).is_dir() and not (package / relative.with_suffix(".py")).is_file():
            continue  # a module of another release (0.34.0's token_buffer): this release's import graph never asks
        if (package / relative).is_dir():
            shutil.copytree(package / relative, site / "vllm" / relative, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (site / "vllm" / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(package / relative.with_suffix(".py"), site / "vllm" / relative.with_suffix(".py"))
    shutil.copy2(package / "_version.py", site / "vllm/_version.py")
    monkeypatch.setenv(vllm_files.SOURCE_ENV, str(site))
    modules = vllm_files.load_vllm()
    assert modules.root == site.resolve() / "vllm/v1/core" and modules.version == vllm_files.installed_version()
    assert _refusal("VllmBlockPool") is None
    assert modules.new_block_pool(4).get_num_free_blocks() == 3

    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    (broken / "vllm/v1/core/block_pool.py").unlink()
    monkeypatch.setenv(vllm_files.SOURCE_ENV, str(broken))
    reason = _refusal("VllmBlockPool")
    assert reason is not None and reason.endswith("v1/core/ has no block_pool.py") and "\n" not in reason

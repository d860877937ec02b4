"""The pytest plugin, as a user gets it: poolfuzz installed from a wheel into a fresh venv, a scratch project.

The wheel is built from a copy of this working tree and installed (not editable) into a venv of its
own; the packages poolfuzz needs (torch, hypothesis, pytest, xdist) come from this environment's
site-packages through a ``.pth`` line.  A directory named in a ``.pth`` line is a plain ``sys.path``
entry, so the *editable* install's ``.pth`` finder in there is never run: the only ``poolfuzz`` the
scratch runs can import is the installed copy, which each run checks (``poolfuzz.harness.__file__``,
the registered plugin's file, the distribution's ``direct_url.json``).

The scratch project holds two pool classes (``GoodPool``: our ``ReqToTokenPool``; ``LeakyPool``:
its ``free`` loses the row) and a test module declaring both with ``poolfuzz_test``.  Every run uses
``CI=1``: the derandomised ``ci`` profile, so what the machines find is the same on every run.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.once import computed_once
from tests.processes import python

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pools", "harness", "strategies")
"""The folders the wheel ships as ``poolfuzz.pools``, ``poolfuzz.harness`` and ``poolfuzz.strategies``, copied with
``pyproject.toml`` and ``README.md``."""

POOLS = '''
from poolfuzz.pools.req_to_token import ReqToTokenPool


class GoodPool(ReqToTokenPool):
    """Our pool, unchanged: every machine passes."""


class LeakyPool(ReqToTokenPool):
    """``free`` takes the row it gave back off the free list again: every freed row leaks."""

    def free(self, req):
        super().free(req)
        self.free_slots.pop()
'''

TESTS = '''
from poolfuzz.harness.pytest_plugin import poolfuzz_test

test_good_pool = poolfuzz_test("req_to_token", "scratchpools:GoodPool", max_examples=8, steps=15)
test_leaky_pool = poolfuzz_test("req_to_token", "scratchpools:LeakyPool", max_examples=8, steps=15)
'''

BAD_TESTS = '''
from poolfuzz.harness.pytest_plugin import poolfuzz_test

test_missing_class = poolfuzz_test("req_to_token", "scratchpools:NoSuchPool")
'''

OWN_POOLS = '''
"""The project's own ``pools`` module: the name poolfuzz used to install as a top-level package."""

from poolfuzz.pools.req_to_token import ReqToTokenPool

OWNER = "project"


class ReqPool(ReqToTokenPool):
    """The project's pool: ours, renamed."""
'''

OWN_TESTS = '''
"""The project's own tests: its ``pools``, ``harness`` and ``tests/strategies.py`` beside poolfuzz's, in one run."""

import harness
import pools
import strategies

from poolfuzz.harness.pytest_plugin import poolfuzz_test
from poolfuzz.pools import ReqToTokenPool


def test_the_projects_own_modules_are_the_ones_imported():
    assert (pools.OWNER, harness.OWNER, strategies.OWNER) == ("project", "project", "project")
    assert issubclass(pools.ReqPool, ReqToTokenPool)


test_the_projects_pool_under_poolfuzz = poolfuzz_test("req_to_token", "pools:ReqPool", max_examples=5, steps=10)
'''

CONFTEST = '''
"""Records, once the plugins are configured and before collection, what this run imports and from where."""

import importlib.metadata
import json
import os
import sys


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):
        return
    heavy = sorted(m for m in ("poolfuzz.harness.machines", "poolfuzz.harness.fuzz", "torch") if m in sys.modules)
    plugin = session.config.pluginmanager.get_plugin("poolfuzz")
    from poolfuzz import harness

    dist = importlib.metadata.distribution("poolfuzz")
    facts = {
        "heavy_before_collection": heavy,
        "plugin_file": getattr(plugin, "__file__", None),
        "harness_file": harness.__file__,
        "direct_url": json.loads(dist.read_text("direct_url.json") or "{}"),
        "sys_path": sys.path,
    }
    with open(os.environ["SCRATCH_FACTS"], "w") as handle:
        json.dump(facts, handle)
'''


@dataclass(frozen=True)
class Scratch:
    """The installed venv and the scratch project that runs its pytest."""

    python: Path
    site_packages: Path
    project: Path
    facts: Path

    def env(self) -> dict[str, str]:
        """This environment minus whatever could point the run elsewhere (paths, profiles, pytest's own)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTEST_", "PYTHON", "HYPOTHESIS_", "POOLFUZZ_", "COV_", "COVERAGE_"))}
        env.update(CI="1", PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", SCRATCH_FACTS=str(self.facts))
        return env

    def pytest(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.python), "-m", "pytest", "-p", "no:cacheprovider", *args], check=False,
                              cwd=self.project, env=self.env(), capture_output=True, text=True, timeout=timeout)


def _run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], check=False, cwd=cwd, capture_output=True, text=True, timeout=300)


def _copy_source(to: Path) -> None:
    to.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, to / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, to / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _build_and_install(root: Path) -> None:
    """A wheel of this tree installed into a fresh venv under ``root`` (``root/skip`` says why, where that cannot be done
    here), and the scratch project beside it."""
    _copy_source(root / "src")  # built from a copy: the build leaves no build/ or egg-info in the repo
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                 "--wheel-dir", root / "dist", root / "src")
    wheels = sorted((root / "dist").glob("poolfuzz-*.whl"))
    if built.returncode != 0 or not wheels:
        (root / "skip").write_text(f"cannot build a poolfuzz wheel here: {(built.stderr or built.stdout).strip()[-300:]}")
        return
    made = _run(sys.executable, "-m", "venv", "--without-pip", root / "venv")
    if made.returncode != 0:
        (root / "skip").write_text(f"cannot create a venv here: {made.stderr.strip()[-300:]}")
        return
    python = root / "venv" / "bin" / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (root / "purelib").write_text(purelib)
    site_packages = Path(purelib)
    # Torch, hypothesis, pytest, xdist (and pip) from this environment, as plain path entries.
    (site_packages / "_poolfuzz_test_dependencies.pth").write_text(
        "".join(f"{path}\n" for path in site.getsitepackages()))
    # --ignore-installed: pip must not touch the editable poolfuzz it can see through that .pth.
    installed = _run(python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
                     "--no-warn-script-location", wheels[0])
    if installed.returncode != 0:
        (root / "skip").write_text(f"cannot install the poolfuzz wheel here: {(installed.stderr or installed.stdout).strip()[-300:]}")


def _write_project(project: Path) -> None:
    (project / "scratchpools").mkdir(parents=True)
    (project / "scratchpools" / "__init__.py").write_text(POOLS)
    (project / "test_pools.py").write_text(TESTS)
    (project / "bad").mkdir()
    (project / "bad" / "test_bad_target.py").write_text(BAD_TESTS)
    (project / "conftest.py").write_text(CONFTEST)
    # The names poolfuzz's folders have in its repository, taken by the project's own modules.
    (project / "pools.py").write_text(OWN_POOLS)
    (project / "harness").mkdir()
    (project / "harness" / "__init__.py").write_text('OWNER = "project"\n')
    (project / "tests").mkdir()
    (project / "tests" / "strategies.py").write_text('OWNER = "project"\n')
    (project / "tests" / "test_own.py").write_text(OWN_TESTS)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scratch]:
    """The installed venv, built once per test run (:func:`tests.once.computed_once`: under xdist the workers share
    it, read-only), and a scratch project of this worker's own (the runs write their traces and facts into it)."""
    root = computed_once(tmp_path_factory, "pytest-plugin", _build_and_install)
    if (root / "skip").exists():
        pytest.skip((root / "skip").read_text())
    mine = tmp_path_factory.mktemp("pytest-plugin-project")
    project = mine / "project"
    _write_project(project)
    yield Scratch(root / "venv" / "bin" / "python", Path((root / "purelib").read_text()), project, mine / "facts.json")


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return f"rc={result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def _saved_traces(text: str) -> list[tuple[str, str]]:
    """``(nodeid, path)`` of each line ``NODEID: [conservation] poolfuzz replay PATH`` of the summary."""
    line = r"^(\S+): \[conservation\] poolfuzz replay (\S+)$"
    found: list[tuple[str, str]] = re.findall(line, text, flags=re.MULTILINE)
    return found


def test_a_project_with_its_own_pools_harness_and_strategies_runs_its_tests_and_poolfuzz_in_one_run(scratch: Scratch) -> None:
    result = scratch.pytest("tests/test_own.py", "-v", "--poolfuzz-target", "req_to_token=pools:ReqPool")
    assert result.returncode == 0, _output(result)
    assert re.search(r"\b3 passed\b", result.stdout), _output(result)
    assert re.search(r"poolfuzz::req_to_token\[pools:ReqPool@cpu\] PASSED", result.stdout), _output(result)


def test_the_good_pool_passes_and_the_leaky_one_fails_with_its_invariant_and_a_saved_trace(scratch: Scratch) -> None:
    result = scratch.pytest("test_pools.py")
    out = result.stdout
    assert result.returncode == 1, _output(result)
    assert "collected 2 items" in out, _output(result)  # no --poolfuzz-target: the plugin adds nothing
    assert re.search(r"\b1 failed, 1 passed\b", out), _output(result)
    assert "FAILED test_pools.py::test_leaky_pool" in out
    assert "poolfuzz: req_to_token=scratchpools:LeakyPool on cpu broke invariant conservation" in out
    assert "Traceback" not in out and "harness/machines/run.py" not in out  # the message, not the harness's stack

    # The installed copy ran, registered through its entry point, and imported nothing before it was asked to.
    facts = json.loads(scratch.facts.read_text())
    site_packages = scratch.site_packages.resolve()
    assert Path(facts["harness_file"]).resolve().is_relative_to(site_packages), facts["harness_file"]
    assert facts["plugin_file"] is not None, "the pytest11 entry point did not register the plugin as 'poolfuzz'"
    assert Path(facts["plugin_file"]).resolve() == site_packages / "poolfuzz" / "harness" / "pytest_plugin.py"
    assert not facts["direct_url"].get("dir_info", {}).get("editable", False), facts["direct_url"]
    assert str(REPO) not in facts["sys_path"]
    assert facts["heavy_before_collection"] == []

    # The summary names the saved trace; it is the shrunk one, and the installed CLI replays it.
    listed = _saved_traces(out)
    assert [nodeid for nodeid, _ in listed] == ["test_pools.py::test_leaky_pool"], _output(result)
    path = scratch.project / listed[0][1]
    assert path.is_file() and path.is_relative_to(scratch.project / "corpus" / "found"), path
    assert f"saved to {path}" in out
    trace = json.loads(path.read_text())
    assert trace["expect"]["invariant"] == "conservation"
    assert trace["implementation"] == "scratchpools:LeakyPool"
    replayed = subprocess.run([str(scratch.python), "-m", "poolfuzz.harness", "replay", listed[0][1]], check=False,
                              cwd=scratch.project, env=scratch.env(), capture_output=True, text=True, timeout=120)
    assert replayed.returncode == 0 and "[conservation]" in replayed.stdout, _output(replayed)  # reproduced


def test_a_bad_poolfuzz_target_stops_the_run_with_one_line(scratch: Scratch) -> None:
    result = scratch.pytest("test_pools.py", "--poolfuzz-target", "req_to_token=scratchpools:NoSuchPool")
    assert result.returncode == 4, _output(result)  # pytest's usage error, before any test ran
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    message = "ERROR: --poolfuzz-target: target 'scratchpools:NoSuchPool': 'scratchpools' has no attribute 'NoSuchPool'"
    assert lines == [message], _output(result)
    assert "passed" not in result.stdout and "failed" not in result.stdout


@pytest.mark.parametrize(("target", "says"), [
    ("no_such_family=poolfuzz.pools:ReqToTokenPool", "unknown family 'no_such_family'"),
    ("req_to_token=", "is not of the form FAMILY=module:attr"),
    ("req_to_token=pools", "is not of the form module:attr"),
    ("req_to_token=no_such_module:Pool", "cannot import 'no_such_module'"),
    ("req_to_token=poolfuzz.pools:NoSuchPool", "has no attribute 'NoSuchPool'"),
    ("paged_kv=poolfuzz.pools:ReqToTokenPool", "does not take paged_kv's configuration"),
], ids=["unknown-family", "no-spec", "malformed", "no-module", "no-attribute", "wrong-family"])
def test_every_kind_of_bad_target_is_refused_in_one_line(target: str, says: str) -> None:
    """What the option and ``poolfuzz_test`` refuse (the end-to-end run above shows one of them stopping pytest)."""
    from poolfuzz.harness.judge.families import UnknownTargetError
    from poolfuzz.harness.pytest_plugin import validate_targets

    with pytest.raises(UnknownTargetError) as refused:
        validate_targets([target])
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_valid_targets_keep_their_order_once_each() -> None:
    from poolfuzz.harness.pytest_plugin import validate_targets

    assert validate_targets(["req_to_token=poolfuzz.pools:ReqToTokenPool", " ", "token_kv=poolfuzz.pools:TokenToKVPoolAllocator",
                             "req_to_token=poolfuzz.pools:ReqToTokenPool"]) == [
        ("req_to_token", "poolfuzz.pools:ReqToTokenPool"), ("token_kv", "poolfuzz.pools:TokenToKVPoolAllocator")]
    assert validate_targets([]) == []


def test_a_bad_poolfuzz_test_target_is_a_one_line_collection_error(scratch: Scratch) -> None:
    result = scratch.pytest("bad")
    assert result.returncode == 2, _output(result)  # interrupted: errors during collection
    message = ("poolfuzz_test('req_to_token', 'scratchpools:NoSuchPool'): target 'scratchpools:NoSuchPool': "
               "'scratchpools' has no attribute 'NoSuchPool'")
    assert "ERROR collecting bad/test_bad_target.py" in result.stdout
    errors = result.stdout.split("ERROR collecting bad/test_bad_target.py", 1)[1].split("short test summary")[0]
    body = [line for line in errors.splitlines()[1:] if line.strip() and not line.startswith("=")]
    assert body == [message], _output(result)


def test_poolfuzz_targets_run_under_xdist_with_the_same_items_in_every_worker(scratch: Scratch) -> None:
    pytest.importorskip("xdist", reason="needs pytest-xdist")
    result = scratch.pytest("-n", "2", "test_pools.py", "--poolfuzz-max-examples", "5", "--poolfuzz-steps", "10",
                            "--poolfuzz-target", "req_to_token=scratchpools:GoodPool",
                            "--poolfuzz-target", "req_to_token=scratchpools:LeakyPool",
                            "--poolfuzz-corpus", "found-by-xdist")
    out = result.stdout
    assert result.returncode == 1, _output(result)
    assert "2 workers [4 items]" in out, _output(result)  # a collection that differed between workers errors out
    assert re.search(r"\b2 failed, 2 passed\b", out), _output(result)
    assert "FAILED poolfuzz::req_to_token[scratchpools:LeakyPool@cpu]" in out
    listed = dict(_saved_traces(out))
    assert set(listed) == {"poolfuzz::req_to_token[scratchpools:LeakyPool@cpu]", "test_pools.py::test_leaky_pool"}
    for shown in listed.values():
        assert (scratch.project / shown).is_file() and shown.startswith("found-by-xdist/"), shown


def _plugin_registered_here() -> bool:
    return any(ep.name == "poolfuzz" for ep in importlib.metadata.entry_points(group="pytest11"))


def test_in_this_repository_the_plugin_adds_nothing_and_leaves_the_target_option_alone() -> None:
    """The repository's own ``--target`` (tests/conftest.py) and the plugin's options live side by side."""
    load = [] if _plugin_registered_here() else ["-p", "poolfuzz.harness.pytest_plugin"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = python("-m", "pytest", "-p", "no:cacheprovider", *load, "--collect-only", "-q", "tests/test_machines.py",
                    "--target", "req_to_token=poolfuzz.pools:ReqToTokenPool", "--poolfuzz-max-examples", "3",
                    cwd=REPO, env=env, timeout=120)
    assert result.returncode == 0, _output(result)
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert any(line.startswith("tests/test_machines.py::test_machine_finds_no_violation[") for line in collected)
    assert all(line.startswith("tests/test_machines.py::") for line in collected), _output(result)

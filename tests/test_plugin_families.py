"""A family from outside this repository, registered through the ``poolfuzz.families`` entry point.

The kit is the smallest a family can be: a slot pool, a driver judging it against a set,
a move table (so its machine, walk and bench workload are generated), one canary and
its size limits.  It is installed with pip from a temporary folder into a target
directory, and every command runs in a subprocess whose ``PYTHONPATH`` holds that
directory: the entry point is found the way an installed engine test suite's would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.once import computed_once
from tests.processes import python

REPO = Path(__file__).resolve().parents[1]

KIT = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "tinykit"
        version = "0.1"

        [project.entry-points."poolfuzz.families"]
        tiny_slots = "tinykit:FAMILY"

        [tool.setuptools]
        packages = ["tinykit"]
    """,
    "tinykit/__init__.py": '''
        """A tiny slot pool's kit for poolfuzz: one registry entry, every part named by module:attr."""
        from poolfuzz.harness.judge.kit import Family
        from poolfuzz.harness.judge.limits import SETTING, FamilyLimits, Limit

        FAMILY = Family(
            name="tiny_slots", summary="a tiny slot pool (plug-in kit)", default="tinykit.pool:SlotPool",
            driver="tinykit.driver:SlotDriver", moves="tinykit.moves:slot_table",
            bench_config=(("size", 4), ("device", "cpu")), canaries=("tinykit.canaries",),
            upstream=("tinykit.upstream:ToySlots",),
            invariants=("valid-call-accepted", "misuse-rejected", "empty-pool-guard", "no-double-allocation",
                        "conservation"),
            limits=FamilyLimits({"size": Limit(0, 64), "device": SETTING}, (), {}),
        )
    ''',
    "tinykit/pool.py": '''
        from poolfuzz.pools.errors import DoubleFreeError


        class SlotPool:
            """Slots 0..size-1; alloc takes the lowest free one, free gives it back, a double free is an error."""

            def __init__(self, size, device="cpu"):
                self.size = size
                self.free_slots = list(range(size))

            def alloc(self):
                if not self.free_slots:
                    return None
                return self.free_slots.pop(0)

            def free(self, slot):
                if slot in self.free_slots or not 0 <= slot < self.size:
                    raise DoubleFreeError("SlotPool", [slot])
                self.free_slots.append(slot)
                self.free_slots.sort()

            def available_size(self):
                return len(self.free_slots)
    ''',
    "tinykit/driver.py": """
        from poolfuzz.harness.judge.driver import Driver, operation
        from poolfuzz.harness.judge.invariants import check
        from poolfuzz.pools.errors import DoubleFreeError


        class SlotDriver(Driver):
            family = "tiny_slots"

            def __init__(self, factory, config, **kwargs):
                super().__init__(factory, config, **kwargs)
                self.live = set()
                self.freed = set()

            @operation
            def alloc(self):
                if len(self.live) == self.config["size"]:
                    self.expect_refused(self.pool.alloc, "alloc()")
                    return None
                slot = self.expect_accepted(self.pool.alloc, "alloc()")
                check(slot is not None, "empty-pool-guard", "alloc() refused with free slots")
                check(slot not in self.live, "no-double-allocation", f"alloc() handed out live slot {slot}")
                self.live.add(slot)
                self.freed.discard(slot)
                return slot

            @operation
            def free(self, slot):
                if slot not in self.live:
                    self.expect_rejected(lambda: self.pool.free(slot), DoubleFreeError, f"free({slot})")
                    return
                self.expect_accepted(lambda: self.pool.free(slot), f"free({slot})")
                self.live.discard(slot)
                self.freed.add(slot)

            def observe(self):
                return tuple(self.pool.free_slots)

            def audit(self):
                check(self.pool.available_size() + len(self.live) == self.config["size"], "conservation",
                      "free plus live is not the pool", free=self.pool.available_size(), live=len(self.live))
    """,
    "tinykit/moves.py": '''
        from poolfuzz.strategies.table import Move, MoveTable


        class SlotView:
            """What the moves read: the live and the freed slots."""

            def __init__(self, driver):
                self._driver = driver

            def live(self):
                return sorted(self._driver.live)

            def freed(self):
                return sorted(self._driver.freed)


        def _free(view, choose):
            live = view.live()
            return ("free", {"slot": choose.choice(live)}) if live else None


        def _free_again(view, choose):
            freed = view.freed()
            return ("free", {"slot": choose.choice(freed)}) if freed else None


        def slot_table():
            return MoveTable(
                configs=lambda choose: {"size": choose.randint(0, 4)},
                moves=(Move("alloc", 3, lambda view, choose: ("alloc", {})), Move("free", 2, _free),
                       Move("free again", 1, _free_again, misuse=True)),
                view=SlotView,
            )
    ''',
    "tinykit/upstream.py": '''
        """The toy engine's own slot allocator, loaded from its files by poolfuzz's one loader."""
        from types import ModuleType

        from poolfuzz.harness.upstream.loading import Distribution, copy_of
        from poolfuzz.harness.upstream.sources import UpstreamUnavailableError
        from poolfuzz.harness.upstream.wrapper import runs_upstream


        def _util(name):
            module = ModuleType(name)
            module.lowest = min  # toyengine/util.py's lowest(), as documented: the smallest slot
            return module


        TOY = Distribution(name="toyengine", title="Toy engine", supported="1.0", env="TINYKIT_TOY_SRC", probe="core",
                           real=("toyengine.core",), stand_ins=lambda: {"toyengine.util": _util})


        @runs_upstream(TOY)
        class ToySlots:
            poolfuzz_check_misuse = False

            def __init__(self, size, device="cpu"):
                loaded, problems = copy_of(TOY).load(["toyengine.core.slots"])
                if problems:
                    raise UpstreamUnavailableError(next(iter(problems.values())))
                self.size = size
                self.inner = loaded["toyengine.core.slots"].UpstreamSlots(size)

            @property
            def free_slots(self):
                return sorted(self.inner.free)

            def alloc(self):
                return self.inner.alloc()

            def free(self, slot):
                self.inner.release(slot)

            def available_size(self):
                return len(self.inner.free)
    ''',
    "tinykit/canaries.py": '''
        from poolfuzz.harness.canaries.catalogue import Canary
        from tinykit.pool import SlotPool


        class LeakyFree(SlotPool):
            """free forgets to give the slot back."""

            def free(self, slot):
                if slot in self.free_slots or not 0 <= slot < self.size:
                    super().free(slot)


        CANARIES = {
            "tiny-leaky-free": Canary("tiny_slots", "tinykit.canaries:LeakyFree", "free drops the slot",
                                      "a plug-in test", "conservation"),
        }
    ''',
}


TOY_ENGINE = {
    "toyengine/__init__.py": "raise ImportError('the engine package top pulls a GPU stack: poolfuzz must not run it')\n",
    "toyengine/core/__init__.py": "",
    "toyengine/core/slots.py": """
        from toyengine.telemetry import Counter  # a module poolfuzz does not load: a placeholder


        class UpstreamSlots:
            def __init__(self, size):
                self.free = list(range(size))

            def alloc(self):
                if not self.free:
                    return None
                from toyengine.util import lowest  # imported at call time, as engines do

                slot = lowest(self.free)
                self.free.remove(slot)
                return slot

            def release(self, slot):
                self.free.append(slot)
    """,
}
"""A tiny upstream engine's files: the plug-in's upstream target drives ``toyengine.core.slots`` from them."""


@dataclass(frozen=True)
class Installed:
    site: Path
    work: Path
    toy: Path

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POOLFUZZ_", "HYPOTHESIS_"))}
        env.update(PYTHONPATH=str(self.site), CI="1", TINYKIT_TOY_SRC=str(self.toy))
        return python("-m", "poolfuzz.harness", *args, cwd=self.work, env=env, timeout=timeout)


def _install_the_kit(root: Path) -> None:
    """The kit's and the toy engine's files under ``root``, the kit pip-installed into ``root/site`` (``root/failed``
    says why if pip could not)."""
    for folder, files in (("src", KIT), ("toy", TOY_ENGINE)):
        for name, text in files.items():
            path = root / folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(root / "site"),
            str(root / "src"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        (root / "failed").write_text((done.stderr or done.stdout).strip()[-300:])


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The kit installed once per test run (:func:`tests.once.computed_once`: the workers share the read-only site
    folder), and a working folder of this worker's own for what the commands write."""
    root = computed_once(tmp_path_factory, "plugin-kit", _install_the_kit)
    if (root / "failed").exists():
        pytest.skip(f"cannot pip-install the kit here: {(root / 'failed').read_text()}")
    return Installed(root / "site", tmp_path_factory.mktemp("plugin-kit-work"), root / "toy")


def _out(result: subprocess.CompletedProcess[str]) -> str:
    return f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"


def test_an_installed_kit_is_listed_with_its_generated_machine(installed: Installed) -> None:
    result = installed.run("list", "--json")
    assert result.returncode == 0, _out(result)
    listing = json.loads(result.stdout)
    tiny = next(entry for entry in listing["families"] if entry["family"] == "tiny_slots")
    assert tiny["available"] and not listing["plugin_problems"], listing["plugin_problems"]
    assert tiny["plugin"] == "tiny_slots = tinykit:FAMILY"
    assert tiny["moves"] == "tinykit.moves:slot_table" and tiny["operations"] == ["alloc", "construct", "free"]


def test_an_installed_kit_is_fuzzed_and_its_pool_runs_clean(installed: Installed) -> None:
    result = installed.run(
        "fuzz", "--target", "tiny_slots", "--seconds", "3", "--workers", "1", "--corpus", "found", "--report", "report.json"
    )
    assert result.returncode == 0, _out(result)
    report = json.loads((installed.work / "report.json").read_text())
    (target,) = report["targets"]
    assert target["family"] == "tiny_slots" and target["steps"] > 100, target


def test_an_installed_kits_upstream_target_loads_through_the_one_loader_and_runs_clean(installed: Installed) -> None:
    result = installed.run(
        "fuzz",
        "--target",
        "tiny_slots=tinykit.upstream:ToySlots",
        "--seconds",
        "3",
        "--workers",
        "1",
        "--corpus",
        "up",
        "--report",
        "up.json",
    )
    assert result.returncode == 0, _out(result)
    (target,) = json.loads((installed.work / "up.json").read_text())["targets"]
    assert target["implementation"] == "tinykit.upstream:ToySlots" and target["steps"] > 100, target


def test_an_installed_kits_canary_is_caught_saved_and_replayed(installed: Installed) -> None:
    caught = installed.run("selfcheck", "--canary", "tiny-leaky-free", "--seconds-per-canary", "20")
    assert caught.returncode == 0 and "tiny-leaky-free" in caught.stdout, _out(caught)
    found = installed.run(
        "fuzz", "--target", "tiny_slots=tinykit.canaries:LeakyFree", "--seconds", "20", "--workers", "1", "--corpus", "leaky"
    )
    assert found.returncode == 1, _out(found)
    (trace,) = sorted(p for p in (installed.work / "leaky").rglob("*.json") if "unshrunk" not in p.parts)
    invariant = json.loads(trace.read_text())["expect"]["invariant"]
    # the leak shows at the audit, at the next alloc, or when the leaked slot is freed again (accepted: a double free)
    assert invariant in ("conservation", "empty-pool-guard", "misuse-rejected")
    replayed = installed.run("replay", str(trace))
    assert replayed.returncode == 0 and f"reproduced expected [{invariant}]" in replayed.stdout, _out(replayed)
    fixed = installed.run("replay", str(trace), "--target", "tiny_slots=tinykit.pool:SlotPool", "--expect", "fixed")
    assert fixed.returncode == 0, _out(fixed)


def test_an_installed_kits_machine_runs_under_the_pytest_plugin(installed: Installed) -> None:
    (installed.work / "test_tiny.py").write_text(
        textwrap.dedent("""
        from poolfuzz.harness.pytest_plugin import poolfuzz_test

        test_slot_pool = poolfuzz_test("tiny_slots", "tinykit.pool:SlotPool", max_examples=10, steps=10)
        test_leaky_pool = poolfuzz_test("tiny_slots", "tinykit.canaries:LeakyFree", max_examples=50, steps=10)
    """)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POOLFUZZ_", "HYPOTHESIS_", "PYTEST_"))}
    env.update(PYTHONPATH=str(installed.site), CI="1")
    result = python(
        "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "test_tiny.py", cwd=installed.work, env=env, timeout=300
    )
    assert result.returncode == 1 and "1 failed, 1 passed" in result.stdout, _out(result)
    assert "tiny_slots=tinykit.canaries:LeakyFree on cpu broke invariant" in result.stdout, _out(result)

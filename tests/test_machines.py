"""Every family's state machine, on every available device, under the active profile.

The KV and Mamba families also run with the device path of their checks and free
lists forced on the CPU (``POOLFUZZ_DEVICE_PATH_ON_CPU``): the torch-op code a CUDA
pool runs instead of the NumPy one, judged by the same machines without a GPU.
A family with optional imports in its kit (the paged allocator's ``triton``) also
runs with each blocked, as on a host without it.

The run with the misuse rules off gets half the active profile's examples (:func:`misuse_off_settings`): it
re-runs the full machine over the same pools minus the misuse moves, and half the budget still reaches what it
guards.  Of the 48 canaries of these families, the 39 the misuse-off machine catches at the full ``ci`` budget it
still catches at half, each by the same invariant (the other 9 are misuse bugs, out of its reach at any budget).
The device-path and optional-import runs keep the full budget: at half, a leak planted in the device free list's
``append`` went unseen by ``swa_kv`` and ``decode-rank-by-batch-position`` by the run without Triton.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from poolfuzz.harness.judge.families import FAMILIES, family_unavailable, upstream_default
from poolfuzz.harness.machines import make_machine, run_machine, settings_for
from poolfuzz.harness.machines.without import without_modules
from poolfuzz.harness.mutate.targets import DEVICE_PATH_FAMILIES
from poolfuzz.pools.page_states import DEVICE_PATH_ON_CPU
from tests.conftest import DEVICES
from tests.machine_coverage import MEASURED


def skip_unless_loadable(family: str) -> None:
    if upstream_default(family):
        pytest.skip("its default is upstream code with known findings (docs/upstream-findings.md): tests/test_engine_family.py")
    reason = family_unavailable(family)
    if reason is not None:
        pytest.skip(reason)


def misuse_off_settings() -> settings:
    """The active profile with half its examples, for the machine with its misuse rules off (module docstring)."""
    return settings_for(max_examples=max(1, settings().max_examples // 2))


# The scheduler machine has its own tests, pinned per kernel and page size.
POOL_FAMILIES = [name for name in FAMILIES if name != "scheduler"]


@MEASURED
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", POOL_FAMILIES)
def test_machine_finds_no_violation(family: str, device: str, target_overrides: dict[str, str], found_corpus: Path) -> None:
    skip_unless_loadable(family)
    run_machine(make_machine(family, overrides=target_overrides, device=device), corpus=found_corpus)


@pytest.mark.parametrize("family", [pytest.param(f, marks=MEASURED) if f == "prefix_cache" else f for f in POOL_FAMILIES])
def test_machine_with_misuse_rules_off_issues_valid_calls_only_and_stays_green(family: str) -> None:
    skip_unless_loadable(family)
    run_machine(make_machine(family, check_misuse=False), settings=misuse_off_settings())


DEVICE_PATH_MEASURED = {"paged_kv", "hybrid_req_to_token"}
"""The device-path runs that reach device code no other family's run does (tests/machine_coverage.py)."""


@pytest.mark.parametrize("family", [pytest.param(f, marks=MEASURED) if f in DEVICE_PATH_MEASURED else f for f in DEVICE_PATH_FAMILIES])
def test_the_kv_and_mamba_machines_find_no_violation_on_the_device_path_of_the_checks(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_PATH_ON_CPU, "1")
    run_machine(make_machine(family))


OPTIONAL_IMPORTS = [(family, name) for family, kit in FAMILIES.items() for name in kit.optional_imports]


@MEASURED
@pytest.mark.parametrize(("family", "module"), OPTIONAL_IMPORTS)
def test_a_machine_finds_no_violation_on_a_host_without_its_optional_import(family: str, module: str) -> None:
    with without_modules([module]):
        run_machine(make_machine(family))

"""Every family's state machine, on every available device, under the active profile."""

from __future__ import annotations

import pytest

from harness.machines import make_machine, run_machine
from harness.judge.families import FAMILIES
from tests.conftest import DEVICES

# The scheduler machine has its own tests, pinned per kernel and page size.
POOL_FAMILIES = [name for name in FAMILIES if name != "scheduler"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", POOL_FAMILIES)
def test_machine_finds_no_violation(family: str, device: str, target_overrides: dict[str, str]) -> None:
    run_machine(make_machine(family, overrides=target_overrides, device=device))


@pytest.mark.parametrize("family", POOL_FAMILIES)
def test_machine_with_misuse_rules_off_issues_valid_calls_only_and_stays_green(family: str) -> None:
    run_machine(make_machine(family, check_misuse=False))

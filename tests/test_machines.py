"""Every family's state machine, on every available device, under the active profile."""

from __future__ import annotations

import pytest

from harness.machines import make_machine
from harness.runner import run_machine
from tests.conftest import DEVICES

FAMILIES_READY = ["req_to_token", "decode_req_to_token"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES_READY)
def test_machine_finds_no_violation(family: str, device: str, target_overrides: dict[str, str]) -> None:
    run_machine(make_machine(family, overrides=target_overrides, device=device))

"""Test-suite wiring: our hypothesis profile, the ``--target`` option and the ``cuda`` marker."""

from __future__ import annotations

import pytest
import torch

from harness.machines.settings import load_default_profile

load_default_profile()

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[CUDA, pytest.mark.cuda])]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--target", action="append", default=[], metavar="FAMILY=module:attr",
        help="fuzz another implementation of a pool family (repeatable)",
    )


@pytest.fixture(scope="session")
def target_overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    from harness.judge.families import parse_overrides

    return parse_overrides(request.config.getoption("--target"))

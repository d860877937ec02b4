"""Test-suite wiring: our hypothesis profile, the ``--target`` option and the ``cuda`` marker."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase
from hypothesis import settings as Settings

from poolfuzz.harness.machines.settings import load_default_profile

load_default_profile()

pytest_plugins = ["tests.machine_coverage"]

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[CUDA, pytest.mark.cuda])]


def found_settings(*, examples: int, steps: int) -> Settings:
    """Deterministic whatever the profile, so the same bug is found the same way twice.

    Hypothesis's own shrink phase is left out: it costs seconds, and the runner's replay shrinker must reach a
    minimal trace without its help (so the run as found is longer than the shrunk trace).
    """
    return Settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=True,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )


def pytest_configure(config: pytest.Config) -> None:
    """A ``--target`` that does not resolve, or does not fit its family, stops the run at once with one
    line (as ``harness fuzz --target`` and ``--poolfuzz-target`` do), not after the whole suite ran."""
    from poolfuzz.harness.judge.families import UnknownTargetError
    from poolfuzz.harness.pytest_plugin import validate_targets

    try:
        validate_targets(config.getoption("--target"))
    except UnknownTargetError as exc:
        raise pytest.UsageError(f"--target: {exc}") from None


@pytest.fixture(scope="session")
def found_corpus(request: pytest.FixtureRequest) -> Path:
    """Where the machine tests save the shrunk trace of a counterexample (named in the failure)."""
    return request.config.rootpath / "corpus" / "found"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--target",
        action="append",
        default=[],
        metavar="FAMILY=module:attr",
        help="fuzz another implementation of a pool family (repeatable)",
    )


@pytest.fixture(scope="session")
def target_overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    from poolfuzz.harness.judge.families import parse_overrides

    return parse_overrides(request.config.getoption("--target"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The suite's skips grouped by reason, one line each with its count (``pytest -rs`` lists every one).

    ``-ra`` printed a line per skipping test location: 231 lines of the same few reasons (no CUDA device,
    upstream not installed) on a machine without a GPU or SGLang.  ``addopts`` is ``-rfE`` now, so this
    summary is where skips stay visible.
    """
    if "s" in (terminalreporter.config.option.reportchars or ""):
        return  # -rs / -ra asked for each skip: pytest prints them
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ").strip().splitlines()[0] if reason.strip() else "no reason"
        counts[reason] = counts.get(reason, 0) + 1
    if not counts:
        return
    terminalreporter.section("skipped, by reason (pytest -rs lists each test)")
    for reason, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"{count:5d}  {reason}")

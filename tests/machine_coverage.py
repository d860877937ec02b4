"""The machine tests alone reach at least 97% of the CPU-reachable branches of ``pools/``, measured as the suite runs them.

The fuzzer is the product, so the number that matters is what its state machines reach
(:mod:`poolfuzz.harness.bench.coverage`, which ``poolfuzz coverage`` runs on its own).  The suite
used to run the two machine test files a second time under ``coverage`` in a subprocess: three
minutes of one worker, the longest item of the run.  Now each machine test is measured where it
runs, in whichever xdist worker it lands (a ``coverage.Coverage`` around the test, its data saved
to a folder the workers share); a fresh process adds the lines that importing ``pools`` runs
(:func:`~poolfuzz.harness.bench.coverage.record_imports`: the workers imported it untraced during
collection); and at the end of the session the controller combines the data and fails the run when
the total is below :data:`~poolfuzz.harness.bench.coverage.REQUIRED`, with the per-file table of
what was missed.

Only the machine tests marked :data:`MEASURED` run traced.  Coverage's tracer costs a machine run about 70%
(``paged_kv``: 3.3 s untraced, 6.2 s traced, on this 2-core box), and most machine tests reach nothing the others
do not: per-test data of every machine test (2026-12-06, ``ci`` profile) showed the marked ones (every
family's run, each family's without its optional imports, the device path of ``paged_kv`` and
``hybrid_req_to_token`` (whose device code covers the other families'), the prefix cache with its misuse rules off
(the prompt-length split in ``RadixCache._settle`` that only its valid calls reach), the scheduler machine per kernel and
over hybrid rows) reach all 2,439 arcs of ``pools/`` the 41 reach, 2,437
without Triton.  A test left unmarked still runs and fails as before; the number is what the marked ones reach,
so it can only understate what the machine tests reach.  Mark a new machine test when it reaches code the
marked ones do not.

On with ``CI`` set (as the derandomised profile is) or ``--machine-coverage``; off when the run
selects a part of the machine tests (``-k``, ``-m``, ``--lf``, ``--deselect``, a node id), points
``--target`` at another pool, or a machine test failed: the number would mean nothing then.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from poolfuzz.harness.bench.coverage import MACHINE_TESTS, REQUIRED, ROOT, Measurement, combined, record_imports

FOLDER_ENV = "POOLFUZZ_MACHINE_COVERAGE_DIR"
"""The shared data folder; set by the controller before the xdist workers start, so they inherit it."""
MACHINE_FILES = frozenset(Path(name).name for name in MACHINE_TESTS)
MEASURED = pytest.mark.machine_coverage
"""The machine tests whose runs are traced (module docstring: the others reach nothing these do not)."""


class _State:
    """The controller's view of one measured run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.machine_failures = 0
        self.measurement: Measurement | None = None
        self.error = ""


_state: _State | None = None
"""Set in the controller (or the only process) when this run is measured."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--machine-coverage",
        action="store_true",
        default=False,
        help=f"fail the run when the machine tests reach less than {REQUIRED}% of pools/'s branches (on when CI is set)",
    )


def _whole_machine_run(config: pytest.Config) -> bool:
    """Whether this run collects every machine test as they stand: no selection, no other pool."""
    option = config.option
    if option.keyword or option.markexpr or getattr(option, "lf", False) or getattr(option, "deselect", None):
        return False
    if config.getoption("--target", default=None):
        return False
    if any("::" in arg for arg in config.args):
        return False
    machine_paths = {(ROOT / name).resolve() for name in MACHINE_TESTS}
    covered = {(Path(config.invocation_params.dir) / arg).resolve() for arg in config.args}
    return all(any(path == c or c in path.parents for c in covered) for path in machine_paths)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # a worker: the controller decided, and the folder came in the environment
    global _state
    os.environ.pop(FOLDER_ENV, None)
    _state = None
    wanted = config.getoption("--machine-coverage") or bool(os.environ.get("CI"))
    if wanted and _whole_machine_run(config):
        os.environ[FOLDER_ENV] = tempfile.mkdtemp(prefix="poolfuzz-machine-coverage-")
        _state = _State(Path(os.environ[FOLDER_ENV]))


@pytest.fixture(autouse=True)
def _measured_if_a_machine_test(request: pytest.FixtureRequest) -> Iterator[None]:
    folder = os.environ.get(FOLDER_ENV)
    if not folder or request.node.get_closest_marker(MEASURED.name) is None:
        yield
        return
    import coverage

    cov = coverage.Coverage(
        data_file=str(Path(folder) / ".coverage"),
        data_suffix=True,
        branch=True,
        source=[str(ROOT / "pools")],
        config_file=str(ROOT / "pyproject.toml"),
    )
    cov.set_option("run:disable_warnings", ["no-data-collected"])  # an engine machine runs no line of pools/
    cov.start()
    try:
        yield
    finally:
        cov.stop()
        cov.save()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count failed machine tests as their reports reach the controller."""
    if _state is not None and report.failed and Path(report.fspath).name in MACHINE_FILES:
        _state.machine_failures += 1


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    state = _state
    if state is None:
        return
    try:
        if state.machine_failures or not any(state.folder.glob(".coverage.*")):
            return  # a failed machine test is the failure to read; no data: none of them ran
        record_imports(state.folder)
        state.measurement = combined(state.folder, 0.0)
        if state.measurement.total < REQUIRED and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    except Exception as exc:  # noqa: BLE001 - reported in the summary and failing the run, not swallowed
        state.error = f"{type(exc).__name__}: {exc}"
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        shutil.rmtree(state.folder, ignore_errors=True)
        if os.environ.get(FOLDER_ENV) == str(state.folder):
            del os.environ[FOLDER_ENV]  # only the folder this state made: a test driving the hook in a worker keeps the worker's


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = _state
    if state is None:
        return
    if state.error:
        terminalreporter.write_line(f"machine coverage of pools/: could not be measured: {state.error}", red=True)
    elif state.measurement is not None:
        total = state.measurement.total
        line = f"machine coverage of pools/: {total:.2f}% of statements and branches (required {REQUIRED}%)"
        if total < REQUIRED:
            terminalreporter.write_sep("=", "machine coverage below the requirement", red=True)
            terminalreporter.write_line(line, red=True)
            terminalreporter.write_line(state.measurement.table(missing=True))
        else:
            terminalreporter.write_line(line)

"""The pieces of the machine-coverage measurement (``poolfuzz coverage``; the suite's own check is
``tests/machine_coverage.py``, which measures the machine tests as the suite runs them and fails the
run below 97% of the CPU-reachable branches of ``pools/``).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import coverage
import pytest

from poolfuzz.harness.bench.coverage import REQUIRED, FileCoverage, Measurement, _ranges
from tests import machine_coverage


def test_a_run_whose_measured_coverage_is_below_the_requirement_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session check has teeth: a worker's data that measured no line of ``pools`` (no machine test ran a step)
    is combined with the import pass, falls far below the requirement, and turns a passing run into a failed one.

    The worker's data file is written here, empty, in branch mode as the workers record: the hook's own import pass
    (:func:`~poolfuzz.harness.bench.coverage.record_imports`, a fresh process importing ``pools`` under coverage) is
    then all the measurement holds.  It used to be made by a second import pass, which added the same lines again
    at the cost of another fresh process."""
    empty = coverage.CoverageData(basename=str(tmp_path / ".coverage"), suffix="worker")
    empty.add_arcs({})  # branch data, of no file
    empty.write()
    state = machine_coverage._State(tmp_path)
    monkeypatch.setattr(machine_coverage, "_state", state)
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    machine_coverage.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert state.error == "" and state.measurement is not None
    assert {f.path for f in state.measurement.files} >= {"pools/kv_allocator.py", "pools/radix_cache.py", "pools/swa.py"}
    assert 20.0 < state.measurement.total < REQUIRED - 30, state.measurement.table()
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED


def test_driving_the_session_hook_in_a_worker_leaves_the_workers_own_measurement_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook removes only the folder its own state made: the tests above drive it inside an xdist worker, and
    when it popped the shared folder's variable there, every later machine test on that worker went unmeasured
    (a clean-clone CI run measured 64.74%)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv(machine_coverage.FOLDER_ENV, str(shared))
    own = tmp_path / "own"
    own.mkdir()
    monkeypatch.setattr(machine_coverage, "_state", machine_coverage._State(own))
    machine_coverage.pytest_sessionfinish(SimpleNamespace(exitstatus=pytest.ExitCode.OK))  # type: ignore[arg-type]
    assert os.environ[machine_coverage.FOLDER_ENV] == str(shared) and shared.is_dir()


def test_a_failed_machine_test_leaves_the_coverage_unmeasured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".coverage.worker").write_text("")
    state = machine_coverage._State(tmp_path)
    state.machine_failures = 1
    monkeypatch.setattr(machine_coverage, "_state", state)
    session = SimpleNamespace(exitstatus=pytest.ExitCode.TESTS_FAILED)
    machine_coverage.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert state.measurement is None and state.error == "" and session.exitstatus == pytest.ExitCode.TESTS_FAILED


def test_the_total_weighs_statements_and_branches_as_coverage_does() -> None:
    files = (FileCoverage("pools/a.py", 10, 1, 4, 1, "3, 5->7"), FileCoverage("pools/b.py", 6, 0, 0, 0, ""))
    result = Measurement(files, 1.0)
    assert round(result.total, 4) == round(100 * (20 - 2) / 20, 4)
    assert files[0].percent == 100 * 12 / 14
    table = result.table(missing=True)
    assert "| `pools/a.py` | 10 | 1 | 4 | 1 | 85.7% | 3, 5->7 |" in table
    assert "**90.0%**" in table


def test_missed_lines_are_shown_as_ranges() -> None:
    assert _ranges([94, 98, 99, 100, 103, 105, 106]) == ["94", "98-100", "103", "105-106"]

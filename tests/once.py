"""A module fixture's work done once per test run, however many xdist workers run the module's tests.

xdist's ``load`` scheduling spreads one module's tests over every worker, and a module-scoped fixture runs once on
each: test_report_schema's real fuzz run (10-20 s) ran twice in a 2-worker suite.  The pattern pytest-xdist documents
("making session-scoped fixtures execute only once"): the first worker computes into the run's shared temporary
folder under a file lock, the others read what it wrote.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def computed_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``make`` filled: once per run and shared by the workers under xdist, once per call without it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, each worker's basetemp below it
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder

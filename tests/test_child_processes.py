"""Workers start from a fork server yet see the parent's environment at their start, as spawned ones did; the fuzz
command's parent leaves torch to them."""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from poolfuzz.harness.child_processes import worker_context


def _report(conn: Connection) -> None:
    conn.send((os.environ.get("POOLFUZZ_CHILD_SET"), "POOLFUZZ_CHILD_GONE" in os.environ, "torch" in sys.modules))
    conn.close()


def _child_sees() -> tuple[str | None, bool, bool]:
    context = worker_context()
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=_report, args=(writer,), daemon=True)
    process.start()
    writer.close()
    seen: tuple[str | None, bool, bool] = reader.recv()
    process.join(timeout=30)
    return seen


def test_a_worker_gets_the_variables_the_parent_set_and_removed_after_the_fork_server_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLFUZZ_CHILD_GONE", "1")
    _child_sees()  # the fork server (where there is one) starts with POOLFUZZ_CHILD_GONE set
    monkeypatch.setenv("POOLFUZZ_CHILD_SET", "now")
    monkeypatch.delenv("POOLFUZZ_CHILD_GONE")

    value, gone_still_set, _ = _child_sees()

    assert value == "now"
    assert not gone_still_set


def _environment_variable(name: str) -> str | None:
    return os.environ.get(name)


def test_a_process_pool_worker_gets_the_parents_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ProcessPoolExecutor

    monkeypatch.setenv("POOLFUZZ_CHILD_SET", "pooled")
    with ProcessPoolExecutor(1, mp_context=worker_context()) as pool:
        assert pool.submit(_environment_variable, "POOLFUZZ_CHILD_SET").result() == "pooled"


@pytest.mark.skipif(worker_context().get_start_method() != "forkserver", reason="no fork server on this platform")
def test_a_forked_worker_starts_with_torch_already_imported() -> None:
    _, _, has_torch = _child_sees()

    assert has_torch


def test_the_fuzz_commands_parent_coordinates_its_workers_without_importing_torch(tmp_path: Path) -> None:
    """Checking the targets, and finding whose code each runs, happen in a worker process: the parent stays free
    of torch's two-second import (harness/fuzz/options.py: select_targets_apart)."""
    script = (
        "import sys\n"
        "from poolfuzz.harness.cli import main\n"
        "code = main(['fuzz', '--target', 'req_to_token', '--seconds', '1', '--workers', '1', '--seed', '1',\n"
        "             '--report', 'r.json', '--corpus', 'found', '--database', 'db'])\n"
        "print('exit', code, 'torch imported:', 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert "exit 0 torch imported: False" in done.stdout, done.stdout + done.stderr


def test_a_target_whose_import_ends_the_process_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from poolfuzz.harness.fuzz.options import select_targets_apart
    from poolfuzz.harness.judge.families import UnknownTargetError

    (tmp_path / "pool_that_exits_on_import.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the child takes the parent's sys.path

    with pytest.raises(UnknownTargetError, match="ended the process that tried it") as refused:
        select_targets_apart(["req_to_token=pool_that_exits_on_import:Pool"])
    assert "\n" not in str(refused.value)

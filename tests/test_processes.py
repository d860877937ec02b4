"""The tests' command runner: a command forked from a warm interpreter sees itself as a fresh ``python`` would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import _zygotes, python

PROBE = """
import atexit, json, os, sys, threading, time

view = {
    "argv": sys.argv, "path0": sys.path[0], "path": sys.path[1:], "file": globals().get("__file__"), "name": __name__,
    "cwd": os.getcwd(), "probe_variable": os.environ.get("PROBE_VARIABLE"), "getenv_home": os.getenv("HOME"),
    "isolated": sys.flags.isolated, "safe_path": sys.flags.safe_path, "no_site": sys.flags.no_user_site,
    "bytecode": sys.dont_write_bytecode, "encoding": [sys.stdout.encoding, sys.stderr.errors],
    "stdin": sys.stdin.read(), "main": sorted(k for k in vars(sys.modules["__main__"]) if not k.startswith("__")),
}
atexit.register(lambda: print("atexit ran", flush=True))
threading.Thread(target=lambda: (time.sleep(0.1), print("thread finished", flush=True))).start()
print(json.dumps(view), flush=True)
print("to stderr", file=sys.stderr)
raise SystemExit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else sys.argv[-1])
"""


@pytest.fixture()
def probe(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "probe.py").write_text(PROBE)
    return tmp_path / "pkg" / "probe.py"


COMMANDS = {
    "script": ("pkg/probe.py", "a", "3"),
    "isolated-script": ("-I", "pkg/probe.py", "0"),
    "environment-ignored-script": ("-E", "pkg/probe.py", "0"),
    "module": ("-m", "pkg.probe", "b", "0"),
    "code": ("-B", "-c", PROBE, "c", "a message, exit 1"),
}


@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_command_run_warm_sees_the_same_interpreter_and_ends_the_same_as_run_fresh(probe: Path, args: tuple[str, ...]) -> None:
    env = {**os.environ, "PROBE_VARIABLE": "set for this command"}
    cwd = probe.parent.parent
    fresh = python(*args, cwd=cwd, env=env, timeout=120, fresh=True)
    warm = python(*args, cwd=cwd, env=env, timeout=120)
    assert (warm.returncode, warm.stderr) == (fresh.returncode, fresh.stderr)
    assert warm.stdout.splitlines()[1:] == fresh.stdout.splitlines()[1:] == ["thread finished", "atexit ran"]
    assert json.loads(warm.stdout.splitlines()[0]) == json.loads(fresh.stdout.splitlines()[0])


def test_a_command_past_its_timeout_is_killed_and_the_next_one_runs(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        python("-c", "print('started', flush=True); import time; time.sleep(60)", cwd=tmp_path, timeout=0.5)
    done = python("-c", "print('next')", cwd=tmp_path, timeout=60)
    assert (done.returncode, done.stdout) == (0, "next\n")


def test_an_uncaught_ctrl_c_ends_the_command_by_sigint_as_the_interpreter_does(tmp_path: Path) -> None:
    warm = python("-c", "raise KeyboardInterrupt", cwd=tmp_path, timeout=60)
    fresh = python("-c", "raise KeyboardInterrupt", cwd=tmp_path, timeout=60, fresh=True)
    assert warm.returncode == fresh.returncode == -2 and "KeyboardInterrupt" in warm.stderr


def test_a_flag_the_runner_does_not_know_starts_a_fresh_interpreter(tmp_path: Path) -> None:
    done = python("-X", "importtime", "-c", "import sys; print('torch' in sys.modules)", cwd=tmp_path, timeout=120)
    assert done.stdout == "False\n" and "import time:" in done.stderr  # no warm torch: a fresh process ran it
    unknown = python("--check-hash-based-pycs", "default", "-c", "import sys; print('torch' in sys.modules)", cwd=tmp_path, timeout=120)
    assert unknown.stdout == "False\n"


def test_the_warm_interpreter_has_imported_torch_and_nothing_of_ours(tmp_path: Path) -> None:
    code = "import sys; print(sorted(m for m in ('torch', 'poolfuzz', 'hypothesis', 'tests') if m in sys.modules))"
    done = python("-c", code, cwd=tmp_path, timeout=120)
    assert done.stdout == "['torch']\n", done.stderr
    assert sys.executable == python("-c", "import sys; print(sys.executable)", cwd=tmp_path, timeout=60).stdout.strip()


@pytest.mark.parametrize("flags", [(), ("-P",), ("-I",)], ids=["plain", "safe-path", "isolated"])
def test_a_commands_pythonpath_reaches_sys_path_as_start_up_puts_it_without_a_zygote_of_its_own(
    probe: Path, flags: tuple[str, ...]
) -> None:
    cwd = probe.parent.parent
    python(*flags, "pkg/probe.py", "0", cwd=cwd, timeout=120)  # the zygote for these flags, started without it
    started = set(_zygotes)
    extra = cwd / "extra"
    extra.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(extra), f"{extra}/", str(cwd / "pkg"), os.path.dirname(os.__file__)])}
    fresh = python(*flags, "pkg/probe.py", "0", cwd=cwd, env=env, timeout=120, fresh=True)
    warm = python(*flags, "pkg/probe.py", "0", cwd=cwd, env=env, timeout=120)
    view = json.loads(warm.stdout.splitlines()[0])
    assert view == json.loads(fresh.stdout.splitlines()[0])
    assert (str(extra) in [view["path0"], *view["path"]]) == ("-I" not in flags)
    assert set(_zygotes) == started


@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
def test_a_command_in_its_own_session_past_its_timeout_is_killed_with_the_processes_it_started(tmp_path: Path, fresh: bool) -> None:
    code = "import subprocess, time; print(subprocess.Popen(['sleep', '60']).pid, flush=True); time.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        python("-c", code, cwd=tmp_path, timeout=2, fresh=fresh, session=True)
    output = expired.value.output
    grandchild = int(output if isinstance(output, str) else (output or b"").decode())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False

"""Python commands the tests run in a child process, their output captured as text (tests only).

Most of these commands are a standalone reproduction or a ``poolfuzz`` command: a few hundred milliseconds of work
after ``import torch``, which alone costs about 2 s of CPU on the 2-core CI box, twenty-odd times a suite.
:func:`python` therefore runs a command in a child *forked* from a warm interpreter (a zygote) that has imported
torch and nothing of ours, instead of in a fresh one.  The child is a process of its own (its own pid, exit status,
signals, working directory, environment and output files); what it shares with a fresh ``python ARGS`` is made exact
where it can differ:

* **Start-up.**  A zygote is started with the command's own interpreter flags (``-I``, ``-B``, ...) and the
  environment variables read while Python or torch start (:data:`STARTUP_VARIABLES`: ``PYTHON*``, locale, thread
  and device settings), one zygote per distinct set, so ``sys.flags``, ``sys.path`` (user site, isolated mode) and
  stdio encodings are what that command's own interpreter would have set up.  ``PYTHONPATH`` is the exception: the
  child puts absolute entries where start-up would (after ``sys.path[0]``, deduplicated as ``site`` does), so a
  kit's folder or the repository on it does not cost a zygote of its own (about 220 MB and 2 s of CPU each).
* **The command.**  The child takes the whole environment, the working directory and ``sys.argv`` of the command,
  sets ``sys.path[0]`` as ``python`` does for a script, ``-m`` or ``-c`` (nothing under ``-I``/``-P``), runs it
  in a fresh ``__main__`` with import caches cleared, and ends as the interpreter does: non-daemon threads joined,
  ``atexit`` handlers run, streams flushed, the exit status of ``SystemExit`` or 1 after a traceback.
* **What it cannot be.**  torch is already in ``sys.modules``, so a command that checks what it imports gets
  ``fresh=True``: a real ``subprocess.run``, as does any command with a flag :func:`_split` does not reproduce
  (``-X`` options among them).  A command that needs ``Popen`` (signals, process groups, ``preexec_fn``) is not
  run through here at all.  ``tests/test_processes.py`` holds the two ways to the same view of the interpreter.

Nothing of poolfuzz, hypothesis or the tests is preloaded: the child imports them from disk, as a fresh
interpreter would, so an edited module or a kit installed mid-run is seen.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

STARTUP_VARIABLES = ("PYTHON", "LC_", "LANG", "TORCH", "OMP_", "MKL_", "KMP_", "CUDA", "NVIDIA", "LD_", "TRITON")
"""Prefixes of the environment variables an interpreter or ``import torch`` reads as it starts: a command whose
values of them differ from a zygote's gets a zygote of its own."""

_FLAGS = frozenset({"-I", "-B", "-P", "-E", "-s", "-S", "-u", "-O", "-OO", "-b", "-bb", "-q"})
_FLAGS_WITH_VALUE = frozenset({"-W"})

_ZYGOTE = r"""
import atexit, builtins, importlib, importlib.machinery, json, os, runpy, signal, sys, threading, types

def main():
    import torch  # the preload: everything else the child imports is its own

    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "w")
    for line in requests:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            replies.close()
            os._exit(child(job))
        replies.write(f"{pid}\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(f"{os.waitstatus_to_exitcode(status)}\n")
        replies.flush()

def child(job):
    code, interrupted = 1, False
    try:
        if job["session"]:
            os.setsid()
        stdin = os.open(os.devnull, os.O_RDONLY)
        out = os.open(job["stdout"], os.O_WRONLY | os.O_TRUNC)
        err = os.open(job["stderr"], os.O_WRONLY | os.O_TRUNC)
        for fd, target in ((stdin, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        sys.argv, sys.orig_argv = job["argv"], job["orig_argv"]
        if job["path0"] is not None:
            sys.path[0] = job["path0"]
        if job["pythonpath"]:  # where start-up puts PYTHONPATH: after path0, deduplicated as site does
            at, entries = (0 if job["path0"] is None else 1), list(dict.fromkeys(job["pythonpath"]))
            sys.path[at:] = entries + [entry for entry in sys.path[at:] if entry not in entries]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        main_module = types.ModuleType("__main__")
        main_module.__builtins__ = builtins
        sys.modules["__main__"] = main_module
        if job["mode"] == "script":  # as the interpreter runs a script: in __main__, argv[0] as given
            with open(job["run"], "rb") as handle:
                source = handle.read()
            main_module.__file__, main_module.__cached__ = job["run"], None
            main_module.__loader__ = importlib.machinery.SourceFileLoader("__main__", job["run"])
            exec(compile(source, job["run"], "exec"), main_module.__dict__)
        elif job["mode"] == "module":
            runpy._run_module_as_main(job["run"], alter_argv=True)
        else:
            exec(compile(job["run"], "<string>", "exec"), main_module.__dict__)
        code = 0
    except SystemExit as exc:
        code = exit_status(exc.code)
    except BaseException as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
        interrupted = isinstance(exc, KeyboardInterrupt)
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    if interrupted:  # as the interpreter ends after an uncaught Ctrl-C: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code

def exit_status(value):
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1

main()
"""


def python(
    *args: str, cwd: Path, timeout: float | None, env: Mapping[str, str] | None = None, fresh: bool = False, session: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (this interpreter) run to its end in ``cwd``, in ``env`` (else this process's environment), its
    stdout and stderr captured as text; its exit status is the caller's to check.

    Forked from a warm zygote (module docstring); ``fresh=True`` starts a new interpreter instead, for a command whose
    test checks what it imports.  ``session=True`` runs the command in a session of its own and, past ``timeout``,
    kills its whole process group (a ``poolfuzz fuzz`` and the workers it started), not the command alone."""
    environment = dict(os.environ if env is None else env)
    command = None if fresh or not hasattr(os, "fork") else _split(args)
    if command is None:
        return _fresh(args, Path(cwd), environment, timeout, session)
    pythonpath = _pythonpath(command.flags, environment)
    return _zygote(command.flags, environment, pythonpath).run(command, Path(cwd), environment, timeout, session, pythonpath)


def _fresh(
    args: tuple[str, ...], cwd: Path, environment: dict[str, str], timeout: float | None, session: bool
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *args]
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=session,
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process.pid, session)
            out, err = process.communicate()
            raise subprocess.TimeoutExpired(command, timeout or 0.0, out, err) from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _kill(pid: int, session: bool) -> None:
    """SIGKILL to ``pid``, and to its process group when it leads one (a child forked just now may not yet)."""
    try:
        (os.killpg if session else os.kill)(pid, signal.SIGKILL)
    except ProcessLookupError:
        os.kill(pid, signal.SIGKILL)


class _Command(NamedTuple):
    """A command line as the interpreter reads it: its flags, then a script, ``-m`` module or ``-c`` code and its
    arguments."""

    args: tuple[str, ...]
    flags: tuple[str, ...]
    mode: str  # "script", "module" or "code"
    what: str
    rest: tuple[str, ...]


def _split(args: tuple[str, ...]) -> _Command | None:
    """``args`` read as the interpreter reads them; ``None`` when a flag is not one this runner reproduces."""
    flags: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in _FLAGS:
            flags.append(arg)
        elif arg in _FLAGS_WITH_VALUE and index + 1 < len(args):
            flags += [arg, args[index + 1]]
            index += 1
        elif arg in ("-m", "-c") and index + 1 < len(args):
            return _Command(args, tuple(flags), "module" if arg == "-m" else "code", args[index + 1], args[index + 2 :])
        elif arg.startswith("-"):
            return None
        else:
            return _Command(args, tuple(flags), "script", arg, args[index + 1 :])
        index += 1
    return None


class _Zygote:
    """One warm interpreter: started with a command's flags and start-up environment, forking a child per command."""

    def __init__(self, flags: tuple[str, ...], environment: Mapping[str, str], pythonpath: tuple[str, ...] | None) -> None:
        self.lock = threading.Lock()
        # Where the children put PYTHONPATH on sys.path themselves, the zygote starts without it.
        started = {name: value for name, value in environment.items() if pythonpath is None or name != "PYTHONPATH"}
        self.process = subprocess.Popen(
            [sys.executable, *flags, "-c", _ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=started, cwd=tempfile.gettempdir()
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests, self.replies = self.process.stdin, self.process.stdout
        self.safe_path = "-I" in flags or "-P" in flags  # no sys.path[0], as -I and -P start

    def run(
        self,
        command: _Command,
        cwd: Path,
        environment: dict[str, str],
        timeout: float | None,
        session: bool,
        pythonpath: tuple[str, ...] | None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in a child; ``pythonpath`` is what the child puts on ``sys.path`` (:func:`_pythonpath`)."""
        args, mode, what, rest = command.args, command.mode, command.what, command.rest
        if mode == "script":
            argv, path0 = [what, *rest], os.path.dirname(os.path.realpath(cwd / what))
        elif mode == "module":
            argv, path0 = ["-m", *rest], os.path.realpath(cwd)
        else:
            argv, path0 = ["-c", *rest], ""
        with self.lock, tempfile.TemporaryDirectory(prefix="poolfuzz-zygote-") as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            out.touch()
            err.touch()
            job = {
                "argv": argv,
                "orig_argv": [sys.executable, *args],
                "cwd": str(cwd),
                "env": environment,
                "mode": mode,
                "run": str(cwd / what) if mode == "script" else what,
                "stdout": str(out),
                "stderr": str(err),
                "path0": None if self.safe_path else path0,
                "session": session,
                "pythonpath": pythonpath,
            }
            self.requests.write(json.dumps(job).encode() + b"\n")
            self.requests.flush()
            pid = int(self._reply(None))
            try:
                status = int(self._reply(timeout))
            except subprocess.TimeoutExpired:
                _kill(pid, session)
                self._reply(None)
                raise subprocess.TimeoutExpired([sys.executable, *args], timeout or 0.0, out.read_text(), err.read_text()) from None
            return subprocess.CompletedProcess([sys.executable, *args], status, out.read_text(), err.read_text())

    def _reply(self, timeout: float | None) -> str:
        if timeout is not None and not select.select([self.replies], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("zygote", timeout)
        line = self.replies.readline()
        if not line:
            raise RuntimeError(f"the warm interpreter exited (status {self.process.wait()})")
        return line.decode()

    def close(self) -> None:
        self.requests.close()
        self.process.wait(timeout=30)


_zygotes: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], _Zygote] = {}


def _pythonpath(flags: tuple[str, ...], environment: Mapping[str, str]) -> tuple[str, ...] | None:
    """The ``PYTHONPATH`` entries a child puts on ``sys.path`` itself, as start-up would (absolute, normalised); empty
    under ``-I``/``-E``, which ignore it; ``None`` for entries only start-up resolves (relative or empty: against the
    interpreter's first working directory), which a zygote of their own then starts with."""
    if _ignores_environment(flags):
        return ()
    value = environment.get("PYTHONPATH", "")
    entries = value.split(os.pathsep) if value else []
    return tuple(os.path.abspath(entry) for entry in entries) if all(map(os.path.isabs, entries)) else None


def _ignores_environment(flags: tuple[str, ...]) -> bool:
    """Whether start-up ignores every ``PYTHON*`` variable: ``-E``, or ``-I`` which implies it."""
    return "-I" in flags or "-E" in flags


def _zygote(flags: tuple[str, ...], environment: Mapping[str, str], pythonpath: tuple[str, ...] | None) -> _Zygote:
    """The zygote for a command: one per set of flags and start-up variables, ``PYTHONPATH`` left to the child where
    it can be (``pythonpath`` not ``None``: :func:`_pythonpath`), every ``PYTHON*`` variable left out under
    ``-I``/``-E``."""
    ignored = ("PYTHON",) if _ignores_environment(flags) else ("PYTHONPATH",) if pythonpath is not None else ()
    startup = tuple(
        sorted(
            (name, value)
            for name, value in environment.items()
            if name.startswith(STARTUP_VARIABLES) and not (ignored and name.startswith(ignored))
        )
    )
    key = (flags, startup)
    if key not in _zygotes or _zygotes[key].process.poll() is not None:
        _zygotes[key] = _Zygote(flags, environment, pythonpath)
    return _zygotes[key]


@atexit.register
def _close_zygotes() -> None:
    for zygote in _zygotes.values():
        zygote.close()

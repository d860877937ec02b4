"""SIGINT and SIGTERM end a command within a second, wherever it is, with its counts so far.

:class:`SignalGuard` replaces the two handlers for the duration of a ``with``
block.  The handler raises :class:`Interrupted` (a ``BaseException``, so no
``except Exception`` in a driver or pool swallows it); the command catches it,
prints what it did so far and returns ``128 + signal`` (130, 143).

A handler written in Python only runs when the main thread is between
bytecodes.  Stuck inside a call that does not return (a blocking C call that
retries on ``EINTR``, say), it would never run.  So the C-level handler also
writes the signal number to a pipe (``signal.set_wakeup_fd``), which a
watchdog thread reads: if the main thread has not finished within
:data:`GRACE` seconds, the watchdog prints the same summary itself and ends the
process with ``os._exit(128 + signal)``.  That covers every call that releases
the GIL; one that holds it (a long pure-C loop, none in the replay path within
the size limits) delays the exit until it returns.

Outside the main thread (where Python allows no handlers) the guard does nothing.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, final

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE = 0.5
"""Seconds the main thread has to finish after a signal before the watchdog ends the process."""
_STOP = b"\xff"
"""Written by the guard itself to wake and end the watchdog (no signal has this number)."""


class Interrupted(BaseException):
    """Raised in the main thread by :class:`SignalGuard`'s handler."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)

    @property
    def status(self) -> int:
        """The exit status a shell reports for the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


@final
class SignalGuard:
    """``with SignalGuard(summary) as guard:`` turns SIGINT/SIGTERM into :class:`Interrupted` and enforces :data:`GRACE`.

    ``summary(name)`` gives the final line to print (``name`` is ``SIGINT`` or
    ``SIGTERM``); whoever prints it first, the command via :meth:`claim` or the
    watchdog, is the only one that does.
    """

    def __init__(self, summary: Callable[[str], str], *, grace: float = GRACE) -> None:
        self.summary = summary
        self.grace = grace
        self.signum: int | None = None
        self._claimed = False
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._previous: dict[int, Any] = {}
        self._previous_fd: int | None = None
        self._pipe: tuple[int, int] | None = None
        self._watchdog: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is not threading.main_thread():
            return self
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        self._watchdog = threading.Thread(target=self._watch, name="poolfuzz-signal-watchdog", daemon=True)
        self._watchdog.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        self._finished.set()  # from here a signal is ignored: the command is ending anyway
        if self._pipe is None:
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(-1 if self._previous_fd is None else self._previous_fd)
        read, write = self._pipe
        try:
            os.write(write, _STOP)
        except OSError:
            pass
        if self._watchdog is not None:
            self._watchdog.join(timeout=2 * self.grace)
        os.close(read)
        os.close(write)
        self._pipe = None

    @property
    def active(self) -> bool:
        """Whether the handlers are installed (the guard was entered in the main thread)."""
        return self._pipe is not None

    def claim(self) -> bool:
        """True for the first caller (the command or the watchdog): that one prints the summary."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    # ------------------------------------------------------------ internals
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None or self._finished.is_set():
            return  # already ending: a second Ctrl-C must not break the summary being printed
        self.signum = signum
        raise Interrupted(signum)

    def _watch(self) -> None:
        assert self._pipe is not None
        read = self._pipe[0]
        while True:
            try:
                select.select([read], [], [])
                data = os.read(read, 64)
            except (OSError, ValueError):
                return
            if _STOP in data or not data:
                return
            signums = [b for b in data if b in SIGNALS]
            if signums:
                break
        signum = signums[0]
        if self._finished.wait(self.grace) or not self.claim():
            return
        name = signal.Signals(signum).name
        try:
            line = self.summary(name)
        except Exception:  # noqa: BLE001 - the exit must happen whatever the summary does
            line = f"interrupted by {name}"
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):
            fd = 1
        try:
            os.write(fd, (line + "\n").encode())
        except OSError:
            pass
        os._exit(128 + signum)

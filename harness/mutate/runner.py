"""The parent side: a pool of worker processes, fed one job at a time, under a watchdog.

Each worker (:func:`poolfuzz.harness.mutate.worker.serve`, started from
:func:`~poolfuzz.harness.child_processes.worker_context`'s fork server, so it imports the pools fresh) takes one job, replies, and takes the next.  The
parent watches the clock: a worker still busy past its job's limit is killed
(the job's reply is ``("timeout", limit)``) and a fresh worker takes its place
while jobs remain; a worker that dies mid-job gives ``("crashed", exit code)``.
A worker that cannot start (it reports ``fatal``, or dies before it is ready)
stops the whole run with :class:`WorkerFailed`: a broken harness must never be
counted as killed mutants.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from poolfuzz.harness.child_processes import worker_context
from poolfuzz.harness.mutate.worker import WorkerSetup, serve

STARTUP_LIMIT = 300.0
"""Seconds a worker may take to import and index the pools before the run is abandoned."""
_POLL = 0.2


class WorkerFailed(RuntimeError):
    """A worker could not start: the run cannot be trusted and stops."""


@dataclass(frozen=True)
class Job:
    """One message for a worker, the key its reply is filed under, and how long it may run."""

    key: str
    message: tuple[Any, ...]
    limit: float


@dataclass
class _Slot:
    process: BaseProcess
    conn: Connection
    spawned: float
    ready: bool = False
    job: Job | None = None
    started: float = 0.0


class WorkerPool:
    """``workers`` processes built from ``setup``; :meth:`run` feeds them jobs until all have replies."""

    def __init__(self, setup: WorkerSetup, workers: int) -> None:
        self.setup = setup
        self.workers = workers
        self.context = worker_context()
        self.slots: list[_Slot] = []
        self.restarts = 0

    def _spawn(self) -> _Slot:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=serve, args=(child, self.setup), daemon=True, name="poolfuzz-mutate")
        process.start()
        child.close()
        return _Slot(process, parent, time.monotonic())

    def _stop(self, slot: _Slot) -> None:
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join(timeout=10)
        slot.conn.close()

    def close(self) -> None:
        """Stop every worker: ask the idle ones to exit, kill the busy ones."""
        for slot in self.slots:
            if slot.ready and slot.job is None and slot.process.is_alive():
                try:
                    slot.conn.send(None)
                    slot.process.join(timeout=5)
                except (OSError, BrokenPipeError):
                    pass
            self._stop(slot)
        self.slots.clear()

    def run(self, jobs: Sequence[Job], on_reply: Callable[[Job, tuple[Any, ...]], None]) -> None:
        """Run every job, calling ``on_reply(job, reply)`` as each finishes (in completion order)."""
        pending = deque(jobs)
        while len(self.slots) < min(self.workers, len(pending)):
            self.slots.append(self._spawn())
        while pending or any(slot.job is not None for slot in self.slots):
            for slot in self.slots:
                if slot.ready and slot.job is None and pending:
                    slot.job = pending.popleft()
                    slot.conn.send(slot.job.message)
                    slot.started = time.monotonic()
            ready = wait([slot.conn for slot in self.slots], timeout=_POLL)
            for slot in [s for s in self.slots if s.conn in ready]:
                self._receive(slot, on_reply, bool(pending))
            self._watch(on_reply, bool(pending))

    def _receive(self, slot: _Slot, on_reply: Callable[[Job, tuple[Any, ...]], None], more: bool) -> None:
        try:
            message = slot.conn.recv()
        except (EOFError, OSError):
            self._died(slot, on_reply, more)
            return
        if message[0] == "ready":
            slot.ready = True
        elif message[0] == "fatal":
            raise WorkerFailed(f"a mutation worker could not start:\n{message[1]}")
        else:
            job, slot.job = slot.job, None
            assert job is not None, "a worker replied without a job"
            on_reply(job, message)

    def _died(self, slot: _Slot, on_reply: Callable[[Job, tuple[Any, ...]], None], more: bool) -> None:
        slot.process.join(timeout=10)
        if not slot.ready:
            raise WorkerFailed(f"a mutation worker exited while starting (exit code {slot.process.exitcode})")
        job = slot.job
        self._replace(slot, more)
        if job is not None:
            on_reply(job, ("crashed", slot.process.exitcode))

    def _watch(self, on_reply: Callable[[Job, tuple[Any, ...]], None], more: bool) -> None:
        now = time.monotonic()
        for slot in list(self.slots):
            if not slot.ready and now - slot.spawned > STARTUP_LIMIT:
                raise WorkerFailed(f"a mutation worker did not start within {STARTUP_LIMIT:.0f} s")
            if slot.job is not None and now - slot.started > slot.job.limit:
                job = slot.job
                self._replace(slot, more)
                on_reply(job, ("timeout", job.limit))

    def _replace(self, slot: _Slot, more: bool) -> None:
        self._stop(slot)
        self.slots.remove(slot)
        if more:
            self.slots.append(self._spawn())
            self.restarts += 1

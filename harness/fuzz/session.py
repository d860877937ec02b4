"""The nightly runner: fuzz every target on every core for a time budget, then report.

:func:`select_targets` turns ``--target`` values into :class:`TargetRef` s;
:class:`FuzzRun` starts one process per worker (:mod:`poolfuzz.harness.fuzz.protocol`, from
:mod:`poolfuzz.harness.child_processes`' fork server), collects their counters and findings over per-worker pipes, drives
the live display (:mod:`poolfuzz.harness.fuzz.progress`) and builds the report
(:mod:`poolfuzz.harness.fuzz.run_report`, of :mod:`poolfuzz.harness.fuzz.report`'s parts): at each finding too, and for the live page
(:mod:`poolfuzz.harness.fuzz.snapshots`).

How a run ends:

* The budget is fuzzing time: workers import torch and hypothesis (seconds,
  more on a loaded machine), say hello, and all start together when the last
  one is ready; the clock starts then.
* At the deadline the stop event is set; workers abandon their round unless
  they are shrinking a failure, which may go on for ``grace`` seconds.  Then
  the parent sends SIGTERM (a worker saves its smallest failing trace so far)
  and, 5 s later, SIGKILL.
* Ctrl-C (or SIGTERM to the parent) does the same within a second: half a second of
  grace, then SIGTERM, then SIGKILL half a second later; a second Ctrl-C terminates the
  workers at once.  A failure being shrunk is not lost: its unshrunk trace was written
  the moment it was found.  The report is still written; the exit status is 130 for
  SIGINT and 143 for SIGTERM unless something was found (1).
* A worker that dies on its own (segfault, CUDA abort, OOM kill) is reported
  with its exit code and log; the target it was on is retired, and a
  replacement worker carries on with the others.  A worker whose failure was a
  sticky CUDA error reports it, then exits with ``EXIT_RESTART`` to be
  replaced: its CUDA context is unusable.
* A target is fuzzed until its first failure in this run; then it is retired
  for every worker, and the report says so.  A failure that is a known finding
  (``corpus/known.toml``, :mod:`poolfuzz.harness.upstream.known`) is recorded as known and
  its target put back, so fuzzing goes on past it and the run exits 0 unless
  something new turns up (``--strict``: a known finding retires its target and fails
  the run, as a new one does).

Targets do not get equal time: every :data:`SHARES_EVERY_S` the parent turns
each target's behaviours so far (distinct event labels, and branch arcs under
``--coverage``) into shares of the fuzzing time (:mod:`poolfuzz.harness.fuzz.shares`:
more to targets still finding new behaviour, a floor for all), and workers
draw their next target from them.
"""

from __future__ import annotations

import multiprocessing.connection
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from poolfuzz.harness.child_processes import worker_context
from poolfuzz.harness.fuzz.findings import Findings, cut_off_by
from poolfuzz.harness.fuzz.options import FuzzOptions
from poolfuzz.harness.fuzz.process import worker_main
from poolfuzz.harness.fuzz.progress import Progress
from poolfuzz.harness.fuzz.protocol import (
    EXIT_RESTART,
    Bye,
    CoverageSample,
    FailureFound,
    FailureSeen,
    Hello,
    Message,
    ProgressReport,
    RoundStarted,
    Shared,
    WorkerPlan,
)
from poolfuzz.harness.fuzz.report import CrashRecord, RunReport, TargetStats, possible_arcs, utc_now
from poolfuzz.harness.fuzz.run_report import build_run_report, opening_line
from poolfuzz.harness.fuzz.shares import ShareBook
from poolfuzz.harness.fuzz.slots import Slot
from poolfuzz.harness.fuzz.snapshots import Snapshots

MAX_RESPAWNS = 3
KILL_AFTER_TERM_S = 5.0
SHARES_EVERY_S = 2.0
"""How often the parent recomputes the targets' shares of fuzzing time from what they found."""
STARTUP_TIMEOUT_S = 300.0
LIVE_EVERY_S = 5.0
"""How often ``fuzz --dashboard`` rewrites the live page (it reloads itself as often)."""
INTERRUPT_GRACE_S = 0.5
"""How long a worker shrinking a failure may go on after Ctrl-C or SIGTERM: the unshrunk trace is
already on disk (written at the first failing step), so an interrupt is honoured within a second."""
KILL_AFTER_INTERRUPT_S = 0.5


class FuzzRun:
    """One ``poolfuzz fuzz`` run; :meth:`run` returns the report dict."""

    def __init__(self, options: FuzzOptions, *, err: TextIO, live: Callable[[dict[str, Any]], None] | None = None,
                 live_every: float = LIVE_EVERY_S) -> None:
        from poolfuzz.harness.upstream.known import load_known

        self.options = options
        self.ctx = worker_context()
        slots = max(1, len(options.targets))
        self.shared = Shared(go=self.ctx.Event(), stop=self.ctx.Event(),
                             retired=self.ctx.Array("b", slots, lock=False),
                             shares=self.ctx.Array("d", [1.0 / slots] * slots, lock=False))
        self.retired = self.shared.retired
        self.book = ShareBook([t.key for t in options.targets])
        self.next_shares = 0.0
        arcs = possible_arcs() if options.coverage else None
        self.stats = {
            t.key: TargetStats(t.key, t.family, t.spec, possible_arcs=arcs, upstream=t.upstream, strict=options.strict)
            for t in options.targets
        }
        self.series_every = options.series_every or max(1.0, options.seconds / 100)
        self.next_sample = float("inf")
        self.by_key = {t.key: t for t in options.targets}
        self.slots: list[Slot] = []
        self.finished: list[Slot] = []
        self.crashes: list[CrashRecord] = []
        self.handlers: dict[type, Any] = {
            Hello: self.on_hello, RoundStarted: self.on_round, ProgressReport: self.on_progress,
            CoverageSample: self.on_coverage, FailureSeen: self.on_seen, FailureFound: self.on_failure,
            Bye: self.on_bye,
        }
        self.interrupts = 0
        self.signal: int | None = None
        self.stop_reason: str | None = None
        self.term_at = self.kill_at = float("inf")
        self.termed = False
        # Worker logs: kept (next to the report, by default) only when a worker crashed.
        self.logdir = options.logs or Path(tempfile.mkdtemp(prefix="poolfuzz-logs-"))
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.covdir = Path(tempfile.mkdtemp(prefix="poolfuzz-coverage-")) if options.coverage else None
        self.started = self.fuzz_started = time.time()
        self.started_iso = utc_now()
        self.deadline = float("inf")  # set when the workers are ready (start_when_ready)
        self.progress = Progress(err, live=options.live, every=options.progress_every, started=self.started,
                                 deadline=self.started + options.seconds)
        self.findings = Findings(self.stats, self.progress.note, known=load_known(options.known_file), strict=options.strict)
        self.snapshots = Snapshots(lambda: self.build_report(final=False).to_json(), report=options.report, live=live,
                                   live_every=live_every, note=self.progress.note)
        """The report so far: to ``options.report`` at findings, to ``live`` (the live page) then and when due."""

    # ------------------------------------------------------------ workers
    def spawn(self, index: int, generation: int) -> None:
        o = self.options
        log = self.logdir / f"worker-{index}.{generation}.log"
        # Workers stop on the parent's event; their own deadline only ends an orphaned worker.
        deadline = self.deadline if self.deadline != float("inf") else time.time() + STARTUP_TIMEOUT_S + o.seconds
        plan = WorkerPlan(
            worker=index, generation=generation, targets=tuple(o.targets), seed=o.seed, deadline=deadline,
            steps=o.steps, misuse=o.misuse, device=o.device, corpus=str(o.corpus), database=o.database,
            log_path=str(log), round_seconds=o.round_seconds, walk_share=o.walk_share,
            coverage_dir=str(self.covdir) if self.covdir else None, strict=o.strict,
            known_file=str(o.known_file) if o.known_file else None,
        )
        reader, writer = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=worker_main, args=(plan, writer, self.shared),
                                   name=f"poolfuzz-{plan.name}", daemon=True)
        process.start()
        writer.close()
        self.slots.append(Slot(index, generation, process, reader, log))

    # ----------------------------------------------------------- messages
    def handle(self, slot: Slot, message: Message) -> None:
        self.handlers[type(message)](slot, message)

    def on_hello(self, slot: Slot, message: Hello) -> None:
        slot.greeted, slot.info = True, message
        self.start_when_ready()

    def on_round(self, slot: Slot, message: RoundStarted) -> None:
        slot.target, slot.round, slot.rounds = message.target, message, slot.rounds + 1
        self.stats[message.target].rounds += 1

    def on_progress(self, slot: Slot, message: ProgressReport) -> None:
        self.stats[message.target].add_progress(message)

    def on_coverage(self, slot: Slot, message: CoverageSample) -> None:
        self.stats[message.target].add_arcs(message.arcs)

    def on_seen(self, slot: Slot, message: FailureSeen) -> None:
        self.retired[self.by_key[message.target].index] = 1
        now = time.time()
        if self.findings.sighted(message, worker=slot.name, after_s=now - self.fuzz_started, since_start_s=now - self.started):
            self.snapshots.finding(now)

    def on_failure(self, slot: Slot, message: FailureFound) -> None:
        # A known finding (corpus/known.toml) puts its target back, unless --strict: fuzzing goes on past it.
        self.retired[self.by_key[message.target].index] = 0 if message.known is not None and not self.options.strict else 1
        now = time.time()
        cut_off = cut_off_by(self.stop_reason, self.options.grace)
        if self.findings.found(message, worker=slot.name, after_s=now - self.fuzz_started, cut_off=cut_off):
            self.snapshots.finding(now)

    def on_bye(self, slot: Slot, message: Bye) -> None:
        slot.said_bye = True

    def sample(self, now: float, *, force: bool = False) -> None:
        """Append a time-series point to every target when one is due (and always at the end)."""
        if now < self.next_sample and not force:
            return
        for stats in self.stats.values():
            stats.sample(now - self.fuzz_started)
        self.next_sample = now + self.series_every

    def update_shares(self, now: float) -> None:
        """Give more of the time to targets still finding new behaviour (:mod:`poolfuzz.harness.fuzz.shares`)."""
        if now < self.next_shares:
            return
        self.next_shares = now + SHARES_EVERY_S
        for target in self.options.targets:
            stats = self.stats[target.key]
            self.book.targets[target.key].retired = bool(self.retired[target.index])  # a known finding puts one back
            behaviours = len(stats.events) + sum(len(arcs) for arcs in stats.arcs.values())
            self.book.observe(target.key, behaviours=behaviours, seconds=stats.seconds)
        shares = self.book.shares()
        for target in self.options.targets:
            self.shared.shares[target.index] = shares[target.key]

    def start_when_ready(self, *, anyway: bool = False) -> None:
        """Start the clock (and the workers) once every first-generation worker is ready or gone."""
        if self.deadline != float("inf"):
            return
        first = [s for s in self.slots + self.finished if s.generation == 0]
        if not anyway and not all(s.greeted or s in self.finished for s in first):
            return
        self.fuzz_started = time.time()
        self.deadline = self.fuzz_started + self.options.seconds
        self.progress.fuzzing_from(self.fuzz_started, self.deadline)
        self.next_sample = self.fuzz_started
        self.shared.go.set()

    def drain(self, slot: Slot) -> None:
        try:
            while slot.conn.poll():
                self.handle(slot, slot.conn.recv())
        except (EOFError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - a garbled message from a dying worker
            self.progress.note(f"worker {slot.name}: unreadable message ({type(exc).__name__}: {exc})")

    def reap(self, slot: Slot) -> None:
        """A worker process ended: collect its last words, record a crash, maybe replace it."""
        self.drain(slot)
        slot.process.join()
        slot.conn.close()
        self.slots.remove(slot)
        self.finished.append(slot)
        code = slot.process.exitcode
        if (slot.said_bye and code == 0) or slot.asked_to_stop:
            return
        if slot.said_bye and code == EXIT_RESTART:
            self.progress.note(f"worker {slot.name}: CUDA error on {slot.target}; replacing the process")
            self.replace(slot)
            return
        reason = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        crash = CrashRecord(worker=slot.name, target=slot.target, round=slot.round.round if slot.round else None,
                            seed=slot.round.seed if slot.round else None, exit_code=code, reason=reason,
                            log=str(slot.log), log_tail=self.log_tail(slot.log))
        self.crashes.append(crash)
        if slot.target is not None:
            self.stats[slot.target].crashes.append(crash)
            self.retired[self.by_key[slot.target].index] = 1
        self.progress.note(f"CRASH worker {slot.name} on {slot.target or '(no target yet)'}: {reason}; log {slot.log}")
        self.replace(slot)

    def replace(self, slot: Slot) -> None:
        """Start the next generation of a worker that died, unless there is no point."""
        active = [t for t in self.options.targets if not self.retired[t.index]]
        if slot.greeted and active and self.stop_reason is None and slot.generation < MAX_RESPAWNS:
            self.spawn(slot.index, slot.generation + 1)
        self.start_when_ready()

    @staticmethod
    def log_tail(path: Path, limit: int = 6000) -> str:
        """The end of a worker's log, from the fatal-error banner when faulthandler wrote one."""
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return ""
        banner = text.rfind("Fatal Python error")
        return text[banner:][:limit] if banner >= 0 else text[-limit:]

    # --------------------------------------------------------------- stop
    def begin_stop(self, reason: str, grace: float) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.shared.stop.set()
            self.progress.status = f"stopping ({reason})"
            self.progress.note(f"poolfuzz: {reason}; stopping workers (a failure being shrunk gets {grace:g} s)")
            for slot in self.slots:
                if not slot.greeted:  # still importing: nothing to save, no reason to wait
                    slot.asked_to_stop = True
                    slot.process.terminate()
        self.term_at = min(self.term_at, time.time() + grace)

    def enforce_stop(self, now: float) -> None:
        if now >= self.term_at and not self.termed:
            self.termed = True
            self.kill_at = now + (KILL_AFTER_INTERRUPT_S if self.stop_reason == "interrupted" else KILL_AFTER_TERM_S)
            for slot in self.slots:
                slot.asked_to_stop = True
                if slot.process.is_alive():
                    slot.process.terminate()
        if now >= self.kill_at:
            for slot in self.slots:
                if slot.process.is_alive():
                    slot.process.kill()

    def on_signal(self, signum: int, frame: Any) -> None:
        self.interrupts += 1
        self.signal = signum

    # ---------------------------------------------------------------- run
    def run(self) -> dict[str, Any]:
        """Fuzz until the budget is spent or the run is interrupted; the JSON report (see :class:`RunReport`)."""
        o = self.options
        self.progress.note(opening_line(o))
        handlers = self.install_signal_handlers()
        try:
            for index in range(o.workers):
                self.spawn(index, 0)
            self.loop()
        finally:
            self.restore_signal_handlers(handlers)
            for slot in list(self.slots):
                if slot.process.is_alive():
                    slot.process.kill()
                slot.process.join()
        self.findings.unreported(cut_off_by(self.stop_reason, self.options.grace))
        if self.deadline != float("inf"):
            self.sample(time.time(), force=True)
        self.progress.tick(self.stats.values(), force=True)
        self.progress.close()
        report = self.build_report().to_json()
        if not self.crashes:
            shutil.rmtree(self.logdir, ignore_errors=True)
        if self.covdir is not None:
            shutil.rmtree(self.covdir, ignore_errors=True)
        return report

    def loop(self) -> None:
        handled = 0
        while self.slots:
            waitables = [s.conn for s in self.slots] + [s.process.sentinel for s in self.slots]
            multiprocessing.connection.wait(waitables, timeout=0.2)
            for slot in list(self.slots):
                self.drain(slot)
                if not slot.process.is_alive():
                    self.reap(slot)
            now = time.time()
            if self.interrupts > handled:
                handled = self.interrupts
                self.begin_stop("interrupted", 0.0 if handled > 1 else min(INTERRUPT_GRACE_S, self.options.grace))
            if now >= self.deadline:
                self.begin_stop("time is up", self.options.grace)
            if self.deadline == float("inf") and now - self.started > STARTUP_TIMEOUT_S:
                if any(s.greeted for s in self.slots):
                    self.start_when_ready(anyway=True)
                else:
                    self.begin_stop("no worker started", 0.0)
            if self.stop_reason is not None:
                self.enforce_stop(now)
            self.sample(now)
            self.update_shares(now)
            self.progress.tick(self.stats.values(), now=now)
            self.snapshots.update_live(now)

    def install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def restore_signal_handlers(handlers: dict[int, Any]) -> None:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    # ------------------------------------------------------------- report
    def build_report(self, *, final: bool = True) -> RunReport:
        """The report of the run so far (:func:`~poolfuzz.harness.fuzz.run_report.build_run_report`)."""
        return build_run_report(self, final=final)

"""Rounds inside one fuzz worker: choosing target and engine, counting, stopping, reporting what was found.

A worker takes each target once under each engine first, then draws its next target from the
shares the parent publishes (:mod:`poolfuzz.harness.fuzz.shares`: more time where new
behaviour still turns up).  Before a target's first round it replays the walk
failures the example database holds for it (:mod:`poolfuzz.harness.fuzz.saved_walks`),
and it alternates two engines on each target, the walk's share of the target's time
measured from what each engine finds (:class:`~poolfuzz.harness.fuzz.shares.EngineBook`; the prior is
:data:`poolfuzz.harness.fuzz.walk.WALK_SHARE`, and a fixed ``walk_share`` overrides it).  A *walk round* drives the
target's driver from a seeded random walk (:class:`~poolfuzz.harness.fuzz.walk.WalkRun`,
one per target, resumed round after round), many times faster per step; a
failing trace goes to the same shrinker and corpus.  A *hypothesis round* is one
:func:`~poolfuzz.harness.machines.run.run_machine` call with ``derandomize=False``, a seed
derived from ``(--seed, worker, generation, round)`` and a ``max_examples``
sized so the round lasts about ``round_seconds``.  All workers share one
example database, so a failure found in one round (by either engine) is
replayed first in the next, and shrinking progress survives rounds, workers and nights.

The machine is subclassed with :class:`~poolfuzz.harness.fuzz.counted.Counted`, which counts steps, examples
and driver events (the labels drivers pass to ``hypothesis.event``) and checks,
every few steps, whether the round must end: the deadline passed, the parent set
the stop event, or another worker retired the target.  It then raises
:class:`~poolfuzz.harness.fuzz.protocol.StopRound`, which hypothesis lets through without
shrinking anything.  While a violation is being shrunk the round is *not*
abandoned; the parent lets it finish for ``--grace`` seconds, then sends
SIGTERM, and the smallest failing trace seen so far is saved (``shrunk:
false``).  Before any of that, the first failing step of a round is written
unshrunk, under the corpus's :data:`~poolfuzz.harness.fuzz.worker_reports.UNSHRUNK_FOLDER`, and announced
(:meth:`Worker.first_sighting`), so a counterexample is never lost to the clock,
a signal or a kill; that file stays, as the record of what was found at that step,
beside the shrunk trace that follows.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from poolfuzz.harness.fuzz.counted import Counted
from poolfuzz.harness.fuzz.database import open_database
from poolfuzz.harness.fuzz.failure_text import error_text, poisons_cuda
from poolfuzz.harness.fuzz.protocol import (
    FLUSH_SECONDS,
    CoverageSample,
    Hello,
    Message,
    ProgressReport,
    RoundStarted,
    Shared,
    StopRound,
    TargetRef,
    Terminated,
    WorkerPlan,
)
from poolfuzz.harness.fuzz.rounds import FIRST_ROUND_EXAMPLES, next_round_size, round_seed
from poolfuzz.harness.fuzz.saved_walks import replay_walk_failures, save_walk_failure, walk_key
from poolfuzz.harness.fuzz.shares import EngineBook, pick
from poolfuzz.harness.fuzz.walk import WALK_SHARE, WalkRun
from poolfuzz.harness.fuzz.worker_reports import WorkerReports
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.machines import PoolMachine, build_settings, make_machine, run_machine
from poolfuzz.harness.machines.run import ShortestFailure, describe_shrunk
from poolfuzz.harness.traces.keep import keep_trace

#: How often a worker measuring coverage sends the arcs its current target reached, in seconds.
COVERAGE_SAMPLE_SECONDS = 2.0


class Worker(WorkerReports):
    """The round loop of one worker process; see the module docstring."""

    def __init__(self, plan: WorkerPlan, conn: Any, shared: Shared, terminate: dict[str, bool], coverage: Any = None) -> None:
        self.plan = plan
        self.coverage = coverage
        self.last_coverage_sample = time.monotonic()
        self.conn = conn
        self.go = shared.go
        self.stop = shared.stop
        self.retired = shared.retired
        self.shares = shared.shares
        self.terminate = terminate
        self.database = open_database(plan.database)
        self.machines: dict[str, type[PoolMachine]] = {}
        self.round_size: dict[str, int] = {}
        self.known_seen: dict[str, dict[str, dict[str, Any]]] = {}
        """Per target, the known findings reported in this run, by invariant (:meth:`known_again`)."""
        self.as_found: dict[str, Trace] = {}
        """Each target's failing trace as first seen, unshrunk: what its realistic trace is lifted from."""
        self.target: TargetRef | None = None
        self.steps = 0
        self.examples = 0
        self.events: Counter[str] = Counter()
        self.flushed_steps = 0
        self.flushed_examples = 0
        self.last_flush = time.monotonic()
        self.abandoning = False
        self.shortest = ShortestFailure()  # this round's first violation and the shortest trace of it since
        self.seed = 0
        self.round_no = 0
        self.poisoned = False
        self.error_trace: Trace | None = None  # steps of the last example that raised something else
        self.walks: dict[str, WalkRun] = {}
        self.walk_rounds: Counter[str] = Counter()
        self.engines = EngineBook(WALK_SHARE if plan.walk_share is None else plan.walk_share, fixed=plan.walk_share is not None)
        self.round_labels: set[str] = set()  # the event labels of the round in progress, for the engine book
        self.rng = random.Random(round_seed(plan.seed, plan.worker, plan.generation, -1))

    # ------------------------------------------------------------ reporting
    def send(self, message: Message) -> None:
        try:
            self.conn.send(message)
        except OSError:  # the parent is gone: nobody to report to
            self.terminate["now"] = True

    def flush(self) -> None:
        now = time.monotonic()
        if self.target is not None:
            self.send(
                ProgressReport(
                    target=self.target.key,
                    steps=self.steps - self.flushed_steps,
                    examples=self.examples - self.flushed_examples,
                    seconds=now - self.last_flush,
                    events=dict(self.events),
                )
            )
            if self.coverage is not None and now - self.last_coverage_sample >= COVERAGE_SAMPLE_SECONDS:
                self.sample_coverage(self.target)
        self.round_labels.update(self.events)
        self.events.clear()
        self.flushed_steps, self.flushed_examples, self.last_flush = self.steps, self.examples, now

    def sample_coverage(self, target: TargetRef) -> None:
        """Send the arcs of ``pools/`` executed under ``target`` (a coverage.py dynamic context)."""
        self.last_coverage_sample = time.monotonic()
        data = self.coverage.get_data()
        data.set_query_contexts([target.key])
        arcs = frozenset((name, a, b) for name in data.measured_files() for a, b in (data.arcs(name) or ()))
        data.set_query_contexts(None)
        self.send(CoverageSample(target=target.key, arcs=arcs))

    # ------------------------------------------------------------- stopping
    def time_is_up(self) -> bool:
        return bool(self.stop.is_set()) or time.time() >= self.plan.deadline

    def poll(self) -> None:
        """Flush if due; end the round if it must end (see the module docstring)."""
        if time.monotonic() - self.last_flush >= FLUSH_SECONDS:
            self.flush()
        if self.terminate["now"]:
            self.abandoning = True
            raise Terminated()
        if self.shortest.violation is not None:
            return
        if self.time_is_up() or (self.target is not None and self.retired[self.target.index]):
            self.abandoning = True
            raise StopRound()

    def saw(self, violation: InvariantViolation) -> None:
        """Remember the shortest failing trace of the first invariant seen this round.

        The first sighting retires the target for every worker at once: the
        others leave it alone while this one shrinks.
        """
        if self.shortest.offer(violation):
            if self.target is not None:
                self.retired[self.target.index] = 1
            assert violation.trace is not None
            self.first_sighting(violation, violation.trace)

    # --------------------------------------------------------------- rounds
    def run(self) -> None:
        import torch

        torch.set_num_threads(1)
        device_name = torch.cuda.get_device_name() if self.plan.device == "cuda" else ""
        self.send(Hello(pid=os.getpid(), device_name=device_name))
        while not self.go.wait(0.2):
            if self.terminate["now"] or self.stop.is_set():
                return
        round_no = 0
        while not self.terminate["now"] and not self.poisoned and not self.time_is_up():
            active = [t for t in self.plan.targets if not self.retired[t.index]]
            if not active:
                break
            target, engine = self.next_round(active)
            first_visit = target.key not in self.engines.met
            self.engines.meet(target.key, engine)
            if first_visit and self.replay_saved_walks(target, round_no):
                round_no += 1
                continue
            started = time.monotonic()
            self.round_labels = set()
            try:
                if engine == "walk":
                    self.run_walk_round(target, round_no)
                else:
                    self.run_round(target, round_no)
            except Terminated:
                break
            finally:
                self.engines.observe(target.key, engine, seconds=time.monotonic() - started, labels=self.round_labels)
            round_no += 1
        self.flush()

    def next_round(self, active: list[TargetRef]) -> tuple[TargetRef, str]:
        """The next round's target and engine.

        First every target once under each engine, the engines alternating by the worker's own time
        split (workers starting at different targets), as a short run must not leave a target unfuzzed,
        or unwalked, because a draw favoured another; then a target drawn by the shares, under the
        engine its own measured split calls for (:class:`~poolfuzz.harness.fuzz.shares.EngineBook`).
        """
        first = self.engines.worker_engine()
        for engine in dict.fromkeys((first, "hypothesis", "walk") if self.engines.prior > 0 else ("hypothesis",)):
            unvisited = [t for t in active if engine not in self.engines.met.get(t.key, ())]
            if unvisited:
                return unvisited[self.plan.worker % len(unvisited)], engine
        target = self.plan.targets[pick([t.index for t in active], self.shared_shares(), self.rng)]
        return target, self.engines.next_engine(target.key)

    def replay_saved_walks(self, target: TargetRef, round_no: int) -> bool:
        """Replay the walk failures the database holds for ``target`` (:mod:`poolfuzz.harness.fuzz.saved_walks`);
        True when one still fails and was reported as this round's finding."""
        saved = replay_walk_failures(self.database, target.key, spec=target.spec, check_misuse=None if self.plan.misuse else False)
        if saved is None:
            return False
        trace, result = saved.trace, saved.result
        seed = trace.provenance.get("seed")
        seed = seed if isinstance(seed, int) else 0
        self.send(RoundStarted(target=target.key, round=round_no, seed=seed, examples=0, engine="replay"))
        kept = keep_trace(trace, Path(self.plan.corpus))
        path = kept.path
        message = (
            f"{result.describe()}\n  replayed from a walk failure in the example database "
            f"({trace.provenance.get('note', 'no note')}):\n{trace.steps_text()}" + (f"\n  ({kept.problem})" if kept.problem else "")
        )
        known = self.found(target, result.invariant, message, path=path, trace=trace, shrunk=True, where={"round": round_no, "seed": seed})
        if known is None or self.plan.strict:
            return True
        if self.database is not None:  # known: replayed and reported once, as hypothesis drops a passing example
            self.database.delete(walk_key(target.key), trace.dumps().encode())
        return False

    def shared_shares(self) -> list[float]:
        shares = self.shares
        return [0.0] * len(self.plan.targets) if shares is None else list(shares)

    def run_walk_round(self, target: TargetRef, round_no: int) -> None:
        """Walk ``target``'s driver for a round: half ``round_seconds`` at first, doubling up to
        ``round_seconds * walk_share / (1 - walk_share)`` (at most three), so a target whose bugs only
        hypothesis reaches loses little to the walk."""
        walk = self.walks.get(target.key)
        if walk is None:
            walk = self.walks[target.key] = WalkRun(
                target.family,
                round_seed(self.plan.seed, self.plan.worker, self.plan.generation, -2 - target.index),
                spec=target.spec,
                device=self.plan.device,
                check_misuse=None if self.plan.misuse else False,
                corpus=Path(self.plan.corpus),
                on_found=self.first_sighting,
                known_again=self.known_again,
            )
        share = self.engines.walk_share(target.key)
        longest = self.plan.round_seconds * min(3.0, share / max(1e-9, 1 - share))
        seconds = min(longest, self.plan.round_seconds / 2 * 2 ** self.walk_rounds[target.key])
        self.walk_rounds[target.key] += 1
        self.flush()
        self.target, self.shortest, self.abandoning, self.error_trace = target, ShortestFailure(), False, None
        self.seed, self.round_no = walk.seed, round_no
        if self.coverage is not None:
            self.coverage.switch_context(target.key)
        self.send(RoundStarted(target=target.key, round=round_no, seed=walk.seed, examples=0, engine="walk"))
        counted = {"steps": walk.steps, "episodes": walk.episodes}

        def stop() -> bool:
            self.steps += walk.steps - counted["steps"]
            self.examples += walk.episodes - counted["episodes"]
            counted.update(steps=walk.steps, episodes=walk.episodes)
            self.events.update(walk.events)
            walk.events.clear()
            try:
                self.poll()
            except StopRound:
                return True
            return False

        try:
            finding = walk.run(seconds=seconds, stop=stop)
            stop()
        except StopRound:
            finding = None
        finally:
            self.flush()
            if self.coverage is not None:
                self.sample_coverage(target)
            self.target = None
        if finding is not None:
            where = {"round": round_no, "seed": walk.seed}
            violation = finding.violation
            message = (
                describe_shrunk(violation, found=finding.found_steps, trace=finding.trace, found_by="the walk found")
                if violation is not None
                else (error_text(finding.error, finding.trace, "the walk episode that raised"))
            )
            if violation is not None and finding.trace_problem:
                message += f"\n  ({finding.trace_problem})"
            self.poisoned = poisons_cuda(message)
            known = self.found(
                target,
                violation.invariant_id if violation is not None else None,
                message,
                path=finding.trace_path,
                trace=finding.trace,
                shrunk=True,
                where=where,
            )
            if violation is not None and (known is None or self.plan.strict):
                save_walk_failure(self.database, target.key, finding.trace)

    def machine_for(self, target: TargetRef) -> type[PoolMachine]:
        if target.key not in self.machines:
            base = make_machine(target.family, target.spec, check_misuse=None if self.plan.misuse else False, device=self.plan.device)
            # Same name as the base: hypothesis keys a dynamic class's database entries by its name.
            namespace = {"worker": self, "__module__": base.__module__}
            self.machines[target.key] = type(base.__name__, (Counted, base), namespace)
        return self.machines[target.key]

    def run_round(self, target: TargetRef, round_no: int) -> None:
        machine = self.machine_for(target)
        seed = self.seed = round_seed(self.plan.seed, self.plan.worker, self.plan.generation, round_no)
        # Not hypothesis.seed(): that decorator also switches the database off.
        machine._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
        size = self.round_size.get(target.key, FIRST_ROUND_EXAMPLES)
        self.flush()
        self.target, self.shortest, self.abandoning, self.error_trace = target, ShortestFailure(), False, None
        self.round_no = round_no
        if self.coverage is not None:
            self.coverage.switch_context(target.key)
        self.send(RoundStarted(target=target.key, round=round_no, seed=seed, examples=size))
        started, examples_before = time.monotonic(), self.examples
        where = {"round": round_no, "seed": seed}
        note = f"found by poolfuzz fuzz --seed {self.plan.seed} (worker {self.plan.name}, round {round_no}, hypothesis seed {seed})"
        settings = build_settings("fuzz-round", database=self.database, stateful_step_count=self.plan.steps, max_examples=size)
        try:
            run_machine(machine, settings=settings, corpus=self.plan.corpus, note=note)
        except StopRound:
            pass
        except Terminated:
            if self.shortest.violation is not None:
                self.save_partial(target, where)
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure is a finding to report, not a crash
            self.report_failure(target, exc, where)
        finally:
            self.flush()
            if self.coverage is not None:
                self.sample_coverage(target)
            self.target = None
        self.round_size[target.key] = next_round_size(self.examples - examples_before, time.monotonic() - started, self.plan.round_seconds)

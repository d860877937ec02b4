"""Walk failures in the example database: saved by the worker that found one, replayed first by every other.

Hypothesis keeps its own failures in the example database and replays them
before generating anything (``Phase.reuse``); that is how a bug one machine of
a fleet found becomes the first thing every other machine hits.  A walk round
(:mod:`poolfuzz.harness.fuzz.walk`) has no choice sequence for hypothesis to keep, so
without this module a bug the walk found lived only in the finder's local
corpus, and the rest of the fleet had to find it again by luck.

The walk's shrunk trace is saved instead, as its canonical JSON text, under one
key per target (:func:`walk_key`), in the same database (a directory, Redis,
or layers of both; a ``readonly:`` layer is read but never written).  A worker
about to fuzz a target for the first time replays that target's saved traces
through the family driver (:func:`~poolfuzz.harness.traces.replay.replay_trace`, the
checks a fuzz run makes): one that still violates an invariant is the round's
finding, and is saved again so that every writable layer (a developer's local
directory under a ``readonly:`` fleet layer) keeps it; one that passes (the bug was fixed), no longer parses or no longer fits
the driver (the schema or driver moved on) is deleted, as hypothesis deletes an
example that stopped failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.replay import ReplayResult, replay_trace
from poolfuzz.harness.traces.schema import TraceError, loads_trace

WALK_KEY_PREFIX = b"poolfuzz:walk-failures:"


def walk_key(target_key: str) -> bytes:
    """The database key holding ``target_key``'s walk failures (``family=module:attr`` or a family name)."""
    return WALK_KEY_PREFIX + target_key.encode()


def save_walk_failure(database: Any, target_key: str, trace: Trace) -> None:
    """Keep ``trace`` (a walk's shrunk failing trace) for every worker that later fuzzes ``target_key``."""
    if database is not None:
        database.save(walk_key(target_key), trace.dumps().encode())


@dataclass(frozen=True)
class SavedFailure:
    """A saved walk trace that still fails: the trace and what its replay saw."""

    trace: Trace
    result: ReplayResult


def replay_walk_failures(database: Any, target_key: str, *, spec: str, check_misuse: bool | None) -> SavedFailure | None:
    """The first saved walk failure of ``target_key`` that still fails on ``spec``; stale entries are deleted."""
    if database is None:
        return None
    key = walk_key(target_key)
    traces: list[tuple[bytes, Trace]] = []
    for value in sorted(database.fetch(key)):  # sorted: a database's own order may differ run to run
        try:
            traces.append((value, loads_trace(value.decode(), source=f"database entry {key.decode()}")))
        except (TraceError, UnicodeDecodeError):
            database.delete(key, value)
    for value, trace in traces:
        result = replay_trace(trace, target=spec, check_misuse=check_misuse)
        if result.outcome == "violation":
            database.save(key, value)  # into every writable layer, as hypothesis keeps a replayed failure
            return SavedFailure(trace, result)
        if result.outcome != "unavailable":  # fixed, or no longer fits the driver: as hypothesis drops a stale example
            database.delete(key, value)
    return None

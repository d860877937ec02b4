"""A walk's failure is kept in the example database and replayed first, like hypothesis's own failures."""

from __future__ import annotations

from hypothesis.database import InMemoryExampleDatabase, MultiplexedDatabase, ReadOnlyDatabase

from poolfuzz.harness.fuzz.saved_walks import replay_walk_failures, save_walk_failure, walk_key
from poolfuzz.harness.fuzz.walk import WalkRun
from poolfuzz.harness.judge.trace import Trace

LEAKY = "tests.fuzz_planted:ForgetfulFree"
TARGET = f"req_to_token={LEAKY}"
CORRECT = "poolfuzz.pools.req_to_token:ReqToTokenPool"


def walk_failure() -> Trace:
    finding = WalkRun("req_to_token", 1, spec=LEAKY).run(max_steps=5_000)
    assert finding is not None and finding.violation is not None
    return finding.trace


def test_a_saved_walk_failure_replays_as_the_same_violation() -> None:
    database = InMemoryExampleDatabase()
    trace = walk_failure()
    save_walk_failure(database, TARGET, trace)
    saved = replay_walk_failures(database, TARGET, spec=LEAKY, check_misuse=None)
    assert saved is not None
    assert saved.result.invariant == "conservation"
    assert saved.trace.steps == trace.steps
    assert list(database.fetch(walk_key(TARGET))) == [trace.dumps().encode()]  # kept while it still fails


def test_a_saved_failure_the_pool_no_longer_has_is_deleted() -> None:
    database = InMemoryExampleDatabase()
    save_walk_failure(database, TARGET, walk_failure())
    assert replay_walk_failures(database, TARGET, spec=CORRECT, check_misuse=None) is None
    assert list(database.fetch(walk_key(TARGET))) == []


def test_a_corrupt_entry_is_dropped_and_the_next_one_still_replays() -> None:
    database = InMemoryExampleDatabase()
    database.save(walk_key(TARGET), b"{not json")
    database.save(walk_key(TARGET), b'{"schema": 1, "family": "no_such_family"}')
    save_walk_failure(database, TARGET, walk_failure())
    saved = replay_walk_failures(database, TARGET, spec=LEAKY, check_misuse=None)
    assert saved is not None and saved.result.invariant == "conservation"
    assert len(list(database.fetch(walk_key(TARGET)))) == 1


def test_failures_are_kept_per_target() -> None:
    database = InMemoryExampleDatabase()
    save_walk_failure(database, TARGET, walk_failure())
    assert replay_walk_failures(database, "req_to_token", spec=LEAKY, check_misuse=None) is None


def test_a_read_only_fleet_layer_is_replayed_into_the_local_layer_and_never_written() -> None:
    fleet, local = InMemoryExampleDatabase(), InMemoryExampleDatabase()
    trace = walk_failure()
    save_walk_failure(fleet, TARGET, trace)
    before = dict(fleet.data)
    saved = replay_walk_failures(MultiplexedDatabase(local, ReadOnlyDatabase(fleet)), TARGET, spec=LEAKY, check_misuse=None)
    assert saved is not None
    assert list(local.fetch(walk_key(TARGET))) == [trace.dumps().encode()]
    assert fleet.data == before


def test_no_database_replays_nothing_and_saves_nowhere() -> None:
    save_walk_failure(None, TARGET, walk_failure())
    assert replay_walk_failures(None, TARGET, spec=LEAKY, check_misuse=None) is None

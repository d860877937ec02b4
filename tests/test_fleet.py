"""Two machines on one Redis: what one finds, the other replays first; a developer replays it read-only.

A real ``redis-server`` on loopback is the fleet's example database.  Machine A
(its own working directory and corpus) fuzzes a planted leak until it finds it;
machine B, another process with an empty corpus, must then hit the same failure
in its very first round, from the database: hypothesis's replay (``Phase.reuse``)
when a hypothesis round found it, the saved walk trace
(:mod:`poolfuzz.harness.fuzz.saved_walks`) when a walk round did.

Why that proves a replay rather than luck: B runs with A's ``--seed``, so B's
round 0 would *generate* exactly the examples A's round 0 generated on an empty
database, and A's round 0 did not find the bug (A is the control).  The only
difference between the two round 0s is the database, so B's round-0 finding
came from it.  If a change to the strategies ever moves the bug into round 0
for a seed, A tries the next seed instead (:data:`SEEDS`).

The developer set-up, ``--database LOCALDIR,readonly:redis://...``, replays the
fleet's failure the same way, keeps it in the local layer and writes nothing to Redis.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.fuzz.rounds import FIRST_ROUND_EXAMPLES
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.pools.req_to_token import Req, ReqToTokenPool
from tests.processes import python
from tests.redis_server import throwaway_redis

REPO = Path(__file__).resolve().parent.parent
PLANTED = "req_to_token=tests.test_fleet:LeakyAllocUnderLoad"
#: Seeds A tries, in order, until its round 0 misses the bug (the first one does on the current strategies).
SEEDS = (2, 3, 1, 5)
#: Short examples: a found leak shrinks in about a second instead of twenty.
STEPS = 6
#: Wall-clock bound on one ``fuzz`` process, start-up included; the runs themselves end when the bug is found.
PROCESS_TIMEOUT_S = 150


class LeakyAllocUnderLoad(ReqToTokenPool):
    """``alloc`` of requests loses one more row when four or more rows are already live: a leak that shows only
    under load.

    Random generation needs a few dozen examples to load the pool that far and admit more, so a fuzz round of
    ten examples usually misses it; a replayed example does not.  The trigger is an admission, not a free: the
    drain audits free every live row, which would make a leak on ``free`` under load show in every example,
    but they take rows back with ``alloc_rows``, never ``alloc``.
    """

    def alloc(self, reqs: Sequence[Req]) -> list[int] | None:
        live = self.num_rows - len(self.free_slots)
        rows = super().alloc(reqs)
        if rows is not None and live >= 4 and self.free_slots:
            self.free_slots.pop(0)
        return rows


# ----------------------------------------------------------------- the fleet
@dataclass(frozen=True)
class Run:
    """One ``fuzz`` process as a machine of the fleet ran it: its working directory, report and output."""

    workdir: Path
    report: dict[str, Any]
    output: str

    @property
    def failure(self) -> dict[str, Any]:
        failures = self.report["failures"]
        assert len(failures) == 1, self.output
        return dict(failures[0])

    def trace_steps(self) -> list[dict[str, Any]]:
        return load_trace(self.workdir / self.failure["trace"]).steps


def fuzz_machine(workdir: Path, database: str, *, seed: int, seconds: int) -> Run:
    """``poolfuzz fuzz`` in its own process and working directory (so its own default corpus)."""
    workdir.mkdir(parents=True, exist_ok=True)
    command = [
        "-m",
        "poolfuzz.harness",
        "fuzz",
        "--target",
        PLANTED,
        "--database",
        database,
        "--workers",
        "1",
        "--steps",
        str(STEPS),
        "--seconds",
        str(seconds),
        "--seed",
        str(seed),
        "--report",
        "report.json",
        "--plain",
        "--progress-every",
        "5",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = python(*command, cwd=workdir, env=env, timeout=PROCESS_TIMEOUT_S, session=True)  # a timeout kills its workers too
    output = done.stdout + done.stderr
    assert done.returncode == 1, f"exit {done.returncode}, expected 1 (found):\n{output}"
    return Run(workdir, json.loads((workdir / "report.json").read_text()), output)


@dataclass(frozen=True)
class Fleet:
    redis_url: str
    client: Any
    machine_a: Run

    def snapshot(self) -> dict[bytes, frozenset[bytes]]:
        """Every key of the fleet's database with its members (hypothesis stores each example key as a set)."""
        return {key: frozenset(self.client.smembers(key)) for key in self.client.keys("*")}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A throwaway ``redis-server`` on loopback, and machine A's run on it that found the planted leak."""
    root = tmp_path_factory.mktemp("fleet")
    with throwaway_redis(root) as url:
        import redis  # throwaway_redis skipped the test without it

        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        yield Fleet(url, client, machine_a_finds_the_leak(root, url, client))


def machine_a_finds_the_leak(root: Path, url: str, client: Any) -> Run:
    """Machine A's run, on the first seed of :data:`SEEDS` whose round 0 on an empty database misses the bug."""
    for seed in SEEDS:
        client.flushdb()
        run = fuzz_machine(root / f"machine-a-seed{seed}", url, seed=seed, seconds=40)
        if run.failure["round"] >= 1:
            return run
    pytest.fail(
        f"round 0 found the planted leak for every seed in {SEEDS}: it no longer needs the replay to be "
        "found, so the fleet test cannot tell replay from luck; make the planted bug rarer"
    )


# --------------------------------------------------------------------- tests
def test_a_failure_one_machine_found_is_the_first_thing_another_machine_hits(fleet: Fleet, tmp_path: Path) -> None:
    a = fleet.machine_a
    assert fleet.client.keys("hypothesis-example:*"), "A saved nothing to the fleet's database"
    b = fuzz_machine(tmp_path / "machine-b", fleet.redis_url, seed=a.report["run"]["seed"], seconds=5)
    found_a, found_b = a.failure, b.failure
    # A's round 0 ran the very examples B's round 0 would generate, and found nothing: B's came from the database.
    assert found_a["round"] >= 1 and found_b["round"] == 0, b.output
    assert b.report["targets"][0]["examples"] < FIRST_ROUND_EXAMPLES, b.output  # within its first examples
    assert found_b["invariant"] == found_a["invariant"]
    assert b.trace_steps() == a.trace_steps()  # the same shrunk failure, in B's own corpus
    assert (tmp_path / "machine-b" / found_b["trace"]).is_file()
    assert found_b["found_after_s"] <= found_a["found_after_s"], (found_a, found_b)


def test_a_developer_replays_the_fleets_failure_read_only_and_keeps_it_locally(fleet: Fleet, tmp_path: Path) -> None:
    a = fleet.machine_a
    local = tmp_path / "developer" / ".hypothesis" / "poolfuzz"
    before = fleet.snapshot()
    developer = fuzz_machine(tmp_path / "developer", f"{local},readonly:{fleet.redis_url}", seed=a.report["run"]["seed"], seconds=5)
    assert developer.failure["round"] == 0 and developer.failure["invariant"] == a.failure["invariant"]
    assert developer.trace_steps() == a.trace_steps()
    assert fleet.snapshot() == before  # not a key added, removed or changed in the fleet's database
    assert any(path.is_file() for path in local.rglob("*"))  # the local layer keeps it for offline replays

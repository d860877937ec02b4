"""What an engine target is, and the raw memory state it reports: engine-neutral, frozen, plain data.

An engine target (:class:`EngineTarget`) takes requests (:meth:`~EngineTarget.submit`), aborts them, and
runs scheduler steps (:meth:`~EngineTarget.step`).  A step may schedule work whose results land at a later
step (SGLang's overlap loop, vLLM's async scheduler): that in-flight work is part of the state, and
:meth:`~EngineTarget.observe` reports it with everything else a judge needs, read from raw state:

* every **pool** (KV pages or blocks, request rows, Mamba slots, SWA pages) as ids and who holds them
  (:class:`PoolState`): the free places, and each holder's ids, owned or only referenced;
* what **in-flight** work still reads (:class:`InFlight`);
* the **lock** counts (:class:`LockCount`);
* the last step's **progress** (:class:`Progress`);
* the engine's **own checker's** verdicts, where it has one (:class:`Account`);
* the **surface**: what a user of the engine can observe, which two implementations must agree on.

SGLang's pages and vLLM's blocks both fit.  SGLang (0.5.23): the allocator's ``free_pages`` and
``release_pages`` are two free places; the radix tree *owns* the pages it caches (a cache holder); a request
owns the private part of its ``req_to_token`` row and *references* the tree's pages through the rest; the
tree's ``protected_size`` is a lock count.  vLLM (v1 ``KVCacheManager``): the free queue is the free place; a
request *references* each block of its block table, nobody owns a block, and ``ref_cnt`` is the engine's own
count of those references (``ref_counts``); a cached block with ``ref_cnt == 0`` is free (its hash is an index
entry, not a holder), and the null block is reserved.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

INVARIANT_OF_A_BREACH = "scheduler-conservation"
"""The invariant a broken partition is reported under unless the pool names another (:attr:`PoolState.breach`)."""


class HolderKind(enum.Enum):
    """Who can hold ids of a pool."""

    REQUEST = "request"
    """A request the engine still serves (queued, running, chunked, or finished with its results in flight)."""
    CACHE = "cache"
    """A prefix cache that keeps the content of what it holds (SGLang's radix tree): in-flight work may read it."""
    BATCH = "batch"
    """In-flight work that keeps ids off the free list until its results land (an engine's deferred frees)."""
    MAPPING = "mapping"
    """Another pool's entries pointing at these ids (SGLang's full-to-SWA index over the SWA pool)."""


@dataclass(frozen=True, order=True)
class Holder:
    """One holder: its kind and its name (a request id; ``"tree"``; a batch id)."""

    kind: HolderKind
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Holding:
    """The ids one holder holds in one pool.

    ``owned``: the holder owns them, and no one else may own them (a tree's pages, a request's private
    pages, a request's row).  Otherwise it only references them (a ``req_to_token`` row's cached part, a
    vLLM block table entry): in a pool of owners a reference must point at the holder's own ids or a cache's;
    in a shared pool (:attr:`PoolState.shared`) every id is held by reference and counted.
    """

    holder: Holder
    ids: tuple[int, ...]
    owned: bool = True


@dataclass(frozen=True)
class FreePlace:
    """One place free ids wait in (a free list, a release list, a free queue), in its own order."""

    name: str
    ids: tuple[int, ...]


@dataclass(frozen=True)
class PoolState:
    """One pool's ids and who holds each, read from raw state (never from a size method).

    ``ids`` are the ids the pool hands out; ``reserved`` ones are never handed out (page 0, vLLM's null block).
    ``ref_counts`` is the engine's own reference count per id, where it keeps one (vLLM's ``ref_cnt``).
    ``breach`` names the invariant a broken partition of this pool is reported under.
    """

    name: str
    ids: range
    free: tuple[FreePlace, ...] = ()
    holdings: tuple[Holding, ...] = ()
    reserved: tuple[int, ...] = ()
    shared: bool = False
    ref_counts: tuple[tuple[int, int], ...] | None = None
    breach: str = INVARIANT_OF_A_BREACH

    def free_ids(self) -> list[int]:
        """Every free id, each place's in order, repeats kept (a repeat is itself a finding)."""
        return [i for place in self.free for i in place.ids]


@dataclass(frozen=True)
class Read:
    """Ids of one pool that in-flight work reads on behalf of ``reader`` (its request)."""

    pool: str
    reader: Holder
    ids: tuple[int, ...]


@dataclass(frozen=True)
class InFlight:
    """Work a step scheduled whose results have not landed yet, and what it still reads."""

    batch: str
    reads: tuple[Read, ...]


@dataclass(frozen=True)
class LockCount:
    """A lock count an engine keeps (SGLang's protected tokens of its tree): ``name`` holds ``count`` locked ``unit``."""

    name: str
    unit: str
    count: int


@dataclass(frozen=True)
class Progress:
    """The last step's outcome: who was queued and who was active at its end, and whether it advanced.

    ``advanced``: the step scheduled work, landed results or changed the queue itself (an admission, a
    timeout's abort).  ``context`` holds numbers a hang report shows (the queue head's sizes, free memory).
    """

    waiting: tuple[str, ...]
    active: tuple[str, ...]
    advanced: bool
    context: tuple[tuple[str, int | float | None], ...] = ()


@dataclass(frozen=True)
class Verdict:
    """The engine's own checker on one account: does it see a leak, and its words."""

    leak: bool
    message: str


@dataclass(frozen=True)
class Account:
    """One account the engine's own checker keeps, over the pools it sums (its leak equation).

    ``verdict`` is ``None`` where the checker does not check at this point, ``unchecked`` saying why;
    ``failure`` is the checker's own error where it raised instead of answering.
    """

    what: str
    pools: tuple[str, ...]
    verdict: Verdict | None
    unchecked: str = ""
    failure: str | None = None


@dataclass(frozen=True)
class Observation:
    """An engine's whole memory state between two steps (see the module docstring)."""

    engine: str
    pools: tuple[PoolState, ...]
    progress: Progress
    in_flight: tuple[InFlight, ...] = ()
    locks: tuple[LockCount, ...] = ()
    checker: str = "the engine's own checker"
    accounts: tuple[Account, ...] = ()
    surface: tuple[tuple[str, Hashable], ...] = ()

    def pool(self, name: str) -> PoolState:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"{self.engine} reports no pool named {name!r}")

    @property
    def at_rest(self) -> bool:
        """Nothing queued, active or in flight, and the last step did nothing: every request's memory is back."""
        p = self.progress
        return not (p.waiting or p.active or p.advanced or self.in_flight)


@dataclass(frozen=True)
class Submission:
    """A tokenized request as a user sends it."""

    prompt: tuple[int, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class StepReport:
    """What one step did: its kind, the requests it scheduled, and those whose results landed (maybe scheduled earlier)."""

    kind: str
    scheduled: tuple[str, ...] = ()
    landed: tuple[str, ...] = ()


@runtime_checkable
class EngineTarget(Protocol):
    """An engine under the judges: requests in, scheduler steps, and its raw memory state out."""

    def submit(self, request: Submission) -> str | None:
        """Queue a request; its id, or ``None`` where the engine refuses it at admission."""
        ...

    def abort(self, rid: str) -> str:
        """Abort a request wherever it is; where it was (``"queued"``, ``"running"``, ...)."""
        ...

    def step(self, samples: Mapping[str, int]) -> StepReport:
        """One scheduler step; ``samples[rid]`` is the token a request samples when a result of it lands."""
        ...

    def observe(self) -> Observation:
        """The raw memory state now (between steps)."""
        ...


__all__ = [
    "Account",
    "EngineTarget",
    "FreePlace",
    "Holder",
    "HolderKind",
    "Holding",
    "InFlight",
    "LockCount",
    "Observation",
    "PoolState",
    "Progress",
    "Read",
    "StepReport",
    "Submission",
    "Verdict",
]

"""A second engine for the engine judges: small, in-flight, and not SGLang (tests only).

:class:`FakeEngine` schedules ahead of its results, as an overlap loop does: each :meth:`~FakeEngine.step`
first schedules the next batch, then lands the results of the batch the previous step scheduled.  A
request that finishes at a landing may already sit in the batch just scheduled; its memory is released
only when that batch lands (a deferred free), so in-flight work never reads a block someone else holds.

Memory: KV blocks of one token each (ids ``1..blocks``, block 0 reserved) and request rows (``1..rows``).
Admission matches the prompt's cached prefix (the cache owns those blocks and a request references and
locks them), reserves every block the request may need, and takes a row.  A release inserts the prompt's
blocks into the cache (or frees a duplicate), frees the rest, unlocks and returns the row.  The engine keeps
its own counters of free, cached and private blocks; its own checker's verdict is their sum against the
size (the leak equation such an engine would assert).

Each name in :data:`FAULTS` plants one bug, for the judge that must catch it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from poolfuzz.harness.engines.interface import (
    Account,
    FreePlace,
    Holder,
    HolderKind,
    Holding,
    InFlight,
    LockCount,
    Observation,
    PoolState,
    Progress,
    Read,
    StepReport,
    Submission,
    Verdict,
)

EOS = 2

FAULTS = frozenset(
    {
        "double-free",  # a release puts one block on the free list twice
        "hands-out-a-free-block",  # an allocation hands out a block it leaves on the free list
        "leaks-a-block",  # a release drops one block and counts it nowhere
        "miscounts-a-free",  # a release frees every block but counts one fewer
        "keeps-a-lock",  # a release leaves its cached prefix locked
        "unlocks-twice",  # a release unlocks its cached prefix twice
        "admits-nothing-when-idle",  # admission refuses everyone while nothing runs
        "frees-under-in-flight",  # a finish releases at once, though the batch in flight still reads its blocks
        "takes-from-the-tail",  # allocation takes the free list's last block, not its first
    }
)


@dataclass
class FakeRequest:
    rid: str
    prompt: tuple[int, ...]
    max_new: int
    row: int | None = None
    cached: list[int] = field(default_factory=list)
    own: list[int] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    decodes: int = 0
    finished: bool = False
    released: bool = False
    abort: bool = False

    @property
    def holder(self) -> Holder:
        return Holder(HolderKind.REQUEST, self.rid)

    def budget(self) -> int:
        """Blocks it may still allocate: a decode block for each token after the first, until it finishes."""
        return 0 if self.finished else self.max_new - 1 - self.decodes


@dataclass(frozen=True)
class FakeBatch:
    name: str
    reqs: tuple[FakeRequest, ...]
    reads: tuple[tuple[FakeRequest, tuple[int, ...]], ...]


class FakeEngine:
    """An engine target (:class:`~poolfuzz.harness.engines.interface.EngineTarget`) whose results land one step late."""

    def __init__(self, *, blocks: int = 16, rows: int = 3, faults: frozenset[str] = frozenset(), name: str = "fake") -> None:
        unknown = set(faults) - FAULTS
        assert not unknown, f"no such fault: {unknown}"
        self.name, self.faults, self.size, self.rows = name, faults, blocks, rows
        self.free: list[int] = list(range(1, blocks + 1))
        self.free_rows: list[int] = list(range(1, rows + 1))
        self.cache: dict[tuple[int, ...], int] = {}
        self.locks: dict[int, int] = {}
        self.waiting: list[FakeRequest] = []
        self.running: list[FakeRequest] = []
        self.in_flight: FakeBatch | None = None
        self.counted = {"free": blocks, "cached": 0, "private": 0}
        self.progress = Progress((), (), False)
        self._rids = itertools.count()
        self._batches = itertools.count()

    # ------------------------------------------------------------------ the protocol
    def submit(self, request: Submission) -> str | None:
        if len(request.prompt) + request.max_new_tokens - 1 > self.size or not request.prompt or request.max_new_tokens < 1:
            return None
        req = FakeRequest(f"r{next(self._rids)}", request.prompt, request.max_new_tokens)
        self.waiting.append(req)
        return req.rid

    def abort(self, rid: str) -> str:
        for req in self.waiting:
            if req.rid == rid:
                self.waiting.remove(req)
                return "queued"
        for req in self.running:
            if req.rid == rid and not req.finished:
                req.abort = True
                return "running"
        return "unknown"

    def step(self, samples: Mapping[str, int]) -> StepReport:
        batch = self._schedule()
        landing, self.in_flight = self.in_flight, batch
        landed = self._land(landing, samples) if landing is not None else ()
        self.running = [r for r in self.running if not r.released]
        active = tuple(r.rid for r in self.running) + (tuple(r.rid for r in batch.reqs) if batch else ())
        self.progress = Progress(tuple(r.rid for r in self.waiting), active, batch is not None or bool(landed))
        kind = "idle" if batch is None and not landed else "step"
        return StepReport(kind, tuple(r.rid for r in batch.reqs) if batch else (), landed)

    def observe(self) -> Observation:
        live = [r for r in self.running if not r.released]
        cache = Holder(HolderKind.CACHE, "cache")
        kv = PoolState(
            "KV block",
            range(1, self.size + 1),
            free=(FreePlace("free list", tuple(self.free)),),
            holdings=(
                Holding(cache, tuple(self.cache.values())),
                *(Holding(r.holder, tuple(r.own)) for r in live),
                *(Holding(r.holder, tuple(r.cached), owned=False) for r in live),
            ),
            reserved=(0,),
        )
        rows = PoolState(
            "request row",
            range(1, self.rows + 1),
            free=(FreePlace("free rows", tuple(self.free_rows)),),
            holdings=tuple(Holding(r.holder, (r.row,)) for r in live if r.row is not None),
        )
        flights: tuple[InFlight, ...] = ()
        if self.in_flight is not None:
            reads = tuple(Read("KV block", r.holder, ids) for r, ids in self.in_flight.reads)
            flights = (InFlight(self.in_flight.name, reads),)
        total = sum(self.counted.values())
        verdict = Verdict(
            total != self.size,
            f"free={self.counted['free']} cached={self.counted['cached']} private={self.counted['private']} size={self.size}",
        )
        return Observation(
            engine=self.name,
            pools=(rows, kv),
            progress=self.progress,
            in_flight=flights,
            locks=(LockCount("the cache", "blocks", sum(self.locks.values())),),
            checker="the fake's own counters",
            accounts=(Account("KV block", ("KV block",), verdict),),
            surface=(
                ("free blocks", len(self.free)),
                ("waiting", tuple(r.rid for r in self.waiting)),
                ("running", tuple(r.rid for r in live)),
                ("blocks", tuple((r.rid, tuple(r.cached + r.own)) for r in live)),
            ),
        )

    # ------------------------------------------------------------------ scheduling
    def _schedule(self) -> FakeBatch | None:
        """Decode every running request that may still produce a token, then admit from the queue."""
        reqs: list[FakeRequest] = []
        in_flight = {r.rid for r in self.in_flight.reqs} if self.in_flight is not None else set()
        for req in self.running:
            pending = 1 if req.rid in in_flight else 0
            if not req.finished and not req.abort and len(req.output) + pending < req.max_new:
                req.own.append(self._alloc())
                req.decodes += 1
                reqs.append(req)
        idle = not self.running and self.in_flight is None
        while self.waiting and not ("admits-nothing-when-idle" in self.faults and idle) and self._admit(self.waiting[0]):
            req = self.waiting.pop(0)
            self.running.append(req)
            reqs.append(req)
        if not reqs:
            return None
        reads = tuple((r, tuple(r.cached + r.own)) for r in reqs)
        return FakeBatch(f"b{next(self._batches)}", tuple(reqs), reads)

    def _admit(self, req: FakeRequest) -> bool:
        matched = self._match(req.prompt)
        need = len(req.prompt) - len(matched) + req.max_new - 1
        evictable = sum(1 for b in self.cache.values() if not self.locks.get(b) and b not in matched)
        promised = sum(r.budget() for r in self.running)
        if not self.free_rows or len(self.free) + evictable - promised < need:
            return False
        req.row = self.free_rows.pop(0)
        req.cached = matched
        for block in matched:
            self.locks[block] = self.locks.get(block, 0) + 1
        req.own = [self._alloc() for _ in range(len(req.prompt) - len(matched))]
        return True

    def _match(self, prompt: tuple[int, ...]) -> list[int]:
        blocks = []
        for end in range(1, len(prompt)):
            block = self.cache.get(prompt[:end])
            if block is None:
                break
            blocks.append(block)
        return blocks

    def _alloc(self) -> int:
        if not self.free:
            key = next(k for k, b in self.cache.items() if not self.locks.get(b))
            self.free.append(self.cache.pop(key))
            self.counted["cached"] -= 1
            self.counted["free"] += 1
        if "hands-out-a-free-block" in self.faults:
            block = self.free[0]
        else:
            block = self.free.pop(-1 if "takes-from-the-tail" in self.faults else 0)
        self.counted["free"] -= 1
        self.counted["private"] += 1
        return block

    # ------------------------------------------------------------------ results
    def _land(self, batch: FakeBatch, samples: Mapping[str, int]) -> tuple[str, ...]:
        """The batch's results: each request samples its token; a finished one is released unless still in flight."""
        ahead = {r.rid for r in self.in_flight.reqs} if self.in_flight is not None else set()
        for req in batch.reqs:
            if req.released:
                continue
            if req.finished:  # a late decode of a request that finished a landing ago: its last batch is in
                self._release(req)
                continue
            token = samples.get(req.rid, 7)
            req.output.append(token)
            req.finished = token == EOS or len(req.output) >= req.max_new or req.abort
            if req.finished and (req.rid not in ahead or "frees-under-in-flight" in self.faults):
                self._release(req)
        return tuple(r.rid for r in batch.reqs)

    def _release(self, req: FakeRequest) -> None:
        freed: list[int] = []
        prompt_blocks = len(req.prompt) - len(req.cached)
        for position, block in enumerate(req.own):
            key = req.prompt[: len(req.cached) + position + 1]
            if position < prompt_blocks and len(key) < len(req.prompt) and key not in self.cache:
                self.cache[key] = block
                self.counted["private"] -= 1
                self.counted["cached"] += 1
            else:
                freed.append(block)
        unlocks = 0 if "keeps-a-lock" in self.faults else 2 if "unlocks-twice" in self.faults else 1
        for block in req.cached:
            self.locks[block] -= unlocks
        self._free(freed)
        req.own, req.cached = [], []
        assert req.row is not None
        self.free_rows.append(req.row)
        req.row, req.released = None, True

    def _free(self, blocks: list[int]) -> None:
        self.counted["private"] -= len(blocks)
        counted = len(blocks)
        if blocks and "double-free" in self.faults:
            blocks = blocks + blocks[:1]
        if blocks and "leaks-a-block" in self.faults:
            blocks, counted = blocks[1:], counted - 1
        if blocks and "miscounts-a-free" in self.faults:
            counted -= 1
        self.free.extend(blocks)
        self.counted["free"] += counted

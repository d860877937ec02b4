"""The engine judges, written once over an :class:`~poolfuzz.harness.engines.interface.Observation`.

Every judge reads the observed raw state only, so SGLang's loop, an overlap loop or a vLLM scheduler is
judged by the same code once it reports its state.  :func:`judge` runs them in this order:

1. :func:`partition`, for each pool: every id is free xor held, none in two free places or twice in one
   (``no-double-allocation``), none owned twice, none both free and held, a reference points at the
   holder's own ids or a cache's, no reserved id in use (``reserved-never-handed-out``), no id outside
   the pool, and, where the engine keeps reference counts, each one equals the references held
   (``ref-count``).  It returns the pool's raw **leak equation**: free + held == size, every id accounted
   for.  A pool no checker account covers raises its loss at once.
2. :func:`progress`: requests queued, nothing active or in flight, and a step that did nothing is a
   hang (``scheduler-progress``); a lock still held then is its cause (``lock-balance``).
3. :func:`accounts`: the raw leak equation against the engine's own checker (``kv-accounting`` when
   both see a leak, ``checker-agreement`` when only one does).
4. :func:`in_flight_reuse`: no id that in-flight work still reads is free or held by another holder.
5. :func:`locks` and :func:`at_rest`: no lock count below zero, none held and nothing held by a request
   or a batch once the engine is at rest (``lock-balance``, ``scheduler-conservation``).

:func:`agree` compares two observations' surfaces (``implementations-agree``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from poolfuzz.harness.engines.interface import Holder, HolderKind, Observation, PoolState
from poolfuzz.harness.judge.invariants import InvariantViolation, check

SHOWN = 8
"""Ids shown in a message; the rest are counted, not listed."""


@dataclass(frozen=True)
class Leak:
    """A pool's raw leak equation: whether some id is unaccounted for, and the counts."""

    leak: bool
    message: str


def judge(observation: Observation, *, engine_checks: Callable[[], None] | None = None) -> dict[str, Leak]:
    """Every judge over one observation, in the module docstring's order; the pools' raw leak equations.

    ``engine_checks`` runs an engine's checks of its own structures (SGLang's full-to-SWA index) right after
    the partitions, so a structural breach is reported before its consequences (a hang, a leak).
    """
    leaks = partitions(observation)
    if engine_checks is not None:
        engine_checks()
    progress(observation)
    accounts(observation, leaks)
    in_flight_reuse(observation)
    locks(observation)
    at_rest(observation)
    return leaks


def partitions(observation: Observation) -> dict[str, Leak]:
    """:func:`partition` of each pool; a pool no account covers raises its loss here (its ``breach``)."""
    covered = {name for account in observation.accounts for name in account.pools}
    leaks: dict[str, Leak] = {}
    for pool in observation.pools:
        leak = leaks[pool.name] = partition(pool)
        check(pool.name in covered or not leak.leak, pool.breach, f"a {pool.name} is neither free nor held (leaked)", counts=leak.message)
    return leaks


def partition(pool: PoolState) -> Leak:
    """Structural breaches of one pool's partition raise; returns its leak equation (see the module docstring).

    Why each holds: a repeated free id is handed out twice (two owners of one page, SGLang's debug
    duplicate-page check, vLLM #42571); an id both free and held, or owned twice, is overwritten under its
    owner; a reference to another request's private id reads KV that is not its own; a reserved id in use
    is the padding slot a kernel writes garbage to; a reference count off the references held frees a
    block in use (or never frees it).
    """
    free = pool.free_ids()
    counts = Counter(free)
    repeated = sorted(i for i, n in counts.items() if n > 1)
    check(not repeated, "no-double-allocation", f"a {pool.name} is free twice (in one free place or two)", ids=repeated[:SHOWN])
    owners = _owners(pool)
    for i in counts:
        owners.setdefault(i, []).append("free")
    twice = {i: who for i, who in owners.items() if len(who) > 1}
    check(
        not twice,
        pool.breach,
        f"a {pool.name} is held twice (free, a cache or a holder's own part)",
        ids=dict(sorted(twice.items())[:SHOWN]),
    )
    referenced = _references(pool, owners)
    in_use = set(owners) | set(referenced)
    reserved = sorted(in_use & set(pool.reserved))
    check(
        not reserved,
        "reserved-never-handed-out",
        f"a reserved {pool.name} is in use",
        ids=reserved,
        holders=[owners.get(i) for i in reserved],
    )
    outside = sorted(i for i in in_use if i not in pool.ids and i not in pool.reserved)
    check(not outside, pool.breach, f"a {pool.name} outside the pool is in use", ids=outside[:SHOWN], pool=str(pool.ids))
    if pool.ref_counts is not None:
        _ref_counts(pool, referenced, set(counts))
    missing = sorted(set(pool.ids) - in_use) if len(in_use) < len(pool.ids) else []  # in_use lies within ids here
    held: Counter[str] = Counter()
    for holding in pool.holdings:
        if holding.owned or pool.shared:
            held[holding.holder.kind.value] += len(holding.ids)
    parts = [f"{pool.name}s={len(pool.ids)}", f"free={len(free)}", *(f"{kind}={n}" for kind, n in sorted(held.items()))]
    return Leak(bool(missing), " ".join([*parts, f"unaccounted={missing[:SHOWN]}"]))


def _owners(pool: PoolState) -> dict[int, list[str]]:
    """Who owns each id (a holder's name; ``"free"`` is added by the caller)."""
    owners: dict[int, list[str]] = {}
    for holding in pool.holdings:
        if holding.owned:
            for i in holding.ids:
                owners.setdefault(i, []).append(holding.holder.name)
    return owners


def _references(pool: PoolState, owners: dict[int, list[str]]) -> dict[int, list[Holder]]:
    """Who references each id; a reference to a free id, or (in a pool of owners) to another holder's, raises."""
    caches = {h.holder.name for h in pool.holdings if h.holder.kind is HolderKind.CACHE}
    referenced: dict[int, list[Holder]] = {}
    for holding in pool.holdings:
        if holding.owned:
            continue
        name = holding.holder.name
        if pool.shared:
            foreign = sorted({i for i in holding.ids if owners.get(i) == ["free"]})
            words = f"{pool.name}s on the free list"
        else:
            foreign = sorted({i for i in holding.ids if not set(owners.get(i, ())) & (caches | {name})})
            words = f"{pool.name}s neither a cache nor it holds"
        check(not foreign, pool.breach, f"{holding.holder.kind.value} {name} references {words}", holder=name, ids=foreign[:SHOWN])
        for i in holding.ids:
            referenced.setdefault(i, []).append(holding.holder)
    return referenced


def _ref_counts(pool: PoolState, referenced: dict[int, list[Holder]], free: set[int]) -> None:
    """``ref-count``: the engine's count of each id is the references held, never negative, and 0 exactly when free."""
    kept = dict(pool.ref_counts or ())
    negative = sorted(i for i, n in kept.items() if n < 0)
    check(not negative, "ref-count", f"a {pool.name}'s reference count is negative", ids=negative[:SHOWN])
    off = {
        i: (kept.get(i, 0), len(referenced.get(i, ()))) for i in set(kept) | set(referenced) if kept.get(i, 0) != len(referenced.get(i, ()))
    }
    check(
        not off,
        "ref-count",
        f"a {pool.name}'s reference count differs from the references held (kept, held)",
        ids=dict(sorted(off.items())[:SHOWN]),
    )
    queued = sorted(i for i in pool.ids if (kept.get(i, 0) == 0) != (i in free) and i not in pool.reserved)
    check(not queued, "ref-count", f"a {pool.name} is free iff its reference count is 0, and these are not", ids=queued[:SHOWN])


def progress(observation: Observation) -> None:
    """``scheduler-progress``: requests queued, nothing active or in flight, and a step that did nothing.

    No later step changes anything then: the queue head waits for ever.  A lock is taken at admission
    and dropped at release, so with nothing active a held lock has leaked and is the hang's cause
    (``lock-balance``, checked first).
    """
    p = observation.progress
    if not p.waiting or p.active or p.advanced or observation.in_flight:
        return
    for lock in observation.locks:
        check(
            lock.count == 0,
            "lock-balance",
            f"nothing runs, yet {lock.name} holds locked {lock.unit} (and the queue is stuck)",
            locked=lock.count,
        )
    raise InvariantViolation(
        "scheduler-progress", "nothing runs and the queue admitted nothing: the server hangs", waiting=len(p.waiting), **dict(p.context)
    )


def accounts(observation: Observation, leaks: dict[str, Leak]) -> None:
    """The raw leak equation of each account's pools against the engine's own checker.

    Both see a leak: ``kv-accounting``, with both accounts.  Only one does: ``checker-agreement`` (the raw
    partition, which counts ids rather than sizes, says which is wrong).  The checker does not check here:
    a raw leak is ``kv-accounting`` alone.  The checker raised: ``kv-accounting`` with its words.
    """
    for account in observation.accounts:
        ours = any(leaks[name].leak for name in account.pools)
        words = "; ".join(leaks[name].message for name in account.pools)
        if account.failure is not None:
            raise InvariantViolation("kv-accounting", f"{observation.checker} failed: {account.failure}", ours=words)
        if account.verdict is None:
            check(not ours, "kv-accounting", f"a {account.what} is unaccounted for ({account.unchecked})", ours=words)
            continue
        theirs = account.verdict
        if ours and theirs.leak:
            raise InvariantViolation("kv-accounting", f"both judges see a {account.what} leak", ours=words, upstream=theirs.message)
        if ours != theirs.leak:
            who = "ours" if ours else observation.checker
            raise InvariantViolation("checker-agreement", f"only {who} sees a {account.what} leak", ours=words, upstream=theirs.message)


def in_flight_reuse(observation: Observation) -> None:
    """``in-flight-reuse``: an id in-flight work still reads stays with its reader, a batch or a cache until it lands.

    The work reads (or writes) it when it runs; freed, the next allocation may hand it to another request
    whose KV the work then overwrites, or whose KV it reads as its own.  An engine that keeps such ids off
    the free list (deferred frees) reports them held by the reader or by the batch.
    """
    for flight in observation.in_flight:
        for read in flight.reads:
            pool = observation.pool(read.pool)
            keepers = _keepers(pool)
            free = set(pool.free_ids())
            for i in read.ids:
                kept = keepers.get(i, [])
                if read.reader in kept or any(h.kind is HolderKind.CACHE or h.name == flight.batch for h in kept):
                    continue
                where = "free" if i in free else ", ".join(sorted(str(h) for h in kept)) or "lost"
                raise InvariantViolation(
                    "in-flight-reuse",
                    f"batch {flight.batch} still reads {pool.name} {i} for {read.reader}, which is now {where}",
                    batch=flight.batch,
                    reader=str(read.reader),
                    id=i,
                )


def _keepers(pool: PoolState) -> dict[int, list[Holder]]:
    keepers: dict[int, list[Holder]] = {}
    for holding in pool.holdings:
        for i in holding.ids:
            keepers.setdefault(i, []).append(holding.holder)
    return keepers


def locks(observation: Observation) -> None:
    """``lock-balance``: no lock count is negative (an unlock of a path nobody locked)."""
    for lock in observation.locks:
        check(lock.count >= 0, "lock-balance", f"{lock.name} holds a negative count of locked {lock.unit}", locked=lock.count)


def at_rest(observation: Observation) -> None:
    """At rest nothing is locked (``lock-balance``) and no request or batch holds an id (``scheduler-conservation``)."""
    if not observation.at_rest:
        return
    for lock in observation.locks:
        check(lock.count == 0, "lock-balance", f"nothing runs, yet {lock.name} holds locked {lock.unit}", locked=lock.count)
    for pool in observation.pools:
        kept = sorted(str(h.holder) for h in pool.holdings if h.ids and h.holder.kind in (HolderKind.REQUEST, HolderKind.BATCH))
        check(not kept, pool.breach, f"nothing runs, yet {pool.name}s are held", holders=kept[:SHOWN])


def agree(first: Observation, second: Observation) -> None:
    """``implementations-agree``: two engines given the same steps leave the same surface (named fields)."""
    a, b = dict(first.surface), dict(second.surface)
    if a == b:
        return
    fields = [name for name in dict.fromkeys((*a, *b)) if a.get(name) != b.get(name)]
    raise InvariantViolation(
        "implementations-agree",
        f"the same steps over {first.engine} and over {second.engine} differ in {fields}",
        **{first.engine: a, second.engine: b},
    )


__all__ = ["Leak", "accounts", "agree", "at_rest", "in_flight_reuse", "judge", "locks", "partition", "partitions", "progress"]

"""Three prefix caches, one operation sequence: upstream's Python ``RadixCache``, the Rust
TreeCore in the 0.5.23 wheel, and :class:`poolfuzz.pools.radix_cache.RadixCache` must answer alike.

All three are driven through one API (ours; :mod:`poolfuzz.harness.kits.prefix_cache.upstream` and
:mod:`poolfuzz.harness.kits.prefix_cache.upstream_rust` translate it into upstream's calls), each over
its own :class:`RecordingAllocator`.  The contract they share (SGLang 0.5.23): keys are
page-aligned; ``insert`` returns the length already cached and leaves those duplicates to
the caller; ``match`` splits where it ends and returns the cached path; a lock moves the
path from evictable to protected; ``evict`` frees unlocked leaves in policy order; a
request ``checkpoint`` inserts its row, frees its duplicates, repoints the row at the
tree's indices and moves its lock; ``release`` also frees the uncached tail.

With upstream's ``radix_cache`` reading :class:`~poolfuzz.harness.upstream.sglang_fakes.LogicalClock`
and the Rust core's logical access counter, eviction order is a pure function of the
sequence, so everything is compared exactly after every step: return values, match
indices, every ``free`` the caches issued (in order), the rewritten request rows, and the
three sizes.  The Rust core's ``sanity_check`` and ours run after every step too, and the
Rust core's ``free_device_kv`` answer to a plain insert must be ``value[:prefix_len]``.

One :class:`Caller` issues the operations and keeps the contract (fresh pages for new KV,
a lock taken right after its match and released once, no reset while a request holds a
lock), so a disagreement is a behaviour difference, not misuse.  Plain Python, no
hypothesis: :func:`run_sequence` is the check, :func:`random_ops` a seeded generator, and
``python -m poolfuzz.harness.upstream.cache_differential --seconds N`` runs it for a time budget.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from poolfuzz.harness.kits.prefix_cache.upstream import RadixCacheOver
from poolfuzz.harness.kits.prefix_cache.upstream_rust import TreeCoreOver
from poolfuzz.pools.radix_cache import RadixCache

POLICIES = ("lru", "mru", "fifo", "filo")
"""The eviction policies all three implement (upstream's two caches have more)."""
SUBJECTS: dict[str, Callable[..., Any]] = {"ours": RadixCache, "python": RadixCacheOver, "rust": TreeCoreOver}


@dataclass(frozen=True)
class Op:
    """One caller step.  ``pick`` chooses a running request, ``amount`` an eviction size or spare row slots."""

    name: str
    tokens: tuple[int, ...] = ()
    amount: int = 0
    pick: int = 0

    def describe(self) -> str:
        request = f"request #{self.pick}"
        return {
            "insert": f"insert({list(self.tokens)})",
            "match": f"match({list(self.tokens)})",
            "admit": f"admit({list(self.tokens)}): match and lock",
            "extend": f"extend({request}, {list(self.tokens)}, spare={self.amount})",
            "checkpoint": f"checkpoint({request})",
            "release": f"release({request}, cache={bool(self.amount % 2)})",
            "evict": f"evict({self.amount})",
            "reset": "reset()",
        }[self.name]


OP_WEIGHTS = {"insert": 5, "match": 2, "admit": 4, "extend": 4, "checkpoint": 3, "release": 3, "evict": 3, "reset": 0.2}


class Disagreement(AssertionError):
    """Two implementations answered one step differently (or one raised where the others did not)."""

    def __init__(self, step: int, op: Op, what: str, answers: dict[str, Any]) -> None:
        self.step, self.op, self.what, self.answers = step, op, what, answers
        shown = "; ".join(f"{name}: {answer!r}" for name, answer in answers.items())
        super().__init__(f"step {step} {op.describe()}: {what} differs -- {shown}")


@dataclass
class RecordingAllocator:
    """The KV allocator each cache frees through: it records every non-empty ``free``, in order."""

    size: int
    page_size: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    freed: list[list[int]] = field(default_factory=list)

    def free(self, indices: torch.Tensor) -> None:
        if indices.numel():
            self.freed.append([int(i) for i in indices.tolist()])

    def drain(self) -> list[list[int]]:
        freed, self.freed = self.freed, []
        return freed


@dataclass(eq=False)
class _Request:
    tokens: tuple[int, ...]
    cpl: int
    rows: dict[str, torch.Tensor]
    locks: dict[str, Any]


@dataclass
class Caller:
    """The scheduler side: the free pages, the running requests, what the contract makes its own."""

    page_size: int
    num_pages: int
    free_pages: list[int] = field(default_factory=list)
    requests: list[_Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free_pages = list(range(1, self.num_pages + 1))

    def take(self, num_tokens: int, after: int | None = None) -> list[int] | None:
        """Indices for ``num_tokens`` more tokens of a row whose last index is ``after``: the rest of
        its page first, then fresh pages, lowest first; ``None`` if the pool is short."""
        ps = self.page_size
        same_page = [] if after is None else list(range(after + 1, (after // ps + 1) * ps))[:num_tokens]
        need = -(-(num_tokens - len(same_page)) // ps)
        if need > len(self.free_pages):
            return None
        self.free_pages.sort()
        pages, self.free_pages = self.free_pages[:need], self.free_pages[need:]
        return same_page + [p * ps + o for p in pages for o in range(ps)][: num_tokens - len(same_page)]

    def give_back(self, indices: Sequence[int]) -> None:
        self.free_pages.extend(sorted({i // self.page_size for i in indices}))


def _agree(step: int, op: Op, what: str, answers: dict[str, Any]) -> Any:
    first = next(iter(answers.values()))
    if any(answer != first for answer in answers.values()):
        raise Disagreement(step, op, what, answers)
    return first


class _Run:
    """One sequence against every subject."""

    def __init__(self, page_size: int, policy: str, num_pages: int, subjects: dict[str, Callable[..., Any]]) -> None:
        self.caller = Caller(page_size, num_pages)
        self.allocators = {name: RecordingAllocator(num_pages * page_size, page_size) for name in subjects}
        self.caches = {name: make(self.allocators[name], page_size=page_size, eviction_policy=policy) for name, make in subjects.items()}
        self.step, self.op = 0, Op("reset")

    def each(self, call: Callable[[str, Any], Any]) -> dict[str, Any]:
        """``call(name, cache)`` on every subject; an exception in some but not all is a disagreement."""
        answers: dict[str, Any] = {}
        failures: dict[str, str] = {}
        for name, cache in self.caches.items():
            try:
                answers[name] = call(name, cache)
            except Exception as exc:  # noqa: BLE001 -- an upstream failure is what this looks for
                failures[name] = f"{type(exc).__name__}: {exc}"
        if failures:
            raise Disagreement(self.step, self.op, "outcome", {n: failures.get(n, "returned") for n in self.caches})
        return answers

    def agree(self, what: str, answers: dict[str, Any]) -> Any:
        return _agree(self.step, self.op, what, answers)

    def frees(self) -> list[int]:
        """The indices every cache freed during this step, in order (they must agree; how they
        are split into calls need not: the Rust core frees per node segment), back to the caller."""
        freed = self.agree("indices freed, in order", {n: [i for chunk in a.drain() for i in chunk] for n, a in self.allocators.items()})
        self.caller.give_back(freed)
        return freed  # type: ignore[no-any-return]

    def apply(self, op: Op) -> bool:
        caller, ps = self.caller, self.caller.page_size
        held = caller.requests[op.pick % len(caller.requests)] if caller.requests else None
        if op.name == "insert":
            value = caller.take(len(op.tokens))
            if value is None:
                return False
            tensor = torch.tensor(value, dtype=torch.int64)
            prefix_len = self.agree("prefix_len", self.each(lambda n, c: c.insert(op.tokens, tensor)))
            rust = self.caches.get("rust")
            if rust is not None:
                self.agree("Rust free_device_kv", {"value[:prefix_len]": value[:prefix_len], "rust": rust.last_insert_frees})
            aligned = len(value) - len(value) % ps
            caller.give_back(value[:prefix_len] + value[aligned:])
        elif op.name in ("match", "admit"):
            matched = self.each(lambda n, c: c.match_prefix(op.tokens))
            prefix_len = self.agree("match length, indices", {n: (m.prefix_len, m.indices.tolist()) for n, m in matched.items()})[0]
            if op.name == "admit":
                self.agree("lock delta", self.each(lambda n, c: c.inc_lock_ref(matched[n].last_node)))
                rows = {n: m.indices.clone() for n, m in matched.items()}
                caller.requests.append(_Request(op.tokens[:prefix_len], prefix_len, rows, {n: m.last_node for n, m in matched.items()}))
        elif op.name == "extend" and held is not None:
            row = next(iter(held.rows.values()))
            want = len(held.tokens) + len(op.tokens) + op.amount - len(row)
            more = caller.take(max(0, want), int(row[-1]) if len(row) else None) or []
            if len(more) < want:
                return False
            held.tokens += op.tokens
            held.rows = {n: torch.cat((r, torch.tensor(more, dtype=torch.int64))) for n, r in held.rows.items()}
        elif op.name in ("checkpoint", "release") and held is not None:
            release = op.name == "release"
            call = (
                (lambda n, c: c.release_request(held.tokens, held.rows[n], held.locks[n], held.cpl, cache=bool(op.amount % 2)))
                if release
                else (lambda n, c: c.checkpoint(held.tokens, held.rows[n], held.locks[n], held.cpl))
            )
            done = self.each(call)
            self.agree(
                "result (protected, prefix_len, duplicates, tail freed)",
                {n: (r.cache_protected_len, r.prefix_len, r.num_duplicates_freed, r.num_tail_freed) for n, r in done.items()},
            )
            self.agree("request row", {n: r.tolist() for n, r in held.rows.items()})
            self.frees()
            if release:
                caller.requests.remove(held)
            else:
                held.cpl, held.locks = next(iter(done.values())).cache_protected_len, {n: r.last_node for n, r in done.items()}
        elif op.name == "evict":
            self.agree("tokens evicted", self.each(lambda n, c: c.evict(op.amount)))
        elif op.name == "reset" and not caller.requests:
            self.each(lambda n, c: c.reset())
            caller.free_pages = list(range(1, caller.num_pages + 1))
        else:
            return False
        self.frees()
        self.agree("sizes (evictable, protected, total)", self.each(lambda n, c: (c.evictable_size(), c.protected_size(), c.total_size())))
        self.each(lambda n, c: c.sanity_check())
        return True


def run_sequence(
    ops: Sequence[Op],
    *,
    page_size: int,
    eviction_policy: str = "lru",
    num_pages: int = 24,
    subjects: dict[str, Callable[..., Any]] | None = None,
) -> int:
    """Issue ``ops`` to every subject; raise :class:`Disagreement` at the first difference.

    Returns how many steps did something (a step the caller cannot issue validly, e.g. an
    insert the pool is too short for, or a release with no request running, is skipped).
    """
    run = _Run(page_size, eviction_policy, num_pages, subjects or SUBJECTS)
    done = 0
    for run.step, run.op in enumerate(ops, 1):
        done += run.apply(run.op)
    return done


def random_ops(rng: random.Random, count: int, *, page_size: int = 1, alphabet: int = 3) -> list[Op]:
    """A seeded sequence over a small alphabet, so keys share prefixes and nodes split."""
    names, weights = list(OP_WEIGHTS), list(OP_WEIGHTS.values())
    max_len = 4 * page_size + 3
    return [
        Op(
            rng.choices(names, weights)[0],
            tuple(rng.randint(1, alphabet) for _ in range(rng.randint(0, max_len))),
            amount=rng.randint(0, 2 * page_size + 4),
            pick=rng.randint(0, 7),
        )
        for _ in range(count)
    ]


def shrink(ops: list[Op], fails: Callable[[list[Op]], bool]) -> list[Op]:
    """Delete single operations, pass after pass, while the sequence still fails."""
    current, before = list(ops), -1
    while len(current) != before:
        before, i = len(current), 0
        while i < len(current):
            candidate = current[:i] + current[i + 1 :]
            if fails(candidate):
                current = candidate
            else:
                i += 1
    return current


def _disagrees(ops: list[Op], *, page_size: int, policy: str, subjects: dict[str, Callable[..., Any]] | None) -> bool:
    try:
        run_sequence(ops, page_size=page_size, eviction_policy=policy, subjects=subjects)
    except Disagreement:
        return True
    return False


@dataclass
class Budget:
    """What one budgeted run did."""

    sequences: int = 0
    steps: int = 0
    seconds: float = 0.0
    per_config: dict[str, int] = field(default_factory=dict)
    disagreement: Disagreement | None = None
    shrunk: list[Op] = field(default_factory=list)
    config: str = ""


def run_for(
    seconds: float,
    *,
    seed: int = 0,
    page_sizes: Sequence[int] = (1, 2, 4),
    policies: Sequence[str] = POLICIES,
    ops_per_sequence: int = 150,
    subjects: dict[str, Callable[..., Any]] | None = None,
) -> Budget:
    """Random sequences for ``seconds``, cycling page sizes and policies; stop at a disagreement and shrink it."""
    budget, rng, start = Budget(), random.Random(seed), time.monotonic()
    configs = [(ps, policy) for ps in page_sizes for policy in policies]
    while time.monotonic() - start < seconds:
        page_size, policy = configs[budget.sequences % len(configs)]
        ops = random_ops(rng, ops_per_sequence, page_size=page_size)
        budget.sequences += 1
        key = f"page_size={page_size}/{policy}"
        budget.per_config[key] = budget.per_config.get(key, 0) + 1
        try:
            budget.steps += run_sequence(ops, page_size=page_size, eviction_policy=policy, subjects=subjects)
        except Disagreement as found:
            fails = partial(_disagrees, page_size=page_size, policy=policy, subjects=subjects)
            budget.disagreement, budget.shrunk, budget.config = found, shrink(ops[: found.step], fails), key
            break
    budget.seconds = time.monotonic() - start
    return budget


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m poolfuzz.harness.upstream.cache_differential", description="Python RadixCache vs Rust TreeCore vs pools.RadixCache"
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--page-sizes", default="1,2,4")
    parser.add_argument(
        "--policies",
        default="lru,mru",
        help=f"of {', '.join(POLICIES)}; under fifo and filo the legacy Python cache ages a split node "
        "at the split, the Rust core and ours by its child (UnifiedTreeCore)",
    )
    parser.add_argument("--subjects", default=",".join(SUBJECTS), help="which of ours, python, rust to compare")
    args = parser.parse_args(argv)
    subjects = {name: SUBJECTS[name] for name in args.subjects.split(",")}
    budget = run_for(
        args.seconds,
        seed=args.seed,
        page_sizes=[int(p) for p in args.page_sizes.split(",")],
        policies=args.policies.split(","),
        subjects=subjects,
    )
    per_config = ", ".join(f"{key}: {count}" for key, count in sorted(budget.per_config.items()))
    print(f"{budget.sequences} sequences, {budget.steps} steps in {budget.seconds:.0f} s ({per_config})")
    if budget.disagreement is None:
        print(f"no disagreement between {', '.join(subjects)}")
        return 0
    print(f"DISAGREEMENT ({budget.config}): {budget.disagreement}")
    print("shrunk: " + "; ".join(op.describe() for op in budget.shrunk))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``prefix_cache`` family's move table: cache configurations and prompts that share prefixes on purpose.

One table serves the hypothesis machine, the walk and the bench workload
(:mod:`poolfuzz.strategies.table`); the moves read the cache only through
:class:`PrefixCacheView`.

Prompts are cut from a few fixed stems over a three-token alphabet and given a
short tail, so two draws usually share a prefix and diverge somewhere: at a page
boundary, inside a page (a split falls on the boundary below) or not at all (a
hit).  Lengths rarely land on a page boundary, so partial pages are the common
case.  Pools are a handful of pages, so eviction and refusals happen within a few
requests.  Holders are named by drawing among the handles the state offers, so
every step names a holder in the state it needs.  A reset clears everything, so it
comes at most once every :data:`RESET_EVERY` steps; live requests and bare locks
are capped, the oldest released first, so the pool keeps turning over.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from poolfuzz.harness.kits.prefix_cache.config import PrefixCacheConfig
from poolfuzz.harness.kits.prefix_cache.misuse import INSERT_MISUSE, RELEASE_MISUSE
from poolfuzz.harness.kits.prefix_cache.ops import PrefixCacheOps
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import Draw, DriverView, Move, MoveTable, Overrides, Step, fixed, one_of

ALPHABET = (0, 1, 2)
MAX_PROMPT = 12
STEMS: tuple[tuple[int, ...], ...] = (
    (0,) * MAX_PROMPT,
    (0, 1) * (MAX_PROMPT // 2),
    (0, 0, 1, 1, 2, 2) * (MAX_PROMPT // 6),
    (1, 2, 0) * (MAX_PROMPT // 3),
)
"""Prefixes every prompt starts from: the first shares with the second and third, the fourth with none."""

PAGE_SIZES = (1, 2, 4)
POLICIES = ("lru", "mru", "fifo", "filo")

RESET_EVERY = 12
"""Steps a reset waits for since the pool was built or last reset."""
MAX_RUNNING = 3
"""Live requests at most: at the cap a new request first finishes the oldest, as a batch slot frees up."""
MAX_LOCKS = 2
"""Bare locks at most: at the cap a new lock first drops the oldest."""

PrefixDraw = Draw["PrefixCacheView"]


class PrefixCacheView(DriverView):
    """What the prefix-cache moves may read: holders by kind, free pages, what the tree caches, the page size."""

    __slots__ = ()

    @property
    def page_size(self) -> int:
        return int(self._driver.ps)

    def requests(self) -> list[int]:
        """Handles of live requests, oldest first."""
        return list(self._driver.handles(request=True))

    def locks(self) -> list[int]:
        """Handles of live bare locks, oldest first."""
        return list(self._driver.handles(request=False))

    def holders(self) -> list[int]:
        """Handles of every live holder, requests and bare locks."""
        return list(self._driver.handles())

    def unlocked(self) -> list[int]:
        """Released holders a second ``unlock`` of which any pool must refuse (the driver's ``unlocked_handles``)."""
        return list(self._driver.unlocked_handles())

    def free_tokens(self) -> int:
        """Slots the allocator has free (whole pages)."""
        return len(self._driver.model.free) * self.page_size

    def caches_anything(self) -> bool:
        return bool(self._driver.model.pages)

    def cached_len(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` a match would find cached (the model's answer, without touching its clock)."""
        model = self._driver.model
        return int(model.cached_len(model.aligned(tuple(prompt))))

    def release_breakable(self, handle: int, kind: str) -> bool:
        """Whether a live request's ``release_request`` can be broken as ``kind`` (:data:`RELEASE_MISUSE`) now."""
        return self._driver.release_args(handle, kind) is not None

    def evictable_tokens(self) -> int:
        """Cached tokens no holder locks: what ``evict`` may free now."""
        return int(self._driver.model.evictable)

    def reset_due(self) -> bool:
        """At least :data:`RESET_EVERY` steps since the pool was built or last reset."""
        recent = self._driver.trace.steps[-RESET_EVERY:]
        return len(recent) == RESET_EVERY and all(step["op"] != "reset" for step in recent)


def prefix_cache_config(choose: Chooser, *, page_size: int | None = None, policies: Sequence[str] = POLICIES) -> PrefixCacheConfig:
    """Configs for ``poolfuzz.pools.prefix_cache.build_prefix_cache``; the engine adds ``device``.

    ``size`` is 8 to 48 tokens rounded up to whole pages: a few prompts fill
    it, so eviction and refusals come early while prompts still share what they
    cached.  ``page_size`` pins the page size, ``policies`` the eviction policies drawn.
    """
    ps = choose.choice(PAGE_SIZES) if page_size is None else page_size
    tokens = choose.randint(8, 48)
    return PrefixCacheConfig(size=-(-tokens // ps) * ps, page_size=ps, eviction_policy=choose.choice(tuple(policies)))


TAILS: tuple[tuple[int, ...], ...] = ((), (2,), (1,), (0,), (2, 1), (1, 0, 2), (2, 2, 0, 1))


def _prompt_table() -> tuple[tuple[int, ...], ...]:
    """Every stem cut at every length with each tail, shortest first (hypothesis shrinks toward the front)."""
    cut = {(stem[:n] + tail)[:MAX_PROMPT] for stem in STEMS for n in range(MAX_PROMPT + 1) for tail in TAILS}
    return tuple(sorted((p for p in cut if p), key=lambda p: (len(p), p)))


PROMPTS = _prompt_table()
"""Prompts of 1 to 12 tokens: 225 of them, each one draw (a composite strategy made shrinking ten times slower)."""
PROMPTS_OR_EMPTY = ((), *PROMPTS)
GENERATED: tuple[tuple[int, ...], ...] = ((0,), (1,), (2, 0), (0, 1, 2), (1, 1, 1, 1), ())
EVICT_COUNTS = (1, 2, 4, 0, 3, 8, 64, 5, 6, 7)
"""Tokens to evict: a leaf or two most often, sometimes everything (-1 is a misuse move of its own)."""


def prompt(choose: Chooser, *, empty: bool = False) -> list[int]:
    """A stem cut anywhere, then a short tail: shared prefixes, divergence anywhere.

    Three draws in four take a prompt of :data:`PROMPTS` (one draw, shrinking toward
    the shortest); the rest cut a stem and add up to four free tokens, as the bench
    walk did (a prompt those would leave empty is ``[0]``).  ``empty`` lets the empty
    prompt in (a lock or match of nothing is the root).
    """
    if choose.randrange(4) < 3:
        return list(choose.choice(PROMPTS_OR_EMPTY if empty else PROMPTS))
    stem = choose.choice(STEMS)[: choose.randint(0, MAX_PROMPT)]
    tail = [choose.choice(ALPHABET) for _ in range(choose.randint(0, 4))]
    return (list(stem) + tail)[:MAX_PROMPT] or [0]


def generated(choose: Chooser) -> list[int]:
    """Tokens a running request generates in one step: one of :data:`GENERATED` (none to four), or one to three
    free tokens (the bench walk's)."""
    if choose.randrange(4) < 3:
        return list(choose.choice(GENERATED))
    return [choose.choice(ALPHABET) for _ in range(choose.randint(1, 3))]


# ---------------------------------------------------------------- random moves
def _match(view: PrefixCacheView, choose: Chooser) -> Step:
    return PrefixCacheOps.match, {"prompt": prompt(choose, empty=True)}


def _request(view: PrefixCacheView, choose: Chooser) -> Step | None:
    """Admit a request, below :data:`MAX_RUNNING` live ones (at the cap the setup finishes the oldest first:
    without the cap requests pile up and the pool only ever refuses)."""
    return (PrefixCacheOps.request, {"prompt": prompt(choose)}) if len(view.requests()) < MAX_RUNNING else None


def _finish_oldest(view: PrefixCacheView, choose: Chooser) -> Step | None:
    requests = view.requests()
    return (PrefixCacheOps.finish, {"handle": requests[0], "cache": True}) if requests else None


def _extend(view: PrefixCacheView, choose: Chooser) -> Step | None:
    """A running request generates tokens: new pages as its length crosses page boundaries."""
    requests = view.requests()
    return (PrefixCacheOps.extend, {"handle": choose.choice(requests), "tokens": generated(choose)}) if requests else None


_checkpoint = one_of(PrefixCacheOps.checkpoint, PrefixCacheView.requests)
"""A running request caches what it has so far (its lock moves to the new last node)."""


def _settle(release: bool) -> PrefixDraw:
    """The cache's own ``checkpoint`` (or ``release_request``, one in four an abort) of a running request, with a
    prompt length that may end anywhere in its tokens (mid-page, at the end, past it: the driver clips it)."""

    def draw(view: PrefixCacheView, choose: Chooser) -> Step | None:
        requests = view.requests()
        if not requests:
            return None
        step = {"handle": choose.choice(requests), "prompt_len": choose.randint(0, 24), "release": release}
        return (PrefixCacheOps.settle, {**step, "cache": choose.randrange(4) > 0} if release else step)

    return draw


def _release(cache: bool) -> PrefixDraw:
    """A running request released: cached first (``finish``), or not (an abort)."""
    return one_of(PrefixCacheOps.finish, PrefixCacheView.requests, cache=cache)


def _lock(view: PrefixCacheView, choose: Chooser) -> Step | None:
    """Lock a prefix for a waiting request, below :data:`MAX_LOCKS` bare locks (at the cap the setup drops the
    oldest first)."""
    return (PrefixCacheOps.lock, {"prompt": prompt(choose, empty=True)}) if len(view.locks()) < MAX_LOCKS else None


def _drop_oldest_lock(view: PrefixCacheView, choose: Chooser) -> Step | None:
    locks = view.locks()
    return (PrefixCacheOps.unlock, {"handle": locks[0]}) if locks else None


_unlock = one_of(PrefixCacheOps.unlock, PrefixCacheView.locks)


def _insert(view: PrefixCacheView, choose: Chooser) -> Step:
    """Cache a prompt computed outside any request."""
    return PrefixCacheOps.insert, {"prompt": prompt(choose, empty=True)}


def _evict(view: PrefixCacheView, choose: Chooser) -> Step:
    return PrefixCacheOps.evict, {"num_tokens": choose.choice(EVICT_COUNTS)}


def _reset(view: PrefixCacheView, choose: Chooser) -> Step | None:
    """``flush_cache``, at most once every :data:`RESET_EVERY` steps (it clears everything)."""
    return (PrefixCacheOps.reset, {}) if view.reset_due() else None


_unlock_again = one_of(PrefixCacheOps.unlock, PrefixCacheView.unlocked)
"""A second unlock of a released holder, where the pool can tell (``unlocked_handles``)."""


def _insert_mismatched(view: PrefixCacheView, choose: Chooser) -> Step:
    """A value longer or shorter than its key."""
    return PrefixCacheOps.insert_mismatched, {"prompt": prompt(choose), "extra": choose.choice((-1, 1, -3, 2))}


def _recache(view: PrefixCacheView, choose: Chooser) -> Step:
    """Pages the tree holds, cached again under a new key."""
    return PrefixCacheOps.recache, {"prompt": prompt(choose)}


def prefix_cache_moves() -> tuple[Move[PrefixCacheView], ...]:
    """The random moves of a prefix cache, the commonest and the ones the canaries' states are built from first
    (hypothesis shrinks toward the first): requests, inserts, locks and their releases, then the misuse that
    needs them, then the rest.

    What the hand-written machine's rules did (requests, steps of running requests,
    bare locks, inserts, matches, evictions, rare resets, and the misuse: a second
    unlock, a mismatched value, recached pages, a negative eviction) and what the bench
    walk drew (its prompts with free tails, one to three generated tokens, evictions of
    up to eight tokens), at rates between the two.
    """
    return (
        Move("request", 2, _request, setup=_finish_oldest),
        Move("insert", 1.2, _insert),
        Move("lock", 1, _lock, setup=_drop_oldest_lock),
        Move("finish", 1, _release(True)),
        Move("evict", 1, _evict),
        Move("unlock again", 0.6, _unlock_again, misuse=True),
        Move("recache", 0.6, _recache, misuse=True),
        Move("unlock", 0.8, _unlock),
        Move("match", 1, _match),
        Move("extend", 1.5, _extend),
        Move("checkpoint", 0.7, _checkpoint),
        Move("abort", 0.5, _release(False)),
        Move("insert mismatched", 0.4, _insert_mismatched, misuse=True),
        Move("evict negative", 0.1, fixed(PrefixCacheOps.evict, num_tokens=-1), misuse=True),
        Move("reset", 0.3, _reset),
        Move("checkpoint with the prompt's length", 0.5, _settle(False)),
        Move("release with the prompt's length", 0.3, _settle(True)),
    )


# ---------------------------------------------------------------- the catalogue
def _release_misuse(kind: str) -> PrefixDraw:
    def draw(view: PrefixCacheView, choose: Chooser) -> Step | None:
        ready = [h for h in view.requests() if view.release_breakable(h, kind)]
        return (PrefixCacheOps.release_malformed, {"handle": choose.choice(ready), "kind": kind}) if ready else None

    return draw


def _toward_a_release(view: PrefixCacheView, choose: Chooser) -> Step | None:
    """A cached prompt (its nodes unlocked), then requests sharing part of it, each with an uncached tail."""
    live = view.requests()
    if not view.caches_anything():
        return (PrefixCacheOps.insert, {"prompt": list(STEMS[1][:8])}) if view.free_tokens() else None
    if len(live) < 2 and view.free_tokens() >= 8:
        return PrefixCacheOps.request, {"prompt": [*STEMS[1][: 3 + 2 * len(live)], 2]}
    return None


_node_of_a_holder = one_of(PrefixCacheOps.node_lookup, PrefixCacheView.holders)


REMATCHED = list(STEMS[2][:6])


def _rematch(view: PrefixCacheView, choose: Chooser) -> Step | None:
    return (PrefixCacheOps.rematch, {"prompt": list(REMATCHED), "times": 70}) if view.cached_len(REMATCHED) else None


def _cache_of_another_page_size(view: PrefixCacheView, choose: Chooser) -> Step | None:
    ps = view.page_size
    return (PrefixCacheOps.cache_over, {"page_size": ps + 1, "eviction_policy": "lru"}) if ps > 1 else None


def _cache_of_an_unknown_policy(view: PrefixCacheView, choose: Chooser) -> Step:
    return PrefixCacheOps.cache_over, {"page_size": view.page_size, "eviction_policy": "nope"}


def prefix_cache_catalogue() -> tuple[Move[PrefixCacheView], ...]:
    """Every kind of misuse ``RadixCache`` must reject beyond the random moves', and its rarer corners."""
    constructors: tuple[Overrides, ...] = ({"eviction_policy": "most-recent"}, {"page_size": 0}, {"size": -8})
    return (
        Move("node of a holder", 0.1, _node_of_a_holder, setup=fixed(PrefixCacheOps.lock, prompt=[0, 0])),
        Move("one prefix matched many times", 0.05, _rematch, setup=fixed(PrefixCacheOps.insert, prompt=list(REMATCHED))),
        Move("node of an id never handed out", 0.03, fixed(PrefixCacheOps.node_lookup, handle=None), misuse=True),
        *(Move(f"insert with {kind}", 0.03, fixed(PrefixCacheOps.insert_malformed, kind=kind), misuse=True) for kind in INSERT_MISUSE),
        *(
            Move(f"release_request with {kind}", 0.03, _release_misuse(kind), misuse=True, setup=_toward_a_release)
            for kind in RELEASE_MISUSE
        ),
        Move(
            "a cache of page size 0 over the allocator",
            0.02,
            fixed(PrefixCacheOps.cache_over, page_size=0, eviction_policy="lru"),
            misuse=True,
        ),
        Move("a cache of another page size over the allocator", 0.02, _cache_of_another_page_size, misuse=True),
        Move("a cache with an unknown policy over the allocator", 0.02, _cache_of_an_unknown_policy, misuse=True),
        *(Move(f"malformed constructor {c}", 0.02, fixed(PrefixCacheOps.construct, overrides=c), misuse=True) for c in constructors),
    )


def prefix_cache_drain(view: PrefixCacheView) -> Iterator[Step]:
    """Release every holder (requests cached, as at finish), evict one page at a time until nothing is
    evictable (each victim checked against the policy's first), then ``reset``.

    A wrong age or a lost leaf stays hidden while newer steps re-stamp the paths over it; evicting the
    whole tree in order asks for every age at once (the ``eviction-order`` id)."""
    for handle in view.requests():
        yield PrefixCacheOps.finish, {"handle": handle, "cache": True}
    for handle in view.locks():
        yield PrefixCacheOps.unlock, {"handle": handle}
    while view.evictable_tokens() > 0:
        yield PrefixCacheOps.evict, {"num_tokens": view.page_size}
    yield PrefixCacheOps.reset, {}


def _not_steered(view: PrefixCacheView) -> float:
    """Not steered: hill-climbing any one fill measure here (free pages, cached tokens) turned runs into long
    chains of inserts or of locks, and the canaries went unseen.  Eviction and refusals come from the small
    pools instead."""
    return 0.0


def prefix_cache_table(*, policies: Sequence[str] = POLICIES) -> MoveTable[PrefixCacheView]:
    """The ``prefix_cache`` family's table (``policies``: the eviction policies its configurations draw)."""
    return MoveTable(
        configs=lambda choose: prefix_cache_config(choose, policies=policies),
        moves=prefix_cache_moves(),
        catalogue=prefix_cache_catalogue(),
        view=PrefixCacheView,
        occupancy=_not_steered,
        drain=prefix_cache_drain,
        bench_moves=("request", "extend", "checkpoint", "finish", "abort", "lock", "unlock", "match", "evict", "reset"),
    )

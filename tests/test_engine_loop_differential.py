"""The normal and the overlap loop over one request stream (issue 42, item 2): what a user sees and what the tree
caches at rest must agree, up to the one difference 0.5.23 documents (#24590, one more cached token at a finish).

The stream comes in waves, each run to rest before the next arrives, so a request's cached prefix depends only on
what the tree held at rest, never on when a result landed.  Every request finishes by length (``max_new_tokens``, no
EOS), so both loops stop it at the same output length.  For length finishes #24590 does not show in 0.5.23: the
overlap loop leaves a request whose queued result commits its last token by length out of the next decode batch
(``_reqs_finishing_inflight``, scheduler.py:4444-4457, via ``next_output_finishes_by_length``, schedule_batch.py:1661-1663,
called by ``update_running_batch``, :4462-4463, on since ``event_loop_overlap`` sets ``enable_skip_finishing_decode``,
:2063), so no slot is allocated for the token after the last and ``kv_committed_len`` (bumped at allocation,
allocation.py:685-686) ends where the normal loop's does.  The length test therefore asserts equality.  A request that
stops on EOS was already given that slot by the queued batch: the last test shows #24590 there, exactly one more
cached token per stop finish, and nothing else.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

import pytest

from poolfuzz.harness.upstream.sglang_modules import unavailable_reason

pytestmark = pytest.mark.skipif(bool(reason := unavailable_reason("Engine")), reason=reason or "")

Wave = tuple[tuple[tuple[int, ...], int], ...]
"""(prompt, max_new_tokens) for each request of one wave."""

FIRST: Wave = (
    ((11, 12, 13, 14), 5),
    ((11, 12, 13, 15, 16), 3),
    ((11, 12, 20), 1),
    ((30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41), 7),  # longer than a chunk of 8
    ((11, 12, 13, 14, 50), 9),
    ((60,), 2),
)

SHAPES: tuple[dict[str, Any], ...] = (
    {},
    {"cache": "unified-rust"},
    {"cache": "unified-python", "chunk": 8},
    {"cache": "unified-rust", "page_size": 4, "tokens": 128, "chunk": 8},
)
"""Memory enough that nothing is retracted or evicted: the tree at rest is then a function of the requests alone."""


@dataclass(frozen=True)
class Seen:
    """One loop's run of the stream: per request, what a user sees; at rest, what the tree caches."""

    users: tuple[tuple[str, tuple[int, ...], str, Any, int], ...]
    """(rid, output tokens, finish reason's class, its ``length`` or matched token, ``cached_tokens``) per request."""
    cached: tuple[tuple[tuple[str, int], ...], ...]
    """After each wave, at rest: (rid, how many tokens of its prompt + output the tree matches) per request so far."""
    sizes: tuple[tuple[int, int], ...]
    """After each wave, at rest: the tree's ``evictable_size()`` and ``protected_size()``."""


def _run(loop_kind: str, shape: dict[str, Any], eos_after: int | None = None) -> Seen:
    """The stream through one loop: wave one, then a follow-up for each of its requests (its prompt, its output and
    one new token), each wave run to rest; ``eos_after``: every request samples EOS once it has that many tokens."""
    from poolfuzz.harness.kits.engine.checks import judge
    from poolfuzz.harness.kits.engine.driver import build_engine
    from poolfuzz.harness.kits.engine.target import SGLangEngine
    from poolfuzz.harness.upstream.engine_config import EOS
    from poolfuzz.harness.upstream.sglang_modules import active

    engine = SGLangEngine(build_engine(loop=loop_kind, **shape))
    loop = engine.loop
    reqs: list[Any] = []
    cached: list[tuple[tuple[str, int], ...]] = []
    sizes: list[tuple[int, int]] = []

    def at_rest() -> None:
        with active(loop.m):
            tree = loop.tree_cache
            params = loop.m.base_prefix_cache.MatchPrefixParams

            def matched(req: Any) -> int:
                key = loop.m.radix_cache.RadixKey(array("q", [*req.origin_input_ids, *req.output_ids]), None)
                return int(tree.match_prefix(params(key=key)).device_prefix_len)

            cached.append(tuple((str(r.rid), matched(r)) for r in reqs))
            sizes.append((int(tree.evictable_size()), int(tree.protected_size())))

    def to_rest(wave: Wave) -> None:
        arrived = [loop.arrive(list(prompt), budget) for prompt, budget in wave]
        assert all(req is not None for req in arrived), "a request of the stream was refused"
        reqs.extend(arrived)
        for _ in range(60):
            stop = {r.rid: EOS for r in arrived if eos_after is not None and len(r.output_ids) >= eos_after}
            engine.step(stop)
            judge(loop, engine.checker)
            if all(r.finished() for r in arrived) and engine.observe().at_rest:
                return at_rest()
        raise AssertionError(f"{loop_kind}: the wave did not come to rest in 60 iterations")

    to_rest(FIRST)
    to_rest(tuple((tuple(r.origin_input_ids) + tuple(r.output_ids) + (70,), 2) for r in list(reqs)))
    users = tuple(
        (
            str(r.rid),
            tuple(int(t) for t in r.output_ids),
            type(r.finished_reason).__name__,
            getattr(r.finished_reason, "length", getattr(r.finished_reason, "matched", None)),
            int(r.cached_tokens),
        )
        for r in reqs
    )
    return Seen(users, tuple(cached), tuple(sizes))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: ",".join(f"{k}={v}" for k, v in shape.items()) or "default")
def test_length_finishes_look_the_same_to_users_and_cache_the_same_tokens_under_both_loops(shape: dict[str, Any]) -> None:
    normal, overlap = _run("normal", shape), _run("overlap", shape)
    assert all(reason == "FINISH_LENGTH" for _, _, reason, _, _ in normal.users)
    assert [len(out) for _, out, _, _, _ in normal.users] == [budget for _, budget in FIRST] + [2] * len(FIRST)
    assert any(cached for *_, cached in normal.users), "the follow-ups found their prefixes cached"
    assert overlap.users == normal.users
    assert overlap.cached == normal.cached
    assert overlap.sizes == normal.sizes


def test_a_stop_finish_caches_exactly_one_more_token_under_overlap_the_documented_24590() -> None:
    """The same stream with every request sampling EOS once it has two tokens.  A request that stops before its
    budget's last token was given the next slot by the queued batch (``kv_committed_len`` one larger): under overlap
    the tree keeps its last token's KV, its sequence matches one token more after its wave, its follow-up reports one
    more ``cached_tokens``, and the tree holds one token more per such request.  A stop on the budget's last token
    (``r1-``, budget 3) was left out of that batch (``_reqs_finishing_inflight``) and caches the same.  Nothing else
    differs: the comparison of the length test sees #24590 where 0.5.23 has it."""
    shape = {"cache": "unified-rust"}
    normal, overlap = _run("normal", shape, eos_after=2), _run("overlap", shape, eos_after=2)
    first = len(FIRST)
    early = {
        i for i, (_, out, reason, _, _) in enumerate(normal.users[:first]) if reason == "FINISH_MATCHED_TOKEN" and len(out) < FIRST[i][1]
    }
    assert early == {0, 3, 4}
    for i, (user, seen) in enumerate(zip(normal.users, overlap.users, strict=True)):
        rid, out, reason, how, cached = user
        assert seen == (rid, out, reason, how, cached + int(i - first in early)), (i, seen, user)
    for i, (rid, matched) in enumerate(normal.cached[0]):
        assert overlap.cached[0][i] == (rid, matched + int(i in early)), (i, overlap.cached[0][i], matched)
    assert overlap.sizes[0] == (normal.sizes[0][0] + len(early), 0)
    # After the follow-ups (each a stopped request's sequence and more) both trees hold the same tokens again.
    assert overlap.cached[1] == normal.cached[1]
    assert overlap.sizes[1] == normal.sizes[1]

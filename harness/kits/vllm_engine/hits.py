"""Prefix-hit soundness for the ``vllm_engine`` target: a hit reuses only blocks whose content is the request's own.

vLLM's documented semantics of automatic prefix caching (docs/design/prefix_caching.md): a block's hash names its
tokens and every token before it (the parent hash chain), so a cache hit of ``n`` tokens hands a request, in each
KV cache group, blocks whose content is exactly the KV of its own first ``n`` tokens; the last token is always
computed again (its logits are needed), so ``n`` is less than the request's length; hits land on hash blocks; and
with prefix caching off nothing is reused.  A group whose layers do not read a block (left of a sliding window, of
the current local chunk, or a Mamba state before the last) holds the null block there instead.

The fake model writes no KV, so content is checked on what names it: right after ``schedule()`` admits (or
resumes) a request with ``num_computed_tokens`` > 0 (``NewRequestData`` / ``CachedRequestData``, built before
``_update_after_schedule``, scheduler.py:1646-1660, :1966), :func:`admitted` reads, per group, the blocks of its table
that cover the hit and the hash each block carries, and the request's own block hashes (``Request.block_hashes``,
computed from its tokens by the block hasher the engine core installs).  :func:`check_hits` then holds each
non-null block's hash to the request's for that block range, keyed with the group id as the pool keys it
(``make_block_hash_with_group_id``, as ``BlockPool.get_cached_block`` builds the key, block_pool.py:218-221).

Its invariant id is ``prefix-hit-sound`` (harness/judge/invariants.py): a hit reuses, in every group, only blocks
holding the request's own tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.vllm_engine.groups import spec_kind

HIT = "prefix-hit-sound"
"""The invariant a prefix hit is judged under."""


@dataclass(frozen=True)
class GroupHit:
    """One group's part of a hit: for each block index the hit covers, the block id (``None`` for the null block),
    the hash the block carries now and the request's own hash for that range, both keyed with the group id."""

    group: int
    kind: str
    blocks: tuple[tuple[int | None, object, object], ...]


@dataclass(frozen=True)
class Hit:
    """A request admitted or resumed with ``tokens`` computed from the cache, out of ``length`` tokens."""

    rid: str
    step: int
    tokens: int
    length: int
    caching: bool
    hash_block_size: int
    groups: tuple[GroupHit, ...]


def admitted(scheduler: Any, output: Any, step: int, caching: bool, hash_block_size: int, key: Callable[[Any, int], Any]) -> list[Hit]:
    """The hits of the requests ``output`` admits or resumes (see the module docstring); read before any result lands."""
    starts = [(new.req_id, new.num_computed_tokens) for new in output.scheduled_new_reqs]
    cached = output.scheduled_cached_reqs
    resumed = getattr(cached, "resumed_req_ids", ())  # 0.34.0 re-sends a resumed request as a new one (scheduler.py:1619)
    starts += [(rid, n) for rid, n in zip(cached.req_ids, cached.num_computed_tokens, strict=True) if rid in resumed]
    managers = scheduler.kv_cache_manager.coordinator.single_type_managers
    hits = []
    for rid, tokens in starts:
        request = scheduler.requests.get(rid)
        if request is None or tokens == 0:
            continue
        groups = []
        for group, manager in enumerate(managers):
            if manager.block_size != hash_block_size:
                continue  # a coarser group's block is several hash blocks (only a none-mode Mamba group: caching off)
            table = manager.req_to_blocks.get(rid, ())
            ours = request.block_hashes
            blocks = tuple(
                (
                    None if table[i].is_null else table[i].block_id,
                    None if table[i].is_null else table[i].block_hash,
                    key(ours[i], group) if i < len(ours) else None,
                )
                for i in range(min(len(table), tokens // hash_block_size))
            )
            groups.append(GroupHit(group, spec_kind(manager.kv_cache_spec), blocks))
        hits.append(Hit(rid, step, tokens, int(request.num_tokens), caching, hash_block_size, tuple(groups)))
    return hits


def check_hits(hits: Iterable[Hit]) -> None:
    """``prefix-hit-sound`` over each hit (see the module docstring)."""
    for hit in hits:
        where = {"request": hit.rid, "step": hit.step, "hit_tokens": hit.tokens}
        check(hit.caching, HIT, "a request reused computed tokens with prefix caching off", **where)
        check(
            hit.tokens < hit.length,
            HIT,
            "a prefix hit covers the request's last token (its logits need it computed)",
            length=hit.length,
            **where,
        )
        check(
            hit.tokens % hit.hash_block_size == 0,
            HIT,
            "a prefix hit ends inside a hash block",
            hash_block_size=hit.hash_block_size,
            **where,
        )
        for group in hit.groups:
            whole = hit.tokens // hit.hash_block_size
            check(
                len(group.blocks) == whole,
                HIT,
                "a group's table holds fewer blocks than the hit covers",
                group=group.group,
                held=len(group.blocks),
                covered=whole,
                **where,
            )
            for index, (block, carried, ours) in enumerate(group.blocks):
                if block is None:
                    check(
                        group.kind != "full", HIT, "a full-attention hit hands out the null block", group=group.group, index=index, **where
                    )
                    continue
                check(
                    carried is not None and carried == ours,
                    HIT,
                    "a prefix hit reuses a block whose hash is not the request's for that range (stale or foreign content)",
                    group=group.group,
                    index=index,
                    block=block,
                    **where,
                )

"""Machines for ``TokenToKVPoolAllocator`` and ``PagedTokenToKVPoolAllocator``.

Bundles hold allocation handles (``allocs``), request handles (``reqs``,
paged only) and handles that gave slots back (``freed``).  ``consumes`` moves a
wholly freed handle out of its bundle; the double-free rule draws from
``freed``.  Sizes depend on the drawn page size, so rules draw them through
``st.data()``; the trace records the concrete numbers.  Whether a call is
valid is the driver's decision, from the model.  Driver events name the rare
states (pool exactly full, refused for want of pages, frees deferred by a
group, allocations while pages are staged); ``target()`` steers toward full pools.

Corner rules take the walk's moves (:mod:`strategies.kv`) from a drawn seed, so
both engines reach them at the same rate under the same event labels: a live
slot named twice in one free, an unaligned prefix grown beside a request taking
pages, a request filling exactly the free pages (or one more), and decode
batches mixing requests that open a page with requests that do not.
"""

from __future__ import annotations

import random

from typing import Any, ClassVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, consumes, initialize, multiple, precondition, rule

from harness.judge.drivers.kv import TokenKVDriver
from harness.machines.base import PoolMachine
from strategies.table import MoveTable, config_corners, corner_steps
from strategies.kv_misuse import paged_catalogue, token_catalogue
from strategies.kv import (
    alloc_sizes,
    extend_lengths,
    paged_kv_configs,
    paged_kv_walk,
    token_indices,
    token_kv_configs,
    token_kv_walk,
)

TOKEN_WALK, PAGED_WALK = token_kv_walk(), paged_kv_walk()

MOVE_SEEDS = st.integers(min_value=0, max_value=255)
"""What a hand-written rule draws to take a table move: the seed of its own ``random.Random``."""


class TokenKVMachine(PoolMachine):
    family = "token_kv"
    allocs = Bundle("allocs")
    freed = Bundle("freed")
    walk: ClassVar[MoveTable] = TOKEN_WALK
    catalogue = token_catalogue()

    @initialize(config=token_kv_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)
        for label in config_corners(config):
            self.driver.event(label)  # type: ignore[union-attr]

    @property
    def kv(self) -> TokenKVDriver:
        return cast(TokenKVDriver, self.driver)

    def occupancy(self) -> float:
        """Share of pages live or pending; an empty (size 0) pool counts as 0, not as full."""
        model = self.kv.model
        return 1.0 - model.available_pages() / model.num_pages if model.num_pages else 0.0

    def _group_open(self) -> bool:
        return self.driver is not None and self.kv.model.group_open

    def _holds_pages(self) -> bool:
        return self.driver is not None and bool(self.kv.model.owner)

    @rule(target=allocs, data=st.data())
    def alloc(self, data: st.DataObject) -> Any:
        need = data.draw(alloc_sizes(page_size=self.kv.page_size, misuse=self.misuse_enabled), label="need_size")
        handle = self.do("alloc", need_size=need)
        return multiple() if handle is None or need == 0 else handle  # an empty allocation has nothing to free

    @rule(target=freed, handle=consumes(allocs))
    def free(self, handle: int) -> int:
        self.do("free", handle=handle)
        return handle

    @rule(target=freed, handle=consumes(allocs))
    def free_deferred(self, handle: int) -> int:
        """Free inside a free group, opening one first if none is open (the scheduler's batch release)."""
        if not self._group_open():
            self.do("group_begin")
        self.do("free", handle=handle)
        return handle

    @rule(target=freed, handle=allocs, count=st.integers(min_value=1, max_value=3), sparse=st.booleans())
    def free_part(self, handle: int, count: int, sparse: bool) -> int:
        """Partly freed allocations also join ``freed``, so their released pages can be double-freed."""
        self.do("free_part", handle=handle, count=count, sparse=sparse)
        return handle

    @precondition(lambda self: self.misuse_enabled)
    @rule(handle=freed)
    def free_again(self, handle: int) -> None:
        self.do("free_again", handle=handle)

    def walk_move(self, name: str, seed: int) -> list[int]:
        """Run the walk move ``name`` drawn from ``seed`` (setup steps included); the request handles it made."""
        move = self.walk.move(name)
        made: list[int] = []
        for op, args in corner_steps(move, self.driver, random.Random(seed), self.driver.event):
            result = self.do(op, **args)
            if op == "extend" and result:
                made += result
        return made

    @precondition(lambda self: self.misuse_enabled)
    @rule(seed=MOVE_SEEDS)
    def free_repeating(self, seed: int) -> None:
        """Live slots of one allocation freed with one named twice (misuse for the token allocator)."""
        self.walk_move("free repeating", seed)

    @precondition(lambda self: self.misuse_enabled and self._holds_pages())
    @rule(data=st.data())
    def free_indices(self, data: st.DataObject) -> None:
        model = self.kv.model
        indices = data.draw(token_indices(page_size=model.page_size, num_pages=model.num_pages), label="indices")
        self.do("free_indices", indices=indices)

    # Rules without arguments sort first in hypothesis's rule list, so the simplest
    # choice sequences pick them: their preconditions keep them to states where
    # they can show something (a fresh pool clears, merges and groups trivially).
    @precondition(lambda self: not self._group_open() and self._holds_pages())
    @rule()
    def group_begin(self) -> None:
        self.do("group_begin")

    @precondition(lambda self: self._group_open())
    @rule()
    def group_end(self) -> None:
        self.do("group_end")

    @precondition(lambda self: self.misuse_enabled and self._holds_pages())
    @rule()
    def group_misuse(self) -> None:
        """Begin inside an open group (nesting), or end with none open."""
        self.do("group_begin" if self._group_open() else "group_end")

    @precondition(lambda self: bool(self.driver and self.kv.model.has_staged))
    @rule()
    def merge(self) -> None:
        self.do("merge")

    @precondition(lambda self: self._holds_pages() and (self.occupancy() >= 0.5 or self._group_open()))
    @rule()
    def clear(self) -> None:
        self.do("clear")


class PagedKVMachine(TokenKVMachine):
    family = "paged_kv"
    reqs = Bundle("reqs")
    walk = PAGED_WALK
    catalogue = paged_catalogue()

    @initialize(config=paged_kv_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)
        for label in config_corners(config):
            self.driver.event(label)  # type: ignore[union-attr]

    def _extend(self, data: st.DataObject, existing: list[int], new: int) -> Any:
        lengths = extend_lengths(page_size=self.kv.page_size)
        batch: list[list[int | None]] = [[h, data.draw(lengths, label="extend_len")] for h in existing]
        batch += [[None, data.draw(lengths, label="new_len")] for _ in range(new)]
        if len(batch) > 1:
            batch = data.draw(st.permutations(batch), label="batch order")
        return multiple(*(self.do("extend", batch=batch) or []))

    @rule(target=reqs, data=st.data(), new=st.one_of(st.integers(min_value=1, max_value=3), st.just(0)))
    def admit(self, data: st.DataObject, new: int) -> Any:
        """An extend batch of new requests only (prefix 0, ``last_loc`` -1); 0 requests is an empty batch."""
        return self._extend(data, [], new)

    def _live_requests(self, data: st.DataObject, *, max_size: int) -> list[int]:
        """A few distinct live requests, drawn from the model (the bundle also holds cleared ones)."""
        live = sorted(self.kv.model.requests)
        return data.draw(st.lists(st.sampled_from(live), unique=True, min_size=1, max_size=max_size), label="requests")

    @precondition(lambda self: bool(self.kv.model.requests))
    @rule(target=reqs, data=st.data(), new=st.integers(min_value=0, max_value=2))
    def extend(self, data: st.DataObject, new: int) -> Any:
        """Chunked prefill: live requests grow from their current length, new ones may join the batch."""
        return self._extend(data, self._live_requests(data, max_size=3), new)

    @precondition(lambda self: self.kv.page_size > 1 or bool(self.kv.model.requests))
    @rule(target=reqs, seed=MOVE_SEEDS)
    def extend_unaligned(self, seed: int) -> Any:
        """A request whose prefix ends mid-page grown within its page or by whole pages, beside a new one."""
        return multiple(*self.walk_move("unaligned prefix", seed))

    @rule(target=reqs, seed=MOVE_SEEDS)
    def fill(self, seed: int) -> Any:
        """One new request taking exactly the free pages, or one page more."""
        return multiple(*self.walk_move("fill", seed))

    @precondition(lambda self: self.kv.page_size > 1)
    @rule(target=reqs, seed=MOVE_SEEDS)
    def decode_mixed(self, seed: int) -> Any:
        """Requests opening a page and requests mid-page decoded in one batch, in any order (admitting them first)."""
        return multiple(*self.walk_move("decode mixed", seed))

    @rule(target=TokenKVMachine.freed, handle=consumes(reqs))
    def free_request(self, handle: int) -> int:
        self.do("free", handle=handle)
        return handle

    @precondition(lambda self: bool(self.kv.model.requests))
    @rule(data=st.data())
    def decode(self, data: st.DataObject) -> None:
        """One decode step for a few live requests."""
        self.do("decode", handles=self._live_requests(data, max_size=4))

    @precondition(lambda self: bool(self.kv.model.requests))
    @rule(data=st.data())
    def decode_to_page_edge(self, data: st.DataObject) -> None:
        """Decode steps until the first request's next token opens a page (one step if it already does)."""
        handles = self._live_requests(data, max_size=4)
        ps, length = self.kv.page_size, len(self.kv.model.slots[handles[0]])
        for _ in range(ps - length % ps + 1 if length % ps else 1):
            self.do("decode", handles=handles)

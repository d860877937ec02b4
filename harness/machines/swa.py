"""Machines for the SWA families: ``swa_kv`` (``SWATokenToKVPoolAllocator``) and ``pure_swa_kv``.

``SWAKVMachine`` rules take the moves of the family's walk (:func:`strategies.swa.swa_kv_walk`)
from a drawn seed, so both engines reach the same states at the same rates and every step
costs the shrinker one choice: the moves read the driver's model (a request's life has more
states than consumed or not: tokens leave the window page by page, a request wholly out of
the window is freed with ``free_full``), and whether a call is valid is the driver's
decision.  Misuse rules sit behind :meth:`SWAKVMachine.misuse_allowed` and never run twice
in a row.  ``target()`` steers toward full sides, whichever runs short first.

``PureSWAKVMachine`` is the token machine of :mod:`harness.machines.kv` on the pure
variant's config, plus its three SWA calls.
"""

from __future__ import annotations

import random
from typing import Any, cast

from hypothesis import strategies as st
from hypothesis.stateful import consumes, initialize, precondition, rule

from harness.judge.drivers.pure_swa import PureSWAKVDriver
from harness.judge.drivers.swa import SWAKVDriver
from harness.machines.base import PoolMachine
from harness.machines.kv import TokenKVMachine
from strategies.kv_misuse import pure_swa_catalogue
from strategies.swa import (
    pure_swa_kv_configs,
    swa_catalogue,
    swa_kv_configs,
    swa_kv_walk,
)

SWA_WALK = swa_kv_walk()
MOVE_SEEDS = st.integers(min_value=0, max_value=255)
"""A rule draws one seed for its move's own ``random.Random``: one choice a step for the shrinker."""
CORNER_STEPS = 4
"""Steps a corner rule may take toward its corner (each corner move gives the next one)."""


class SWAKVMachine(PoolMachine):
    family = "swa_kv"
    catalogue = swa_catalogue()

    def __init__(self) -> None:
        super().__init__()
        self.just_misused = False

    @initialize(config=swa_kv_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)

    @property
    def swa(self) -> SWAKVDriver:
        return cast(SWAKVDriver, self.driver)

    def occupancy(self) -> float:
        """The fuller side's share of pages live or pending; an empty side counts as 0."""
        model = self.swa.model
        shares = [1.0 - len(side.free) / side.num_pages for side in (model.full, model.swa) if side.num_pages]
        return max(shares, default=0.0)

    def misuse_allowed(self) -> bool:
        """Misuse changes nothing, so never two in a row: alone in a swarm they would fill whole runs."""
        return self.misuse_enabled and not self.just_misused

    def do(self, op: str, **args: Any) -> Any:
        self.just_misused = False
        return super().do(op, **args)

    def walk_move(self, name: str, seed: int, *, misuse: bool = False) -> None:
        """The walk's move ``name`` drawn from ``seed``; nothing when the state offers none."""
        step = SWA_WALK.move(name).draw(self.driver, random.Random(seed))
        if step is not None:
            self.do(step[0], **step[1])
            self.just_misused = misuse

    def _live(self) -> bool:
        return self.driver is not None and bool(self.swa.model.slots)

    # ---------------------------------------------------------- allocation
    @rule(seed=MOVE_SEEDS)
    def admit(self, seed: int) -> None:
        """An extend batch of new requests, lengths at page edges (page size 1: one ``alloc``)."""
        self.walk_move("admit", seed)

    @precondition(lambda self: self._live())
    @rule(seed=MOVE_SEEDS)
    def grow(self, seed: int) -> None:
        """Chunked prefill: requests whose last token is in the window grow, a new one may join."""
        self.walk_move("grow", seed)

    @precondition(lambda self: self.driver is not None and self.swa.page_size > 1)
    @rule(seed=MOVE_SEEDS)
    def tail(self, seed: int) -> None:
        """PD decode pre-allocation: full KV for the extend, SWA KV for its tail only."""
        self.walk_move("swa tail", seed)

    @precondition(lambda self: self.driver is not None and self.swa.page_size == 1)
    @rule(seed=MOVE_SEEDS)
    def alloc(self, seed: int) -> None:
        self.walk_move("alloc", seed)

    @precondition(lambda self: self._live())
    @rule(seed=MOVE_SEEDS, to_page_edge=st.booleans())
    def decode(self, seed: int, to_page_edge: bool) -> None:
        """A decode step for a few requests; ``to_page_edge``: steps until the first one's next token opens a page."""
        step = SWA_WALK.move("decode").draw(self.driver, random.Random(seed))
        if step is None:
            return
        ps, length = self.swa.page_size, len(self.swa.model.slots[step[1]["handles"][0]])
        for _ in range(ps - length % ps + 1 if to_page_edge and length % ps else 1):
            self.do(*step[:1], **step[1])

    @precondition(lambda self: self._live())
    @rule(seed=MOVE_SEEDS)
    def slide_window(self, seed: int) -> None:
        """Tokens leave the window: ``free_swa`` of a request's oldest pages that still have SWA peers."""
        self.walk_move("window slides", seed)

    @rule(seed=MOVE_SEEDS, corner=st.sampled_from([m.name for m in SWA_WALK.moves if m.corner]))
    def corner(self, seed: int, corner: str) -> None:
        """Up to :data:`CORNER_STEPS` steps toward a corner few random interleavings line up:
        a decode only the SWA side is too short for, an SWA tail over recycled full pages."""
        move, rng = SWA_WALK.move(corner), random.Random(seed)
        for _ in range(CORNER_STEPS):
            step = move.draw(self.driver, rng)
            if step is None:
                return
            self.do(step[0], **step[1])

    # --------------------------------------------------------------- frees
    @precondition(lambda self: self._live())
    @rule(seed=MOVE_SEEDS, deferred=st.booleans())
    def free(self, seed: int, deferred: bool) -> None:
        """Free a whole request (sometimes naming one token a page); ``deferred``: inside a free group."""
        if deferred and not self.swa.model.group_open:
            self.do("group_begin")
        self.walk_move("free", seed)

    @precondition(lambda self: self._live())
    @rule(seed=MOVE_SEEDS)
    def free_full(self, seed: int) -> None:
        """Free a request none of whose tokens is in the window any more."""
        self.walk_move("free out of the window", seed)

    @precondition(lambda self: self.misuse_allowed() and self.driver is not None)
    @rule(seed=MOVE_SEEDS, kind=st.sampled_from([m.name for m in SWA_WALK.moves if m.misuse]))
    def misuse(self, seed: int, kind: str) -> None:
        """A call the contract forbids: double, foreign and padding frees on all three free calls,
        ``free_full`` in the window, ``free_swa`` out of it, a continuation out of the window, an
        impossible SWA tail, the other page regime's call, group nesting."""
        self.walk_move(kind, seed, misuse=True)

    # ---------------------------------------------------- groups and clear
    # Argument-free rules sort first in hypothesis's rule list; their preconditions keep them
    # to states where they can show something.
    @precondition(lambda self: self._live() and not self.swa.model.group_open)
    @rule()
    def group_begin(self) -> None:
        self.do("group_begin")

    @precondition(lambda self: self.driver is not None and self.swa.model.group_open)
    @rule()
    def group_end(self) -> None:
        self.do("group_end")

    @precondition(lambda self: self._live() and (self.occupancy() >= 0.75 or self.swa.model.group_open))
    @rule()
    def clear(self) -> None:
        self.do("clear")


class PureSWAKVMachine(TokenKVMachine):
    """The token machine on ``PureSWATokenToKVPoolAllocator``, plus ``free_swa``, ``free_full`` and padded frees."""

    family = "pure_swa_kv"
    catalogue = pure_swa_catalogue()

    @initialize(config=pure_swa_kv_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)

    def merge(self) -> None:
        """Not a rule here: the pure pool merges its staging area inside ``alloc`` only."""

    @property
    def pure(self) -> PureSWAKVDriver:
        return cast(PureSWAKVDriver, self.driver)

    @rule(target=TokenKVMachine.freed, handle=consumes(TokenKVMachine.allocs), op=st.sampled_from(["free_swa", "free_padded"]))
    def free_other_way(self, handle: int, op: str) -> int:
        """``free_swa`` is ``free`` here; a free padded with 0 and -1 drops the padding."""
        self.do(op, handle=handle)
        return handle

    @rule(handle=TokenKVMachine.allocs)
    def free_full(self, handle: int) -> None:
        """``free_full`` releases nothing: there is no full-attention pool."""
        self.do("free_full", handle=handle)


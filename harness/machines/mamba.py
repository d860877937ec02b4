"""Machines for ``MambaSlotAllocator`` and ``HybridReqToTokenPool``.

Bundles hold slot handles (``slots``) or request handles (``reqs``);
``consumes`` moves a freed handle into ``freed`` / ``released``, from which the
double-free rules draw.  Group windows interleave with everything else, and a
few rules steer toward the rare states: ``take_reserved`` drains an open
window, ``admission_round`` / ``admit`` wrap admissions in a window the way the
scheduler does (reserving more or fewer than they admit), ``finish`` makes the
two-call release in either order, and ``target()`` rewards full pools and
long-consumed reservations.  Misuse rules sit behind ``misuse_allowed()``.
Whether a call is valid is the driver's decision, from the model."""

from __future__ import annotations

import random

from typing import Any, cast

from hypothesis import strategies as st
from hypothesis import target
from hypothesis.stateful import (
    Bundle,
    consumes,
    initialize,
    multiple,
    precondition,
    rule,
)

from harness.judge.drivers.hybrid import HybridDriver
from harness.judge.drivers.mamba import MambaSlotDriver
from harness.machines.base import PoolMachine
from harness.judge.models.mamba import SlotModel
from strategies.table import Move, config_corners, corner_steps
from strategies.mamba_catalogue import hybrid_catalogue, mamba_slot_catalogue
from strategies.mamba import (
    group_sizes,
    hybrid_configs,
    hybrid_walk,
    mamba_slot_configs,
    mamba_slot_walk,
    raw_slots,
    slot_counts,
)

SLOT_WALK, HYBRID_WALK = mamba_slot_walk(), hybrid_walk()

MOVE_SEEDS = st.integers(min_value=0, max_value=255)
"""What a hand-written rule draws to take a table move: the seed of its own ``random.Random``."""


class _WindowMachine(PoolMachine):
    """Shared window rules; subclasses say where the slot model is."""

    def __init__(self) -> None:
        super().__init__()
        self.most_reserved_taken = 0
        self.just_misused = False

    def slot_model(self) -> SlotModel:
        raise NotImplementedError

    def window_open(self) -> bool:
        return self.driver is not None and self.slot_model().group_open

    def reservation_left(self) -> bool:
        return self.window_open() and bool(self.slot_model().unconsumed)

    def misuse_allowed(self) -> bool:
        """Misuse rules change nothing, so never two in a row: alone in a swarm they would fill whole runs."""
        return self.misuse_enabled and not self.just_misused

    def misuse(self, op: str, **args: Any) -> None:
        self.do(op, **args)
        self.just_misused = True

    def walk_move(self, move: Move, seed: int) -> list[int]:
        """Run a walk move drawn from ``seed`` (setup steps included, misuse through :meth:`misuse`);
        the handles its allocations made."""
        made: list[int] = []
        for op, args in corner_steps(move, self.driver, random.Random(seed), self.driver.event):
            if move.misuse and op != "alloc":
                self.misuse(op, **args)
                continue
            result = self.do(op, **args)
            if op == "alloc" and result:
                made += result
        return made

    def do(self, op: str, **args: Any) -> Any:
        self.just_misused = False
        result = super().do(op, **args)
        if self.driver is not None:
            self.most_reserved_taken = max(self.most_reserved_taken, self.slot_model().cursor)
        return result

    @precondition(lambda self: not self.window_open())
    @rule(data=st.data())
    def group_begin(self, data: st.DataObject) -> None:
        self.do("group_begin", num_reqs=data.draw(group_sizes(misuse=self.misuse_enabled), label="num_reqs"))

    @precondition(lambda self: self.window_open())
    @rule()
    def group_end(self) -> None:
        self.do("group_end")

    @precondition(lambda self: self.misuse_allowed() and self.window_open())
    @rule(num_reqs=group_sizes(misuse=False, max_reqs=2))
    def nested_group_begin(self, num_reqs: int) -> None:
        self.misuse("group_begin", num_reqs=num_reqs)

    @precondition(lambda self: self.misuse_allowed() and not self.window_open())
    @rule()
    def group_end_without_window(self) -> None:
        self.misuse("group_end")

    def in_use(self) -> bool:
        """Something for ``clear`` to undo: a clear of a fresh pool proves nothing and wastes a step."""
        model = self.slot_model()
        return model.group_open or len(model.free) < model.size

    @precondition(lambda self: self.driver is not None and self.in_use())
    @rule()
    def clear(self) -> None:
        self.do("clear")

    def teardown(self) -> None:
        if self.driver is not None and not getattr(self, "failed", False):
            target(float(self.most_reserved_taken), label="reserved slots consumed in one window")
        super().teardown()


class MambaSlotMachine(_WindowMachine):
    family = "mamba_slots"
    catalogue = mamba_slot_catalogue()
    slots = Bundle("slots")
    freed = Bundle("freed")

    @initialize(config=mamba_slot_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)
        for label in config_corners(config):
            self.driver.event(label)  # type: ignore[union-attr]

    def slot_model(self) -> SlotModel:
        return cast(MambaSlotDriver, self.driver).model

    def occupancy(self) -> float:
        model = self.slot_model()
        return 1.0 - len(model.free) / max(1, model.size)

    @rule(target=slots, data=st.data())
    def alloc(self, data: st.DataObject) -> Any:
        need = data.draw(slot_counts(misuse=self.misuse_enabled), label="need_size")
        return multiple(*(self.do("alloc", need_size=need) or []))

    @precondition(lambda self: self.window_open())
    @rule(target=slots)
    def take_reserved(self) -> Any:
        return multiple(*(self.do("alloc", need_size=1) or []))

    @precondition(lambda self: not self.window_open())
    @rule(target=slots, reserve=st.integers(min_value=1, max_value=4), take=st.integers(min_value=0, max_value=5))
    def admission_round(self, reserve: int, take: int) -> Any:
        """The scheduler's round: reserve for the queue, ``alloc(1)`` per admitted request, end the window."""
        self.do("group_begin", num_reqs=reserve)
        handles = [h for _ in range(take) for h in self.do("alloc", need_size=1) or []]
        self.do("group_end")
        return multiple(*handles)

    @rule(target=freed, handle=consumes(slots), pair=st.booleans())
    def free(self, handle: int, pair: bool) -> Any:
        """Free one drawn handle, or with ``pair`` also the lowest other live handle, in one call.

        Only one handle comes from the bundle: a list of ``consumes`` draws
        aborts the example when the bundle runs dry mid-list.
        """
        live = self.driver.model.live  # type: ignore[union-attr]
        others = sorted(h for h in live.values() if h != handle)[:1] if pair else []
        self.do("free", handles=[handle, *others])
        return handle

    @precondition(lambda self: self.misuse_allowed())
    @rule(handle=freed)
    def free_again(self, handle: int) -> None:
        self.misuse("free", handles=[handle])

    @precondition(lambda self: self.misuse_allowed())
    @rule(seed=MOVE_SEEDS)
    def free_repeating(self, seed: int) -> None:
        """Live slots freed in one call with one named twice, next to itself or with others between."""
        self.walk_move(SLOT_WALK.move("free repeating"), seed)

    @rule(target=slots, seed=MOVE_SEEDS)
    def alloc_in_window(self, seed: int) -> Any:
        """``alloc`` of 1, 2, all or one more than the reservation left (opening or closing the window first)."""
        return multiple(*self.walk_move(SLOT_WALK.move("alloc in a window"), seed))

    @precondition(lambda self: self.misuse_allowed())
    @rule(handle=slots)
    def free_twice_in_one_call(self, handle: int) -> None:
        self.misuse("free", handles=[handle, handle])

    @precondition(lambda self: self.misuse_allowed())
    @rule(slots=raw_slots())
    def free_arbitrary_slots(self, slots: list[int]) -> None:
        self.misuse("free_slots", slots=slots)

    @precondition(lambda self: self.misuse_allowed() and self.reservation_left())
    @rule(position=st.integers(min_value=0, max_value=3))
    def free_reserved_slot(self, position: int) -> None:
        unconsumed = self.slot_model().unconsumed
        self.misuse("free_slots", slots=[unconsumed[position % len(unconsumed)]])


class HybridMachine(_WindowMachine):
    family = "hybrid_req_to_token"
    catalogue = hybrid_catalogue()
    reqs = Bundle("reqs")
    released = Bundle("released")

    @initialize(config=hybrid_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)
        for label in config_corners(config):
            self.driver.event(label)  # type: ignore[union-attr]

    @property
    def hybrid(self) -> HybridDriver:
        return cast(HybridDriver, self.driver)

    def slot_model(self) -> SlotModel:
        return self.hybrid.hybrid.slots

    def in_use(self) -> bool:
        return super().in_use() or len(self.hybrid.hybrid.free) < self.hybrid.hybrid.num_rows

    def occupancy(self) -> float:
        model = self.hybrid.hybrid
        rows = 1.0 - len(model.free) / max(1, model.num_rows)
        return max(rows, 1.0 - model.slots.capacity / max(1, model.slots.size))

    @rule(target=reqs, picks=st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=15)), max_size=3))
    def alloc(self, picks: list[int | None]) -> Any:
        """New requests (``None``) and known ones by index: live ones reuse, released ones re-enter."""
        batch = [self.known_handle(pick) for pick in picks]
        return multiple(*(self.do("alloc", batch=batch) or []))

    @precondition(lambda self: not self.window_open())
    @rule(target=reqs, reserve=st.integers(min_value=0, max_value=4), admit=st.integers(min_value=0, max_value=4))
    def admit(self, reserve: int, admit: int) -> Any:
        """The scheduler's admission round: reserve for the queue, admit some, end the window."""
        self.do("group_begin", num_reqs=reserve)
        handles = self.do("alloc", batch=[None] * admit) or []
        self.do("group_end")
        return multiple(*handles)

    @rule(target=reqs, seed=MOVE_SEEDS)
    def readmit_without_slot(self, seed: int) -> Any:
        """A request holding its row but not its slot, readmitted beside new ones (a mixed batch)."""
        return multiple(*self.walk_move(HYBRID_WALK.move("readmit without a slot"), seed))

    @rule(target=reqs, seed=MOVE_SEEDS)
    def alloc_to_capacity(self, seed: int) -> Any:
        """New and known requests, as many new ones as the shorter side has room for (or one more)."""
        return multiple(*self.walk_move(HYBRID_WALK.move("alloc"), seed))

    @rule(target=released, handle=consumes(reqs), cache_first=st.booleans())
    def finish(self, handle: int, cache_first: bool) -> int:
        """A finished request's two-call release, in either order."""
        for op in ("free_mamba_cache", "free") if cache_first else ("free", "free_mamba_cache"):
            self.do(op, handle=handle)
        return handle

    @rule(target=released, handle=consumes(reqs))
    def free(self, handle: int) -> int:
        """Row only: the slot stays live (donated to a cache) until ``free_mamba_cache``."""
        self.do("free", handle=handle)
        return handle

    @precondition(lambda self: bool(getattr(self.driver, "reqs", None)))
    @rule(pick=st.integers(min_value=0, max_value=15))
    def free_mamba_cache(self, pick: int) -> None:
        """Any known request, by index: live, released or already without a slot (then misuse)."""
        self.do("free_mamba_cache", handle=self.known_handle(pick))

    @precondition(lambda self: self.misuse_allowed())
    @rule(handle=released)
    def free_again(self, handle: int) -> None:
        self.misuse("free", handle=handle)

    @rule(handle=reqs, start=st.integers(min_value=0, max_value=8), length=st.integers(min_value=0, max_value=4))
    def write(self, handle: int, start: int, length: int) -> None:
        self.do("write", handle=handle, start=start, length=length)

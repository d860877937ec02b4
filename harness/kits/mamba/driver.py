"""Driver for ``mamba_slots``, and the slot machinery ``hybrid_req_to_token`` shares.

Both families share :class:`SlotWindowDriver`: the checks on handed-out slots, the
group-window operations and the slot audit.  Slots and requests are named by
integer handles handed out in order, so a trace replays the same calls.

A group window's reservation is whatever ``alloc_group_begin`` takes off the
free list; the driver reads which slots those are from the public
``free_slots`` tensor (the model cannot know a pool's pop order) and from then
on predicts everything: ``alloc(1)`` must hand the reservation out in that
order, and ``alloc_group_end`` must give back exactly the rest (seed 001).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, ConstructorKwargs, Driver, offends_free, operation
from poolfuzz.harness.judge.invariants import check, check_unique
from poolfuzz.harness.judge.limits import is_int
from poolfuzz.harness.kits.mamba.config import MambaSlotConfig
from poolfuzz.harness.kits.mamba.model import SlotModel
from poolfuzz.harness.kits.mamba.ops import SlotOps
from poolfuzz.pools.errors import (
    BadBatchError,
    BadSizeError,
    DoubleFreeError,
    ForeignIndexError,
    GroupStateError,
    PoolError,
    ReservedIndexError,
)


def as_int(value: Any) -> int | None:
    """A request field as a plain int (upstream stores 0-d tensors), or ``None``."""
    return None if value is None else int(value)


def bad_count(value: Any) -> bool:
    """A count (``need_size``, ``num_reqs``, ``size``) that is not an int >= 0: ``BadSizeError``."""
    return not is_int(value) or value < 0


class SlotWindowDriver(Driver):
    """Slot checks and group windows, over ``slot_allocator`` and its ``slot_model``."""

    @property
    def slot_allocator(self) -> Any:
        raise NotImplementedError

    @property
    def slot_model(self) -> SlotModel:
        raise NotImplementedError

    def slot_tensor(self, slots: list[int]) -> torch.Tensor:
        return torch.tensor(slots, dtype=torch.int64, device=self.config.device)

    def free_list(self) -> list[int]:
        return [int(s) for s in self.slot_allocator.free_slots.reshape(-1).tolist()]

    def misuse(self, call: Callable[[], Any], error: type[PoolError] | tuple[type[PoolError], ...], what: str,
               offending: Callable[[PoolError, int], bool] | None = None) -> Any:
        """Expect the typed rejection, or skip the call for a target that does not validate input."""
        if not self.check_misuse:
            return SKIPPED
        self.expect_rejected(call, error, what, offending=offending)
        return []

    def offends(self, slots: list[int]) -> Callable[[PoolError, int], bool]:
        """What a rejected ``free(slots)`` may name: slot 0, slots past the pool, or slots named twice or not live."""
        model = self.slot_model
        return offends_free(slots, model.in_range, lambda slot: slot in model.live)

    # ------------------------------------------------------------ per-call checks
    def check_handed_out(self, slots: list[int], what: str, reserved: list[int]) -> None:
        """Slots one call hands out: unique, never slot 0, in range, not live; the first
        ``len(reserved)`` are exactly the reservation's next ones in order, the rest came off the free list."""
        model = self.slot_model
        check_unique(slots, "no-double-allocation", f"slots returned by {what}")
        for position, slot in enumerate(slots):
            check(slot != 0, "reserved-never-handed-out", f"{what} handed out padding slot 0")
            check(model.in_range(slot), "in-bounds", f"{what} returned slot {slot}", size=model.size)
            check(slot not in model.live, "no-double-allocation", f"{what} returned slot {slot}, which is live",
                  owner=model.live.get(slot))
            if position < len(reserved):
                check(slot == reserved[position], "group-window", f"{what} must hand out the reservation in order",
                      expected=reserved[position], actual=slot, reservation=model.unconsumed)
            else:
                check(slot in model.free, "group-window", f"{what} handed out reserved slot {slot} outside alloc(1)",
                      reservation=model.unconsumed)

    def check_slot_counts(self, what: str) -> None:
        """O(1): ``available_size()`` and ``reserved_size()`` agree with the model."""
        allocator, model = self.slot_allocator, self.slot_model
        available, reserved = allocator.available_size(), allocator.reserved_size()
        check(available == len(model.free), "conservation", f"after {what}, mamba available_size() disagrees",
              available=available, expected=len(model.free))
        check(reserved == len(model.unconsumed), "conservation", f"after {what}, reserved_size() disagrees",
              reserved=reserved, expected=len(model.unconsumed))

    def check_slots_cleared(self) -> None:
        allocator, model = self.slot_allocator, self.slot_model
        check(not allocator.group_open, "clear-restores", "clear left the group window open")
        check(allocator.reserved_size() == 0, "clear-restores", "clear kept an unconsumed reservation (reissued later)",
              reserved_size=allocator.reserved_size())
        check(allocator.available_size() == model.size, "clear-restores", "clear left mamba slots allocated",
              available=allocator.available_size(), size=model.size)

    def bind_slots(self, slots: list[int], handles: list[int | None], from_reservation: int) -> None:
        for position, (slot, handle) in enumerate(zip(slots, handles)):
            if position < from_reservation:
                self.slot_model.consume_reserved(handle)
            else:
                self.slot_model.bind(slot, handle)
        if from_reservation and not self.slot_model.unconsumed:
            self.event("group reservation exhausted")

    def release_slots(self, slots: list[int], what: str, dtype: torch.dtype = torch.int64) -> None:
        """A valid ``free``: the slots go back, the counts follow."""
        self.expect_accepted(lambda: self.slot_allocator.free(self.slot_tensor(slots).to(dtype)), what)
        for slot in slots:
            self.slot_model.release(slot)
        self.check_slot_counts(what)

    # ------------------------------------------------------------ group windows
    @operation
    def group_begin(self, num_reqs: float | bool) -> Any:
        allocator, model = self.slot_allocator, self.slot_model
        what = f"alloc_group_begin({num_reqs})"
        if model.group_open:
            self.event("nested group begin")
            nested = f"{what} in an open window"
            return self.misuse(lambda: allocator.alloc_group_begin(num_reqs), GroupStateError, nested)
        if bad_count(num_reqs):
            return self.misuse(lambda: allocator.alloc_group_begin(num_reqs), BadSizeError, what)
        before = self.free_list()
        self.check_free_list(before, f"before {what}")
        self.expect_accepted(lambda: allocator.alloc_group_begin(num_reqs), what)
        after = set(self.free_list())
        reserved = [s for s in dict.fromkeys(before) if s not in after]
        expected = num_reqs if num_reqs <= len(model.free) else 0
        check(allocator.group_open, "group-window", f"{what} did not open the window")
        check(len(reserved) == expected == allocator.reserved_size(), "group-window",
              f"{what} with {len(model.free)} free must reserve {expected}", reserved=reserved,
              reserved_size=allocator.reserved_size())
        check(0 not in reserved, "reserved-never-handed-out", f"{what} reserved padding slot 0")
        check(set(reserved) <= model.free, "no-double-allocation", f"{what} reserved slots that were not free",
              slots=sorted(set(reserved) - model.free))
        check(after == model.free - set(reserved), "group-window", f"{what} changed more than the reservation",
              missing=sorted(model.free - set(reserved) - after), extra=sorted(after - model.free))
        model.open_group(reserved)
        self.event("group opened with a reservation" if reserved else "group opened without a reservation")
        return None

    @operation
    def group_end(self) -> Any:
        allocator, model = self.slot_allocator, self.slot_model
        if not model.group_open:
            return self.misuse(allocator.alloc_group_end, GroupStateError, "alloc_group_end() with no open window")
        unconsumed = model.unconsumed
        available = allocator.available_size()
        self.expect_accepted(allocator.alloc_group_end, "alloc_group_end()")
        returned = allocator.available_size() - available
        check(returned == len(unconsumed), "group-window", "group end must return exactly the unconsumed reservation",
              returned=returned, unconsumed=unconsumed)
        check(not allocator.group_open and allocator.reserved_size() == 0, "group-window",
              "group end left the window open", reserved_size=allocator.reserved_size())
        after = set(self.free_list())
        missing = [s for s in unconsumed if s not in after]
        check(not missing, "group-window", "unconsumed reserved slots are not back on the free list", missing=missing)
        model.close_group()
        self.event("group end returned slots" if unconsumed else "group end returned nothing")
        return None

    # ------------------------------------------------------------ audits
    def observe_slots(self) -> tuple[Any, ...]:
        allocator = self.slot_allocator
        live = tuple(s for s in range(self.slot_model.size + 2) if allocator.is_live(s))
        counts = (allocator.available_size(), allocator.reserved_size(), allocator.group_open)
        return (tuple(self.free_list()), counts, live)

    def check_free_list(self, free_list: list[int], when: str) -> None:
        """The free list: no duplicates, no slot 0, nothing out of range, exactly the model's free slots."""
        model = self.slot_model
        check_unique(free_list, "no-double-allocation", f"mamba free_slots ({when})")
        check(0 not in free_list, "reserved-never-handed-out", f"padding slot 0 is on the free list ({when})")
        outside = [s for s in free_list if not model.in_range(s)]
        check(not outside, "in-bounds", f"mamba free list holds slots that do not exist ({when})", slots=outside,
              size=model.size)
        free = set(free_list)
        check(free == model.free, "conservation", f"free slots differ from the model ({when})",
              missing=sorted(model.free - free), extra=sorted(free - model.free))

    def audit_slots(self) -> None:
        """conservation: free + live + unconsumed reservation == 1..size, disjoint; counts agree."""
        allocator, model = self.slot_allocator, self.slot_model
        model.assert_partition()
        self.check_free_list(self.free_list(), "audit")
        check(not allocator.is_live(0), "reserved-never-handed-out", "padding slot 0 is live")
        live = {s for s in range(1, model.size + 1) if allocator.is_live(s)}
        check(live == set(model.live), "conservation", "live slots differ from the model",
              missing=sorted(set(model.live) - live), extra=sorted(live - set(model.live)))
        check(allocator.group_open == model.group_open, "group-window", "group window state differs from the model",
              open=allocator.group_open, expected=model.group_open)
        self.check_slot_counts("audit")


class MambaSlotDriver(SlotWindowDriver):
    family = "mamba_slots"
    ops = SlotOps

    config: MambaSlotConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.model = SlotModel(self.config.size)
        self.handles: dict[int, int] = {}  # handle -> the slot it was given

    @property
    def slot_allocator(self) -> Any:
        return self.pool

    @property
    def slot_model(self) -> SlotModel:
        return self.model

    @operation
    def alloc(self, need_size: float | bool) -> Any:
        """``alloc(need_size)``; inside a window ``alloc(1)`` takes the next reserved slot."""
        model, what = self.model, f"alloc({need_size!r})"
        if bad_count(need_size):
            return self.misuse(lambda: self.pool.alloc(need_size), BadSizeError, what)
        next_reserved = model.next_reserved() if need_size == 1 else None
        reserved = [] if next_reserved is None else [next_reserved]
        short = not reserved and need_size > len(model.free)
        if short:
            self.expect_refused(lambda: self.pool.alloc(need_size), what, free=len(model.free))
            self.event("alloc refused: pool short")
            return []
        result = self.expect_accepted(lambda: self.pool.alloc(need_size), what)
        check(result is not None, "empty-pool-guard", f"{what} refused with {len(model.free)} free",
              reserved=model.unconsumed)
        slots = [int(s) for s in result.reshape(-1).tolist()]
        check(len(slots) == need_size, "empty-pool-guard", f"{what} returned {len(slots)} slots", slots=slots)
        if need_size == 0:
            check(self.pool.available_size() == len(model.free) and self.pool.reserved_size() == len(model.unconsumed),
                  "empty-pool-guard", "alloc(0) consumed slots", available=self.pool.available_size())
        self.check_handed_out(slots, what, reserved)
        handles = list(range(len(self.handles), len(self.handles) + len(slots)))
        self.handles.update(zip(handles, slots))
        self.bind_slots(slots, list(handles), len(reserved))
        self.check_slot_counts(what)
        if not model.capacity:
            self.event("pool exactly full")
        return handles

    @operation
    def free(self, handles: list[int]) -> Any:
        """Free the slots of ``handles``; a slot freed twice, or already free or reserved, is misuse."""
        model = self.model
        slots = [self.handles[h] for h in handles]
        what = f"free(slots {slots} of handles {handles})"
        if len(set(slots)) != len(slots) or any(s not in model.live for s in slots):
            return self.misuse(lambda: self.pool.free(self.slot_tensor(slots)), DoubleFreeError, what, self.offends(slots))
        if any(model.live[s] != h for h, s in zip(handles, slots)):
            return SKIPPED  # a stale handle whose slot is live again under another owner: no pool can tell
        self.release_slots(slots, what)
        return None

    @operation
    def free_slots(self, slots: list[int], int32: bool = False) -> Any:
        """Free raw slot numbers (as an int32 tensor with ``int32``): padding, foreign, free, reserved or
        repeated ones are misuse."""
        model, what = self.model, f"free(slots {slots})"
        expected: list[type[PoolError]] = []
        if 0 in slots:
            expected.append(ReservedIndexError)
        if any(s != 0 and not model.in_range(s) for s in slots):
            expected.append(ForeignIndexError)
        if len(set(slots)) != len(slots) or any(model.in_range(s) and s not in model.live for s in slots):
            expected.append(DoubleFreeError)
        if expected:
            return self.misuse(lambda: self.pool.free(self.slot_tensor(slots)), tuple(expected), what, self.offends(slots))
        self.release_slots(slots, what, torch.int32 if int32 else torch.int64)  # their handles go stale
        if not slots or int32:
            self.event("corner: free of an empty tensor" if not slots else "corner: free of an int32 tensor")
        return None

    @operation
    def free_malformed(self, form: str) -> Any:
        """``free`` of a list, a float tensor, or a 2-D or 0-d one, instead of a 1-D integer tensor: ``BadBatchError``."""
        slots = sorted(self.model.live)[:2] or [1]
        indices: Any = {"list": slots, "float tensor": torch.tensor(slots, dtype=torch.float32),
                        "2-D tensor": self.slot_tensor(slots).reshape(1, -1),
                        "0-d tensor": self.slot_tensor(slots[:1]).reshape(())}.get(form)
        if indices is None:
            return SKIPPED
        result = self.misuse(lambda: self.pool.free(indices), BadBatchError, f"free of a {form} {slots}")
        if result is not SKIPPED:
            self.event(f"misuse: free of a {form}")
        return result

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        return (BadSizeError,) if bad_count(config.get("size")) else ()

    @operation
    def clear(self) -> None:
        self.expect_accepted(self.pool.clear, "clear()")
        self.model.clear()
        self.check_slots_cleared()

    def observe(self) -> Hashable:
        return self.observe_slots()

    def audit(self) -> None:
        self.audit_slots()

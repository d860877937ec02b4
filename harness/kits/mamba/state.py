"""The hybrid pool's Mamba state: ``MambaPool.clear_slots`` and ``copy_from`` over the requests' slots.

The scheduler zeroes a fresh request's state (``mamba_needs_clear``) and forks a
cached request's state into a new slot (``copy_from``).  The driver plays the
model's forward pass too: ``write_state`` fills a request's slot with a value of
its own, so a copy that reads or writes the wrong slot shows.  The state the
driver expects in every slot (``0`` until written) is plain data here; each
state call is checked against it over the whole table, slot 0 included
(``reserved-never-handed-out``: the padding slot's state stays zero).  A state
call that must be refused (:data:`STATE_MISUSE`) raises its typed error and leaves
the table as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.driver import SKIPPED, operation
from poolfuzz.harness.judge.invariants import check
from poolfuzz.pools.errors import BadBatchError, ForeignIndexError, PoolError, ReservedIndexError

STATE_MISUSE: dict[str, type[PoolError]] = {
    "clear of padding slot 0": ReservedIndexError,
    "clear of a slot past the pool": ForeignIndexError,
    "clear through a float tensor": BadBatchError,
    "copy onto itself": BadBatchError,
    "copy naming a destination twice": BadBatchError,
    "copy of unequal lengths": BadBatchError,
    "copy of one source onto two distinct destinations": BadBatchError,
    "copy from a list": BadBatchError,
    "copy into a list": BadBatchError,
    "clear through a list": BadBatchError,
    "copy into padding slot 0": ReservedIndexError,
}
"""State calls the pool must refuse, and the error each must raise."""

OTHER_SLOTS_NEEDED = {"copy naming a destination twice": 1, "copy of one source onto two distinct destinations": 2}
"""Misuse that names slots besides the request's own: how many the pool must have."""


class MambaStateOps:
    """Operations on ``pool.mamba_pool`` for a driver with ``pool``, ``hybrid`` (its model) and ``config``."""

    pool: Any
    hybrid: Any
    config: PoolConfig
    check_misuse: bool
    expect_accepted: Callable[..., Any]
    expect_rejected: Callable[..., None]
    event: Callable[[str], None]

    def _state_values(self) -> dict[int, float]:
        """The state each slot holds, by the calls so far (0 where never written)."""
        values: dict[int, float] | None = getattr(self, "_states", None)
        if values is None:
            values = {}
            self._states = values
        return values

    def _slots_of(self, handles: list[int]) -> list[int]:
        return [int(self.hybrid.claims[h].slot) for h in dict.fromkeys(handles) if h in self.hybrid.claims and self.hybrid.holds_slot(h)]

    def _index(self, slots: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(slots, dtype=dtype, device=self.config.device)

    def _table(self) -> list[float]:
        """Each slot's state as one number (layers and shape must agree within a slot)."""
        pool = self.pool.mamba_pool
        per_slot = []
        for state in (pool.conv, pool.temporal):
            flat = state.transpose(0, 1).reshape(state.shape[1], -1)
            per_slot.append(flat)
        both = torch.cat(per_slot, dim=1)
        first = both[:, :1]
        uniform = bool((both == first).all())
        return [float(v) for v in first.flatten().tolist()] if uniform else [float("nan")] * both.shape[0]

    def _check_table(self, what: str, touched: set[int]) -> None:
        """Every slot holds what the driver expects: ``touched`` slots the call's result, the rest what they held."""
        values, table = self._state_values(), self._table()
        expected = [values.get(slot, 0.0) for slot in range(len(table))]
        check(table[0] == 0.0, "reserved-never-handed-out", f"{what} wrote the state of padding slot 0", state=table[0])
        wrong = {s: (table[s], expected[s]) for s in range(len(table)) if table[s] != expected[s]}
        check(
            not wrong,
            "valid-call-accepted",
            f"after {what}, Mamba state differs from what the calls wrote (actual, expected)",
            slots=wrong,
            touched=sorted(touched),
        )

    @operation
    def write_state(self, handle: int) -> Any:
        """The model's forward pass: the request's slot holds ``handle + 1`` in every layer and element."""
        slots = self._slots_of([handle])
        if not slots:
            return SKIPPED
        pool, value = self.pool.mamba_pool, float(handle + 1)
        for state in (pool.conv, pool.temporal):
            state[:, slots[0]] = value
        self._state_values()[slots[0]] = value
        return None

    @operation
    def clear_state(self, handles: list[int]) -> Any:
        """``clear_slots`` of the requests' slots (none: an empty call): those slots are zero, nothing else moved."""
        slots = self._slots_of(handles)
        if len(slots) != len(dict.fromkeys(handles)):
            return SKIPPED
        what = f"clear_slots({slots})"
        self.expect_accepted(lambda: self.pool.mamba_pool.clear_slots(self._index(slots)), what)
        for slot in slots:
            self._state_values().pop(slot, None)
        self._check_table(what, set(slots))
        self.event("corner: clear_slots of no slot" if not slots else "Mamba state cleared")
        return None

    @operation
    def copy_state(self, sources: list[int], targets: list[int]) -> Any:
        """``copy_from`` of the source requests' slots onto the targets' (distinct, disjoint): state forked."""
        src, dst = self._slots_of(sources), self._slots_of(targets)
        if len(src) != len(sources) or len(dst) != len(targets) or len(src) != len(dst) or set(src) & set(dst) or len(set(dst)) != len(dst):
            return SKIPPED
        what = f"copy_from({src} -> {dst})"
        values = self._state_values()
        moved = {d: values.get(s, 0.0) for s, d in zip(src, dst)}
        self.expect_accepted(lambda: self.pool.mamba_pool.copy_from(self._index(src), self._index(dst)), what)
        values.update(moved)
        self._check_table(what, set(dst))
        self.event("corner: copy_from of no slot" if not dst else "Mamba state forked")
        return None

    @operation
    def state_misuse(self, handles: list[int], kind: str) -> Any:
        """A state call of :data:`STATE_MISUSE` over the requests' slots: its error, the table unchanged."""
        slots, error = self._slots_of(handles), STATE_MISUSE.get(kind)
        if error is None or not slots or not self.check_misuse:
            return SKIPPED
        pool, size = self.pool.mamba_pool, self.hybrid.slots.size
        others = [slot for slot in range(1, size + 1) if slot != slots[0]]
        other = others[0] if others else None
        if len(others) < OTHER_SLOTS_NEEDED.get(kind, 0):
            return SKIPPED  # a pool this small has no other slot(s) to name
        calls: dict[str, Callable[[], None]] = {
            "clear of padding slot 0": lambda: pool.clear_slots(self._index([*slots, 0])),
            "clear of a slot past the pool": lambda: pool.clear_slots(self._index([*slots, size + 1])),
            "clear through a float tensor": lambda: pool.clear_slots(self._index(slots, torch.float32)),
            "copy onto itself": lambda: pool.copy_from(self._index(slots[:1]), self._index(slots[:1])),
            "copy naming a destination twice": lambda: pool.copy_from(self._index(slots[:1] * 2), self._index([other or 0] * 2)),
            "copy of unequal lengths": lambda: pool.copy_from(self._index(slots), self._index([*slots, *slots])),
            "copy of one source onto two distinct destinations": lambda: pool.copy_from(self._index(slots[:1]), self._index(others[:2])),
            "copy from a list": lambda: pool.copy_from(slots, self._index(slots)),
            "copy into a list": lambda: pool.copy_from(self._index(slots[:1]), [other]),
            "clear through a list": lambda: pool.clear_slots(slots),
            "copy into padding slot 0": lambda: pool.copy_from(self._index(slots[:1]), self._index([0])),
        }
        self.expect_rejected(calls[kind], error, f"Mamba state: {kind} (slots {slots})")
        self._check_table(kind, set())
        self.event(f"misuse: Mamba state {kind}")
        return None

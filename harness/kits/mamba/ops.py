"""The Mamba drivers' operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`).

:class:`~poolfuzz.harness.kits.mamba.driver.MambaSlotDriver` implements :class:`SlotOps`,
:class:`~poolfuzz.harness.kits.mamba.hybrid.HybridDriver` :class:`HybridOps` (the row operations, the slot window and
the state tensors); moves, contracts, limits, realistic floors and the known-finding filter name them here.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from poolfuzz.harness.judge.ops import Operations, TypedOp, op
from poolfuzz.harness.kits.rows.ops import RowOps


# ---------------------------------------------------------------- typed arguments (the model for other kits)
class NoArgs(TypedDict):
    """An operation without arguments."""


class GroupBeginArgs(TypedDict):
    num_reqs: float
    """The requests the window reserves for (misuse sends a float, a bool or a negative count)."""


class AllocArgs(TypedDict):
    need_size: float
    """Slots to take (misuse sends a float or a bool)."""


class FreeArgs(TypedDict):
    handles: list[int]
    """Handles of live allocations (a handle again, for a double free)."""


class FreeSlotsArgs(TypedDict):
    slots: list[int]
    """Raw slot numbers, live or not."""
    int32: NotRequired[bool]
    """Sent as an int32 tensor (upstream frees only int64 ones)."""


class FreeMalformedArgs(TypedDict):
    form: str
    """Which malformed argument: a list, a float tensor, a 2-D or a 0-d tensor."""


class WindowOps(Operations):
    """What both Mamba drivers share: the alloc window they open and close (``SlotWindowDriver``), and ``clear``."""

    clear = op(NoArgs)
    group_begin = op(GroupBeginArgs)
    group_end = op(NoArgs)


class SlotOps(WindowOps):
    """``mamba_slots``: slots taken, freed (well-formed, as raw slot tensors, or malformed) and cleared.  Every
    operation is declared with its typed arguments, and the moves build their steps through the builders below."""

    alloc = op(AllocArgs)
    free = op(FreeArgs)
    free_malformed = op(FreeMalformedArgs)
    free_slots = op(FreeSlotsArgs)


CLEAR = TypedOp(SlotOps, SlotOps.clear, NoArgs)
GROUP_BEGIN = TypedOp(SlotOps, SlotOps.group_begin, GroupBeginArgs)
GROUP_END = TypedOp(SlotOps, SlotOps.group_end, NoArgs)
ALLOC = TypedOp(SlotOps, SlotOps.alloc, AllocArgs)
FREE = TypedOp(SlotOps, SlotOps.free, FreeArgs)
FREE_SLOTS = TypedOp(SlotOps, SlotOps.free_slots, FreeSlotsArgs)
FREE_MALFORMED = TypedOp(SlotOps, SlotOps.free_malformed, FreeMalformedArgs)
"""Typed step builders of ``mamba_slots`` (``ALLOC({"need_size": 2})``): mypy checks each step's argument names
and types against the operation's ``TypedDict``."""


class HybridOps(RowOps, WindowOps):
    """``hybrid_req_to_token``: the row operations, the slot window, and each request's Mamba state."""

    clear_state = op("handles")
    copy_state = op("sources", "targets")
    free_mamba_cache = op("handle")
    free_mamba_cache_forged = op("handle", "form")
    state_misuse = op("handles", "kind")
    write_state = op("handle")

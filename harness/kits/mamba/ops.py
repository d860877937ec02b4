"""The Mamba drivers' operations and their arguments, declared once (:mod:`harness.judge.ops`).

:class:`~harness.kits.mamba.driver.MambaSlotDriver` implements :class:`SlotOps`,
:class:`~harness.kits.mamba.hybrid.HybridDriver` :class:`HybridOps` (the row operations, the slot window and
the state tensors); moves, contracts, limits, realistic floors and the known-finding filter name them here.
"""

from __future__ import annotations

from harness.judge.ops import Operations, op
from harness.kits.rows.ops import RowOps


class WindowOps(Operations):
    """What both Mamba drivers share: the alloc window they open and close (``SlotWindowDriver``), and ``clear``."""

    clear = op()
    group_begin = op("num_reqs")
    group_end = op()


class SlotOps(WindowOps):
    """``mamba_slots``: slots taken, freed (well-formed, as raw slot tensors, or malformed) and cleared."""

    alloc = op("need_size")
    free = op("handles")
    free_malformed = op("form")
    free_slots = op("slots", "int32")


class HybridOps(RowOps, WindowOps):
    """``hybrid_req_to_token``: the row operations, the slot window, and each request's Mamba state."""

    clear_state = op("handles")
    copy_state = op("sources", "targets")
    free_mamba_cache = op("handle")
    free_mamba_cache_forged = op("handle", "form")
    state_misuse = op("handles", "kind")
    write_state = op("handle")

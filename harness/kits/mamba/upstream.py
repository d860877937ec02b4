"""Upstream SGLang 0.5.23's ``MambaSlotAllocator`` behind the ``mamba_slots`` family's constructor signature.

Target ``mamba_slots=poolfuzz.harness.upstream:MambaSlots``; the wrapper forwards the family protocol
(:class:`~poolfuzz.harness.upstream.wrapper.UpstreamWrapper`) and derives what upstream does not keep.
"""

from __future__ import annotations

import operator

import torch

from poolfuzz.harness.upstream.sglang_files import SGLANG
from poolfuzz.harness.upstream.sglang_modules import load_upstream
from poolfuzz.harness.upstream.wrapper import UpstreamWrapper, runs_upstream


@runs_upstream(SGLANG)
class MambaSlots(UpstreamWrapper):
    """``mamba_slots``: upstream ``MambaSlotAllocator(size, device)``.

    Upstream keeps a group's reservation as an iterator over length-1 tensors and has
    neither a window flag nor a record of live slots, so this wrapper derives what the
    family protocol reads, without changing what upstream does:

    * :meth:`reserved_slots` reads what is left of the iterator without advancing it;
    * :attr:`group_open` is set by ``alloc_group_begin`` and cleared by ``alloc_group_end``
      (upstream opens no visible window when the pool is short, but the caller's window is
      open all the same).  Upstream's ``clear()`` does not touch the group: afterwards the
      window stays in effect exactly as far as its iterator still has slots to hand out;
    * :meth:`is_live` is "in range, neither free nor reserved": a slot upstream loses
      track of therefore shows up as live, and the conservation audit catches it.
    """

    upstream_class = "MambaSlotAllocator"
    poolfuzz_contract = "poolfuzz.harness.kits.mamba.contracts.mamba_slots:CONTRACT"

    def __init__(self, size: int, device: str | torch.device = "cpu") -> None:
        upstream = load_upstream().mamba
        self.inner = upstream.MambaSlotAllocator(size, torch.device(device))
        self.size, self.device = size, torch.device(device)
        self.group_open = False

    @property
    def free_slots(self) -> torch.Tensor:
        return self.inner.free_slots  # type: ignore[no-any-return]

    def reserved_slots(self) -> list[int]:
        """The open group's unconsumed reservation, in hand-out order (read without consuming)."""
        iterator = self.inner._alloc_iter
        if iterator is None:
            return []
        state = iterator.__reduce__()  # (iter, (chunks,), position); an exhausted one drops the position
        chunks, position = state[1][0], (state[2] if len(state) > 2 else 0)
        return [int(chunk) for chunk in chunks[position:]]

    def reserved_size(self) -> int:
        iterator = self.inner._alloc_iter
        return 0 if iterator is None else operator.length_hint(iterator)

    def is_live(self, slot: int) -> bool:
        if not 0 < slot <= self.size:
            return False
        return slot not in self.inner.free_slots.tolist() and slot not in self.reserved_slots()

    def alloc_group_begin(self, num_reqs: int) -> None:
        self.inner.alloc_group_begin(num_reqs)
        self.group_open = True

    def alloc_group_end(self) -> None:
        self.inner.alloc_group_end()
        self.group_open = False

    def clear(self) -> None:
        self.inner.clear()
        self.group_open = self.group_open and self.reserved_size() > 0

"""SWA canaries: ``SWATokenToKVPoolAllocator`` with one historical bug put back each.

Three are mapping bugs that SGLang shipped (each let a stale ``full_to_swa_index_mapping``
entry free an SWA page twice, or free one a live request uses); the fourth is the
non-atomic decode that upstream 0.5.23 still has.  The first three are caught by
``swa-mapping`` at the call that leaves the stale entry, before any double free happens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.pools.swa import SWATokenToKVPoolAllocator


class TailHeadKeepsOldEntries(SWATokenToKVPoolAllocator):
    """``alloc_extend_swa_tail`` maps the tail and leaves the head's entries as they were (SGLang #25805).

    The bug mattered because recycled full pages still held the entries of their previous
    owner: 0.5.12 unmapped only the tokens a free named (#27779), so the rest of a page kept
    pointing at SWA slots that went to other requests, and freeing the new owner freed them.
    This pool unmaps whole pages, so its table is clean; the canary keeps a shadow of every
    entry ever written (what 0.5.12's table held for those slots) and the tail call leaves
    the head with those old entries instead of zeroing it, the one line #25805 added.
    """

    def clear(self) -> None:
        super().clear()
        self._old_entries = self.full_to_swa_index_mapping.clone()
        self._in_tail = False

    def _set_mapping(self, full_indices: Tensor, swa_indices: Tensor) -> None:
        super()._set_mapping(full_indices, swa_indices)
        self._old_entries[full_indices] = swa_indices

    def _clear_mapping(self, full_indices: Tensor) -> None:
        if not self._in_tail:
            super()._clear_mapping(full_indices)
            return
        self.full_to_swa_index_mapping[full_indices] = self._old_entries[full_indices]  # the bug: no zeroing

    def alloc_extend_swa_tail(
        self,
        prefix_lens: Tensor,
        prefix_lens_cpu: Tensor,
        seq_lens: Tensor,
        seq_lens_cpu: Tensor,
        last_loc: Tensor,
        extend_num_tokens: int,
        swa_tail_len: int,
    ) -> Tensor | None:
        self._in_tail = True
        try:
            return super().alloc_extend_swa_tail(
                prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens, swa_tail_len
            )
        finally:
            self._in_tail = False


class UnmapsOnlyNamedTokens(SWATokenToKVPoolAllocator):
    """``free`` / ``free_swa`` unmap only the tokens they name (SGLang #27779).

    The paged SWA allocator releases the whole SWA page of a named token, but the other
    tokens of the full page keep their entries into it, so a later free of those tokens
    releases that SWA page again.  Invisible at page size 1, where a page is one token.
    """

    def _release_named(self, free_index: Tensor) -> None:
        named = free_index.to(self.device, torch.int64)
        peers = self.full_to_swa_index_mapping[named]
        self.swa_attn_allocator.free(peers[peers > 0])  # the paged side releases each named token's whole page
        self._clear_mapping(named)  # the bug: the named tokens only, not their whole pages

    def free(self, free_index: Tensor) -> None:
        if isinstance(free_index, Tensor) and free_index.numel() == 0:
            return
        self._touched_slots(free_index)  # validation, unchanged
        self._release_named(free_index)
        self.full_attn_allocator.free(free_index)

    def free_swa(self, free_index: Tensor) -> None:
        if isinstance(free_index, Tensor) and free_index.numel() == 0:
            return
        _, slots = self._touched_slots(free_index)
        if bool((self.full_to_swa_index_mapping[slots].view(-1, self.page_size).amax(dim=1) <= 0).any()):
            super().free_swa(free_index)  # raises DoubleFreeError, as the fixed pool does
            return
        self._release_named(free_index)


class TombstoneKeepsItsEntry(SWATokenToKVPoolAllocator):
    """``free_swa`` releases the SWA peers of tokens that left the window but keeps their entries
    (SGLang PR #27586).

    The full slot becomes a tombstone still naming an SWA slot; that slot goes to another
    request, and the tombstone's later free releases it while its new owner still uses it.
    """

    _keep_entries = False

    def free_swa(self, free_index: Tensor) -> None:
        self._keep_entries = True
        try:
            super().free_swa(free_index)
        finally:
            self._keep_entries = False

    def _release_peers(self, slots: Tensor, peers: Tensor) -> None:
        if not self._keep_entries:
            super()._release_peers(slots, peers)
            return
        self.swa_attn_allocator.free(peers[peers > 0])  # the bug: the entries stay


class NonAtomicDecode(SWATokenToKVPoolAllocator):
    """``alloc_decode`` allocates the full side, then the SWA side, and returns ``None`` if either
    came up short, leaving the other side's pages consumed (upstream 0.5.23; sglang-pools.md
    section 8, hazard 2).  Callers pre-check, but a decode refused for want of SWA pages leaks
    full pages until ``clear``.
    """

    def alloc_decode(self, seq_lens: Tensor, seq_lens_cpu: Tensor, last_loc: Tensor) -> Tensor | None:
        full, swa = self._paged_sides("alloc_decode")
        swa_last_loc = self._swa_last_loc(last_loc, seq_lens_cpu > 1, "alloc_decode")
        full_indices = full.alloc_decode(seq_lens, seq_lens_cpu, last_loc)
        swa_indices = swa.alloc_decode(seq_lens, seq_lens_cpu, swa_last_loc)
        if full_indices is None or swa_indices is None:
            return None  # the bug: the side that succeeded keeps its pages
        self._set_mapping(full_indices, swa_indices)
        return full_indices


CANARIES: dict[str, Canary] = {
    "swa-tail-head-keeps-old-entries": Canary(
        "swa_kv",
        "poolfuzz.harness.kits.swa.canaries:TailHeadKeepsOldEntries",
        "alloc_extend_swa_tail leaves the non-tail full slots mapped to their previous owner's SWA slots",
        "SGLang #25805",
        "swa-mapping",
    ),
    "swa-free-unmaps-only-named-tokens": Canary(
        "swa_kv",
        "poolfuzz.harness.kits.swa.canaries:UnmapsOnlyNamedTokens",
        "a paged free/free_swa unmaps the named tokens only, not their whole pages",
        "SGLang #27779",
        "swa-mapping",
    ),
    "swa-tombstone-keeps-its-entry": Canary(
        "swa_kv",
        "poolfuzz.harness.kits.swa.canaries:TombstoneKeepsItsEntry",
        "free_swa releases the SWA peers but leaves the tombstones' mapping entries",
        "SGLang PR #27586",
        "swa-mapping",
    ),
    "swa-non-atomic-decode": Canary(
        "swa_kv",
        "poolfuzz.harness.kits.swa.canaries:NonAtomicDecode",
        "alloc_decode leaves one side's pages consumed when the other side is short",
        "SGLang 0.5.23 swa.py alloc_decode; sglang-pools.md section 8, hazard 2",
        "empty-pool-guard",
    ),
}

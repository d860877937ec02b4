"""What upstream SGLang 0.5.23's callers send each SWA free call: the table the ``swa_kv`` driver consults.

``SWATokenToKVPoolAllocator`` (``mem_cache/allocator/swa.py``) validates nothing, and its
three frees assume different things about the SWA peers (``full_to_swa_index_mapping``) of
the slots they are given.  A target that does not validate its input
(``poolfuzz_check_misuse = False``, every upstream target) is fuzzed with valid calls only,
so the driver must never send it a free its callers never send: that would report the
driver's own misuse as upstream's bug.  Each :class:`FreeRule` names the precondition and
the upstream lines that show it; :func:`allows` answers it from the model.

Our pool (``pools/swa.py``) accepts a wider contract: its ``free`` releases the peers that
are still mapped and skips the rest (``SWATokenToKVPoolAllocator.free``), so for a validating
target the driver keeps sending ``free`` of a request partly out of the window as a valid call.

Line numbers are those of the installed ``sglang==0.5.23`` wheel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from poolfuzz.harness.kits.kv.contract_view import PagedContractView
from poolfuzz.harness.kits.swa.model import SWAModel

Needs = Literal["peers mapped", "peers released", "live pages"]


class SWAContractView(PagedContractView[SWAModel]):
    """The ``swa_kv`` driver (:class:`~poolfuzz.harness.kits.swa.model.SWAModel`) as its caller contract's predicates
    (:mod:`poolfuzz.harness.kits.swa.contracts.swa_kv`) see it."""

    __slots__ = ()


@dataclass(frozen=True)
class FreeRule:
    """``call`` at ``page_sizes`` (``"1"``, ``">1"`` or ``"any"``) may be sent only slots of pages that meet ``needs``."""

    call: str
    page_sizes: str
    needs: Needs
    evidence: tuple[str, ...]


CONTRACT: tuple[FreeRule, ...] = (
    FreeRule(
        "free",
        "1",
        "peers mapped",
        (
            "allocator/swa.py:467-475: free() calls free_swa() first, then free_full()",
            "allocator/swa.py:499-507: at page size 1 free_swa() goes to _free_swa_pages()",
            "allocator/swa.py:558-560: expect(_SWA_PEER_MAPPED, swa_tokens > 0, msg='caller wants free_full'); "
            "FATAL_UNCONTAINABLE (:29); unchecked by default, slot 0 then lands on the SWA free list (:27-28)",
            "mem_cache/common.py:152-190: free_kv_row_segments sends [swa_dead_lo, swa_evicted_seqlen) to "
            "free_full_segments (:188) and only the rest to free_segments (:190)",
        ),
    ),
    FreeRule(
        "free",
        ">1",
        "live pages",
        (
            "allocator/swa.py:509-522: above page size 1 free_swa() expands to whole pages (:512) and reads their entries",
            "allocator/swa.py:601-605: _release_swa() drops the padding (0) entries of pages without peers",
        ),
    ),
    FreeRule("free_swa", "1", "peers mapped", ("allocator/swa.py:499-507, :558-560: the same _SWA_PEER_MAPPED expectation as free()",)),
    FreeRule("free_swa", ">1", "live pages", ("allocator/swa.py:509-522, :601-605: pages without peers read as 0 and are filtered",)),
    FreeRule(
        "free_full",
        "any",
        "peers released",
        (
            "allocator/swa.py:609-619: expect(_SWA_PEER_RELEASED, full_to_swa_index_mapping[free_index] == 0, "
            "msg='caller wants free'); free_full_segment the same (:633-640)",
            "mem_cache/common.py:187-188 and unified_radix_cache.py:1406-1408: callers send it only slots below the "
            "SWA cursor, whose peers free_swa already released",
        ),
    ),
)


def rule_for(call: str, page_size: int) -> FreeRule:
    """The rule of ``call`` at ``page_size``."""
    regime = "1" if page_size == 1 else ">1"
    for rule in CONTRACT:
        if rule.call == call and rule.page_sizes in (regime, "any"):
            return rule
    raise KeyError(f"no contract rule for {call} at page size {page_size}")


def allows(model: SWAModel, call: str, pages: list[int]) -> bool:
    """Whether upstream's callers send ``call`` for these live full ``pages``."""
    needs = rule_for(call, model.page_size).needs
    if needs == "peers mapped":
        return all(page in model.peer for page in pages)
    if needs == "peers released":
        return not any(page in model.peer for page in pages)
    return True

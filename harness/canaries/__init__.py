"""Canaries: our pools with one real, historical bug put back each.

A fuzzer that finds nothing might be broken.  Every canary here is a subclass
or variant of a pool in :mod:`pools` reproducing exactly one bug from the seed
documents or the catalogue in ``sglang-pools.md`` (sections 6 and 8), and
names the invariant that must catch it.  ``python -m harness selfcheck`` fuzzes
each one with the normal machine and fails unless all are caught; the test
suite does the same under the ``ci`` profile.

Canaries never live in :mod:`pools`: they are bugs, kept only to prove the
harness has teeth.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.canaries.kv import PHASE2_BOUND
from harness.judge.invariants import INVARIANTS
from harness.machines.base import PoolMachine, make_machine
from harness.judge.families import UnknownTargetError, family, resolve


class Canary(NamedTuple):
    """One planted bug: where it lives, what it was upstream, and which invariant catches it."""

    family: str
    spec: str
    bug: str
    upstream: str
    invariant: str
    driver: str | None = None
    """A driver variant (``module:attr``) when the bug is in how the scheduler calls the pools."""


_ROWS = "harness.canaries.rows"
_MAMBA = "harness.canaries.mamba"
_KV = "harness.canaries.kv"
_SCHED = "harness.canaries.scheduler"

CANARIES: dict[str, Canary] = {
    "negative-zero-slice": Canary(
        "req_to_token", f"{_ROWS}:NegativeZeroSlice",
        "tail pop without the need-0 guard: free_slots[-0:] takes every free row",
        "seed 000, SGLang #32208", "empty-pool-guard",
    ),
    "row-zero-handed-out": Canary(
        "req_to_token", f"{_ROWS}:RowZeroHandedOut",
        "no padding row: free rows start at 0",
        "SGLang #24243", "reserved-never-handed-out",
    ),
    "alloc-size-mismatch": Canary(
        "req_to_token", f"{_ROWS}:AllocSizeMismatch",
        "row 0 reserved but req_to_token sized by size, not _alloc_size",
        "seed 003, SGLang #24439", "in-bounds",
    ),
    "generation-zeroed-on-clear": Canary(
        "req_to_token", f"{_ROWS}:GenerationZeroedOnClear",
        "clear() zeroes req_generation",
        "SGLang 0.5.23 (post-snapshot fix)", "generation-monotonic",
    ),
    "uninitialised-req-to-token": Canary(
        "req_to_token", f"{_ROWS}:UninitialisedTable",
        "req_to_token from torch.empty (garbage pinned to a sentinel)",
        "SGLang #1782", "reserved-never-handed-out",
    ),
    "silent-double-free-rows": Canary(
        "req_to_token", f"{_ROWS}:SilentDoubleFreeRows",
        "free_rows appends without validation: a double free is accepted",
        "sglang-pools.md section 8, hazard 6", "misuse-rejected",
    ),
    "decode-clear-forgets-prealloc": Canary(
        "decode_req_to_token", f"{_ROWS}:DecodeClearForgetsPreAlloc",
        "clear() rebuilds the free list from size, dropping the pre-allocation rows",
        "seed 003 (DecodeReqToTokenPool.clear)", "clear-restores",
    ),
    "group-end-leak": Canary(
        "mamba_slots", f"{_MAMBA}:GroupEndLeak",
        "alloc_group_end closes the window without returning unconsumed reserved slots",
        "seed 001", "group-window",
    ),
    "clear-leaves-group-open": Canary(
        "mamba_slots", f"{_MAMBA}:ClearLeavesGroupOpen",
        "clear() keeps the open group window: stale reserved slots are issued twice",
        "sglang-pools.md section 8, hazard 3; SGLang #4698 (same bug in the KV free group)", "clear-restores",
    ),
    "nested-group-drops-reservation": Canary(
        "mamba_slots", f"{_MAMBA}:NestedGroupDropsReservation",
        "a second alloc_group_begin silently replaces the first window's reservation",
        "sglang-pools.md section 8, hazard 3", "misuse-rejected",
    ),
    "silent-double-free-mamba": Canary(
        "mamba_slots", f"{_MAMBA}:SilentDoubleFreeSlots",
        "MambaSlotAllocator.free appends without validation",
        "sglang-pools.md section 8, hazard 6", "misuse-rejected",
    ),
    "mamba-mapping-sized-by-mamba-size": Canary(
        "hybrid_req_to_token", f"{_MAMBA}:MappingSizedByMambaSize",
        "req_index_to_mamba_index_mapping sized by mamba_size but indexed by row",
        "SGLang #24244", "in-bounds",
    ),
    "silent-double-free-tokens": Canary(
        "token_kv", f"{_KV}:SilentDoubleFreeTokens",
        "TokenToKVPoolAllocator.free appends without validation: a double free is accepted",
        "sglang-pools.md section 8, hazard 6", "misuse-rejected",
    ),
    "free-group-aliasing": Canary(
        "paged_kv", f"{_KV}:FreeGroupAliasing",
        "deferred frees keep the caller's tensor instead of a clone",
        "SGLang #34067", "group-window",
    ),
    "extend-without-empty-guard": Canary(
        "paged_kv", f"{_KV}:ExtendWithoutEmptyGuard",
        "vectorised extend gathers from an empty free_pages (no empty-pool guard)",
        "seed 002", "empty-pool-guard",
    ),
    "truncated-phase2": Canary(
        "paged_kv", f"{_KV}:TruncatedPhase2",
        f"extend kernel writes only the first {PHASE2_BOUND} phase-2 tokens of a request",
        "SGLang #9271", "reserved-never-handed-out",
    ),
    "capacity-checked-after-kernel": Canary(
        "paged_kv", f"{_KV}:CapacityCheckedAfterKernel",
        "alloc_extend/alloc_decode launch the kernel before checking capacity",
        "SGLang #34399", "empty-pool-guard",
    ),
    "page-size-1-decode-consumes-nothing": Canary(
        "paged_kv", f"{_KV}:PageSize1DecodeConsumesNothing",
        "decode counts new pages with seq % ps == 1: zero at page size 1",
        "sglang-pools.md sections 3.5 and 8, hazard 1", "page-layout",
    ),
    "retract-frees-from-ceil": Canary(
        "scheduler", "harness.judge.drivers.scheduler:build_scheduler_pools",
        "retract frees KV from ceil(keep/ps)*ps instead of the floor, leaking the partial page",
        "SGLang #4977", "scheduler-conservation", driver=f"{_SCHED}:CeilRetractScheduler",
    ),
}


def canary(name: str) -> Canary:
    try:
        return CANARIES[name]
    except KeyError:
        raise KeyError(f"unknown canary {name!r}; known: {', '.join(CANARIES)}") from None


def machine_available(family_name: str) -> str | None:
    """``None`` if the family's machine imports, else a one-line reason."""
    try:
        resolve(family(family_name).machine)
    except UnknownTargetError as exc:
        return f"machine not available: {exc}"
    return None


def canary_machine(name: str, *, device: str = "cpu") -> type[PoolMachine]:
    """The family's normal machine bound to the canary (its pool, and its driver variant if any)."""
    entry = canary(name)
    machine = make_machine(entry.family, entry.spec, device=device)
    if entry.driver is None:
        return machine
    if not hasattr(machine, "driver_class"):
        raise UnknownTargetError(f"the {entry.family} machine cannot take a driver variant ({entry.driver})")
    attrs = {"driver_class": resolve(entry.driver), "__module__": machine.__module__}
    return type(f"{machine.__name__}[{entry.driver}]", (machine,), attrs)


assert all(c.invariant in INVARIANTS for c in CANARIES.values()), "a canary names an unknown invariant"

__all__ = ["CANARIES", "Canary", "canary", "canary_machine", "machine_available"]

"""Every invariant id has teeth: a deliberately broken pool trips exactly that id.

Most ids are proven by a canary (``harness/canaries``, run by ``tests/test_canaries.py``);
the broken pools of :data:`TEETH` cover the rest: here, or beside the tests that plant the same bug.
Broken pools live in tests, never in ``pools/``.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase

from poolfuzz.harness.canaries import CANARIES
from poolfuzz.harness.judge.invariants import INVARIANTS
from poolfuzz.harness.machines import make_machine, pinned_settings, run_machine, violation_of
from poolfuzz.pools import BadSizeError, ReqToTokenPool
from poolfuzz.pools.prefix_cache import build_prefix_cache
from poolfuzz.pools.radix_cache import RadixCache
from poolfuzz.pools.radix_tree import EVICTION_POLICIES


class RefusesBatchesOfThree(ReqToTokenPool):
    """Over-eager validation: a perfectly valid ``alloc_rows(3)`` raises."""

    def alloc_rows(self, need_size: int) -> list[int] | None:
        if need_size == 3:
            raise BadSizeError(self.pool_name, "need_size", need_size, "three is unlucky")
        return super().alloc_rows(need_size)


_OPPOSITE = {"lru": "mru", "mru": "lru", "fifo": "filo", "filo": "fifo"}


def build_evicts_in_the_opposite_order(size: int, page_size: int, eviction_policy: str = "lru", device: str = "cpu") -> RadixCache:
    """A prefix cache that evicts whole unlocked leaves, but in its policy's opposite order (an MRU posing as LRU)."""
    cache = build_prefix_cache(size, page_size, eviction_policy, device)
    opposite = _OPPOSITE.get(str(eviction_policy).lower())
    if opposite is not None:
        cache._tree.priority = EVICTION_POLICIES[opposite]
    return cache


TEETH: dict[str, tuple[str, str]] = {
    "conservation": ("req_to_token", "tests.fuzz_planted:ForgetfulFree"),  # the fuzz runner's leak, the same bug
    "no-double-allocation": ("paged_kv", "tests.test_kv_machines:FreeWithoutDedup"),
    "valid-call-accepted": ("req_to_token", f"{__name__}:RefusesBatchesOfThree"),
    "kernel-agreement": ("paged_kv", "tests.test_kv_machines:KernelReversesPages"),
    "eviction-order": ("prefix_cache", f"{__name__}:build_evicts_in_the_opposite_order"),
}


ENGINE_TEETH: dict[str, str] = {"in-flight-reuse": "frees-under-in-flight"}
"""Ids only the engine judges (harness/engines) check, proven on the fake engine of tests/engine_fake.py by the fault named."""


def caught_by(family: str, spec: str) -> str:
    with pytest.raises(BaseException) as failure:
        run_machine(make_machine(family, spec), settings=pinned_settings(max_examples=300, phases=[Phase.generate]), shrink=False)
    violation = violation_of(failure.value)
    assert violation is not None, f"{spec} failed without a violation: {failure.value!r}"
    return violation.invariant_id


def test_every_invariant_id_is_proven_by_a_canary_or_a_broken_pool_here() -> None:
    proven = {canary.invariant for canary in CANARIES.values()} | set(TEETH) | set(ENGINE_TEETH)
    assert proven == set(INVARIANTS)


@pytest.mark.parametrize("invariant_id", sorted(ENGINE_TEETH))
def test_the_faulty_fake_engine_trips_exactly_its_invariant(invariant_id: str) -> None:
    from tests.test_engine_judges import caught_on_the_fake

    violation = caught_on_the_fake(frozenset({ENGINE_TEETH[invariant_id]}))
    assert violation is not None and violation.invariant_id == invariant_id


@pytest.mark.parametrize("invariant_id", sorted(TEETH))
def test_the_broken_pool_trips_exactly_its_invariant(invariant_id: str) -> None:
    assert caught_by(*TEETH[invariant_id]) == invariant_id

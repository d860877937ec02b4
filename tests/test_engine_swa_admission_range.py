"""Finding 5 with chunked prefill on is a range of prompt sizes, not one tied value (docs/upstream-findings.md, finding 5).

On an idle hybrid-SWA server, ``SWAPrefillBudget.check_prefill`` (prefill_budget.py:230-264) admits a prefill when the
SWA tokens it needs are strictly below ``remaining_swa``, and shrinks a chunk only when they reach the whole SWA pool
(``swa_never_fits``, :213-219).  While it checks, ``add_one_req`` locks the request's own matched prefix
(schedule_policy.py:1429-1431), so the prefix's SWA slots (P) are neither free nor evictable: every demand in
``[size_swa - P, size_swa - 1]`` is refused and never shrunk, and the queue head waits for ever.  Without a cached
prefix (P = 0) that range is empty.  These run upstream's own scheduler through the engine target.
"""

from __future__ import annotations

import pytest

from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.upstream.sglang_modules import unavailable_reason

pytestmark = pytest.mark.skipif(bool(reason := unavailable_reason("Engine")), reason=reason or "")

SHAPE = {"cache": "unified-rust", "rows": 4, "tokens": 64, "context": 64, "page_size": 1, "sliding_window": 4}
"""Page 1, a 4-token window, a 16-slot SWA pool and chunked prefill of 16: one request's SWA demand is its uncached
tail plus a window plus a page (``estimate_swa_kv_tokens``, prefill_budget.py:27-59), E + 1 for a tail E of 4 or more."""


def hangs(cached_prefix: int, length: int) -> bool:
    """Whether a ``length``-token prompt hangs an idle server whose tree holds the first ``cached_prefix`` of its tokens."""
    from poolfuzz.harness.kits.engine.driver import EngineDriver, build_engine

    driver = EngineDriver(build_engine, {**SHAPE, "swa_tokens": 16, "chunk": 16})
    if cached_prefix:
        driver.step("arrive", stem=0, length=cached_prefix, tail=0, max_new=1)
        driver.step("run", iterations=6)  # it runs, finishes and leaves its prompt in the tree
    driver.step("arrive", stem=0, length=length, tail=0, max_new=1)
    try:
        driver.teardown()
    except InvariantViolation as violation:
        assert violation.invariant_id == "scheduler-progress", violation
        return True
    return False


@pytest.mark.parametrize(("length", "hung"), [(18, False), (19, True), (22, True), (23, False)])
def test_a_prompt_behind_a_cached_prefix_hangs_exactly_when_its_demand_is_within_the_locked_window_of_the_pool(
    length: int, hung: bool
) -> None:
    """An 8-token prefix in the tree locks P = 4 SWA slots (its last window): tails of 11 to 14 tokens need 12 to 15
    slots, at least the 12 the check sees and below the 16 that would shrink the chunk (prompts of 19 to 22 tokens).
    An 18-token prompt fits; a 23-token one needs the whole pool and is chunked."""
    assert hangs(8, length) is hung


def test_without_a_cached_prefix_no_prompt_length_hangs_a_chunked_server() -> None:
    assert not any(hangs(0, length) for length in (12, 15, 16, 19, 22, 30))

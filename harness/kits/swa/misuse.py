"""Misuse of an SWA allocator: when the driver may issue it, and which typed error the contract demands.

Upstream SGLang validates none of these calls, so a misuse probe runs only while the
driver checks misuse (:func:`reject_misuse`); otherwise the operation is skipped and
leaves no step in the trace.  :func:`free_errors` reads the model to name every
:class:`~poolfuzz.pools.errors.PoolError` a raw free may raise: a pool is right to raise any
one of them, since which check fires first is its own business.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolfuzz.harness.judge.driver import SKIPPED, Driver
from poolfuzz.harness.kits.swa.model import SWAModel
from poolfuzz.pools.errors import BadBatchError, DoubleFreeError, ForeignIndexError, PoolError, ReservedIndexError

FREE_CALLS = ("free", "free_swa", "free_full")


def skipped() -> Any:
    """:data:`SKIPPED`, typed for operations declared to return something else."""
    return SKIPPED


def reject_misuse(driver: Driver, call: Callable[[], Any], error: type[PoolError] | tuple[type[PoolError], ...], what: str) -> Any:
    """Issue misuse only while misuse checking is on (upstream does not validate)."""
    if not driver.check_misuse:
        return SKIPPED
    driver.expect_rejected(call, error, what)
    return None


def free_errors(model: SWAModel, indices: list[int], call: str) -> tuple[type[PoolError], ...]:
    """The errors ``call`` (one of :data:`FREE_CALLS`) of raw full ``indices`` may raise; empty when it is valid."""
    ps, end = model.page_size, model.full_slots_end
    errors: list[type[PoolError]] = []
    if any(i < 0 or i >= end for i in indices):
        errors.append(ForeignIndexError)
    if any(0 <= i < ps for i in indices):
        errors.append(ReservedIndexError)
    pages = [i // ps for i in indices if ps <= i < end]
    live = [p for p in pages if model.full.state(p) == "live"]
    if len(live) < len(pages) or (ps == 1 and len(set(indices)) != len(indices)):
        errors.append(DoubleFreeError)
    if call == "free_swa" and any(p not in model.peer for p in live):
        errors.append(DoubleFreeError)
    if call == "free_full" and any(p in model.peer for p in live):
        errors.append(BadBatchError)
    return tuple(dict.fromkeys(errors))

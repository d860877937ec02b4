"""The realistic trace of a finding: the smallest failing trace within what a server builds and sends.

A finding's minimal trace is often a pool of no pages and a request of no tokens
(:mod:`poolfuzz.harness.traces.realistic` says why that is, and what the floors are).
:func:`find_realistic` gives the maintainer the other trace too: it lifts the trace as
found to the family's floors and, if that no longer fails, walks the target with every
config and step lifted (:attr:`WalkRun.realistic <poolfuzz.harness.fuzz.walk.WalkRun.realistic>`)
for a few seconds; whatever fails is shrunk without going below a floor.  The invariant
found first is preferred; another one is kept if nothing else shows in the budget,
since a bug that reads ``empty-pool-guard`` in an empty pool often reads
``no-double-allocation`` in a real one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from poolfuzz.harness.fuzz.protocol import RealisticTrace
from poolfuzz.harness.fuzz.walk import WalkRun
from poolfuzz.harness.judge.families import family
from poolfuzz.harness.judge.trace import Trace, fill_provenance
from poolfuzz.harness.traces.keep import keep_trace
from poolfuzz.harness.traces.realistic import floors_of, shrink_realistic, within_floors

REALISTIC_SECONDS = 5.0
"""The search's budget after a finding: the walk's share of it, then shrinking within the floors."""
MIN_SECONDS = 0.5
"""Less time than this left in the run: no search (the finding's own report must not wait on it)."""

__all__ = ["REALISTIC_SECONDS", "find_realistic", "realistic_note"]


def find_realistic(
    family: str,
    spec: str,
    *,
    invariant_id: str,
    trace: Trace | None = None,
    seed: int = 0,
    seconds: float = REALISTIC_SECONDS,
    stop: Callable[[], bool] | None = None,
    **replay: Any,
) -> Trace | None:
    """A realistic failing trace of ``spec`` (a :func:`~poolfuzz.harness.judge.families.load_factory` target), or ``None``
    when the family has no floors or none fails within ``seconds`` (or before ``stop()``).  ``trace``: the
    finding as found."""
    if not floors_of(family):
        return None
    deadline = time.monotonic() + seconds
    replay = {"target": spec, "max_seconds": seconds, **replay}
    lifted = shrink_realistic(trace, invariant_id=invariant_id, stop=stop, **replay) if trace is not None else None
    if lifted is not None and lifted.expect.get("invariant") == invariant_id:
        return lifted
    walk = WalkRun(family, seed, spec=spec, device=str(replay.get("device") or "cpu"), shrink=False, realistic=True)
    other: Trace | None = None
    shows = invariant_id
    while time.monotonic() < deadline and not (stop is not None and stop()):
        finding = walk.run(seconds=max(0.0, deadline - time.monotonic()) / 2, stop=stop)
        violation = finding.violation if finding is not None else None
        if finding is None or violation is None:
            continue
        if violation.invariant_id == invariant_id:
            other, shows = finding.trace, invariant_id
            break
        if other is None:
            other, shows = finding.trace, violation.invariant_id
    if other is None or (lifted is not None and shows != invariant_id):
        return lifted
    replay["max_seconds"] = max(0.2, deadline - time.monotonic())
    return within_floors(other, invariant_id=shows, stop=stop, **replay)


def realistic_note(
    family_name: str,
    spec: str,
    *,
    invariant_id: str,
    trace: Trace,
    seed: int,
    corpus: Path,
    device: str = "cpu",
    seconds: float = REALISTIC_SECONDS,
    stop: Callable[[], bool] | None = None,
    shrunk: tuple[Path | None, Trace] | None = None,
) -> tuple[str, RealisticTrace | None]:
    """The lines a finding's message gets about its realistic trace, and the trace as the report records it
    (kept in ``corpus``).  For an upstream target only: ours are judged on their minimal traces, an upstream
    maintainer asks whether a server hits it.  ``seconds``: what the run has left for it, at most
    :data:`REALISTIC_SECONDS`.

    A family that declares no floors (``engine``, ``vllm_engine``: every config is a server shape its
    release builds, refused otherwise, and every step a scheduler iteration) has no trace below what a server
    builds: its ``shrunk`` trace (saved path, trace) is its realistic one, as ``poolfuzz report`` reads it
    (:func:`poolfuzz.harness.traces.realistic.unrealistic` is ``None`` for it)."""
    if spec not in family(family_name).upstream:
        return "", None
    if not floors_of(family_name):
        if shrunk is None:
            return "", None
        path, shortest = shrunk
        note = f"\n  realistic trace: the shrunk one ({family_name} declares no floors: every shape and step is a server's)"
        return note, RealisticTrace(str(path) if path is not None else None, len(shortest.steps), invariant_id)
    if seconds < MIN_SECONDS:
        return "\n  no realistic trace: the run had no time left to look for one", None
    found = find_realistic(family_name, spec, invariant_id=invariant_id, trace=trace, seed=seed, device=device, seconds=seconds, stop=stop)
    if found is None:
        return (f"\n  no realistic trace (pools and requests within {family_name}'s realistic floors) failed in {seconds:.1f} s"), None
    fill_provenance(found, seed=seed, note=f"realistic trace of a {invariant_id} finding on {spec}")
    kept = keep_trace(found, corpus)
    shows = str(found.expect.get("invariant"))
    where = f": {kept.path}" if kept.path is not None else f" ({kept.problem})"
    note = (
        f"\n  realistic trace (pools and requests a server builds), {len(found.steps)} steps"
        + (f", shows as [{shows}]" if shows != invariant_id else "")
        + where
    )
    return note, RealisticTrace(str(kept.path) if kept.path is not None else None, len(found.steps), shows)

"""What fuzzing upstream SGLang 0.5.23 found, and machines that steer around it.

Every trace under ``corpus/upstream/`` names its :class:`KnownFinding` in
``provenance.finding``: replayed on the upstream wrapper it must break the recorded
invariant, replayed on our pools it must pass (``docs/upstream-findings.md``
explains each finding).

A fuzz run stops at its first failure, so once a finding is known it hides
everything behind it.  :func:`machine_avoiding_known_findings` withholds exactly
the calls that reach a known finding and leaves the rest of the machine as it
is, so the remaining state space is still fuzzed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.judge.contract import KnownFindingFilter
from harness.judge.families import family, resolve
from harness.judge.trace import Trace
from harness.machines.base import PoolMachine
from harness.machines.table import make_machine
from harness.traces.corpus import DEFAULT_CORPUS, trace_key, write_trace

UPSTREAM_FOLDER = "upstream"
"""Upstream findings live flat in ``<corpus>/upstream/``, one folder for every upstream family."""


@dataclass(frozen=True)
class KnownFinding:
    """One upstream defect.  Its traces (``provenance.finding == key``) may show it through
    different invariants: which check fires first depends on the pool's state."""

    key: str
    family: str
    invariants: tuple[str, ...]
    summary: str


KNOWN_FINDINGS: tuple[KnownFinding, ...] = (
    KnownFinding(
        "paged-decode-page-size-1",
        "paged_kv",
        ("empty-pool-guard", "reserved-never-handed-out", "no-double-allocation"),
        "PagedTokenToKVPoolAllocator.alloc_decode at page size 1 counts 0 new pages (seq % 1 == 1 is never true), "
        "so it consumes nothing and returns last_loc + 1: a slot the request does not own",
    ),
    KnownFinding(
        "mamba-clear-keeps-reservation",
        "mamba_slots",
        ("clear-restores",),
        "MambaSlotAllocator.clear() keeps the group's reservation iterator, so alloc(1) after clear re-issues "
        "reserved slots that clear already put back on the free list: one slot, two owners",
    ),
    KnownFinding(
        "swa-decode-keeps-one-side",
        "swa_kv",
        ("empty-pool-guard",),
        "SWATokenToKVPoolAllocator.alloc_decode (page size > 1) allocates on the full side and then on the SWA "
        "side without checking either first; when one side is short it returns None and keeps the page the other "
        "side handed out, mapped to nothing: a page leaked per refused request",
    ),
)
FINDINGS_BY_KEY = {finding.key: finding for finding in KNOWN_FINDINGS}


def known_finding_filter(family_name: str) -> KnownFindingFilter[Any] | None:
    """The family's :class:`~harness.judge.contract.KnownFindingFilter` (its kit's ``known_findings``), if it has one."""
    spec = family(family_name).known_findings
    if not spec:
        return None
    found = resolve(spec)
    if not isinstance(found, KnownFindingFilter):
        raise TypeError(f"{family_name}'s known_findings {spec!r} is a {type(found).__name__}, not a KnownFindingFilter")
    return found


def machine_avoiding_known_findings(family: str, spec: str, *, device: str = "cpu") -> type[PoolMachine]:
    """``make_machine(family, spec)``, except that calls reaching a known finding are not issued.

    The filter sits on :meth:`PoolMachine.do`, below the rules, so it holds for every
    rule that issues the operation (machines gain rules; this need not follow them).
    A filtered call does nothing and returns ``None``, as a refused call does.
    """
    machine = make_machine(family, spec, device=device)
    keep = known_finding_filter(family)
    if keep is None:
        return machine

    def do(self: PoolMachine, op: str, **args: Any) -> Any:
        if not keep.allows(self.driver, op, args):
            return None
        return machine.do(self, op, **args)

    return type(f"{machine.__name__}-avoiding-known", (machine,), {"do": do, "__module__": machine.__module__})


def finding_path(trace: Trace, corpus: Path = DEFAULT_CORPUS) -> Path:
    """``<corpus>/upstream/<family>-<key>.json`` (the corpus is ``corpus/`` under the working directory)."""
    return corpus / UPSTREAM_FOLDER / f"{trace.family}-{trace_key(trace)}.json"


def save_finding(trace: Trace, finding: str, note: str, corpus: Path = DEFAULT_CORPUS) -> Path:
    """Write an upstream trace that shows ``finding``, expecting its violation on the upstream target only."""
    invariant = trace.expect.get("invariant")
    known = FINDINGS_BY_KEY[finding]
    if trace.expect.get("outcome") != "violation" or invariant not in known.invariants:
        raise ValueError(f"{trace.describe()} does not record a violation of {known.invariants}")
    trace.expect_violation(invariant)
    trace.provenance = {**trace.provenance, "finding": finding, "note": note}
    return write_trace(trace, finding_path(trace, corpus))

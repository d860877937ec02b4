"""What fuzzing upstream SGLang 0.5.23 found, and machines that steer around it.

The findings themselves are data: ``corpus/known.toml``, read by :mod:`poolfuzz.harness.upstream.known`
(which also tells a new failure from a known one); :data:`KNOWN_FINDINGS` is its view of the
findings of one class driven alone.

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

from pathlib import Path
from typing import Any

from poolfuzz.harness.judge.contract import KnownFindingFilter
from poolfuzz.harness.judge.families import family, resolve
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.machines.base import PoolMachine
from poolfuzz.harness.machines.table import make_machine
from poolfuzz.harness.traces.corpus import DEFAULT_CORPUS, trace_key, write_trace
from poolfuzz.harness.upstream.known import KnownFinding, load_known

UPSTREAM_FOLDER = "upstream"
"""Upstream findings live flat in ``<corpus>/upstream/``, one folder for every upstream family."""


KNOWN_FINDINGS: tuple[KnownFinding, ...] = tuple(
    finding for finding in load_known() if finding.traces and all(t.startswith(f"{UPSTREAM_FOLDER}/") for t in finding.traces)
)
"""The findings of one upstream class driven alone, whose traces under ``corpus/upstream/`` name them in
``provenance.finding``: a view of ``corpus/known.toml`` (:mod:`poolfuzz.harness.upstream.known`), which also lists the
engine's findings 5 and 6."""
FINDINGS_BY_KEY = {finding.key: finding for finding in KNOWN_FINDINGS}


def known_finding_filter(family_name: str) -> KnownFindingFilter[Any] | None:
    """The family's :class:`~poolfuzz.harness.judge.contract.KnownFindingFilter` (its kit's ``known_findings``), if it has one."""
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

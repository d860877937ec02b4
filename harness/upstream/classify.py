"""Classify a failure on an upstream target: reachable, latent, or a divergence (issue #26).

A maintainer reads a finding's class before its message, so every failure a fuzz run reports on
an upstream implementation carries one:

* ``reachable`` -- the 0.5.23 scheduler makes this call order.  True by construction for the
  ``engine`` target: its steps are scheduler iterations run from upstream's own calls
  (``docs/engine.md``), so the note names the iteration types the trace holds.  The legacy
  ``RadixCache`` shape is the exception: 0.5.23's ``default_radix_cache_factory``
  (``mem_cache/registry.py:83-146``) never builds it for a full-attention or hybrid model, so a
  failure there is ``latent``.
* ``latent`` -- one upstream class driven alone through the calls its contract allows: the class
  breaks its contract, but whether any caller makes that call order today is not shown by the
  trace (``docs/upstream-findings.md`` says, per finding, what the scheduler does).
* ``divergence`` -- two implementations, or two judges, disagree (``implementations-agree``,
  ``checker-agreement``): one of them is wrong, and the note says which one the contract favours.

Failures of our own pools are not classified: there the pool under test is simply wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

DIVERGENCE_IDS = frozenset({"implementations-agree", "checker-agreement"})
"""Ids that report a disagreement between two implementations or two judges, never a safety breach."""


@dataclass(frozen=True)
class Classification:
    kind: str
    """``reachable``, ``latent`` or ``divergence``."""
    note: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "note": self.note}


Classifier = Callable[[Mapping[str, Any], Sequence[str]], Classification]
"""A family's own classification of a violation by its upstream target, from the trace's config and operations
(the kit's ``classifier``: the engine's, whose steps are upstream's own scheduler iterations)."""


def _upstream_specs(family: str) -> tuple[str, ...]:
    from poolfuzz.harness.judge.families import FAMILIES

    fam = FAMILIES.get(family)
    return fam.upstream if fam is not None else ()


def upstream_target_of(family: str, implementation: str) -> str | None:
    """The upstream target whose code ``implementation`` runs: itself when it is one, or the target whose caller
    contract it declares, for a builder that runs that target under another server configuration (the engine's
    ``build_embedding_engine`` and ``build_engine_with_waiting_timeout`` declare ``Engine``'s); else ``None``."""
    specs = _upstream_specs(family)
    if implementation in specs:
        return implementation
    from poolfuzz.harness.judge.contract import contract_of
    from poolfuzz.harness.judge.families import resolve

    try:
        contract = contract_of(resolve(implementation))
    except Exception:  # noqa: BLE001 - a spec that does not resolve here is no upstream target's variant
        return None
    return contract.target if contract is not None and contract.target in specs else None


def _classifier(family: str) -> Classifier | None:
    """The family's kit's ``classifier``, resolved (``None``: one class driven alone, the default below)."""
    from poolfuzz.harness.judge.families import FAMILIES, resolve

    fam = FAMILIES.get(family)
    return resolve(fam.classifier) if fam is not None and fam.classifier else None  # type: ignore[no-any-return]


def _trace_steps(trace: str | None) -> tuple[dict[str, Any], list[str]]:
    """The trace's configuration and the ops of its steps (empty when it cannot be read)."""
    if not trace:
        return {}, []
    try:
        data = json.loads(Path(trace).read_text())
    except (OSError, ValueError):
        return {}, []
    return dict(data.get("config") or {}), [str(step.get("op")) for step in data.get("steps") or []]


def classify(family: str, implementation: str, invariant: str | None, trace: str | None) -> Classification | None:
    """The class of a violation of ``invariant`` by ``implementation``, or ``None`` for our own pools and errors."""
    if invariant is None or upstream_target_of(family, implementation) is None:
        return None
    if invariant in DIVERGENCE_IDS:
        favours = {
            "checker-agreement": "the raw page partition counts pages, not sizes: where it balances, the size "
            "accounting upstream's checker adds up is the one that drifted",
            "implementations-agree": "the upstream side is the reference: poolfuzz's pools follow its semantics",
        }[invariant]
        return Classification("divergence", favours)
    own = _classifier(family)
    if own is not None:
        return own(*_trace_steps(trace))
    off = off_path_steps(trace) if trace else ()
    if off:
        steps = "; ".join(f"step {number} ({op}): {instead}" for number, op, instead in off)
        return Classification(
            "latent",
            "one upstream class driven alone; the class accepts every call, but these "
            f"steps are off its callers' path (docs/contracts.md): {steps}",
        )
    return Classification(
        "latent",
        "one upstream class driven alone through calls its callers make "
        "(docs/contracts.md); whether the scheduler makes this order is not shown "
        "(docs/upstream-findings.md)",
    )


def off_path_steps(trace: str) -> tuple[tuple[int, str, str], ...]:
    """The steps of the trace at ``trace`` that the target accepts but its callers do not send today, each with
    what they do instead (:attr:`poolfuzz.harness.judge.driver.Driver.off_path`), up to the failing step."""
    path = Path(trace)
    try:
        return _off_path_steps(str(path.resolve()), path.stat().st_mtime_ns)
    except OSError:
        return ()


@lru_cache(maxsize=64)
def _off_path_steps(trace: str, _mtime: int) -> tuple[tuple[int, str, str], ...]:
    from poolfuzz.harness.traces.replay import replay_trace
    from poolfuzz.harness.traces.schema import TraceError, load_trace

    try:
        loaded = load_trace(Path(trace))
    except TraceError:
        return ()
    return replay_trace(loaded).off_path  # up to the finding's step (a replay stops there)

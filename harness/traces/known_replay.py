"""What ``replay`` says about known upstream findings (``corpus/known.toml``, issue 44).

Two things, both on the line of one replayed trace:

* a violation whose fingerprint (:mod:`poolfuzz.harness.upstream.known`) is a known finding is labelled with its number
  and key.  Where the trace did not expect it (a trace of ``corpus/found`` replayed on an upstream target, say),
  it is ``KNOWN``: recorded, and the trace counts as matched (exit 0), unless ``--strict``, where it fails as a
  new violation does;
* a committed trace of a known finding (named in its ``traces``, or naming it in ``provenance.finding``) that
  no longer breaks its invariant on its own upstream target is ``POSSIBLY FIXED``: the copy in use
  (``--sglang-src`` of a fixed checkout, a newer release) may have fixed it.  It still fails the replay (exit 1):
  confirm with ``--expect fixed`` or ``replay --across``, then retire the finding from ``known.toml``.
"""

from __future__ import annotations

from pathlib import Path

from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.replay import ReplayResult, expected_outcome, same_implementation
from poolfuzz.harness.upstream.known import KNOWN_FILE, KnownFinding, known_finding_of, load_known, upstream_code, upstream_label

__all__ = ["committed_finding", "known_of", "label", "possibly_fixed_line", "violation_known"]


def known_of(known_file: Path | None) -> tuple[KnownFinding, ...]:
    """The reviewed findings (``--known FILE``, else the checkout's); :class:`KnownFindingsError` when malformed."""
    return load_known(known_file)


def label(finding: KnownFinding) -> str:
    """``known finding 1 (paged-decode-page-size-1, SGLang 0.5.22 to 0.5.23)``."""
    return f"known finding {finding.number} ({finding.key}, {finding.upstream})"


def violation_known(trace: Trace, path: Path | str, result: ReplayResult, known: tuple[KnownFinding, ...]) -> KnownFinding | None:
    """The known finding the replay's violation is, or ``None`` (no violation, or a new one)."""
    if result.outcome != "violation" or not known:
        return None
    return known_finding_of(trace.family, result.implementation, result.invariant, path, known=known)


def committed_finding(
    path: Path | str, trace: Trace, known: tuple[KnownFinding, ...], known_file: Path | None = None
) -> KnownFinding | None:
    """The known finding whose committed traces hold ``path``, or that the trace names in ``provenance.finding``."""
    base = (known_file or KNOWN_FILE).resolve().parent
    here = Path(path).resolve()
    for finding in known:
        if any((base / name).resolve() == here for name in finding.traces):
            return finding
    key = trace.provenance.get("finding") if isinstance(trace.provenance, dict) else None
    return next((finding for finding in known if finding.key == key), None)


def possibly_fixed_line(path: Path | str, trace: Trace, result: ReplayResult, finding: KnownFinding | None) -> str | None:
    """``POSSIBLY FIXED ...`` when a known finding's trace passes on the target it was found on, else ``None``."""
    if finding is None or result.outcome != "pass":
        return None
    outcome, invariant = expected_outcome(trace, result.implementation)
    if outcome != "violation" or not same_implementation(trace, trace.implementation, result.implementation):
        return None
    code = upstream_label(upstream_code(trace.family, result.implementation)) or result.implementation
    return (
        f"POSSIBLY FIXED {path}: finding {finding.number} ({finding.key}) [{invariant}] no longer reproduces on {code} "
        f"(known on {finding.upstream}); check with --expect fixed or --across, then retire it from corpus/known.toml"
    )

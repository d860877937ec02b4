"""One upstream target's CI walk, run in a process of its own: a fixed number of seeded walk steps.

A violation is shrunk (:class:`~poolfuzz.harness.fuzz.walk.WalkRun` does it) and saved under the run's corpus, then
matched against the known findings (:func:`~poolfuzz.harness.upstream.known.known_finding_of`): a known one is
recorded and the walk goes on from where it was, a later violation of the same invariant on this target
ending its episode unchecked (counted as ``known_again``), as ``fuzz`` does; a new one (or an exception that
is no violation) ends this target's walk.  Everything returned is plain data, for the parent's report.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from poolfuzz.harness.ci.plan import CiTarget
from poolfuzz.harness.ci.records import Finding, WalkRecord
from poolfuzz.harness.judge.invariants import InvariantViolation


def walk_target(target: CiTarget, corpus: str, known_file: str | None, max_seconds: float) -> WalkRecord:
    """Walk ``target`` for its steps (or until ``max_seconds``, a guard); the result record of the report."""
    from poolfuzz.harness.fuzz.walk import WalkRun
    from poolfuzz.harness.judge.trace import Trace
    from poolfuzz.harness.traces.keep import keep_trace
    from poolfuzz.harness.upstream.known import known_finding_of, load_known

    started = time.monotonic()
    known = load_known(Path(known_file) if known_file else None)
    record: WalkRecord = {
        "target": target.key,
        "family": target.family,
        "spec": target.spec,
        "distribution": target.distribution,
        "seed": target.seed,
        "steps_budget": target.steps,
        "steps": 0,
        "episodes": 0,
        "seconds": 0.0,
        "cut_off": False,
        "known_again": 0,
        "findings": [],
    }
    seen: set[str] = set()

    def known_again(violation: InvariantViolation) -> bool:
        if violation.invariant_id in seen:
            record["known_again"] += 1
            return True
        return False

    try:
        walk = WalkRun(target.family, target.seed, spec=target.spec, corpus=Path(corpus), known_again=known_again)
    except Exception as exc:  # noqa: BLE001 - a target that will not build is a finding of this checkout
        record["findings"].append(_error(exc, None))
        return _done(record, started)
    while walk.steps < target.steps:
        left = max_seconds - (time.monotonic() - started)
        if left <= 0:
            record["cut_off"] = True
            break
        try:
            finding = walk.run(max_steps=target.steps - walk.steps, seconds=left)
        except Exception as exc:  # noqa: BLE001 - the shrinker or the corpus failing is reported, not a crash
            record["findings"].append(_error(exc, None))
            break
        record["steps"], record["episodes"] = walk.steps, walk.episodes
        if finding is None:
            record["cut_off"] = walk.steps < target.steps
            break
        violation = finding.violation
        if violation is None:
            trace: Trace = finding.trace
            kept = keep_trace(trace, Path(corpus)) if trace.steps else None
            record["findings"].append(_error(finding.error, kept.path if kept else None, steps=len(trace.steps)))
            break
        match = known_finding_of(target.family, target.spec, violation.invariant_id, finding.trace_path, known=known)
        record["findings"].append(
            {
                "kind": "violation",
                "invariant": violation.invariant_id,
                "message": str(violation).splitlines()[0] if str(violation) else violation.invariant_id,
                "trace": str(finding.trace_path) if finding.trace_path else None,
                "trace_problem": finding.trace_problem or None,
                "steps": len(finding.trace.steps),
                "found_steps": finding.found_steps,
                "found_at_step": walk.steps,
                "steps_text": finding.trace.steps_text(),
                "known": match.to_json() if match is not None else None,
            }
        )
        if match is None:
            break
        seen.add(violation.invariant_id)
    record["steps"], record["episodes"] = walk.steps, walk.episodes
    return _done(record, started)


def _error(exc: BaseException, path: Path | None, *, steps: int = 0) -> Finding:
    tail = "".join(traceback.format_exception(exc)[-4:]).rstrip()
    return {
        "kind": "error",
        "invariant": None,
        "message": f"{type(exc).__name__}: {exc}",
        "trace": str(path) if path else None,
        "trace_problem": None,
        "steps": steps,
        "found_steps": steps,
        "found_at_step": None,
        "steps_text": tail,
        "known": None,
    }


def _done(record: WalkRecord, started: float) -> WalkRecord:
    record["seconds"] = round(time.monotonic() - started, 3)
    return record

"""The replay phase of ``poolfuzz ci``: each committed upstream trace replayed against the copy under test.

Each trace is judged as ``poolfuzz replay`` judges it (:func:`poolfuzz.harness.traces.replay_cli.judge`), then given
the CI mode's status:

* ``passed``: it did what it records (``PASS``, ``OK``: a known finding reproduced), or it broke an
  invariant it did not expect in a way that is a known finding (``KNOWN``);
* ``possibly_fixed``: a known finding's committed trace that passes on this copy (``POSSIBLY FIXED``):
  good news to review, not a failure of the engine's CI;
* ``skipped``: its target cannot run on this copy (``MISS``: the files it needs moved; the fuzz phase
  says why, once per target);
* ``failed``: a new finding (``FAIL``) or a file that is no valid trace (``BAD``).
"""

from __future__ import annotations

import time
from pathlib import Path

from poolfuzz.harness.ci.records import ReplayRecord, ReplayStatus
from poolfuzz.harness.upstream.known import KnownFinding

_STATUS: dict[str, ReplayStatus] = dict(matched="passed", failed="failed", skipped="skipped", missing="skipped", invalid="failed")


def replay_traces(paths: list[Path], known: tuple[KnownFinding, ...], known_file: Path | None) -> list[ReplayRecord]:
    """One record per trace: ``trace``, ``status`` (above), ``line`` (replay's own line), ``seconds``."""
    from poolfuzz.harness.traces.replay_cli import Options, judge

    options = Options(overrides={}, steps=True, known=known, known_file=known_file)
    records: list[ReplayRecord] = []
    for path in paths:
        started = time.monotonic()
        try:
            status, lines = judge(path, options)
        except Exception as exc:  # noqa: BLE001 - a replay that raises is a failing testcase, not a crash of the run
            status, lines = "failed", [f"FAIL {path}: replay raised {type(exc).__name__}: {exc}"]
        line = lines[0] if lines else ""
        mapped: ReplayStatus = _STATUS.get(status, "failed")
        if line.startswith("POSSIBLY FIXED"):
            mapped = "possibly_fixed"
        records.append(
            {
                "trace": str(path),
                "status": mapped,
                "line": line,
                "known": line.startswith("KNOWN") or "known finding" in line,
                "steps_text": "\n".join(lines[1:]),
                "seconds": round(time.monotonic() - started, 3),
            }
        )
    return records

"""The corpus directory: content-addressed trace files, safe under parallel writers."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from harness.trace import Trace


def trace_key(trace: Trace) -> str:
    """Digest of what makes a counterexample the same one: family, implementation, config, steps, outcome.

    Provenance (dates, seeds, notes) is left out, so finding the same bug twice,
    also from two xdist workers at once, names the same file.
    """
    body = trace.to_json()
    body.pop("provenance")
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def save_trace(trace: Trace, corpus: Path) -> Path:
    """Write ``trace`` under ``corpus/<family>/`` unless an identical one is there; return its path."""
    folder = corpus / trace.family
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{trace.family}-{trace_key(trace)}.json"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        handle.write(trace.dumps())
    os.replace(tmp, path)
    return path

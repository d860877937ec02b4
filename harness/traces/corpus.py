"""The corpus directory: content-addressed trace files, safe under parallel writers.

A trace is saved as ``corpus/<family>/<family>-<key>.json`` where ``key`` digests
what makes two counterexamples the same one (:func:`trace_key`).  Writers never
expose a partial file and never overwrite one another: each writes a hidden
temporary file in the same folder and *hard-links* it into place, which fails
atomically when the name is taken.  Two xdist workers that find the same bug at
once therefore leave exactly one complete file, the first one's.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from poolfuzz.harness.judge.trace import Trace

DEFAULT_CORPUS = Path("corpus")
"""The corpus of the project being fuzzed: ``corpus/`` under the working directory (``--corpus`` overrides)."""


def trace_key(trace: Trace) -> str:
    """Digest of what makes a counterexample the same one: family, implementation, config, steps, outcome.

    Provenance (dates, seeds, notes) is left out, so finding the same bug twice,
    also from two xdist workers at once, names the same file.
    """
    body = trace.to_json()
    body.pop("provenance")
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def trace_path(trace: Trace, corpus: Path) -> Path:
    """Where :func:`save_trace` puts ``trace`` under ``corpus``."""
    return corpus / trace.family / f"{trace.family}-{trace_key(trace)}.json"


def save_trace(trace: Trace, corpus: Path) -> Path:
    """Write ``trace`` under ``corpus/<family>/`` unless an identical one is there; return its path."""
    return write_trace(trace, trace_path(trace, corpus))


def write_trace(trace: Trace, path: Path) -> Path:
    """Write ``trace`` at ``path`` atomically, unless a file is already there; return ``path``.

    Readers (replay, another worker, a fleet machine syncing the corpus) never see
    a partial file: the text is written and fsynced under a temporary name, then
    linked into place.  Two writers of the same trace race harmlessly: the names
    are content digests, so the loser's file is identical.
    """
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _written_beside(trace, path)
    try:
        _publish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _written_beside(trace: Trace, path: Path) -> Path:
    """``trace`` written and fsynced under a hidden temporary name in ``path``'s folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(trace.dumps())
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def rewrite_trace(trace: Trace, path: Path) -> Path:
    """Replace the file at ``path`` with ``trace``, atomically (``replay --mark-regression`` edits in place).

    Readers see the old file or the new one, never a mix: the text is written
    and fsynced under a hidden temporary name in the same folder, then renamed
    over ``path``.  The name is kept even though the content digest changes
    (docs/corpus.md: edited files need not be renamed).
    """
    tmp = _written_beside(trace, path)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _publish(tmp: Path, path: Path) -> None:
    """Give the complete file ``tmp`` the name ``path`` unless another writer already has."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: an atomic rename still never shows a partial file
        if not path.exists():
            os.replace(tmp, path)

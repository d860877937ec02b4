"""Keeping a found counterexample on disk whatever happens to the corpus folder.

A fuzz run that finds a bug and then loses its trace has wasted the run: before
this module, a ``--corpus`` that named a file (or a full disk, or a folder made
read-only mid-run) ended the run with ``NotADirectoryError`` and no trace.  Every
writer of a found trace goes through :func:`keep_trace`: the corpus first, then a
folder under the system's temporary directory, and says which it used and why.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.corpus import save_trace, trace_path

FALLBACK_FOLDER = "poolfuzz-found"
"""Under :func:`tempfile.gettempdir`: where a trace goes when the corpus cannot be written."""


@dataclass(frozen=True)
class Kept:
    """Where a trace was kept.  ``path`` is ``None`` only when nothing could be written at all."""

    path: Path | None
    created: bool = False
    """This call wrote the file (it was not already there): only such a file may be replaced later."""
    problem: str = ""
    """Why the trace is not under the corpus asked for (empty when it is)."""


def keep_trace(trace: Trace, corpus: Path) -> Kept:
    """Save ``trace`` under ``corpus``, else under the temporary fallback folder; never raises ``OSError``."""
    try:
        return _save(trace, corpus)
    except OSError as exc:
        fallback = Path(tempfile.gettempdir()) / FALLBACK_FOLDER
        first = f"cannot write under {corpus} ({type(exc).__name__}: {exc})"
        try:
            kept = _save(trace, fallback)
        except OSError as again:
            return Kept(None, problem=f"{first}; nor under {fallback} ({type(again).__name__}: {again})")
        return Kept(kept.path, kept.created, problem=f"{first}: saved under {fallback} instead")


def _save(trace: Trace, corpus: Path) -> Kept:
    existed = trace_path(trace, corpus).exists()
    return Kept(save_trace(trace, corpus), created=not existed)


def discard(kept: Kept, *, keep: Path | None) -> None:
    """Remove a trace this run wrote (the unshrunk one), once ``keep`` (its shrunk successor) is on disk."""
    if kept.path is None or not kept.created or keep is None or keep == kept.path or not keep.exists():
        return
    kept.path.unlink(missing_ok=True)

"""Where a fuzz run writes, checked before any worker starts.

A run that finds a bug and then cannot write its trace has lost the counterexample: on main
before this check, ``--corpus notes.txt`` (an existing file) was accepted, and the run ended
in ``NotADirectoryError`` the moment there was a trace to save.  Every folder a run writes to
(the corpus, the report's folder, the dashboard's, a directory database layer) must exist or
be creatable, and must take a file; anything else is a usage error (exit 2, one line) before
a second is spent fuzzing.  A folder the user named that does not exist yet is made when first
written, and the run says so in one line as it starts (:func:`folder_to_make`): ``--dashboard
out/run.html`` with no ``out/`` used to make it silently.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class OutputError(ValueError):
    """A path a run would write to that cannot be written: ``--corpus``, ``--report``, ``--dashboard``, ``--database``."""


def check_folder(path: Path, flag: str) -> None:
    """``path`` is a folder this process can create files in, or one it can make (nothing is made:
    a refused run leaves no folders behind; the writers make theirs when they first write)."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path}: exists and is not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"{flag} {path}: cannot write there ({existing} is not a folder)")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".poolfuzz-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None


def check_file(path: Path, flag: str) -> None:
    """``path`` can be written as a file: not a folder, in a folder :func:`check_folder` accepts."""
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a folder, not a file")
    try:
        check_folder(path.parent, flag)
    except OutputError as exc:
        raise OutputError(f"{flag} {path}: its folder {str(exc).removeprefix(f'{flag} ')}") from None


def folder_to_make(path: Path, flag: str, *, is_file: bool) -> str | None:
    """The line announcing the folder the run will make for ``flag``'s ``path`` (a file's folder when
    ``is_file``), or ``None`` when it exists: ``--dashboard out/run.html: out does not exist; it is made``."""
    folder = path.parent if is_file else path
    if folder.exists():
        return None
    return f"{flag} {path}: {folder} does not exist; it is made when the run first writes there"

"""Atomic file writes: a reader (a browser reloading the live page, a web server) sees the old file or the new one.

The text goes to a temporary file in the same folder, which then replaces the
target with :func:`os.replace` (atomic on POSIX and on Windows within one
volume).  The temporary name is unique per writer, so two writers of one page
never write into each other's file, and it is created with mode ``0o666``
less the umask, like any file a program writes: a page served from
``/var/www`` stays readable by the web server (``tempfile.mkstemp`` would
make it ``0o600``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path``, creating its folder; never leaves a half-written ``path``."""
    encoded = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(encoded)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise

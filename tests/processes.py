"""Python commands the tests run in a child process, their output captured as text (tests only)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def python(*args: str, cwd: Path, timeout: float | None, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (this interpreter) run to its end in ``cwd``, in ``env`` (else this process's environment), its
    stdout and stderr captured as text; its exit status is the caller's to check."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)

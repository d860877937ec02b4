"""The record of one planted bug, shared by every family's canary module."""

from __future__ import annotations

from typing import NamedTuple


class Canary(NamedTuple):
    """One planted bug: where it lives, what it was upstream, and which invariant catches it."""

    family: str
    spec: str
    bug: str
    upstream: str
    invariant: str
    driver: str | None = None
    """A driver variant (``module:attr``) when the bug is in how the harness calls the pools."""

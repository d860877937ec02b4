"""The words every command's ``--help`` shows: one program name, and docstrings without reStructuredText.

Command descriptions are taken from module docstrings, written for Sphinx-style readers
(````code````, ``:func:`name```); a terminal user should read ``code`` and ``name``.
"""

from __future__ import annotations

import re

PROG = "poolfuzz"
"""The one program name every help text shows; ``poolfuzz`` runs the same CLI."""

_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]+)``")
_EMPHASIS = re.compile(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])")


def prog(command: str) -> str:
    """``poolfuzz COMMAND``: the ``prog`` of a subcommand's parser."""
    return f"{PROG} {command}"


def plain(text: str) -> str:
    """``text`` with reStructuredText roles, literals and emphasis reduced to their words."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else m.group(1), text)
    text = _LITERAL.sub(r"\1", text)
    return _EMPHASIS.sub(r"\1", text)


def summary(doc: str | None) -> str:
    """The first paragraph of a module docstring, in plain words, on one line."""
    first = (doc or "").strip().split("\n\n")[0]
    return plain(" ".join(first.split()))

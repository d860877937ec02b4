"""Mutants judged equivalent: edits no caller of the pool can observe, each with the reason.

A mutation score counts a surviving mutant as a behaviour nobody checks.  Some mutants
cannot be killed by any test, because the edited code computes the same observable result
either way (a free of an empty tensor skipped, a second stamp of a path whose nodes are
never compared with each other).  Counted as survivors they hide the real gaps among them;
left out silently they would hide a wrong judgement.  So each one is listed here with the
argument for its equivalence, ``mutate`` reports them under their own kind (``equivalent``)
and leaves them out of the behavioural score, and an *equivalent* mutant a machine kills is
reported as a wrong entry (``mutate`` prints it; the argument was wrong, and the entry must go).

An entry names a mutant by what it edits, not by its line number, so it survives edits
elsewhere in the module: module, function, operator and the description ``mutate --list``
prints, the text of its line and the column.  ``tests/test_mutate.py`` checks that every entry still names a generated mutant.

The entries are data, one TOML table a pool area (``prefix.toml``, ``swa.toml``, ``pages.toml``, package data
next to this file): each ``[[equivalent]]`` has the six fields above and a ``reason``, the name of one of the
shared arguments in ``reasons.py``.  ``entry.load_equivalents`` reads a table and refuses a malformed entry by
file, entry number and field.
"""

from __future__ import annotations

from importlib.resources import files

from poolfuzz.harness.mutate.equivalents.entry import Equivalent, load_equivalents
from poolfuzz.harness.mutate.equivalents.reasons import SELF_CHECK

__all__ = ["EQUIVALENTS", "SELF_CHECKS", "TABLES", "Equivalent", "equivalence"]

TABLES = ("prefix.toml", "swa.toml", "pages.toml")
"""The tables of this package, in the order ``EQUIVALENTS`` lists their entries."""

EQUIVALENTS: tuple[Equivalent, ...] = tuple(entry for table in TABLES for entry in load_equivalents(files(__name__) / table))

_BY_KEY = {entry.key: entry for entry in EQUIVALENTS}

SELF_CHECKS: dict[tuple[str, str], str] = {
    ("poolfuzz.pools.radix_cache_base", "RadixCacheBase.sanity_check"): SELF_CHECK,
    ("poolfuzz.pools.radix_cache_base", "RadixCacheBase._invariant_failed"): SELF_CHECK,
}
"""Functions whose job is to raise on a corrupt pool (``module``, ``function``) -> why their mutants are scored
apart, as ``self-check``: one that weakens the check can never be seen on a correct pool, and one that makes it
fail a correct pool is killed, which the table reports but does not count."""


def equivalence(module: str, function: str, operator: str, source: str, col: int, description: str) -> str:
    """Why the mutant so named is equivalent, or ``""`` when it is not listed (a self-check's: see ``SELF_CHECKS``)."""
    entry = _BY_KEY.get((module, function, operator, source, col, description))
    return entry.why if entry is not None else ""

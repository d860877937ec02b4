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
"""

from __future__ import annotations

from harness.mutate.equivalents import pages, prefix, swa
from harness.mutate.equivalents.entry import Equivalent
from harness.mutate.equivalents.reasons import SELF_CHECK

__all__ = ["EQUIVALENTS", "SELF_CHECKS", "Equivalent", "equivalence"]

EQUIVALENTS: tuple[Equivalent, ...] = (*prefix.ENTRIES, *swa.ENTRIES, *pages.ENTRIES)

_BY_KEY = {entry.key: entry for entry in EQUIVALENTS}

SELF_CHECKS: dict[tuple[str, str], str] = {
    ("pools.radix_cache_base", "RadixCacheBase.sanity_check"): SELF_CHECK,
    ("pools.radix_cache_base", "RadixCacheBase._invariant_failed"): SELF_CHECK,
}
"""Functions whose job is to raise on a corrupt pool (``module``, ``function``) -> why their mutants are scored
apart, as ``self-check``: one that weakens the check can never be seen on a correct pool, and one that makes it
fail a correct pool is killed, which the table reports but does not count."""


def equivalence(module: str, function: str, operator: str, source: str, col: int, description: str) -> str:
    """Why the mutant so named is equivalent, or ``""`` when it is not listed (a self-check's: see ``SELF_CHECKS``)."""
    entry = _BY_KEY.get((module, function, operator, source, col, description))
    return entry.why if entry is not None else ""

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
prints, and the text of its line.  ``tests/test_mutate.py`` checks that every entry still names a generated mutant.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Equivalent:
    """The mutant of ``module``'s ``function`` by ``operator`` on the line reading ``source`` (stripped, as
    ``mutate`` prints it after ``|``), described ``description``, and why it is equivalent."""

    module: str
    function: str
    operator: str
    source: str
    description: str
    why: str

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return self.module, self.function, self.operator, self.source, self.description


_TOUCH_AFTER_INSERT = (
    "the insert just stamped every node on this path; stamping them again (or not) changes their ages only "
    "relative to each other, and nodes on one path are never compared: an ancestor becomes an eviction "
    "candidate only once its descendants are gone, so no policy order can tell")
_EMPTY_FREE = "a free of an empty tensor is a no-op of the allocator (it returns before touching the free list)"

EQUIVALENTS: tuple[Equivalent, ...] = (
    Equivalent("pools.radix_cache", "RadixCache._settle", "stmt-pass",
               "self._tree.touch(self._tree.descend(key))  # upstream re-matches the key to find the new last node",
               "delete `self._tree.touch(self._tree.descend(key))`", _TOUCH_AFTER_INSERT),
    Equivalent("pools.radix_cache", "RadixCache._settle", "stmt-pass", "self._tree.touch(prompt_walk)",
               "delete `self._tree.touch(prompt_walk)`", _TOUCH_AFTER_INSERT),
    Equivalent("pools.radix_cache", "RadixCache._settle", "cond-false", "if cache:", "`cache` -> `False`",
               "it skips only the last touch: " + _TOUCH_AFTER_INSERT),
    Equivalent("pools.radix_cache", "RadixCache._settle", "cond-true", "if piece.numel():", "`piece.numel()` -> `True`",
               _EMPTY_FREE),
    Equivalent("pools.radix_cache", "RadixCache._settle", "Lt->LtE", "if 0 < len(prompt_key) < len(key):",
               "`0 < len(prompt_key) < len(key)` -> `0 <= len(prompt_key) < len(key)`",
               "an empty prompt key descends to the root: touching the root and splitting at it change nothing"),
    Equivalent("pools.radix_cache", "RadixCache._settle", "Lt->LtE@1", "if 0 < len(prompt_key) < len(key):",
               "`0 < len(prompt_key) < len(key)` -> `0 < len(prompt_key) <= len(key)`",
               "a prompt key equal to the key ends at the node the insert just made: no split, and the touch "
               "is one more stamp of the inserted path, equivalent as the last touch is"),
    *(Equivalent("pools.radix_cache", "RadixCache._settle", "str",
                 'for what, piece in [("duplicates", duplicates)] + [("uncached tail", p) for p in tail]:',
                 f"`{text!r}` -> `{'XX' + text + 'XX'!r}`",
                 "the loop's `what` is read only by the AlreadyCachedError message below (message-only, but the "
                 "classifier does not follow a loop target)") for text in ("duplicates", "uncached tail")),
    Equivalent("pools.radix_cache", "RadixCache._held_any", "cond-false", "if indices.numel() == 0:",
               "`indices.numel() == 0` -> `False`",
               "on no indices the vectorised test below is `.any()` of an empty tensor: False, the same answer"),
    Equivalent("pools.radix_cache", "RadixCache._held_any", "return-none", "return False", "`return False` -> `return None`",
               "the only caller tests the answer for truth; None and False are both false"),
)

_BY_KEY = {entry.key: entry for entry in EQUIVALENTS}


def equivalence(module: str, function: str, operator: str, source: str, description: str) -> str:
    """Why the mutant so named is equivalent, or ``""`` when it is not listed."""
    entry = _BY_KEY.get((module, function, operator, source, description))
    return entry.why if entry is not None else ""

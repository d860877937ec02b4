"""One equivalent mutant, named by what it edits, and the loader of the TOML tables that list them."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from poolfuzz.harness.mutate.equivalents import reasons


@dataclass(frozen=True)
class Equivalent:
    """The mutant of ``module``'s ``function`` by ``operator`` at column ``col`` of the line reading ``source``
    (stripped, as ``mutate`` prints it after ``|``), described ``description``, and why it is equivalent."""

    module: str
    function: str
    operator: str
    source: str
    col: int
    description: str
    why: str

    @property
    def key(self) -> tuple[str, str, str, str, int, str]:
        return self.module, self.function, self.operator, self.source, self.col, self.description


FIELDS: dict[str, type] = {"module": str, "function": str, "operator": str, "source": str, "col": int, "description": str, "reason": str}
"""The keys of one ``[[equivalent]]`` of a table, in order, and the type of each value (``reason`` names a
string constant of ``reasons.py``; the entry's ``why`` is that constant's text)."""


class EquivalentsFileError(ValueError):
    """A table of equivalents that cannot be read as one: ``file``, the 1-based ``[[equivalent]]`` number
    ``entry`` (None for the file as a whole) and the ``field`` at fault (None for the entry as a whole)."""

    def __init__(self, file: str, entry: int | None, field: str | None, problem: str) -> None:
        where = file if entry is None else f"{file}: [[equivalent]] entry {entry}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {problem}")
        self.file = file
        self.entry = entry
        self.field = field
        self.problem = problem


def reason_named(name: str) -> str | None:
    """The text of the ``reasons.py`` constant ``name`` (a public module-level string), or None if there is none."""
    if name.startswith("_") or not name.isidentifier():
        return None
    value = vars(reasons).get(name)
    return value if isinstance(value, str) else None


def load_equivalents(table: Traversable | str | os.PathLike[str]) -> tuple[Equivalent, ...]:
    """The entries of the TOML ``table`` (a package resource or a path), in file order.

    Each ``[[equivalent]]`` must have exactly the keys of ``FIELDS``, each of its type, and a ``reason`` that
    names a constant of ``reasons.py``; anything else raises ``EquivalentsFileError`` naming the file, the entry
    and the field."""
    source: Traversable = Path(table) if isinstance(table, (str, os.PathLike)) else table
    file = str(source)
    try:
        data = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EquivalentsFileError(file, None, None, f"not a readable TOML file ({exc})") from exc
    extra = sorted(set(data) - {"equivalent"})
    if extra:
        raise EquivalentsFileError(file, None, None, f"unknown top-level keys {extra} (only [[equivalent]] entries)")
    items = data.get("equivalent")
    if not isinstance(items, list) or not items:
        raise EquivalentsFileError(file, None, None, "no [[equivalent]] entries (an array of tables)")
    return tuple(_entry(file, number, item) for number, item in enumerate(items, start=1))


def _entry(file: str, number: int, item: Any) -> Equivalent:
    if not isinstance(item, dict):
        raise EquivalentsFileError(file, number, None, f"not a table but {type(item).__name__}")
    missing = [key for key in FIELDS if key not in item]
    if missing:
        raise EquivalentsFileError(file, number, missing[0], f"missing (every entry has {', '.join(FIELDS)})")
    unknown = sorted(set(item) - set(FIELDS))
    if unknown:
        raise EquivalentsFileError(file, number, unknown[0], f"unknown key (every entry has {', '.join(FIELDS)})")
    for key, kind in FIELDS.items():
        value = item[key]
        if not isinstance(value, kind) or isinstance(value, bool):  # a TOML boolean is no column
            raise EquivalentsFileError(file, number, key, f"{value!r} is not of type {kind.__name__}")
    why = reason_named(item["reason"])
    if why is None:
        raise EquivalentsFileError(file, number, "reason", f"{item['reason']!r} names no string constant of reasons.py")
    return Equivalent(item["module"], item["function"], item["operator"], item["source"], item["col"], item["description"], why)

"""Families from outside this repository: the ``poolfuzz.families`` entry point group.

An engine's own test suite (or any package) declares, in its ``pyproject.toml``::

    [project.entry-points."poolfuzz.families"]
    my_pool = "my_package.poolfuzz_kit:FAMILY"

where the object named is a :class:`~poolfuzz.harness.judge.kit.Family` or an iterable of
them.  Once the package is installed, ``poolfuzz list``, ``fuzz``, ``replay``,
``selfcheck`` (its canaries) and the pytest plugin treat the family as one of ours.
A kit names its parts as ``module:attr`` strings like ours do: a pool factory, a
driver, a move table, canary modules, size limits.

A plug-in that fails to load, or that claims a family name already taken, is left
out and named in :data:`PROBLEMS` (``poolfuzz list`` prints them): one broken
package must not break the registry for every other family.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Protocol, TypeVar


class Named(Protocol):
    """What the loader needs of a registry entry: its name (a frozen dataclass field, read-only)."""

    @property
    def name(self) -> str: ...


K = TypeVar("K", bound=Named)

GROUP = "poolfuzz.families"

PROBLEMS: list[str] = []
"""One line per plug-in left out of the registry, and why."""
PLUGGED_IN: dict[str, str] = {}
"""Family name to the entry point (``name = module:attr``) that registered it."""


def plugin_families(taken: Iterable[str], kind: type[K]) -> Iterator[K]:
    """Every ``kind`` (the registry's ``Family``) the installed ``poolfuzz.families`` entry points declare,
    except those that clash with a name in ``taken`` or fail to load."""
    names = set(taken)
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        try:
            declared = _load(point)
        except Exception as exc:  # noqa: BLE001 - a broken plug-in is reported, never fatal
            PROBLEMS.append(f"plug-in {point.name} ({point.value}): {type(exc).__name__}: {exc}")
            continue
        for fam in declared:
            if not isinstance(fam, kind):
                PROBLEMS.append(f"plug-in {point.name} ({point.value}): {fam!r} is not a Family")
            elif fam.name in names:
                PROBLEMS.append(f"plug-in {point.name} ({point.value}): family {fam.name!r} is already registered")
            else:
                names.add(fam.name)
                PLUGGED_IN[fam.name] = f"{point.name} = {point.value}"
                yield fam


def _load(point: EntryPoint) -> list[object]:
    loaded = point.load()
    if isinstance(loaded, Iterable) and not isinstance(loaded, (str, bytes)):
        return list(loaded)
    return [loaded]

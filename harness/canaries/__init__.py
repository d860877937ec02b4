"""Canaries: our pools with one real, historical bug put back each.

A fuzzer that finds nothing might be broken.  Every canary here is a subclass
or variant of a pool in :mod:`pools` reproducing exactly one bug from the seed
documents or the catalogue in ``sglang-pools.md`` (sections 6 and 8), and
names the invariant that must catch it.  ``poolfuzz selfcheck`` fuzzes
each one with the normal machine and fails unless all are caught; the test
suite does the same under the ``ci`` profile.

Canaries never live in :mod:`pools`: they are bugs, kept only to prove the
harness has teeth.
"""

from __future__ import annotations

import importlib

from poolfuzz.harness.canaries.catalogue import Canary
from poolfuzz.harness.judge.families import FAMILIES, UnknownTargetError, family_unavailable, resolve
from poolfuzz.harness.judge.invariants import INVARIANTS
from poolfuzz.harness.machines.base import PoolMachine
from poolfuzz.harness.machines.table import machine_class, make_machine

_COLLECTED: dict[str, Canary] = {}


def collected() -> dict[str, Canary]:
    """Every family's ``CANARIES`` modules, in registry order (a module shared by two families is read once).

    Collected on first use, not at import: a plug-in's canary module imports
    :mod:`poolfuzz.harness.canaries.catalogue`, which runs this package first, and an eager
    collection would import that half-initialised module again.
    """
    if not _COLLECTED:
        for module in dict.fromkeys(m for f in FAMILIES.values() for m in f.canaries):
            for name, entry in importlib.import_module(module).CANARIES.items():
                assert name not in _COLLECTED, f"canary {name!r} is planted twice"
                assert entry.invariant in INVARIANTS, f"canary {name!r} names an unknown invariant"
                _COLLECTED[name] = entry
    return _COLLECTED


def __getattr__(name: str) -> dict[str, Canary]:
    if name == "CANARIES":  # PEP 562: ``from poolfuzz.harness.canaries import CANARIES`` collects them
        return collected()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def canary(name: str) -> Canary:
    canaries = collected()
    try:
        return canaries[name]
    except KeyError:
        raise KeyError(f"unknown canary {name!r}; known: {', '.join(canaries)}") from None


def machine_available(family_name: str) -> str | None:
    """``None`` if the family's machine imports, else a one-line reason."""
    try:
        machine_class(family_name)
    except UnknownTargetError as exc:
        return f"machine not available: {exc}"
    reason = family_unavailable(family_name)
    return None if reason is None else f"machine not available: {reason}"


def canary_machine(name: str, *, device: str = "cpu") -> type[PoolMachine]:
    """The family's normal machine bound to the canary (its pool, and its driver variant if any)."""
    entry = canary(name)
    machine = make_machine(entry.family, entry.spec, device=device)
    if entry.driver is None:
        return machine
    attrs = {"driver_class": resolve(entry.driver), "__module__": machine.__module__}
    return type(f"{machine.__name__}[{entry.driver}]", (machine,), attrs)


__all__ = ["CANARIES", "Canary", "canary", "canary_machine", "machine_available"]

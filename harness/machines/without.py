"""Running a machine as a host without an optional dependency would: the module blocked from import.

A family whose pools have an optional fast path (the paged allocator's ``triton``
kernel) must also behave where that dependency is missing: ``triton_available()``
says no, the strategies stop drawing the kernel, and asking for it anyway is a
typed :class:`~poolfuzz.pools.errors.KernelUnavailableError`.  Every machine here runs
with triton installed, so without this block that branch is never taken and a
wrong availability answer (claiming triton where it does not load, or denying it
where it does) goes unseen; the kit's ``optional_imports`` names what to block.

Blocking is done in-process, as the mutation workers need (they swap mutated code
into live modules): the blocked modules and every module of ours holding one of them are
taken out of ``sys.modules`` (and off their parent packages), the names are set
to ``None`` there so an import raises ``ImportError``, and ``functools`` caches of
the modules that probe for them are cleared.  Everything is put back on exit.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

__all__ = ["without_modules"]

_FIRST_PARTY = ("poolfuzz.pools", "poolfuzz.strategies", "poolfuzz.harness")


def _blocked(name: str, names: Sequence[str]) -> bool:
    return any(name == blocked or name.startswith(blocked + ".") for blocked in names)


def _first_party(name: str) -> bool:
    """Ours (``poolfuzz.pools``, ``poolfuzz.strategies``, ``poolfuzz.harness``): the modules whose fallback is under test.  A third-party
    module that imported the blocked one keeps it: taking ``torch._dynamo.utils`` out of ``sys.modules`` would
    make torch execute it a second time on its next import, which torch does not survive."""
    return _blocked(name, _FIRST_PARTY)


def _holds(module: ModuleType, held: set[int]) -> bool:
    return any(id(value) in held for value in vars(module).values() if isinstance(value, ModuleType))


def _clear_probes() -> None:
    """Empty the module-level ``functools`` caches of :mod:`pools`, where an answer may depend on what imports
    (``triton_available``): one cached inside the block would outlive it, and one cached before would leak in.
    Nothing above :mod:`pools` may cache such an answer (it would not be cleared)."""
    for name, module in list(sys.modules.items()):
        if module is None or not _blocked(name, ("poolfuzz.pools",)):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


@contextmanager
def without_modules(names: Sequence[str]) -> Iterator[None]:
    """Run the body as if ``names`` (top-level modules, with their submodules) were not installed."""
    if not names:
        yield
        return
    saved = {name: module for name, module in sys.modules.items() if _blocked(name, names)}
    held = {id(module) for module in saved.values()}
    with warnings.catch_warnings():  # isinstance() reads __class__, which some deprecated torch objects warn on
        warnings.simplefilter("ignore")
        saved.update(
            {
                name: module
                for name, module in list(sys.modules.items())
                if name not in saved and module is not None and _first_party(name) and _holds(module, held)
            }
        )
    attributes: list[tuple[ModuleType, str, object]] = []
    for name in saved:
        parent, _, child = name.rpartition(".")
        package = sys.modules.get(parent) if parent else None
        if package is not None and child in vars(package):
            attributes.append((package, child, vars(package)[child]))
    try:
        for name in saved:
            del sys.modules[name]
        for package, child, _ in attributes:
            delattr(package, child)
        for name in names:
            sys.modules[name] = None  # type: ignore[assignment]
        _clear_probes()
        yield
    finally:
        for name in [name for name in sys.modules if _blocked(name, names) or name in saved]:
            del sys.modules[name]
        sys.modules.update(saved)
        for package, child, value in attributes:
            setattr(package, child, value)
        _clear_probes()

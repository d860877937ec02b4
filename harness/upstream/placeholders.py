"""Placeholders for the upstream modules poolfuzz does not load (see :mod:`poolfuzz.harness.upstream.loading`).

A placeholder lets an upstream file *import* (base classes, decorators, annotations, constants)
and refuses to be *used* once loading is over, naming itself, so no run ever proceeds on a dummy.
The same placeholders serve every distribution (SGLang, vLLM, a plug-in's engine).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any


class StandInReached(RuntimeError):
    """Upstream code used a placeholder for a module poolfuzz does not load.

    Raised the first time a run reaches a module its distribution neither executes from its files
    nor stands in for explicitly (:class:`poolfuzz.harness.upstream.loading.Distribution`); the message names
    the placeholder, so the gap is one stand-in entry, never a silent dummy.
    """


loading = threading.local()
"""``loading.active`` is set while the loader imports upstream files: placeholders are permissive then."""


def _import_phase() -> bool:
    return bool(getattr(loading, "active", False))


class StandIn:
    """A placeholder attribute of a :class:`StandInModule` (see the module docstring)."""

    __slots__ = ("_qualname",)

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def _refuse(self, how: str) -> StandInReached:
        return StandInReached(
            f"upstream code {how} {self._qualname}, which poolfuzz does not load "
            "(add a stand-in to its distribution's stand-ins or execute its file)"
        )

    def __getattr__(self, name: str) -> StandIn:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return StandIn(f"{self._qualname}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not _import_phase():
            raise self._refuse("called")
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # a decorator applied at import: leave the function as written
        return StandIn(f"{self._qualname}(...)")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)  # a class deriving from a placeholder derives from object

    def __getitem__(self, key: Any) -> StandIn:
        return self  # generic annotations: Placeholder[int]

    def __or__(self, other: Any) -> StandIn:
        return self

    __ror__ = __or__

    def __bool__(self) -> bool:
        if not _import_phase():
            raise self._refuse("tested the truth of")
        return False

    def __iter__(self) -> Iterator[Any]:
        if not _import_phase():
            raise self._refuse("iterated")
        return iter(())

    def __repr__(self) -> str:
        return f"<poolfuzz stand-in {self._qualname}>"


class StandInModule(ModuleType):
    """A module poolfuzz does not load: every attribute is a :class:`StandIn`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = StandIn(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value

"""A family's operations and their argument names, declared once.

A driver's operations are the names a trace records (``{"op": "alloc", "args": {"need_size": 3}}``), and the
same names key its moves' steps, its caller contracts' rules, its size limits (``alloc.need_size``), its
realistic floors and its known-finding filters.  Each kit declares them once, in its ``ops`` module, as an
:class:`Operations` subclass, one attribute per operation naming its arguments::

    class SlotOps(Operations):
        alloc = op("need_size")
        free = op("handles")
        group_end = op()

After the class is built each attribute is its plain name (``SlotOps.alloc == "alloc"``, typed
:data:`OpName`), so traces and reports keep their JSON strings, and every other place names the
operation through it: a misspelt ``SlotOps.aloc`` fails mypy and import.  Where the name is checked:

* the driver (``Driver.ops``): its ``@operation`` methods must be exactly the declared operations, each
  taking exactly the declared arguments, when the driver class is built;
* a caller contract and a known-finding filter (``ops=``): every operation they name must be declared, and a
  contract must name each one, when they are built;
* the kit's ``Family`` (``ops=``): every operation and argument its limits and realistic floors name must be
  declared, when the kit is declared; :meth:`Operations.at` writes those paths from the declaration.

This module imports nothing: a kit's declaration imports its ``ops`` module for free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, NewType, TypeVar, cast

OpName = NewType("OpName", str)
"""A declared operation's name: a plain string at run time, which only an :class:`Operations` attribute gives."""


class OpsError(ValueError):
    """A name that the family's :class:`Operations` do not declare (an operation, or an argument of one)."""


Step = tuple[OpName, dict[str, Any]]
"""One step as a move draws it: a declared operation and its arguments (a ``poolfuzz.strategies.table.Step``)."""

A = TypeVar("A", bound=Mapping[str, object])


class _Declared:
    """An operation's argument names (and the ``TypedDict`` they came from), until its class replaces it with its name."""

    __slots__ = ("arguments", "typed")

    def __init__(self, arguments: tuple[str, ...], typed: type | None) -> None:
        self.arguments = arguments
        self.typed = typed


def op(*arguments: str | type) -> OpName:
    """Declare one operation in an :class:`Operations` class body, taking ``arguments`` (by keyword, in order), or
    the keys of one ``TypedDict`` class (the operation's typed arguments, which :class:`TypedOp` builds steps
    from); the attribute's name is the operation's."""
    typed = arguments[0] if len(arguments) == 1 and isinstance(arguments[0], type) else None
    names = tuple(typed.__annotations__) if typed is not None else arguments
    if not all(isinstance(name, str) for name in names) or len(set(names)) != len(names):
        raise OpsError(f"an operation's arguments are names, each once: {arguments}")
    return cast(OpName, _Declared(cast(tuple[str, ...], names), typed))


class TypedOp(Generic[A]):
    """A step builder for one operation declared with a ``TypedDict`` (``op(AllocArgs)``): ``ALLOC({"need_size":
    n})`` is ``("alloc", {"need_size": n})``, and mypy checks the arguments' names and types against the
    ``TypedDict``.  Built from the declaration, it is refused unless the operation was declared with that class."""

    __slots__ = ("name",)

    def __init__(self, ops: type[Operations], name: OpName, arguments: Callable[..., A]) -> None:
        declared = ops.typed_arguments.get(name)
        if declared is not arguments:
            raise OpsError(f"{ops.__name__}.{name} is declared with {declared}, not {arguments}")
        self.name = name

    def __call__(self, args: A) -> Step:
        return self.name, cast(dict[str, Any], args)


class Operations:
    """One driver's operations, each an :func:`op` attribute (a subclass inherits its base's and may add or
    redeclare some); every driver has ``construct`` (a malformed constructor, ``overrides`` of the config)."""

    arguments: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """Every declared operation (base classes' included) and its argument names."""
    typed_arguments: ClassVar[Mapping[str, type]] = {}
    """The operations declared with a ``TypedDict`` of their arguments, and that class."""

    construct = op("overrides")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _declare(cls)

    @classmethod
    def names(cls) -> frozenset[str]:
        """The declared operations."""
        return frozenset(cls.arguments)

    @classmethod
    def at(cls, operation: OpName, argument: str, items: str = "") -> str:
        """The path of ``operation``'s ``argument`` as limits and realistic floors key it (``alloc.need_size``;
        ``items`` for a list's items, ``[*][1]``), refused unless both are declared."""
        if argument not in cls.arguments_of(operation):
            raise OpsError(f"{cls.__name__}.{operation} takes no argument {argument!r}; it takes {cls.arguments_of(operation)}")
        return f"{operation}.{argument}{items}"

    @classmethod
    def arguments_of(cls, operation: str) -> tuple[str, ...]:
        """``operation``'s declared argument names; an undeclared operation is refused."""
        declared = cls.arguments.get(operation)
        if declared is None:
            raise OpsError(f"{cls.__name__} declares no operation {operation!r}; it declares {sorted(cls.arguments)}")
        return declared

    @classmethod
    def check_named(cls, where: str, operations: Iterable[str]) -> None:
        """Refuse any of ``operations`` (named by ``where``) that this class does not declare."""
        unknown = sorted(set(operations) - cls.names())
        if unknown:
            raise OpsError(f"{where} names {unknown}, which {cls.__name__} does not declare; it declares {sorted(cls.arguments)}")

    @classmethod
    def check_paths(cls, where: str, paths: Iterable[str]) -> None:
        """Refuse a path (``op.arg``, ``op.arg[*][1]``; a bare config key passes) naming an undeclared operation or
        argument: the keys of a family's limits and realistic floors."""
        for path in paths:
            operation, dot, rest = path.partition(".")
            if not dot:
                continue
            argument = rest.split("[", 1)[0]
            try:
                cls.at(OpName(operation), argument)
            except OpsError as error:
                raise OpsError(f"{where}: {path!r}: {error}") from None


def _declare(cls: type[Operations]) -> None:
    own = {name: value for name, value in vars(cls).items() if isinstance(value, _Declared)}
    for name in own:
        setattr(cls, name, OpName(name))
    arguments: dict[str, tuple[str, ...]] = {}
    typed: dict[str, type] = {}
    for base in reversed(cls.__mro__[1:]):
        arguments.update(getattr(base, "arguments", {}))
        typed.update(getattr(base, "typed_arguments", {}))
    for name, declared in own.items():
        arguments[name] = declared.arguments
        typed.pop(name, None)
        if declared.typed is not None:
            typed[name] = declared.typed
    cls.arguments = arguments
    cls.typed_arguments = typed


_declare(Operations)

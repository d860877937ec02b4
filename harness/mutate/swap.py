"""Planting a mutant in a live process: compile the mutated function, swap its code object in, restore.

The mutated unit is compiled inside empty class statements named like its real
enclosing classes, so private-name mangling and the ``__class__`` cell that
zero-argument ``super()`` needs come out exactly as in the module.  Nothing of
that scaffold is executed: the function's code object is fished out of the
compiled constants and assigned to ``__code__`` of every live function object
compiled from the unit (found once through the garbage collector by file,
qualified name and first line).  Everything that refers to the function (a
class attribute, a ``property``, an alias imported into another module, a bound
method) then runs the mutant, and restoring is one assignment back.

A function that calls ``super()`` keeps its ``__class__`` cell even when the
mutant deletes that call (a dead ``if False: __class__`` is appended).  A mutant
whose code still needs other free variables than the original cannot be
assigned: that is :class:`NotSwappable`, reported as *not run*.  ``functools`` caches of the module
are cleared around each swap so a mutant's cached result cannot outlive it.
"""

from __future__ import annotations

import ast
import copy
import gc
import importlib
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import CodeType, FunctionType, ModuleType

from poolfuzz.harness.mutate.mutants import ModuleSource, Mutant, walk_unit


class NotSwappable(Exception):
    """The mutant compiles to code that cannot replace the original (or there is no live function to swap)."""


def mutated_code(source: ModuleSource, mutant: Mutant) -> CodeType:
    """The code object of ``mutant``'s unit with the edit applied, compiled against ``source``'s file."""
    unit = source.unit(mutant.unit, mutant.unit_line)
    clone = copy.deepcopy(unit.node)
    for index, place in enumerate(walk_unit(clone, unit.qualname)):
        if index == mutant.index:
            replacement = mutant.transform(place.node)
            if place.position is None:
                setattr(place.parent, place.field, replacement)
            else:
                getattr(place.parent, place.field)[place.position] = replacement
            break
    else:
        raise NotSwappable(f"{mutant.id}: node {mutant.index} not found in {unit.qualname}")
    clone.decorator_list = []
    if _uses_class_cell(unit.node):
        clone.body.append(_keep_class_cell(clone))
    statement: ast.stmt = clone
    for name in reversed(unit.classes):
        statement = ast.ClassDef(name=name, bases=[], keywords=[], body=[statement], decorator_list=[])
        ast.copy_location(statement, unit.node)
    tree = ast.fix_missing_locations(ast.Module(body=[statement], type_ignores=[]))
    try:
        compiled = compile(tree, source.file, "exec", flags=source.future_flags, dont_inherit=True)
    except (SyntaxError, ValueError, TypeError) as exc:
        raise NotSwappable(f"the mutant does not compile: {exc}") from None
    found = _find_code(compiled, unit.qualname)
    if found is None:
        raise NotSwappable(f"no code object {unit.qualname} in the compiled mutant")
    return found


def _uses_class_cell(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id in ("super", "__class__") for n in ast.walk(node))


def _keep_class_cell(function: ast.AST) -> ast.stmt:
    """``if False: __class__``, dead code that keeps the ``__class__`` cell when a mutant deletes ``super()``.

    The symbol table is built before dead branches are dropped, so the cell (and
    with it the free variables the original function object carries) survives.
    """
    line = getattr(function, "end_lineno", None) or getattr(function, "lineno", 1)
    reference = ast.Expr(value=ast.Name(id="__class__", ctx=ast.Load()))
    guard = ast.If(test=ast.Constant(value=False), body=[reference], orelse=[])
    for node in ast.walk(guard):
        node.lineno = node.end_lineno = line  # type: ignore[attr-defined]
        node.col_offset = node.end_col_offset = 0  # type: ignore[attr-defined]
    return guard


def _find_code(code: CodeType, qualname: str) -> CodeType | None:
    for const in code.co_consts:
        if isinstance(const, CodeType):
            if const.co_qualname == qualname:
                return const
            inner = _find_code(const, qualname)
            if inner is not None:
                return inner
    return None


@dataclass
class LiveModule:
    """An imported module and its functions by ``(qualname, first line)``, found once."""

    module: ModuleType
    functions: dict[tuple[str, int], list[FunctionType]]

    @classmethod
    def load_all(cls, sources: list[ModuleSource]) -> dict[str, LiveModule]:
        """Import every module of ``sources`` and index its functions (one pass over the heap for all)."""
        modules = {source.name: importlib.import_module(source.name) for source in sources}
        by_file = {getattr(module, "__file__", None): name for name, module in modules.items()}
        functions: dict[str, dict[tuple[str, int], list[FunctionType]]] = {name: {} for name in modules}
        with warnings.catch_warnings():  # isinstance() reads __class__, which some deprecated torch objects warn on
            warnings.simplefilter("ignore")
            for obj in gc.get_objects():
                if isinstance(obj, FunctionType) and obj.__code__.co_filename in by_file:
                    key = (obj.__code__.co_qualname, obj.__code__.co_firstlineno)
                    functions[by_file[obj.__code__.co_filename]].setdefault(key, []).append(obj)
        return {name: cls(module, functions[name]) for name, module in modules.items()}

    def targets(self, mutant: Mutant) -> list[FunctionType]:
        found = self.functions.get((mutant.unit, mutant.unit_line), [])
        if not found:
            raise NotSwappable(f"no live function {mutant.unit} (line {mutant.unit_line}) in {self.module.__name__}")
        return found

    def clear_caches(self) -> None:
        """Empty every ``functools`` cache held at module level or on a class of the module."""
        holders: list[object] = [self.module]
        holders.extend(v for v in vars(self.module).values() if isinstance(v, type))
        for holder in holders:
            for value in list(vars(holder).values()):
                clear = getattr(value, "cache_clear", None)
                if callable(clear):
                    clear()


def check_swappable(functions: list[FunctionType], code: CodeType) -> None:
    """Raise :class:`NotSwappable` unless ``code`` can be assigned to every function of ``functions``."""
    for function in functions:
        if function.__code__.co_freevars != code.co_freevars:
            raise NotSwappable(f"free variables differ: {function.__code__.co_freevars} vs {code.co_freevars}")


@contextmanager
def swapped(live: LiveModule, functions: list[FunctionType], code: CodeType) -> Iterator[None]:
    """Run the body with ``code`` in every function of ``functions``; restore them (and clear caches) after."""
    check_swappable(functions, code)
    originals = [function.__code__ for function in functions]
    live.clear_caches()
    try:
        for function in functions:
            function.__code__ = code
        yield
    finally:
        for function, original in zip(functions, originals):
            function.__code__ = original
        live.clear_caches()

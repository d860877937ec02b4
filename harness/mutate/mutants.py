"""Mutants of one module: every operator edit of every function body, each with a stable id.

A :class:`ModuleSource` is one parsed source file.  Its *units* are the
functions a mutant is compiled and swapped as: module-level functions and
methods of module-level (possibly nested) classes.  A function nested inside
another belongs to its outermost unit: the outer function's code object holds
the inner one's, so recompiling the unit recreates the inner function on its
next call.

Module-level and class-body code (constants, dataclass fields, default
arguments, decorators) is not mutated: it runs once, at import, and swapping a
function's code cannot re-run it.  Docstrings and annotations are not mutated
either (nothing reads them at run time).

Ids read ``module:function:line:col:operator`` (``col`` is 1-based, ``function``
the innermost enclosing function's qualified name, as Python spells it); they
are stable while the line they point at does not move, and unique within a run
(a rare collision gets ``#2``).
"""

from __future__ import annotations
import __future__

import ast
import copy
import dataclasses
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from poolfuzz.harness.mutate.classify import message_nodes
from poolfuzz.harness.mutate.equivalents import SELF_CHECKS, equivalence
from poolfuzz.harness.mutate.operators import Transform, edits

Function = ast.FunctionDef | ast.AsyncFunctionDef
_SKIPPED_FIELDS = frozenset({"decorator_list", "returns", "annotation", "type_comment", "type_params", "format_spec"})
_SIGNATURES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_WIDTH = 72


@dataclass(frozen=True)
class Unit:
    """One swappable function: ``qualname`` inside ``classes``, defined at ``firstlineno``.

    ``firstlineno`` is what the compiled code's ``co_firstlineno`` says: the line
    of the first decorator if there is one, else the ``def`` line.
    """

    qualname: str
    classes: tuple[str, ...]
    firstlineno: int
    node: Function


@dataclass(frozen=True)
class Place:
    """A node of a unit's body where edits can land: its parent, the parent's field and list position."""

    node: ast.AST
    parent: ast.AST
    field: str
    position: int | None
    function: str


INSTALLED_AS = {"pools": "poolfuzz", "harness": "poolfuzz", "strategies": "poolfuzz"}
"""Our folders import as ``poolfuzz.<folder>``: a module's dotted name gains the package its folder installs under."""


@dataclass(frozen=True)
class ModuleSource:
    """One parsed module file: ``name`` is dotted (``poolfuzz.pools.req_to_token``), ``path`` relative to ``root``."""

    name: str
    path: str
    file: str
    text: str
    tree: ast.Module
    future_flags: int
    root: str = ""
    """The directory dotted names are relative to ("" for a module parsed from text)."""

    @classmethod
    def load(cls, file: Path, root: Path) -> ModuleSource:
        resolved = file.resolve()
        relative = resolved.relative_to(root.resolve())
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[0] in INSTALLED_AS:
            parts.insert(0, INSTALLED_AS[parts[0]])
        return cls.parse(resolved.read_text(), name=".".join(parts), path=relative.as_posix(), file=str(resolved),
                         root=str(root.resolve()))

    @classmethod
    def parse(cls, text: str, *, name: str, path: str, file: str, root: str = "") -> ModuleSource:
        tree = ast.parse(text, filename=file)
        flags = 0
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                for alias in stmt.names:
                    flags |= getattr(__future__, alias.name).compiler_flag
        return cls(name, path, file, text, tree, flags, root)

    def sibling(self, name: str) -> ast.Module | None:
        """The parsed tree of module ``name`` under the same root, if it is a file there."""
        if not self.root:
            return None
        parts = name.split(".")
        if len(parts) > 1 and INSTALLED_AS.get(parts[1]) == parts[0]:
            parts.pop(0)
        base = Path(self.root, *parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return _parse_file(str(candidate))
        return None

    @property
    def digest(self) -> str:
        """A hash of the text: workers check they mutate the file the parent planned from."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    def units(self) -> list[Unit]:
        return list(_units(self.tree.body, ()))

    def unit(self, qualname: str, firstlineno: int) -> Unit:
        for unit in self.units():
            if unit.qualname == qualname and unit.firstlineno == firstlineno:
                return unit
        raise LookupError(f"{self.path}: no function {qualname} at line {firstlineno}")


@dataclass(frozen=True)
class Mutant:
    """One planted edit.  ``index`` is the node's position in :func:`walk_unit` order of its unit."""

    id: str
    module: str
    path: str
    function: str
    unit: str
    unit_line: int
    line: int
    col: int
    end_line: int
    operator: str
    description: str
    source: str
    message_only: bool
    index: int
    transform: Transform = field(compare=False, repr=False)
    equivalent: str = field(default="", compare=False)
    """Why the mutant is equivalent (:mod:`poolfuzz.harness.mutate.equivalents`), ``""`` when it is not judged so."""
    self_check: bool = field(default=False, compare=False)
    """The mutant edits a self-check (``SELF_CHECKS``): scored apart, as an assertion would be."""

    @property
    def kind(self) -> str:
        if self.message_only:
            return "message-only"
        if self.self_check:
            return "self-check"
        return "equivalent" if self.equivalent else "behavioural"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "module": self.module, "path": self.path, "function": self.function,
                "line": self.line, "col": self.col, "operator": self.operator, "kind": self.kind,
                "description": self.description, "source": self.source,
                **({"equivalent": self.equivalent} if self.equivalent else {})}


@lru_cache(maxsize=64)
def _parse_file(file: str) -> ast.Module:
    return ast.parse(Path(file).read_text(), filename=file)


def _first_line(node: Function) -> int:
    return node.decorator_list[0].lineno if node.decorator_list else node.lineno


def _units(body: list[ast.stmt], classes: tuple[str, ...]) -> Iterator[Unit]:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield Unit(".".join((*classes, stmt.name)), classes, _first_line(stmt), stmt)
        elif isinstance(stmt, ast.ClassDef):
            yield from _units(stmt.body, (*classes, stmt.name))
        elif isinstance(stmt, ast.If):
            yield from _units(stmt.body, classes)
            yield from _units(stmt.orelse, classes)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, *(handler.body for handler in stmt.handlers), stmt.orelse, stmt.finalbody):
                yield from _units(block, classes)


def _is_docstring(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def walk_unit(unit: Function, qualname: str) -> Iterator[Place]:
    """Every node of ``unit``'s body an edit may land on, in a fixed depth-first order."""
    yield from _walk(unit, qualname)


def _walk(node: ast.AST, function: str) -> Iterator[Place]:
    scope = function
    for name, value in ast.iter_fields(node):
        if name in _SKIPPED_FIELDS or (name == "args" and isinstance(node, _SIGNATURES)):
            continue
        children = value if isinstance(value, list) else [value]
        for position, child in enumerate(children):
            if not isinstance(child, ast.AST):
                continue
            if isinstance(node, _SCOPES) and name == "body" and position == 0 and _is_docstring(child):
                continue
            if isinstance(node, ast.JoinedStr) and isinstance(child, ast.Constant):
                continue
            yield Place(child, node, name, position if isinstance(value, list) else None, scope)
            inner = scope
            if isinstance(child, _SCOPES):
                inner = f"{scope}.{child.name}" if isinstance(node, ast.ClassDef) else f"{scope}.<locals>.{child.name}"
            yield from _walk(child, inner)


def _oneline(node: ast.AST) -> str:
    return " ".join(ast.unparse(node).split())


def _window(before: str, after: str) -> tuple[str, str]:
    """Both texts cut to what differs, with a little context, when either is too wide."""
    if max(len(before), len(after)) <= _WIDTH:
        return before, after
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end = 0
    while end < min(len(before), len(after)) - start and before[-1 - end] == after[-1 - end]:
        end += 1
    context = max(8, (_WIDTH - max(len(before), len(after)) + start + end) // 2)
    lo = max(0, start - context)

    def cut(text: str) -> str:
        hi = min(len(text), len(text) - end + context)
        return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")

    return cut(before), cut(after)


def describe(before: ast.AST, after: ast.AST) -> str:
    """One line: ``delete `stmt``` or ```old` -> `new```."""
    if isinstance(after, ast.Pass):
        text = _oneline(before)
        return f"delete `{text if len(text) <= _WIDTH else text[:_WIDTH] + '…'}`"
    old, new = _window(_oneline(before), _oneline(after))
    return f"`{old}` -> `{new}`"


def generate(module: ModuleSource) -> list[Mutant]:
    """Every mutant of ``module``, in source order of units and depth-first within each."""
    message = message_nodes(module.tree, module.sibling)
    lines = module.text.splitlines()
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for unit in module.units():
        for index, place in enumerate(walk_unit(unit.node, unit.qualname)):
            for edit in edits(place.node, place.parent, place.field):
                replacement = edit.transform(copy.deepcopy(place.node))
                line = getattr(place.node, "lineno", 0)
                col = getattr(place.node, "col_offset", 0) + 1
                base = f"{module.name}:{place.function}:{line}:{col}:{edit.operator}"
                ident, n = base, 1
                while ident in seen:
                    n += 1
                    ident = f"{base}#{n}"
                seen.add(ident)
                mutants.append(Mutant(
                    id=ident, module=module.name, path=module.path, function=place.function, unit=unit.qualname,
                    unit_line=unit.firstlineno, line=line, col=col,
                    end_line=getattr(place.node, "end_lineno", None) or line, operator=edit.operator,
                    description=describe(place.node, replacement),
                    source=lines[line - 1].strip() if 0 < line <= len(lines) else "",
                    message_only=id(place.node) in message, index=index, transform=edit.transform,
                ))
                source = mutants[-1].source
                why = equivalence(module.name, place.function, edit.operator, source, col, mutants[-1].description)
                self_check = (module.name, place.function) in SELF_CHECKS
                if why or self_check:
                    mutants[-1] = dataclasses.replace(mutants[-1], equivalent=why, self_check=self_check)
    return mutants

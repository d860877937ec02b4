"""Which mutants can only change what an error *says*: the message-only class.

A mutant is *message-only* when the node it edits lies in text or fields that
describe a failure rather than decide one:

* the arguments (and the ``from`` cause) of an exception being raised: its message
  and numbers, not which error is raised or whether;
* the message of an ``assert``, and the arguments of ``warnings.warn`` and logging calls;
* anything inside a method of an exception class (its message and its fields),
  inside ``__repr__``/``__str__``/``__format__``, or inside a *message helper*: a
  function annotated ``-> str`` whose every ``return`` builds text (an f-string,
  a string literal, ``str()``/``repr()``/``format()``, ``.join``/``.format``, ``%`` or
  ``+`` on text);
* the value of a local variable read only inside such places (``needs = "..."``
  followed by ``raise ImportError(f"{needs}: ...")``), and an argument of a call to a
  module-level function (of the same module, or imported by name from a sibling)
  that reads that parameter only inside such places (the ``"size"`` of
  ``check_count(pool, "size", size)``); the same for ``self.method(...)`` calls to a
  method of the module's classes.

Deleting such an assignment, or the ``raise`` itself, stays *behavioural*: the
first raises ``NameError`` instead, the second stops raising.  Everything not
message-only is behavioural.  The rules read the AST only, so a fake module in a
test classifies exactly like a pool.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

_MESSAGE_METHODS = frozenset({"__repr__", "__str__", "__format__"})
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_LOGGERS = frozenset({"logging", "logger", "log", "_logger", "_log", "LOGGER", "LOG", "warnings"})
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Warning")
_TEXT_CALLS = frozenset({"str", "repr", "format"})
_TEXT_METHODS = frozenset({"join", "format"})

Function = ast.FunctionDef | ast.AsyncFunctionDef
Resolver = Callable[[str], "ast.Module | None"]
"""A dotted module name to its parsed tree, ``None`` if it is not ours to read."""


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return ""


def exception_classes(tree: ast.Module) -> set[str]:
    """Names of the classes in ``tree`` that derive, by name, from an exception."""
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name in found:
                continue
            names = [_base_name(base) for base in cls.bases]
            if any(name.endswith(_EXCEPTION_SUFFIXES) or name in found for name in names):
                found.add(cls.name)
                changed = True
    return found


def _builds_text(value: ast.expr) -> bool:
    if isinstance(value, ast.JoinedStr) or (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        return (isinstance(func, ast.Name) and func.id in _TEXT_CALLS) or (isinstance(func, ast.Attribute) and func.attr in _TEXT_METHODS)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod):
        return _builds_text(value.left)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        return _builds_text(value.left) or _builds_text(value.right)
    return False


def _own_nodes(func: Function) -> list[ast.AST]:
    """The nodes of ``func``'s body outside nested function and class scopes."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def is_message_helper(func: Function) -> bool:
    """Annotated ``-> str`` and every ``return`` builds text."""
    if not (isinstance(func.returns, ast.Name) and func.returns.id == "str") and not (
        isinstance(func.returns, ast.Constant) and func.returns.value == "str"
    ):
        return False
    returns = [node for node in _own_nodes(func) if isinstance(node, ast.Return)]
    return bool(returns) and all(r.value is not None and _builds_text(r.value) for r in returns)


def _is_log_call(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "warn"
    if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS:
        return isinstance(func.value, ast.Name) and func.value.id in _LOGGERS
    return False


def _message_contexts(node: ast.AST) -> list[ast.AST]:
    """The subtrees of ``node`` (itself one statement or expression) that only describe a failure."""
    if isinstance(node, ast.Raise):
        parts: list[ast.AST] = []
        if isinstance(node.exc, ast.Call):
            parts.extend(node.exc.args)
            parts.extend(node.exc.keywords)
        if node.cause is not None:
            parts.append(node.cause)
        return parts
    if isinstance(node, ast.Assert) and node.msg is not None:
        return [node.msg]
    if isinstance(node, ast.Call) and _is_log_call(node):
        return [*node.args, *node.keywords]
    return []


def _mark(marked: set[int], node: ast.AST) -> None:
    marked.update(id(inner) for inner in ast.walk(node))


def _mark_message_locals(func: Function, marked: set[int]) -> None:
    """Mark the values of locals that are read only inside marked nodes, until nothing changes."""
    own = _own_nodes(func)
    assigned: dict[str, list[ast.expr]] = {}
    for node in own:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node.value)
    loads: dict[str, list[ast.Name]] = {}
    for node in own:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in assigned:
            loads.setdefault(node.id, []).append(node)
    changed = True
    while changed:
        changed = False
        for name, values in assigned.items():
            reads = loads.get(name, [])
            if reads and all(id(read) in marked for read in reads) and id(values[0]) not in marked:
                for value in values:
                    _mark(marked, value)
                changed = True


def message_nodes(tree: ast.Module, resolve: Resolver | None = None) -> set[int]:
    """``id()`` of every node of ``tree`` that is message-only (valid while ``tree`` lives).

    ``resolve`` maps a dotted module name to its parsed tree (or ``None``), so that
    helpers imported with ``from module import helper`` are judged too (one level deep).
    """
    marked: set[int] = set()
    errors = exception_classes(tree)
    functions: list[Function] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in errors:
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for inner in stmt.body:
                        _mark(marked, inner)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node)
            if node.name in _MESSAGE_METHODS or is_message_helper(node):
                for inner in node.body:
                    _mark(marked, inner)
        for part in _message_contexts(node):
            _mark(marked, part)
    local = _module_functions(tree)
    imported = _imported_parameters(tree, resolve) if resolve is not None else {}
    while True:
        before = len(marked)
        for func in functions:
            _mark_message_locals(func, marked)
        parameters = {**imported, **{name: _message_parameters(func, marked) for name, func in local.items()}}
        _mark_message_arguments(tree, parameters, marked)
        methods = {name: _message_parameters(func, marked, method=True) for name, func in _methods(tree).items()}
        _mark_message_arguments(tree, methods, marked, on_self=True)
        if len(marked) == before:
            return marked


def _module_functions(tree: ast.Module) -> dict[str, Function]:
    return {stmt.name: stmt for stmt in tree.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _methods(tree: ast.Module) -> dict[str, Function]:
    """Methods of the module's classes by name, leaving out names that two classes define differently."""
    found: dict[str, Function] = {}
    clashes: set[str] = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if stmt.name in found:
                    clashes.add(stmt.name)
                found[stmt.name] = stmt
    return {name: func for name, func in found.items() if name not in clashes}


def _imported_parameters(tree: ast.Module, resolve: Resolver) -> dict[str, tuple[set[int], set[str]]]:
    """Message-only parameters of the functions ``tree`` imports by name from modules ``resolve`` finds."""
    found: dict[str, tuple[set[int], set[str]]] = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0):
            continue
        other = resolve(stmt.module)
        if other is None:
            continue
        other_marked = message_nodes(other)
        functions = _module_functions(other)
        for alias in stmt.names:
            if alias.name in functions:
                found[alias.asname or alias.name] = _message_parameters(functions[alias.name], other_marked)
    return found


def _message_parameters(func: Function, marked: set[int], *, method: bool = False) -> tuple[set[int], set[str]]:
    """Positions (as a caller counts them) and names of ``func``'s parameters it reads only inside marked nodes."""
    positional = [a.arg for a in (*func.args.posonlyargs, *func.args.args)][1 if method else 0 :]
    names = [*positional, *(a.arg for a in func.args.kwonlyargs)]
    reads: dict[str, list[ast.Name]] = {name: [] for name in names}
    for node in _own_nodes(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in reads:
            reads[node.id].append(node)
    textual = {name for name, loads in reads.items() if loads and all(id(load) in marked for load in loads)}
    return {i for i, name in enumerate(positional) if name in textual}, textual


def _called(call: ast.Call, on_self: bool) -> str:
    """The name a call names: ``f`` of ``f(...)``, or ``m`` of ``self.m(...)`` when ``on_self``."""
    func = call.func
    if on_self:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return func.attr
        return ""
    return func.id if isinstance(func, ast.Name) else ""


def _mark_message_arguments(
    tree: ast.Module, parameters: dict[str, tuple[set[int], set[str]]], marked: set[int], *, on_self: bool = False
) -> None:
    """Mark the arguments of calls to the functions of ``parameters`` (``self.`` methods if ``on_self``)
    that use that parameter only in messages."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _called(node, on_self) in parameters):
            continue
        positions, names = parameters[_called(node, on_self)]
        for position, argument in enumerate(node.args):
            if position in positions and not isinstance(argument, ast.Starred):
                _mark(marked, argument)
        for keyword in node.keywords:
            if keyword.arg in names:
                _mark(marked, keyword.value)

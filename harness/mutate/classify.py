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
  followed by ``raise ImportError(f"{needs}: ...")``).

Deleting such an assignment, or the ``raise`` itself, stays *behavioural*: the
first raises ``NameError`` instead, the second stops raising.  Everything not
message-only is behavioural.  The rules read the AST only, so a fake module in a
test classifies exactly like a pool.
"""

from __future__ import annotations

import ast

_MESSAGE_METHODS = frozenset({"__repr__", "__str__", "__format__"})
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_LOGGERS = frozenset({"logging", "logger", "log", "_logger", "_log", "LOGGER", "LOG", "warnings"})
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Warning")
_TEXT_CALLS = frozenset({"str", "repr", "format"})
_TEXT_METHODS = frozenset({"join", "format"})

Function = ast.FunctionDef | ast.AsyncFunctionDef


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
        return (isinstance(func, ast.Name) and func.id in _TEXT_CALLS) or (
            isinstance(func, ast.Attribute) and func.attr in _TEXT_METHODS
        )
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


def message_nodes(tree: ast.Module) -> set[int]:
    """``id()`` of every node of ``tree`` that is message-only (valid while ``tree`` lives)."""
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
    for func in functions:
        _mark_message_locals(func, marked)
    return marked

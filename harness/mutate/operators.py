"""The mutation operators: for one AST node in its place, the small edits a real bug could be.

:func:`edits` looks at a node and where it sits (its parent and the parent's
field) and returns :class:`Edit` values.  An edit's ``transform`` takes the node
(a copy: the caller owns it) and returns what replaces it, so the same edit can
be described once at generation time and applied again, in a worker process,
to a fresh copy of the function.

Operators (their names appear in mutant ids):

* comparisons: ``Lt->LtE``, ``Lt->GtE`` (its negation), ``Eq->NotEq``, ``Is->IsNot``,
  ``In->NotIn``, ...; ``@i`` marks the ``i``-th operator of a chained comparison;
* arithmetic and bit operators: ``Add->Sub``, ``Mult->FloorDiv``, ``BitAnd->BitOr``, ...;
  the same on augmented assignments (``augAdd->augSub``) and ``aug->assign``
  (``x += y`` becomes ``x = y``);
* boolean operators: ``And->Or``, ``Or->And``; ``not-drop`` and ``neg-drop`` remove a
  ``not`` or a unary minus;
* constants: ``0->1``, ``1->0``, ``n->n+1`` (shown with the numbers), ``True->False``,
  ``False->True``, ``str``/``bytes`` (text changed), ``fstr`` (an f-string changed);
* conditions of ``if``, ``while``, conditional expressions and comprehension filters
  forced ``cond-true`` or ``cond-false``; an ``assert`` only ``cond-false``;
* ``stmt-pass``: a simple statement replaced by ``pass``; ``return-none``;
  ``Break->Continue`` and back;
* calls: ``min->max``, ``max->min``, ``any->all``, ``all->any``;
* slices: ``slice-lower-drop``, ``slice-upper-drop`` (``a[i:j]`` becomes ``a[:j]`` or ``a[i:]``).

Not generated, on purpose: deleting an ``assert`` or forcing its test true (an
assertion guards what cannot happen, so in a correct pool that mutant is
equivalent and can never be killed), and edits of docstrings, annotations,
decorators and default argument values (evaluated once, when the function is
defined; swapping the function's code does not re-run them).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

Transform = Callable[[ast.AST], ast.AST]
"""Given the node (a copy the caller owns), return the node that replaces it."""


@dataclass(frozen=True)
class Edit:
    """One way to mutate one node: ``operator`` names it in the mutant id."""

    operator: str
    transform: Transform


_COMPARE_SWAPS: dict[type[ast.cmpop], tuple[type[ast.cmpop], ...]] = {
    ast.Lt: (ast.LtE, ast.GtE),
    ast.LtE: (ast.Lt, ast.Gt),
    ast.Gt: (ast.GtE, ast.LtE),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
_ARITH_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_BOOL_SWAPS: dict[type[ast.boolop], type[ast.boolop]] = {ast.And: ast.Or, ast.Or: ast.And}
_CALL_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any"}
_CONDITION_FIELDS: dict[type[ast.AST], str] = {ast.If: "test", ast.While: "test", ast.IfExp: "test"}
_DELETABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete, ast.Raise)
_STATEMENT_LISTS = frozenset({"body", "orelse", "finalbody"})


def _name(op: ast.AST) -> str:
    return type(op).__name__


def _compare_edit(position: int, new: type[ast.cmpop]) -> Transform:
    def transform(node: ast.AST) -> ast.AST:
        assert isinstance(node, ast.Compare)
        node.ops[position] = new()
        return node

    return transform


def _set_op(new: type[ast.AST]) -> Transform:
    def transform(node: ast.AST) -> ast.AST:
        node.op = new()  # type: ignore[attr-defined]
        return node

    return transform


ConstantValue = str | bytes | bool | int | float | None


def _constant(value: ConstantValue) -> Transform:
    def transform(node: ast.AST) -> ast.AST:
        return ast.copy_location(ast.Constant(value=value), node)

    return transform


def _replace_with(make: Callable[[ast.AST], ast.AST]) -> Transform:
    def transform(node: ast.AST) -> ast.AST:
        return ast.copy_location(make(node), node)

    return transform


def _operand(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.UnaryOp)
    return node.operand


def _to_assign(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.AugAssign)
    return ast.Assign(targets=[node.target], value=node.value)


def _return_none(node: ast.AST) -> ast.AST:
    return ast.Return(value=ast.Constant(value=None))


def _rename_call(new: str) -> Transform:
    def transform(node: ast.AST) -> ast.AST:
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        node.func = ast.copy_location(ast.Name(id=new, ctx=ast.Load()), node.func)
        return node

    return transform


def _drop_slice_bound(bound: str) -> Transform:
    def transform(node: ast.AST) -> ast.AST:
        assert isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)
        setattr(node.slice, bound, None)
        return node

    return transform


def _mark_fstring(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.JoinedStr)
    node.values = [ast.Constant(value="XX"), *node.values]
    return node


def _constant_edits(node: ast.Constant) -> list[Edit]:
    value = node.value
    if isinstance(value, bool):
        return [Edit(f"{value}->{not value}", _constant(not value))]
    if isinstance(value, int):
        new = {0: 1, 1: 0}.get(value, value + 1)
        return [Edit(f"{value}->{new}", _constant(new))]
    if isinstance(value, float):
        return [Edit(f"{value!r}->{value + 1.0!r}", _constant(value + 1.0))]
    if isinstance(value, str):
        return [Edit("str", _constant(f"XX{value}XX"))]
    if isinstance(value, bytes):
        return [Edit("bytes", _constant(b"XX" + value + b"XX"))]
    return []


def _condition_edits(node: ast.expr, *, allow_true: bool) -> list[Edit]:
    forced = [True, False] if allow_true else [False]
    current = node.value if isinstance(node, ast.Constant) else None
    return [Edit(f"cond-{str(value).lower()}", _constant(value)) for value in forced if current is not value]


def _is_condition(parent: ast.AST | None, field: str) -> bool:
    return (parent is not None and _CONDITION_FIELDS.get(type(parent)) == field) or (
        isinstance(parent, ast.comprehension) and field == "ifs"
    )


def edits(node: ast.AST, parent: ast.AST | None, field: str) -> list[Edit]:
    """Every edit of ``node``, which sits in ``parent.<field>`` (a statement list or an expression slot)."""
    found: list[Edit] = []
    if isinstance(node, ast.Compare):
        for position, op in enumerate(node.ops):
            suffix = f"@{position}" if position else ""
            for new in _COMPARE_SWAPS.get(type(op), ()):
                found.append(Edit(f"{_name(op)}->{new.__name__}{suffix}", _compare_edit(position, new)))
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAPS:
        new_op = _ARITH_SWAPS[type(node.op)]
        found.append(Edit(f"{_name(node.op)}->{new_op.__name__}", _set_op(new_op)))
    elif isinstance(node, ast.BoolOp):
        new_bool = _BOOL_SWAPS[type(node.op)]
        found.append(Edit(f"{_name(node.op)}->{new_bool.__name__}", _set_op(new_bool)))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        found.append(Edit("not-drop" if isinstance(node.op, ast.Not) else "neg-drop", _operand))
    elif isinstance(node, ast.Constant):
        found.extend(_constant_edits(node))
    elif isinstance(node, ast.JoinedStr):
        found.append(Edit("fstr", _mark_fstring))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALL_SWAPS:
        new_name = _CALL_SWAPS[node.func.id]
        found.append(Edit(f"{node.func.id}->{new_name}", _rename_call(new_name)))
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        for bound in ("lower", "upper"):
            if getattr(node.slice, bound) is not None:
                found.append(Edit(f"slice-{bound}-drop", _drop_slice_bound(bound)))
    if isinstance(node, ast.expr) and _is_condition(parent, field):
        found.extend(_condition_edits(node, allow_true=True))
    elif isinstance(node, ast.expr) and isinstance(parent, ast.Assert) and field == "test":
        found.extend(_condition_edits(node, allow_true=False))
    if field in _STATEMENT_LISTS or (isinstance(parent, ast.ExceptHandler) and field == "body"):
        found.extend(_statement_edits(node))
    return found


def _statement_edits(node: ast.AST) -> list[Edit]:
    found: list[Edit] = []
    if isinstance(node, ast.AugAssign) and type(node.op) in _ARITH_SWAPS:
        new_op = _ARITH_SWAPS[type(node.op)]
        found.append(Edit(f"aug{_name(node.op)}->aug{new_op.__name__}", _set_op(new_op)))
        found.append(Edit("aug->assign", _replace_with(_to_assign)))
    if isinstance(node, ast.Return) and node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
        found.append(Edit("return-none", _replace_with(_return_none)))
    if isinstance(node, ast.Break):
        found.append(Edit("Break->Continue", _replace_with(lambda _: ast.Continue())))
    elif isinstance(node, ast.Continue):
        found.append(Edit("Continue->Break", _replace_with(lambda _: ast.Break())))
    bare_ellipsis = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    if isinstance(node, _DELETABLE) and not bare_ellipsis and not (isinstance(node, ast.AnnAssign) and node.value is None):
        found.append(Edit("stmt-pass", _replace_with(lambda _: ast.Pass())))
    return found

"""Each family's operations and their arguments are declared once (harness/judge/ops.py, each kit's ops module),
and every place that names one is refused, when it is built, if the declaration does not hold the name."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.judge.contract import (
    CONSTRUCT_MISUSE,
    CallRule,
    Contract,
    ContractError,
    KnownFindingFilter,
    NotCalled,
    all_contracts,
)
from poolfuzz.harness.judge.driver import Driver, operation
from poolfuzz.harness.judge.families import FAMILIES, family, resolve
from poolfuzz.harness.judge.ops import Operations, OpsError, op
from poolfuzz.harness.kits.mamba.ops import HybridOps, SlotOps
from poolfuzz.harness.kits.rows.ops import RowOps

DECLARED = sorted(FAMILIES)


@pytest.mark.parametrize("name", DECLARED)
def test_every_family_declares_its_drivers_operations_and_their_arguments(name: str) -> None:
    kit = family(name)
    driver = resolve(kit.driver)
    assert kit.ops is not None and driver.ops is kit.ops, f"{name}: the family and its driver name different declarations"
    assert driver.operations == kit.ops.names()
    for operation_name in driver.operations:
        taken = tuple(inspect.signature(getattr(driver, operation_name)).parameters)[1:]
        assert taken == kit.ops.arguments_of(operation_name), (name, operation_name)


@pytest.mark.parametrize("name", DECLARED)
def test_every_declared_operation_is_its_own_name_as_a_plain_string(name: str) -> None:
    ops = family(name).ops
    assert ops is not None
    for operation_name in ops.names():
        value = getattr(ops, operation_name)
        assert type(value) is str and value == operation_name
        assert json.dumps(value) == json.dumps(operation_name)


def test_every_contract_of_a_declaring_kit_names_its_operations_through_the_declaration() -> None:
    for contract in all_contracts():
        assert contract.ops is not None, f"{contract.target}'s contract names no declaration"
        listed = {rule.op for rule in contract.rules} | {entry.op for entry in contract.not_called}
        assert listed == contract.ops.names(), contract.target


@pytest.mark.parametrize("name", [name for name in DECLARED if family(name).known_findings])
def test_every_known_finding_filter_checks_its_operations_against_the_declaration(name: str) -> None:
    known = resolve(family(name).known_findings)
    assert known.ops is family(name).ops


def test_a_subclass_inherits_its_bases_operations_and_may_add_some() -> None:
    assert RowOps.names() < HybridOps.names()
    assert HybridOps.arguments_of(HybridOps.group_begin) == SlotOps.arguments_of(SlotOps.group_begin) == ("num_reqs",)
    assert "construct" in SlotOps.names() and SlotOps.arguments_of("construct") == ("overrides",)


def test_a_path_names_a_declared_operation_and_argument_or_is_refused() -> None:
    assert SlotOps.at(SlotOps.alloc, "need_size") == "alloc.need_size"
    assert HybridOps.at(HybridOps.alloc, "batch", "[*][1]") == "alloc.batch[*][1]"
    with pytest.raises(OpsError, match="takes no argument 'need_sise'"):
        SlotOps.at(SlotOps.alloc, "need_sise")
    with pytest.raises(OpsError, match="declares no operation 'aloc'"):
        SlotOps.arguments_of("aloc")
    with pytest.raises(OpsError, match="names, each once"):
        op("handle", "handle")


class _TinyOps(Operations):
    take = op("count")
    give = op("handle")


def test_a_driver_whose_operations_differ_from_its_declaration_is_refused_as_it_is_built() -> None:
    class Exact(Driver):
        ops = _TinyOps

        @operation
        def take(self, count: int) -> None: ...

        @operation
        def give(self, handle: int) -> None: ...

    assert Exact.operations == _TinyOps.names()
    with pytest.raises(OpsError, match=r"not implemented \['give'\]"):

        class Missing(Driver):
            ops = _TinyOps

            @operation
            def take(self, count: int) -> None: ...

    with pytest.raises(OpsError, match=r"undeclared \['steal'\]"):

        class Extra(Exact):
            @operation
            def steal(self) -> None: ...

    with pytest.raises(OpsError, match=r"Renamed.take takes \('number',\); _TinyOps declares \('count',\)"):

        class Renamed(Exact):
            @operation
            def take(self, number: int) -> None: ...


def _view(driver: object) -> object:
    return driver


def _rule(name: str) -> CallRule[Any]:
    return CallRule(name, (), "", ())


def test_a_contract_or_filter_naming_an_undeclared_operation_or_missing_one_is_refused() -> None:
    Contract("t:T", "none", (_rule(_TinyOps.take), _rule(_TinyOps.give)), (NotCalled(_TinyOps.construct, "misuse"),), ops=_TinyOps)
    with pytest.raises(OpsError, match=r"names \['tkae'\]"):
        Contract("t:T", "none", (_rule("tkae"), _rule(_TinyOps.give), _rule(_TinyOps.construct)), ops=_TinyOps)
    with pytest.raises(ContractError, match=r"does not name \['give'\]"):
        Contract("t:T", "none", (_rule(_TinyOps.take),), ops=_TinyOps)
    unlisted = Contract("t:T", "none", (_rule(_TinyOps.take), _rule(_TinyOps.give)), ops=_TinyOps)
    assert unlisted.not_called == (NotCalled(_TinyOps.construct, CONSTRUCT_MISUSE),)
    KnownFindingFilter(_view, ((_TinyOps.give, lambda view, args: True),), ops=_TinyOps)
    with pytest.raises(OpsError, match=r"names \['gve'\]"):
        KnownFindingFilter(_view, (("gve", lambda view, args: True),), ops=_TinyOps)


def test_a_family_whose_limits_or_floors_name_an_undeclared_operation_or_argument_is_refused() -> None:
    kit = family("mamba_slots")
    limits = dataclasses.replace(kit.limits, args={**kit.limits.args, "aloc.need_size": 1})
    with pytest.raises(OpsError, match=r"mamba_slots's limits: 'aloc.need_size'"):
        dataclasses.replace(kit, limits=limits)
    with pytest.raises(OpsError, match=r"mamba_slots's realistic floors: 'group_begin.num_req'"):
        dataclasses.replace(kit, realistic=(*kit.realistic, ("group_begin.num_req", 1)))
    assert dataclasses.replace(kit, realistic=(("size", 4),)).realistic == (("size", 4),)


def test_a_typed_operation_builds_its_step_and_is_refused_with_another_operations_arguments() -> None:
    from poolfuzz.harness.judge.ops import TypedOp
    from poolfuzz.harness.kits.mamba.ops import ALLOC, FREE_SLOTS, AllocArgs, FreeArgs

    assert ALLOC({"need_size": 2}) == ("alloc", {"need_size": 2})
    assert FREE_SLOTS({"slots": [3], "int32": True}) == ("free_slots", {"slots": [3], "int32": True})
    assert SlotOps.arguments_of(SlotOps.free_slots) == ("slots", "int32")
    assert SlotOps.typed_arguments[SlotOps.alloc] is AllocArgs
    with pytest.raises(OpsError, match="alloc is declared with"):
        TypedOp(SlotOps, SlotOps.alloc, FreeArgs)
    with pytest.raises(OpsError, match="declared with None"):
        TypedOp(RowOps, RowOps.alloc, AllocArgs)


MOVE_MODULES = sorted(
    path
    for kit in ("rows", "mamba", "kv", "swa", "block_pool", "prefix_cache", "scheduler", "engine", "vllm_engine")
    for path in (Path(__file__).parent.parent / "harness" / "kits" / kit).glob("*.py")
    if path.stem in {"moves", "catalogue", "page_moves", "pure_moves", "random_moves"}
)
STEP_HELPERS = {"fixed", "one_of", "picking", "repeated_within", "_malformed", "_pure_free_through"}


@pytest.mark.parametrize("path", MOVE_MODULES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_moves_name_their_operations_through_the_declaration_not_a_string(path: Path) -> None:
    declared = set().union(*(kit.ops.names() for kit in FAMILIES.values() if kit.ops is not None))
    literal = []
    for node in ast.walk(ast.parse(path.read_text())):
        first: ast.expr | None = None
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            first = node.elts[0]
        elif isinstance(node, ast.Call) and node.args and getattr(node.func, "id", None) in STEP_HELPERS:
            first = node.args[0]
        if isinstance(first, ast.Constant) and first.value in declared:
            literal.append(f"line {first.lineno}: {first.value!r}")
    assert not literal, f"{path.name} names operations as strings: {literal}"

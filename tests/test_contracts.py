"""Caller contracts: every upstream target has one, it cites lines that exist, and the drivers keep to it.

A contract (:mod:`poolfuzz.harness.judge.contract`) is the list of calls upstream's own callers
make.  These tests keep each table true to two things it describes: the installed upstream
files (each citation's line still holds the call it names) and our own driver (each
operation calls exactly the upstream methods its rule lists, and an operation the table
does not allow never reaches upstream).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.fuzz.walk import WalkRun
from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, ContractError, NotCalled, all_contracts, contract_of
from poolfuzz.harness.judge.driver import Driver
from poolfuzz.harness.judge.families import FAMILIES, UnknownTargetError, family, load_factory, resolve
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.view import DriverView
from poolfuzz.harness.traces.schema import load_trace

TARGETS = sorted((name, spec) for name, fam in FAMILIES.items() for spec in fam.upstream)
CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "upstream"


def _factory(spec: str) -> Any:
    try:
        return load_factory(spec)
    except UnknownTargetError as exc:
        pytest.skip(f"{spec} does not load here: {exc}")


def _package_folder(package: str) -> tuple[Path, str] | None:
    """The installed upstream package's folder and version, or ``None`` when it is not installed."""
    if package == "sglang":
        from poolfuzz.harness.upstream.sglang_files import locate_sglang

        locate = locate_sglang
    else:
        from poolfuzz.harness.upstream.vllm_files import locate_vllm

        locate = locate_vllm
    try:
        found = locate()
    except Exception:  # noqa: BLE001 - any refusal: not installed, or another copy
        return None
    return found.package, found.version


def _cites(contract: Contract) -> list[Cite]:
    return [cite for rule in contract.rules for cite in rule.callers]


@pytest.mark.parametrize(("family_name", "spec"), TARGETS)
def test_every_upstream_target_declares_a_contract_covering_every_operation_of_its_driver(family_name: str, spec: str) -> None:
    contract = contract_of(_factory(spec))
    assert contract is not None, f"{spec} declares no poolfuzz_contract"
    assert contract.target == spec
    operations = resolve(family(family_name).driver).operations
    listed = set(contract.by_op) | {entry.op for entry in contract.not_called}
    assert operations - listed == set(), f"{spec}: operations its contract does not mention"
    assert listed - operations == set(), f"{spec}: contract entries for operations the driver lacks"
    assert all(rule.callers for rule in contract.rules), "every allowed call names the upstream line that makes it"


@pytest.mark.parametrize(("family_name", "spec"), TARGETS)
def test_every_citation_names_a_line_of_the_installed_release_that_holds_the_call(family_name: str, spec: str) -> None:
    contract = contract_of(_factory(spec))
    assert contract is not None
    checked = 0
    for cite in _cites(contract):
        found = _package_folder(cite.package)
        if found is None or f"{cite.package}=={found[1]}" != contract.release:
            continue
        lines = (found[0] / cite.path).read_text().splitlines()
        window = "\n".join(lines[max(0, cite.line - 3) : cite.line + 2])
        assert cite.text in window, f"{cite}: not within two lines of line {cite.line}"
        checked += 1
    if not checked:
        pytest.skip(f"{contract.release} is not the installed copy")


class _Recorder:
    """Stands in for the upstream object a wrapper holds and records the name of every method called on it."""

    def __init__(self, inner: Any, log: list[str]) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(object.__getattribute__(self, "_inner"), name)
        if not callable(value) or isinstance(value, type):
            return value
        log = object.__getattribute__(self, "_log")

        def recorded(*args: Any, **kwargs: Any) -> Any:
            log.append(name)
            return value(*args, **kwargs)

        return recorded

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_inner"), name, value)


class _OffContract(AssertionError):
    """A driver operation called an upstream method its contract rule does not list."""


def _recording_walk(family_name: str, spec: str) -> tuple[WalkRun, list[tuple[str, list[str]]]]:
    """A walk of ``spec`` whose wrapper records its upstream calls and whose driver checks them per step."""
    factory = _factory(spec)
    contract = contract_of(factory)
    assert contract is not None
    attr = contract.upstream_attr
    seen: list[tuple[str, list[str]]] = []

    class Recorded(factory):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.poolfuzz_calls: list[str] = []  # one log a pool: a drain's copy (a replay) makes calls of its own
            setattr(self, attr, _Recorder(getattr(self, attr), self.poolfuzz_calls))

    run = WalkRun(family_name, seed=3, spec=spec, shrink=False)
    run.factory = Recorded

    class Checked(run.driver_class):  # type: ignore[misc,name-defined]
        def step(self, op: str, **args: Any) -> Any:
            log = self.pool.poolfuzz_calls
            log.clear()
            try:
                return super().step(op, **args)
            finally:
                calls = list(log)
                assert contract is not None
                rule: CallRule | None = contract.by_op.get(op)
                allowed = set(contract.reads) | (set(rule.calls) if rule is not None else set())
                if not set(calls) <= allowed:
                    raise _OffContract(f"{spec}: {op}({args}) called {calls}; its contract lists {sorted(allowed)}")
                seen.append((op, calls))

    run.driver_class = Checked
    return run, seen


@pytest.mark.parametrize(("family_name", "spec"), [t for t in TARGETS if t[0] not in ("engine", "vllm_engine")])  # descriptive contracts
def test_each_operation_calls_only_the_upstream_methods_its_rule_lists(family_name: str, spec: str) -> None:
    run, seen = _recording_walk(family_name, spec)
    while run.steps < 1500:
        finding = run.run(max_steps=1500 - run.steps)
        if finding is not None and not isinstance(finding.error, InvariantViolation):
            raise finding.error  # an off-contract call, or a crash of the harness
    issued = {op for op, calls in seen if calls}
    assert issued, f"the walk of {spec} issued no upstream call"
    assert issued <= set(contract_of(run.factory).by_op)  # type: ignore[union-attr]


def test_an_operation_the_contract_does_not_allow_is_skipped_and_left_out_of_the_trace() -> None:
    from poolfuzz.harness.kits.kv.driver import TokenKVDriver as KVDriver
    from poolfuzz.pools.kv_allocator import TokenToKVPoolAllocator

    contract: Contract[object] = Contract(
        "test:OnlyAlloc",
        "none",
        (CallRule("alloc", ("alloc",), "n >= 1", (Cite("x.py", 1, "x"),), allows=lambda driver, args: args["need_size"] >= 1),),
    )

    class OnlyAlloc(TokenToKVPoolAllocator):
        poolfuzz_contract = contract

    driver = KVDriver(OnlyAlloc, {"size": 16}, check_misuse=False)
    assert driver.step("alloc", need_size=2) is not None
    assert driver.step("alloc", need_size=0) is None
    assert driver.step("clear") is None
    assert [step["op"] for step in driver.trace.steps] == ["alloc"]
    assert driver.refused_by_contract == 2
    assert driver.pool.available_size() == 14


def test_a_predicate_reads_the_contracts_view_of_the_driver_not_the_driver() -> None:
    seen: list[object] = []

    def allows(view: object, args: dict[str, object]) -> bool:
        seen.append(view)
        return True

    contract: Contract[tuple[str, object]] = Contract(
        "test:Viewed", "none", (CallRule("alloc", ("alloc",), "", (Cite("x.py", 1, "x"),), allows=allows),), view=lambda d: ("view of", d)
    )
    driver = object()
    assert contract.judge(driver, "alloc", {}) == ""
    assert seen == [("view of", driver)]


def _reads_state(predicate: Any) -> bool:
    """Whether a predicate reads more than its arguments: its view parameter is not ``object``."""
    first = next(iter(inspect.signature(predicate).parameters.values()))
    return first.annotation not in ("object", object)


def test_every_table_whose_predicates_read_state_names_its_typed_view() -> None:
    predicates = {c.target: [p for r in c.rules for p in (r.allows, r.today) if p is not None] for c in all_contracts()}
    narrowed = [c for c in all_contracts() if any(_reads_state(p) for p in predicates[c.target])]
    assert len(narrowed) >= 5, [c.target for c in narrowed]
    for contract in narrowed:
        assert isinstance(contract.view, type) and issubclass(contract.view, DriverView), contract.target


def test_a_validating_target_is_not_narrowed_by_a_contract() -> None:
    from poolfuzz.harness.kits.kv.driver import TokenKVDriver as KVDriver
    from poolfuzz.pools.kv_allocator import TokenToKVPoolAllocator

    class Declares(TokenToKVPoolAllocator):
        poolfuzz_contract: Contract[object] = Contract("test:None", "none", ())

    driver = KVDriver(Declares, {"size": 16}, check_misuse=True)
    driver.step("alloc", need_size=2)
    driver.step("clear")
    assert [step["op"] for step in driver.trace.steps] == ["alloc", "clear"]


def test_a_contract_listing_an_operation_twice_or_not_resolving_is_refused() -> None:
    rule: CallRule[object] = CallRule("alloc", ("alloc",), "", (Cite("x.py", 1, "x"),))
    with pytest.raises(ContractError, match="alloc"):
        Contract("t", "r", (rule,), (NotCalled("alloc", "twice"),))

    class Broken:
        poolfuzz_contract = "poolfuzz.harness.kits.kv.contracts:NOT_THERE"

    with pytest.raises(ContractError, match="NOT_THERE"):
        contract_of(Broken)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json")), ids=lambda p: p.stem)
def test_every_committed_upstream_finding_makes_only_calls_its_target_accepts(path: Path) -> None:
    trace = load_trace(path)
    contract = contract_of(_factory(trace.implementation))
    assert contract is not None
    replayed: Driver = resolve(family(trace.family).driver)(
        _factory(trace.implementation), trace.config, implementation=trace.implementation, check_misuse=False
    )
    for step in trace.steps:
        assert contract.allows(replayed, step["op"], step["args"]), f"step {step} is a call the class forbids"
        try:
            replayed.step(step["op"], **step["args"])
        except InvariantViolation:
            return  # the finding itself: every step up to it was a call the class accepts


def test_every_contract_table_imports_without_upstream_installed_and_each_upstream_target_has_one() -> None:
    from poolfuzz.harness.judge.families import FAMILIES, KITS

    tables = []
    for kit in KITS:
        try:
            package = importlib.import_module(f"{kit}.contracts")
        except ModuleNotFoundError:
            continue
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            assert isinstance(module.CONTRACT, Contract), info.name
            tables.append(module.CONTRACT)
    assert sorted(c.target for c in tables) == sorted(c.target for c in all_contracts())
    assert len(tables) == len({spec for f in FAMILIES.values() for spec in f.upstream})  # one table per target


def test_a_latent_finding_names_each_step_its_callers_do_not_make_and_what_they_do_instead() -> None:
    from poolfuzz.harness.upstream.classify import classify

    path = CORPUS / "mamba_slots-6a8cbaad60810966.json"
    trace = load_trace(path)
    _factory(trace.implementation)
    found = classify(trace.family, trace.implementation, trace.expect.get("invariant"), str(path))
    assert found is not None and found.kind == "latent"
    assert "step 2 (clear)" in found.note and "scheduler.py:5520" in found.note


def test_a_step_the_class_accepts_but_callers_do_not_send_is_issued_and_noted() -> None:
    from poolfuzz.harness.kits.kv.driver import TokenKVDriver
    from poolfuzz.pools.kv_allocator import TokenToKVPoolAllocator

    contract: Contract[object] = Contract(
        "test:Noted",
        "none",
        (
            CallRule(
                "alloc",
                ("alloc",),
                "",
                (Cite("x.py", 1, "x"),),
                today=lambda driver, args: args["need_size"] < 4,
                instead="callers take at most 3",
            ),
        ),
    )

    class Noted(TokenToKVPoolAllocator):
        poolfuzz_contract = contract

    driver = TokenKVDriver(Noted, {"size": 16}, check_misuse=False)
    driver.step("alloc", need_size=2)
    driver.step("alloc", need_size=5)
    assert driver.off_path == [(2, "alloc", "callers take at most 3")]
    assert driver.pool.available_size() == 9


def test_the_contracts_document_lists_every_table_as_list_contracts_prints_it() -> None:
    from poolfuzz.harness.judge.contract import all_contracts

    document = (Path(__file__).resolve().parents[1] / "docs" / "contracts.md").read_text()
    for contract in all_contracts():
        assert contract.describe() in document, f"docs/contracts.md is stale for {contract.target}: regenerate it"


def test_a_corner_whose_step_the_contract_refuses_is_not_counted_as_reached() -> None:
    from poolfuzz.harness.kits.kv.paged import PagedKVDriver
    from poolfuzz.pools.kv_allocator import PagedTokenToKVPoolAllocator
    from poolfuzz.strategies.table import CORNER_MIXED

    cite = (Cite("x.py", 1, "x"),)
    contract: Contract[object] = Contract(
        "test:NoDecode", "none", tuple(CallRule(op, (), "", cite) for op in sorted(PagedKVDriver.operations - {"decode"}))
    )

    class NoDecode(PagedTokenToKVPoolAllocator):
        poolfuzz_check_misuse = False
        poolfuzz_contract = contract

    def walk(factory: Any) -> WalkRun:
        run = WalkRun("paged_kv", seed=0, shrink=False, check_misuse=False)
        run.factory = factory
        assert run.run(max_steps=3000) is None
        return run

    assert walk(PagedTokenToKVPoolAllocator).events[CORNER_MIXED] > 0  # reached when the decode is issued
    assert walk(NoDecode).events[CORNER_MIXED] == 0

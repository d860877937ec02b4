"""The mutation check: generation, classification, the code swap, a real kill, the watchdog and the baseline guard.

Generation and classification run on small fake modules written here, so the
expected mutants are visible in the test.  The kill test runs one mutant of the
request-row pool against its own machine in process; the watchdog test starts
a real worker process and a mutant that loops forever.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.cli import main as cli_main
from poolfuzz.harness.mutate.mutants import ModuleSource, Mutant, generate
from poolfuzz.harness.mutate.plan import Baseline, BaselineFailed
from poolfuzz.harness.mutate.runner import Job, WorkerFailed, WorkerPool
from poolfuzz.harness.mutate.swap import LiveModule, NotSwappable, check_swappable, mutated_code, swapped
from poolfuzz.harness.mutate.targets import target_names
from poolfuzz.harness.mutate.worker import MutantLab, WorkerSetup

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = '''\
"""Module docstring: never mutated."""
LIMIT = 3


def pick(values, n):
    """Function docstring: never mutated."""
    if n > LIMIT and not values:
        return None
    total = 0
    for v in values:
        total += v * 2
    return min(total, n)
'''

MESSAGES = '''\
class SampleError(ValueError):
    def __init__(self, n):
        self.n = n + 1
        super().__init__(f"bad {n}")


class Box:
    def __repr__(self) -> str:
        return f"Box({self.size + 1})"

    def take(self, n):
        if n > 3:
            raise SampleError(n - 1)
        needs = "a" + "b"
        if n < 0:
            raise ValueError(f"{needs}: {n * 2}")
        return n + 1

    def checked(self, n):
        return self._check("n", n)

    def _check(self, what, n):
        if n < 0:
            raise ValueError(f"{what} is negative")
        return n


def label(n) -> str:
    return f"#{n + 1}"


def check_count(pool, name, value):
    if value < 0:
        raise ValueError(f"{pool}: {name}={value} is negative")
    return value


def make(n):
    return check_count("Box", "n", n + 0)
'''

SWAPPABLE = '''\
class Base:
    def size(self):
        return 10


class Child(Base):
    def size(self):
        return super().size() + 1

    @property
    def double(self):
        return self.size() * 2


def add_one(n):
    return n + 1


alias = add_one


def make_closure():
    x = 1

    def inner():
        return x

    return inner


closure = make_closure()
'''


def fake(text: str, name: str = "fake") -> ModuleSource:
    return ModuleSource.parse(text, name=name, path=f"{name}.py", file=f"/nowhere/{name}.py")


def by(mutants: list[Mutant], function: str, operator: str, line_text: str = "") -> Mutant:
    found = [m for m in mutants if m.function == function and m.operator == operator and line_text in m.source]
    assert len(found) == 1, f"expected one {operator} mutant in {function} ({line_text!r}), found {len(found)}"
    return found[0]


def test_a_small_module_yields_every_operator_kind_under_stable_unique_ids() -> None:
    mutants = generate(fake(SAMPLE))
    operators = {m.operator for m in mutants}
    assert {"Gt->GtE", "Gt->LtE", "And->Or", "not-drop", "cond-true", "cond-false", "0->1", "augAdd->augSub",
            "aug->assign", "Mult->FloorDiv", "2->3", "return-none", "min->max", "stmt-pass"} <= operators
    assert all(m.line not in (1, 2, 6) for m in mutants), "docstrings and module-level code are not mutated"
    ids = [m.id for m in mutants]
    assert len(ids) == len(set(ids))
    assert ids == [m.id for m in generate(fake(SAMPLE))]
    compare = by(mutants, "pick", "Gt->GtE")
    assert compare.id == "fake:pick:7:8:Gt->GtE"
    assert compare.description == "`n > LIMIT` -> `n >= LIMIT`"
    assert compare.source == "if n > LIMIT and not values:"
    assert by(mutants, "pick", "stmt-pass", "total = 0").description == "delete `total = 0`"


def test_error_text_and_fields_are_message_only_while_whether_and_what_is_raised_is_behavioural() -> None:
    mutants = generate(fake(MESSAGES))
    assert all(m.message_only for m in mutants if m.function in ("SampleError.__init__", "Box.__repr__", "label"))
    assert by(mutants, "Box.take", "Sub->Add", "raise SampleError").message_only
    assert by(mutants, "Box.take", "Mult->FloorDiv", "raise ValueError").message_only
    assert by(mutants, "Box.take", "Add->Sub", "needs =").message_only, "a local read only by a raise is text"
    assert not by(mutants, "Box.take", "stmt-pass", "needs =").message_only, "deleting it raises NameError instead"
    assert not by(mutants, "Box.take", "Gt->GtE", "if n > 3").message_only
    assert not by(mutants, "Box.take", "stmt-pass", "raise SampleError").message_only
    assert not by(mutants, "Box.take", "Add->Sub", "return n + 1").message_only
    names = [m for m in mutants if m.function == "make" and m.operator == "str"]
    assert len(names) == 2 and all(m.message_only for m in names), "a helper reads these only in its raise"
    assert not by(mutants, "make", "Add->Sub").message_only, "the helper compares this one"
    assert by(mutants, "Box.checked", "str").message_only, "the same through a self. method"


@pytest.fixture
def swappable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleSource, Any]]:
    name = "poolfuzz_mutate_swappable"
    (tmp_path / f"{name}.py").write_text(SWAPPABLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    source = ModuleSource.load(tmp_path / f"{name}.py", tmp_path)
    yield source, importlib.import_module(name)
    sys.modules.pop(name, None)


def test_a_swapped_mutant_runs_through_every_reference_and_the_original_code_comes_back(
    swappable: tuple[ModuleSource, Any],
) -> None:
    source, module = swappable
    live = LiveModule.load_all([source])[source.name]
    mutants = generate(source)
    plus = by(mutants, "add_one", "Add->Sub")
    functions = live.targets(plus)
    original = module.add_one.__code__
    with swapped(live, functions, mutated_code(source, plus)):
        assert module.alias(5) == 4 and module.add_one(5) == 4
    assert module.add_one.__code__ is original and module.alias(5) == 6
    with pytest.raises(RuntimeError), swapped(live, functions, mutated_code(source, plus)):
        raise RuntimeError("a failing run still restores")
    assert module.add_one.__code__ is original
    # A method using super() keeps its __class__ cell, even when the mutant deletes the super() call.
    child = module.Child()
    for mutant, expected in ((by(mutants, "Child.size", "Add->Sub"), 9), (by(mutants, "Child.size", "return-none"), None)):
        with swapped(live, live.targets(mutant), mutated_code(source, mutant)):
            assert child.size() == expected
    with swapped(live, live.targets(by(mutants, "Child.double", "Mult->FloorDiv")),
                 mutated_code(source, by(mutants, "Child.double", "Mult->FloorDiv"))):
        assert child.double == 5, "a property's getter is swapped through the property"
    assert child.size() == 11 and child.double == 22


def test_code_needing_other_free_variables_is_not_swappable(swappable: tuple[ModuleSource, Any]) -> None:
    source, module = swappable
    plain = mutated_code(source, by(generate(source), "add_one", "Add->Sub"))
    with pytest.raises(NotSwappable, match="free variables differ"):
        check_swappable([module.closure], plain)


@pytest.fixture(scope="module")
def row_lab() -> MutantLab:
    return MutantLab(ROOT, ["pools/req_to_token.py"])


def test_the_unmutated_row_machine_runs_clean_and_executes_the_allocation_check(row_lab: MutantLab) -> None:
    _, hits = row_lab.trace("req_to_token")
    check = by(list(row_lab.mutants.values()), "_RowPool.alloc_rows", "Gt->GtE")
    assert hits["pools/req_to_token.py"].get(check.line, 0) > 0


def test_a_comparison_mutant_in_the_row_pool_is_killed_by_its_machine_and_then_restored(row_lab: MutantLab) -> None:
    import poolfuzz.pools.req_to_token

    original = poolfuzz.pools.req_to_token._RowPool.alloc_rows.__code__
    mutant = by(list(row_lab.mutants.values()), "_RowPool.alloc_rows", "Gt->GtE")
    assert not mutant.message_only
    outcome = row_lab.run(mutant.id, ["req_to_token"])
    assert (outcome.status, outcome.killer) == ("killed", "req_to_token")
    assert outcome.detail.startswith("invariant ")
    assert poolfuzz.pools.req_to_token._RowPool.alloc_rows.__code__ is original


def test_each_familys_walk_is_a_killer_and_kills_the_same_row_mutant_its_machine_does(row_lab: MutantLab) -> None:
    assert "req_to_token[walk]" in target_names(["req_to_token"])
    mutant = by(list(row_lab.mutants.values()), "_RowPool.alloc_rows", "Gt->GtE")
    outcome = row_lab.run(mutant.id, ["req_to_token[walk]"])
    assert (outcome.status, outcome.killer) == ("killed", "req_to_token[walk]")
    _, hits = row_lab.trace("req_to_token[walk]")  # the unmutated walk runs clean, and is traced like a machine
    assert hits["pools/req_to_token.py"].get(mutant.line, 0) > 0


def test_the_watchdog_stops_a_mutant_that_never_returns_and_a_fresh_worker_carries_on() -> None:
    source = ModuleSource.load(ROOT / "pools/radix_tree.py", ROOT)
    mutants = generate(source)
    endless = by(mutants, "common_prefix_len", "cond-true", "while")
    broken = by(mutants, "common_prefix_len", "return-none", "return lo")
    pool = WorkerPool(WorkerSetup(str(ROOT), ((source.path, source.digest),)), workers=1)
    replies: dict[str, tuple[Any, ...]] = {}
    try:
        pool.run([Job(m.id, ("mutant", m.id, ["prefix_cache"]), 2.0) for m in (endless, broken)],
                 lambda job, reply: replies.__setitem__(job.key, reply))
    finally:
        pool.close()
    assert replies[endless.id] == ("timeout", 2.0)
    assert replies[broken.id][0] == "result" and replies[broken.id][1].status == "killed"
    assert pool.restarts == 1


def test_a_worker_that_cannot_start_stops_the_run_instead_of_killing_mutants() -> None:
    pool = WorkerPool(WorkerSetup(str(ROOT), (("pools/no_such_module.py", "0"),)), workers=1)
    try:
        with pytest.raises(WorkerFailed, match="no_such_module"):
            pool.run([Job("x", ("trace", "req_to_token"), 60.0)], lambda job, reply: None)
    finally:
        pool.close()


def test_a_failing_baseline_aborts_and_a_clean_one_orders_targets_by_hits_per_second() -> None:
    mutant = generate(fake(SAMPLE))[0]
    baseline = Baseline(["slow", "fast", "never"])
    baseline.record("slow", 4.0, {"fake.py": {mutant.line: 40}}, None)
    baseline.record("fast", 1.0, {"fake.py": {mutant.line: 20}}, None)
    baseline.record("never", 1.0, {"fake.py": {}}, None)
    baseline.check()
    assert baseline.reaching(mutant) == ["fast", "slow"]
    assert baseline.limit(["fast"], None) > 1.0 and baseline.limit(["fast"], 7.0) == 7.0
    baseline.record("broken", 0.0, {}, "ImportError: no module named pools")
    with pytest.raises(BaselineFailed, match="broken"):
        baseline.check()


def test_the_cli_lists_the_selected_mutants_without_running_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["mutate", "--module", "pools/req_to_token.py", "--match", "alloc_rows", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("poolfuzz.pools.req_to_token:_RowPool.alloc_rows:") for line in lines)
    assert any("[message-only]" in line for line in lines) and any("[behavioural]" in line for line in lines)


def test_every_listed_equivalent_names_a_mutant_still_generated_and_nothing_else_is_marked() -> None:
    from poolfuzz.harness.mutate.equivalents import EQUIVALENTS

    root = Path(__file__).resolve().parents[1]
    modules = sorted({entry.module for entry in EQUIVALENTS})
    marked = [m for name in modules for m in generate(ModuleSource.load(root / (name.removeprefix("poolfuzz.").replace(".", "/") + ".py"), root))
              if m.kind == "equivalent"]
    found = {(m.module, m.function, m.operator, m.source, m.col, m.description) for m in marked}
    stale = [entry for entry in EQUIVALENTS if entry.key not in found]
    assert not stale, f"equivalents that no longer name a mutant (the code moved on): {stale}"
    assert all(m.equivalent and not m.message_only for m in marked)


def test_equivalent_mutants_are_scored_apart_and_a_killed_one_is_reported_as_a_wrong_entry() -> None:
    import dataclasses

    from poolfuzz.harness.mutate.report import score, tally, wrong_equivalents_text
    from poolfuzz.harness.mutate.worker import Outcome

    root = Path(__file__).resolve().parents[1]
    base = generate(ModuleSource.load(root / "pools" / "radix_cache.py", root))
    listed = next(m for m in base if m.kind == "equivalent")
    plain = next(m for m in base if m.kind == "behavioural")
    killed_listed = dataclasses.replace(listed, id=listed.id + "#x")
    pairs = [(plain, Outcome(plain.id, "killed", killer="m")), (listed, Outcome(listed.id, "survived")),
             (killed_listed, Outcome(killed_listed.id, "killed", killer="prefix_cache"))]
    counts = tally(pairs)[plain.path]
    assert score(counts["behavioural"]) == 1.0
    assert counts["equivalent"]["survived"] == 1
    wrong = wrong_equivalents_text(pairs)
    assert killed_listed.id in wrong and listed.id + ":" not in wrong


_GOOD_EQUIVALENT = """\
[[equivalent]]
module = "poolfuzz.pools.free_list"
function = "PageFreeList.__init__"
operator = "0->1"
source = 'self._buf = torch.empty(0, dtype=torch.int64, device="cpu")'
col = 33
description = "`0` -> `1`"
reason = "INIT_REPLACED"
"""


def test_an_equivalents_table_is_read_in_order_with_each_reason_its_constants_text(tmp_path: Path) -> None:
    from poolfuzz.harness.mutate.equivalents import reasons
    from poolfuzz.harness.mutate.equivalents.entry import Equivalent, load_equivalents

    table = tmp_path / "good.toml"
    table.write_text(_GOOD_EQUIVALENT + "\n" + _GOOD_EQUIVALENT.replace('"INIT_REPLACED"', '"SLACK"'))
    assert load_equivalents(table) == (
        Equivalent("poolfuzz.pools.free_list", "PageFreeList.__init__", "0->1", 'self._buf = torch.empty(0, dtype=torch.int64, device="cpu")',
                   33, "`0` -> `1`", reasons.INIT_REPLACED),
        Equivalent("poolfuzz.pools.free_list", "PageFreeList.__init__", "0->1", 'self._buf = torch.empty(0, dtype=torch.int64, device="cpu")',
                   33, "`0` -> `1`", reasons.SLACK))


@pytest.mark.parametrize(("edit", "field", "problem"), [
    (lambda text: text.replace("col = 33\n", ""), "col", "missing"),
    (lambda text: text.replace('"INIT_REPLACED"', '"NO_SUCH_REASON"'), "reason", "names no string constant"),
    (lambda text: text.replace('"INIT_REPLACED"', '"annotations"'), "reason", "names no string constant"),
    (lambda text: text.replace("col = 33", 'col = "33"'), "col", "not of type int"),
    (lambda text: text.replace("col = 33", "col = true"), "col", "not of type int"),
    (lambda text: text + 'why = "inline prose"\n', "why", "unknown key"),
], ids=["missing-key", "unknown-reason", "reason-not-a-string", "col-a-string", "col-a-boolean", "extra-key"])
def test_a_malformed_equivalents_entry_is_refused_naming_the_file_the_entry_and_the_field(
        tmp_path: Path, edit: Any, field: str, problem: str) -> None:
    from poolfuzz.harness.mutate.equivalents.entry import EquivalentsFileError, load_equivalents

    table = tmp_path / "bad.toml"
    table.write_text(_GOOD_EQUIVALENT + "\n" + edit(_GOOD_EQUIVALENT))
    with pytest.raises(EquivalentsFileError) as refused:
        load_equivalents(table)
    assert (refused.value.file, refused.value.entry, refused.value.field) == (str(table), 2, field)
    assert str(table) in str(refused.value) and "entry 2" in str(refused.value) and repr(field) in str(refused.value)
    assert problem in str(refused.value)


def test_an_equivalents_file_that_is_not_toml_or_holds_no_entries_is_refused_naming_the_file(tmp_path: Path) -> None:
    from poolfuzz.harness.mutate.equivalents.entry import EquivalentsFileError, load_equivalents

    for name, text in (("broken.toml", "[[equivalent]\n"), ("empty.toml", ""), ("misnamed.toml", "[[equivalents]]\n")):
        table = tmp_path / name
        table.write_text(text)
        with pytest.raises(EquivalentsFileError, match=name) as refused:
            load_equivalents(str(table))
        assert refused.value.entry is None


def test_the_packaged_equivalents_tables_load_in_order_from_the_installed_package() -> None:
    from importlib.resources import files

    from poolfuzz.harness.mutate.equivalents import EQUIVALENTS, TABLES
    from poolfuzz.harness.mutate.equivalents.entry import load_equivalents

    tables = [load_equivalents(files("poolfuzz.harness.mutate.equivalents") / name) for name in TABLES]
    assert all(tables) and EQUIVALENTS == tuple(entry for table in tables for entry in table)
    assert len({entry.key for entry in EQUIVALENTS}) == len(EQUIVALENTS), "one mutant listed twice"

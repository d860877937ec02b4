"""Reproductions generated from traces (issue 44 item 4, :mod:`poolfuzz.harness.traces.repro_script`).

Each committed upstream finding trace (``corpus/upstream/*.json``) gives a script that, run in a fresh interpreter
with the installed SGLang 0.5.23 and nothing of poolfuzz imported, exits 1 and prints ``REPRODUCED`` with the invariant
poolfuzz reports; a trace upstream passes gives one that exits 0.  Without SGLang those two are skipped with the
reason; the checks the scripts carry (:mod:`poolfuzz.harness.traces.repro_runtime`) and the translation are tested
here on a planted bug and on hand-made replays, which need no SGLang.
"""

from __future__ import annotations

import ast
import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest
import torch

from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces import repro_script
from poolfuzz.harness.traces.replay import ReplayResult, replay_trace
from poolfuzz.harness.traces.repro_runtime import KVRun, Reproduced, at
from poolfuzz.harness.traces.repro_script import NotGeneratable, generate, ran_steps
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.harness.upstream.sglang_modules import unavailable_reason
from tests.processes import python

REPO = Path(__file__).resolve().parent.parent
UPSTREAM_TRACES = sorted((REPO / "corpus" / "upstream").glob("*.json"))
SGLANG_MISSING = unavailable_reason()
needs_sglang = pytest.mark.skipif(SGLANG_MISSING is not None, reason=f"SGLang unavailable: {SGLANG_MISSING}")
POOLFUZZ_NAMES = ("poolfuzz", "harness", "pools", "strategies")


def _installed() -> str | None:
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def _imports(script: str) -> set[str]:
    """Every module the script imports (top-level names), read from its syntax tree."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(script)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


RUNNER = """
import contextlib, io, json, runpy, sys
ran = {}
for path in sys.argv[1:]:
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]  # each script loads the wheel's files afresh, as in its own interpreter
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = exit.code
    ran[path] = [code, out.getvalue()]
print(json.dumps(ran))
"""


def run_scripts(scripts: dict[str, str], folder: Path) -> dict[str, tuple[int, str]]:
    """Each script's exit status and output, all in one fresh isolated interpreter (one torch import, not one each),
    away from the repository and without PYTHONPATH."""
    paths: dict[str, Path] = {}
    for name, script in scripts.items():
        paths[name] = folder / f"repro_{len(paths)}.py"
        paths[name].write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "POOLFUZZ_SGLANG_SRC")}
    done = python("-I", "-c", RUNNER, *map(str, paths.values()), cwd=folder, env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout.splitlines()[-1])
    return {name: (ran[str(path)][0], ran[str(path)][1]) for name, path in paths.items()}


def _trace(family: str, target: str, config: dict[str, Any], steps: list[tuple[str, dict[str, Any]]]) -> Trace:
    return Trace(family, f"poolfuzz.harness.upstream:{target}", {"device": "cpu", **config}, [{"op": op, "args": a} for op, a in steps])


PASSING = {
    "paged_kv at page size 2": _trace(
        "paged_kv",
        "PagedKV",
        {"page_size": 2, "size": 8, "need_sort": False},
        [
            ("extend", {"batch": [[None, 3], [None, 1]]}),
            ("alloc", {"need_size": 2}),
            ("decode", {"handles": [0, 1]}),
            ("group_begin", {}),
            ("free", {"handle": 1}),
            ("free_part", {"handle": 2, "count": 1, "sparse": True}),
            ("group_end", {}),
            ("extend", {"batch": [[0, 3], [None, 2]]}),
            ("free", {"handle": 0}),
            ("clear", {}),
            ("alloc", {"need_size": 100}),
        ],
    ),
    "swa_kv sliding its window": _trace(
        "swa_kv",
        "SWAKV",
        {"page_size": 2, "size": 16, "size_swa": 16},
        [
            ("tail", {"handle": None, "extend_len": 8, "swa_tail_len": 4}),
            ("decode", {"handles": [0]}),
            ("free", {"handle": 0, "sparse": True}),
            ("extend", {"batch": [[None, 4]]}),
            ("free_swa", {"handle": 1, "pages": 1}),
            ("group_begin", {}),
            ("free", {"handle": 1}),
            ("group_end", {}),
        ],
    ),
    "mamba_slots closing its window before clear": _trace(
        "mamba_slots",
        "MambaSlots",
        {"size": 3},
        [("group_begin", {"num_reqs": 2}), ("alloc", {"need_size": 1}), ("group_end", {}), ("free", {"handles": [0]}), ("clear", {})],
    ),
}
"""Traces upstream passes (the page-size-2 calls finding 1 breaks at page size 1; an SWA request's window sliding, its
row then freed as upstream's callers free it; finding 2's window closed before ``clear``): their scripts must exit
0, so the committed findings' exit 1 is the checks' verdict, not a given."""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[ReplayResult, str, int, str]]:
    """Every committed upstream trace and every passing one: its replay here, its script, and the script's exit
    status and output on the installed SGLang."""
    committed = {path.stem: load_trace(path) for path in UPSTREAM_TRACES} if _installed() == "0.5.23" else {}
    traces = committed | PASSING
    made = {}
    for name, trace in traces.items():
        result = replay_trace(trace)
        made[name] = (result, generate(trace, result, source=name, version="0.5.23"))
    ran = run_scripts({name: script for name, (_, script) in made.items()}, tmp_path_factory.mktemp("repro"))
    return {name: (result, script, *ran[name]) for name, (result, script) in made.items()}


@needs_sglang
@pytest.mark.skipif(_installed() != "0.5.23", reason="the committed findings reproduce on sglang 0.5.23")
@pytest.mark.parametrize("path", UPSTREAM_TRACES, ids=[p.stem for p in UPSTREAM_TRACES])
def test_each_committed_upstream_traces_generated_script_reproduces_on_0_5_23(
    path: Path, generated: dict[str, tuple[ReplayResult, str, int, str]]
) -> None:
    result, script, code, output = generated[path.stem]
    assert result.outcome == "violation", result.describe()
    assert not _imports(script) & set(POOLFUZZ_NAMES), _imports(script)
    reproduced = [line for line in output.splitlines() if line.startswith("REPRODUCED")]
    assert code == 1 and reproduced, output
    assert reproduced[0].startswith(f"REPRODUCED: [{result.invariant}] at step {result.step}:"), (reproduced, result.describe())


@needs_sglang
@pytest.mark.parametrize("name", sorted(PASSING))
def test_a_script_generated_from_a_trace_upstream_passes_exits_0(
    name: str, generated: dict[str, tuple[ReplayResult, str, int, str]]
) -> None:
    result, _, code, output = generated[name]
    assert result.outcome == "pass", result.describe()
    assert code == 0 and "not reproduced: every check held" in output and "REPRODUCED" not in output, output


# ------------------------------------------------------------------ without SGLang
class _GivesALivePage:
    """A paged pool (page size 1, 4 pages) whose ``alloc`` hands out page 1 every time, as a planted bug."""

    def __init__(self) -> None:
        self.free = 4

    def available_size(self) -> int:
        return self.free

    def alloc(self, need_size: int) -> torch.Tensor:
        self.free -= need_size
        return torch.arange(1, need_size + 1)


def test_the_checks_stop_at_a_planted_double_allocation_with_its_step_and_numbers() -> None:
    pool = _GivesALivePage()
    run = KVRun(1, 4, {"full": pool.available_size})
    with at(1, "alloc(need_size=1)"):
        run.allocate("alloc(1)", lambda: pool.alloc(1), owners=[None], pres=[0], seqs=[1], need=1)
    with pytest.raises(Reproduced) as found, at(2, "alloc(need_size=1)"):
        run.allocate("alloc(1)", lambda: pool.alloc(1), owners=[None], pres=[0], seqs=[1], need=1)
    assert (found.value.invariant, found.value.step) == ("no-double-allocation", 2)
    assert found.value.report().startswith("REPRODUCED: [no-double-allocation] at step 2: alloc(1) handed out slot 1")
    assert found.value.numbers["held"] == {0: [1]}


def test_skipped_steps_are_comments_and_the_steps_after_the_violation_are_left_out() -> None:
    trace = _trace(
        "paged_kv",
        "PagedKV",
        {"page_size": 1, "size": 4},
        [("free", {"handle": 7}), ("extend", {"batch": [[None, 1]]}), ("decode", {"handles": [0]}), ("clear", {})],
    )
    ran = tuple(trace.steps[1:3])
    result = ReplayResult("violation", trace.implementation, "cpu", 3, invariant="empty-pool-guard", step=3, recorded=ran, total=4)
    assert [(number, done) for number, _, done in ran_steps(trace, result)] == [(1, False), (2, True), (3, True)]
    script = generate(trace, result)
    assert "# step 1, free(handle=7): skipped by the driver" in script
    assert "with at(3, 'decode(handles=[0])'):" in script and "alloc_decode(t(seqs), t(seqs), t(lasts))" in script
    assert "clear()" not in script.split("def reproduce()")[1]
    assert _imports(script) <= {
        "__future__",
        "sys",
        "importlib",
        "ast",
        "types",
        "pathlib",
        "torch",
        "contextlib",
        "operator",
        "collections",
        "typing",
    }
    compile(script, "repro.py", "exec")


@pytest.mark.parametrize(
    ("trace", "says"),
    [
        (_trace("engine", "Engine", {}, []), "not an upstream allocator target"),
        (_trace("paged_kv", "PagedKV", {"page_size": 2, "size": 8}, [("kernel_call", {"case": "empty batch"})]), "'kernel_call'"),
    ],
    ids=["an engine target", "an operation without a translation"],
)
def test_a_trace_without_a_translation_is_not_generated_and_says_why(trace: Trace, says: str) -> None:
    result = ReplayResult("pass", trace.implementation, "cpu", len(trace.steps), recorded=tuple(trace.steps), total=len(trace.steps))
    with pytest.raises(NotGeneratable, match=says):
        generate(trace, result)


def test_an_install_without_the_corpus_says_the_loader_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(repro_script, "LOADER", tmp_path / "_wheel_allocators.py")
    trace = _trace("mamba_slots", "MambaSlots", {"size": 1}, [])
    with pytest.raises(NotGeneratable, match="_wheel_allocators.py is not here"):
        generate(trace, ReplayResult("pass", trace.implementation, "cpu", 0, total=0))


def test_quotes_and_backslashes_in_the_finding_keep_the_script_valid_python() -> None:
    trace = _trace("mamba_slots", "MambaSlots", {"size": 1}, [])
    said = 'clear() said """ and \\x00'
    result = ReplayResult("violation", trace.implementation, "cpu", 0, invariant="clear-restores", message=said, total=0)
    script = generate(trace, result, source="C:\\traces\\found.json")
    namespace: dict[str, object] = {}
    exec(compile(script.split("\nfrom __future__")[0], "repro.py", "exec"), namespace)  # the docstring alone
    doc = " ".join(str(namespace["__doc__"]).split())
    assert "clear() said ''' and \\x00" in doc and "from C:\\traces\\found.json" in doc, doc

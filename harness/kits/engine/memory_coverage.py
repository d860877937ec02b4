"""How much of the scheduler's memory path the engine target executes: ``scheduler.py`` and ``batch_result_processor.py``.

A **memory statement** is defined mechanically (:func:`memory_statements`): a statement of the file (for a compound
statement, its header alone: an ``if``'s test, a ``for``'s target and iterable, a ``with``'s items; ``def`` and
``class`` lines never) one of whose identifiers (``NAME`` tokens: comments and strings do not count) matches
:data:`MEMORY_NAMES`: ``release_kv_cache``, ``tree_cache``, ``free_group*``, the allocator and request-row pool
(``token_to_kv_pool_allocator``, ``req_to_token_pool``, ``alloc*``/``free*`` calls), and anything named for
retraction, abort or chunked prefill (``*retract*``, ``*abort*``, ``*chunk*``).

:func:`measure` walks the engine family (its move table, :class:`~poolfuzz.harness.fuzz.walk.WalkRun`, a fixed seed) with
the waiting timeout on (finding 5's hang would end every hybrid-SWA episode) under ``coverage`` restricted to the two
installed files, and reports the executed share of each file's memory statements::

    python -m poolfuzz.harness.kits.engine.memory_coverage --steps 3000 --seed 0

A walk violation does not stop the measurement: it is counted and the walk goes on with the next episode.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

MEMORY_NAMES = re.compile(
    r"^(release_kv_cache|tree_cache|free_group\w*|token_to_kv_pool_allocator|req_to_token_pool|req_to_token"
    r"|alloc\w*|free|free_\w+|\w*retract\w*|\w*abort\w*|\w*chunk\w*)$"
)
"""The identifiers that make a statement a memory statement (see the module docstring)."""

FILES = ("srt/managers/scheduler.py", "srt/managers/scheduler_components/batch_result_processor.py")
"""The files measured, relative to the ``sglang`` package."""

SPEC = "poolfuzz.harness.kits.engine.driver:build_engine_with_waiting_timeout"


def _own_span(node: ast.stmt) -> tuple[int, int] | None:
    """The lines a statement owns: the whole of a simple statement, the header of a compound one, none for a def."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return None
    header: list[ast.AST] = []
    if isinstance(node, ast.If | ast.While):
        header = [node.test]
    elif isinstance(node, ast.For | ast.AsyncFor):
        header = [node.target, node.iter]
    elif isinstance(node, ast.With | ast.AsyncWith):
        header = list(node.items)  # type: ignore[arg-type]
    elif isinstance(node, ast.Try | ast.Match):
        return (node.lineno, node.lineno)
    else:
        return (node.lineno, node.end_lineno or node.lineno)
    end = max((getattr(part, "end_lineno", None) or node.lineno) for part in header)
    return (node.lineno, end)


def memory_statements(source: str) -> dict[int, str]:
    """The memory statements of ``source``: each statement's first line, and the first identifier that made it one."""
    names_by_line: dict[int, list[str]] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME:
            names_by_line.setdefault(token.start[0], []).append(token.string)
    found: dict[int, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt) or (span := _own_span(node)) is None:
            continue
        for line in range(span[0], span[1] + 1):
            hit = next((name for name in names_by_line.get(line, ()) if MEMORY_NAMES.match(name)), None)
            if hit is not None:
                found[node.lineno] = hit
                break
    return found


def startup_statements(source: str) -> set[int]:
    """The lines of statements that run once at server start (module level, ``__init__``, ``init_*``, ``run_*``): what
    :func:`~poolfuzz.harness.upstream.sglang_scheduler.build_scheduler` replaces, so no walk reaches them."""
    tree = ast.parse(source)
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not re.match(r"^(__init__|init_|run_)", node.name):
            inside.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return {n.lineno for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno not in inside}


@dataclass(frozen=True)
class FileCoverage:
    path: str
    memory: dict[int, str]
    reached: frozenset[int]
    startup: frozenset[int]
    """The memory statements that run only at server start (:func:`startup_statements`)."""

    @property
    def runtime_share(self) -> float:
        runtime = set(self.memory) - self.startup
        return len(self.reached & runtime) / max(1, len(runtime))

    @property
    def share(self) -> float:
        return len(self.reached) / max(1, len(self.memory))

    def missed(self) -> list[int]:
        return sorted(set(self.memory) - self.reached)


def installed(relative: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / relative


def measure(steps: int, seed: int, seeds: int = 1, spec: str = SPEC) -> tuple[list[FileCoverage], list[str]]:
    """Walk ``seeds`` walks of ``steps`` steps each from ``seed`` of target ``spec`` under coverage; each file's reach and
    the violations seen."""
    import coverage

    from poolfuzz.harness.fuzz.walk import WalkRun

    paths = [installed(f) for f in FILES]
    cov = coverage.Coverage(include=[str(p) for p in paths], data_file=None)
    violations: list[str] = []
    cov.start()
    try:
        for offset in range(seeds):
            walk = WalkRun("engine", seed + offset, spec=spec, shrink=False)
            while walk.steps < steps:
                if (found := walk.run(max_steps=steps - walk.steps)) is not None:
                    ops = [str(step.get("op")) for step in found.trace.steps]
                    violations.append(f"{type(found.error).__name__}: {str(found.error)[:300]} (ops: {sorted(set(ops))})")
    finally:
        cov.stop()
    results = []
    for relative, path in zip(FILES, paths, strict=True):
        _, statements, _, missing, _ = cov.analysis2(str(path))
        memory = {line: name for line, name in memory_statements(path.read_text()).items() if line in set(statements)}
        reached = frozenset(set(memory) - set(missing))
        startup = frozenset(startup_statements(path.read_text()) & set(memory))
        results.append(FileCoverage(relative, memory, reached, startup))
    return results, violations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1, help="walks, seeds seed..seed+N-1")
    parser.add_argument("--missed", action="store_true", help="list the memory statements not reached")
    parser.add_argument("--spec", default=SPEC, help=f"the engine target walked (default {SPEC})")
    args = parser.parse_args(argv)
    results, violations = measure(args.steps, args.seed, args.seeds, args.spec)
    for r in results:
        runtime = len(r.memory) - len(r.startup)
        print(
            f"{r.path}: {len(r.reached)}/{len(r.memory)} memory statements reached ({r.share:.0%}); "
            f"past startup {len(r.reached - r.startup)}/{runtime} ({r.runtime_share:.0%})"
        )
        if args.missed:
            for line in r.missed():
                print(f"  {line}: {r.memory[line]}")
    total, reached = sum(len(r.memory) for r in results), sum(len(r.reached) for r in results)
    runtime = sum(len(r.memory) - len(r.startup) for r in results)
    reached_runtime = sum(len(r.reached - r.startup) for r in results)
    print(
        f"total: {reached}/{total} ({reached / max(1, total):.0%}); past startup {reached_runtime}/{runtime} "
        f"({reached_runtime / max(1, runtime):.0%}); walk violations: {len(violations)}"
    )
    for violation in violations:
        print(f"  {violation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

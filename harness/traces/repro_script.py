"""A standalone reproduction generated from a trace on an upstream allocator (issue 44, ``poolfuzz report``).

:func:`generate` turns a trace of ``token_kv``, ``paged_kv``, ``swa_kv``, ``pure_swa_kv`` or ``mamba_slots`` on its
upstream target, with the replay that judged it, into one Python file that imports nothing from poolfuzz and runs
with torch and the installed SGLang wheel only:

* the loader of the wheel's allocator files, ``corpus/upstream/_wheel_allocators.py`` (the committed hand-written
  reproductions use it too), written out into the script: it runs ``mem_cache/allocator/*.py`` on a CPU without
  importing ``sglang``;
* the checks, :mod:`poolfuzz.harness.traces.repro_runtime` (and :mod:`~poolfuzz.harness.traces.repro_slots` for
  Mamba): plain Python, the invariants the driver checks per call;
* the constructor call the target's wrapper makes (``harness/kits/*/upstream.py``) with the trace's config, then
  each step the driver ran, as the upstream call the driver makes for it (handles resolved at run time from what
  upstream returned, as the driver resolves them), up to the step where the replay broke.

The steps are the ones the replay ran (:attr:`ReplayResult.recorded`): a step the driver skipped (a misuse probe a
target that does not validate is never sent, a handle no longer live) is a comment, not a call.  The script exits 1
and prints ``REPRODUCED`` with the invariant and its numbers at the first check that breaks, 0 when all hold, so the
same script tells a fixed release from a broken one.  An operation without a translation here, or another target
(the engines, the caches, vLLM's block pool), raises :class:`NotGeneratable` with what one needs instead.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces import repro_runtime, repro_slots
from poolfuzz.harness.traces.replay import ReplayResult
from poolfuzz.harness.upstream.known import REPOSITORY

LOADER = REPOSITORY / "corpus" / "upstream" / "_wheel_allocators.py"
"""The wheel loader the committed reproductions share; its source is written into every generated script."""

TARGETS = {"TokenKV": "token_kv", "PagedKV": "paged_kv", "SWAKV": "swa_kv", "PureSWAKV": "pure_swa_kv", "MambaSlots": "mamba_slots"}
"""The ``poolfuzz.harness.upstream:NAME`` targets a script is generated for, with their families: allocators whose
wrappers translate signatures only (``harness/kits/{kv,swa,mamba}/upstream.py``)."""

LEFT_OUT = {
    True: (frozenset({"build", "module", "upstream_functions"}), frozenset({"KVRun", "one_per_page", "free_row"})),
    False: (frozenset({"mamba_module"}), frozenset()),
}
"""What a Mamba script (``True``) and a KV one (``False``) leave out of the loader and of the checks: what it never calls."""

__all__ = ["LOADER", "NotGeneratable", "TARGETS", "generate", "ran_steps", "run_script"]


class NotGeneratable(ValueError):
    """The trace's target or one of its operations has no translation here; the message says what one needs."""


Lines = list[str]


def ran_steps(trace: Trace, result: ReplayResult) -> list[tuple[int, dict[str, Any], bool]]:
    """``(number, step, ran)`` for each step up to the one that broke: ``ran`` is false for a step the driver skipped.

    The replay records the steps it ran, in order (the failing one included); they are matched to the file's steps
    as a subsequence, so a step that matches none was skipped.
    """
    last = result.step if result.outcome == "violation" and result.step is not None else len(trace.steps)
    recorded = [(step.get("op"), step.get("args") or {}) for step in result.recorded]
    out, position = [], 0
    for number, step in enumerate(trace.steps[:last], 1):
        here = position < len(recorded) and recorded[position] == (step.get("op"), json.loads(json.dumps(step.get("args") or {})))
        position += here
        out.append((number, step, here))
    return out


# ------------------------------------------------------------------ step translations
def _literal(value: object) -> str:
    return repr(value)


def _kv_step(op: str, args: dict[str, Any], *, ps: int, family: str) -> Lines:
    """One KV or SWA driver operation as the upstream calls it makes (``harness/kits/kv/{driver,paged}.py``,
    ``harness/kits/swa/{driver,pure}.py``).

    ``swa_kv`` at page size 1 grows requests with ``alloc(n)`` (``alloc_token_slots``), as the SWA driver does; its
    driver has no ``free_part`` or ``merge``.  ``pure_swa_kv`` is the token driver's, ``free_swa`` its ``free``."""
    swa = family == "swa_kv"
    by_alloc = swa and ps == 1
    if op == "alloc":
        n = int(args["need_size"])
        return [f'run.allocate("alloc({n})", lambda: pool.alloc({n}), owners=[None], pres=[0], seqs=[{n}], need={n // ps})']
    if op == "extend":
        owners = [None if h is None else int(h) for h, _ in args["batch"]]
        extends = [int(e) for _, e in args["batch"]]
        call = (
            "pool.alloc(sum(seqs) - sum(pres))"
            if by_alloc
            else "pool.alloc_extend(t(pres), t(pres), t(seqs), t(seqs), t(lasts), sum(seqs) - sum(pres))"
        )
        what = 'f"alloc({sum(seqs) - sum(pres)})"' if by_alloc else 'f"alloc_extend(prefix={pres}, seq={seqs}, last_loc={lasts})"'
        need = "sum(seqs) - sum(pres)" if by_alloc else "run.extend_pages(pres, seqs)"
        return [
            f"pres, lasts = run.tails({_literal(owners)})",
            f"seqs = [p + e for p, e in zip(pres, {_literal(extends)})]",
            f"run.allocate({what}, lambda: {call}, owners={_literal(owners)}, pres=pres, seqs=seqs, need={need}, request=True)",
        ]
    if op == "decode":
        handles = [int(h) for h in args["handles"]]
        call, what = (
            (f"pool.alloc({len(handles)})", f'"alloc({len(handles)})"')
            if by_alloc
            else ("pool.alloc_decode(t(seqs), t(seqs), t(lasts))", 'f"alloc_decode(seq={seqs}, last_loc={lasts})"')
        )
        need = str(len(handles)) if by_alloc else "run.decode_pages(seqs)"
        return [
            f"pres, lasts = run.tails({_literal(handles)})",
            "seqs = [p + 1 for p in pres]",
            f"run.allocate({what}, lambda: {call}, owners={_literal(handles)}, pres=pres, seqs=seqs, need={need})",
        ]
    if op == "free":
        h = int(args["handle"])
        sent = f"one_per_page(slots, {ps})" if args.get("sparse") else "slots"
        if not swa:
            return [f"slots = list(run.held[{h}])", f'run.release("free(handle {h})", lambda: pool.free(t({sent})), {h}, slots)']
        return [  # a row partly out of the window is freed as upstream's callers free it (the SWA driver does too)
            f"slots = list(run.held[{h}])",
            f"dead, alive = run.out_of_window({h}, {sent})",
            f'run.release(f"free(handle {h}): free_full({{dead}}), free({{alive}})", lambda: free_row(pool, dead, alive), {h}, slots)',
        ]
    if op == "free_swa" and swa:
        h, pages = int(args["handle"]), int(args.get("pages", 1))
        sent = f"one_per_page(slots, {ps})" if args.get("sparse") else "slots"
        return [
            f"slots = run.window_slots({h}, {pages})",
            f'run.release(f"free_swa(handle {h}, slots {{slots}})", lambda: pool.free_swa(t({sent})), {h}, slots, full=False)',
        ]
    if op == "free_full" and swa:
        h = int(args["handle"])
        return [f"slots = list(run.held[{h}])", f'run.release("free_full(handle {h})", lambda: pool.free_full(t(slots)), {h}, slots)']
    if op == "tail" and swa:
        owner = None if args.get("handle") is None else int(args["handle"])
        extend, tail = int(args["extend_len"]), int(args["swa_tail_len"])
        return [
            f"pres, lasts = run.tails([{owner}])",
            f"seqs = [pres[0] + {extend}]",
            f'what = f"alloc_extend_swa_tail(prefix={{pres}}, seq={{seqs}}, last_loc={{lasts}}, swa_tail_len={tail})"',
            f"call = lambda: pool.alloc_extend_swa_tail(t(pres), t(pres), t(seqs), t(seqs), t(lasts), {extend}, {tail})",
            f"run.allocate(what, call, owners=[{owner}], pres=pres, seqs=seqs, need=run.extend_pages(pres, seqs), "
            f"need_swa=run.tail_pages({tail}), window_from=[seqs[0] - {tail}])",
        ]
    if op == "free_swa" and family == "pure_swa_kv":
        h = int(args["handle"])
        return [f"slots = list(run.held[{h}])", f'run.release("free_swa(handle {h})", lambda: pool.free_swa(t(slots)), {h}, slots)']
    if op == "free_part" and not swa:
        h, count = int(args["handle"]), int(args["count"])
        sent = f"[s for s in slots if s % {ps} == {ps - 1}]" if args.get("sparse") else "slots"
        return [
            f"slots = run.first_pages({h}, {count})",
            f'run.release("free(part of handle {h})", lambda: pool.free(t({sent})), {h}, slots)',
        ]
    if op == "free_segment" and not swa:
        h, start, trim = int(args["handle"]), int(args.get("start_page", 0)), int(args.get("trim", 0))
        return [
            f"slots, sent, first = run.segment({h}, {start}, {trim})",
            f'run.release(f"free_segment(handle {h}, start_pos={{first}})", lambda: pool.free_segment(t(sent), start_pos=first), {h}, slots)',
        ]
    if op == "group_begin":
        return ["run.group_begin(pool.free_group_begin)"]
    if op == "group_end":
        return ["run.group_end(pool.free_group_end)"]
    if op == "merge" and not swa:
        return ['run.unchanged("merge_and_sort_free()", pool.merge_and_sort_free)']
    if op == "clear":
        return ["run.clear(pool.clear, CLEARED)"]
    raise NotGeneratable(f"operation {op!r} of this family has no translation into upstream calls here")


def _slot_step(op: str, args: dict[str, Any]) -> Lines:
    """One ``mamba_slots`` driver operation (``harness/kits/mamba/driver.py``); the upstream call is in the comment."""
    if op == "group_begin":
        return [f"run.group_begin({int(args['num_reqs'])})  # pool.alloc_group_begin({int(args['num_reqs'])})"]
    if op == "group_end":
        return ["run.group_end()  # pool.alloc_group_end()"]
    if op == "alloc":
        return [f"run.alloc({int(args['need_size'])})  # pool.alloc({int(args['need_size'])})"]
    if op == "free":
        handles = [int(h) for h in args["handles"]]
        return [f"slots = [run.handles[h] for h in {handles}]", f'run.release(slots, "free(slots of handles {handles})")  # pool.free']
    if op == "free_slots":
        dtype = "torch.int32" if args.get("int32") else "torch.int64"
        return [f'run.release({[int(s) for s in args["slots"]]}, "free(slots {list(args["slots"])})", {dtype})  # pool.free']
    if op == "clear":
        return ["run.clear()  # pool.clear()"]
    raise NotGeneratable(f"operation {op!r} of mamba_slots has no translation into upstream calls here")


def _construct(family: str, config: dict[str, Any]) -> tuple[Lines, Callable[[str, dict[str, Any]], Lines]]:
    """The constructor call the family's upstream wrapper makes, the checker, and the family's step translation."""
    need_sort = bool(config.get("need_sort", False))
    if family == "mamba_slots":
        size = int(config["size"])
        return [f"pool = mamba_module().MambaSlotAllocator({size}, torch.device('cpu'))", f"run = SlotRun(pool, {size})"], _slot_step
    device = "torch.device('cpu')"
    if family == "token_kv":
        size, ps = int(config["size"]), 1
        made = [f"pool = allocator.token.TokenToKVPoolAllocator({size}, torch.float16, {device}, None, {need_sort})"]
        sides = '{"full": pool.available_size}'
        cleared = {"full": size}
    elif family == "paged_kv":
        size, ps = int(config["size"]), int(config["page_size"])
        made = [f"pool = allocator.paged.PagedTokenToKVPoolAllocator({size}, {ps}, torch.float16, {device}, None, {need_sort})"]
        sides, cleared = '{"full": pool.available_size}', {"full": size // ps * ps}
    elif family == "swa_kv":
        size, swa_size, ps = int(config["size"]), int(config["size_swa"]), int(config["page_size"])
        made = [
            f"pool = allocator.swa.SWATokenToKVPoolAllocator({size}, {swa_size}, {ps}, torch.float16, {device}, kvcache_class(), {need_sort})"
        ]
        sides = '{"full": pool.full_available_size, "SWA": pool.swa_available_size}'
        cleared = {"full": size // ps * ps, "SWA": swa_size // ps * ps}
    elif family == "pure_swa_kv":
        size, ps = int(config["size_swa"]), 1
        made = [f"pool = allocator.swa.PureSWATokenToKVPoolAllocator({size}, 1, torch.float16, {device}, kvcache_class(), {need_sort})"]
        sides, cleared = '{"SWA": pool.available_size}', {"SWA": size}
    else:
        raise NotGeneratable(f"family {family!r} has no generated reproduction")
    lines = ["allocator, kvcache_class = build()", *made, f"run = KVRun({ps}, {size // ps}, {sides})", f"CLEARED = {cleared!r}"]
    return lines, lambda op, args: _kv_step(op, args, ps=ps, family=family)


# ------------------------------------------------------------------ the script
def _source_body(source: str, leave_out: frozenset[str] = frozenset()) -> str:
    """A module's source without its docstring, its ``from __future__`` line (the script has its own) and the
    top-level definitions named in ``leave_out`` (what the family's script does not call); a runtime module's import
    of another is left out too (the script holds both)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    dropped = {number for node in tree.body if getattr(node, "name", None) in leave_out for number in _span(node)}
    if tree.body and isinstance(tree.body[0], ast.Expr):
        dropped |= set(_span(tree.body[0]))
    kept = [
        line for number, line in enumerate(lines, 1) if number not in dropped and not line.startswith(("from __future__", "from poolfuzz"))
    ]
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(kept)).strip("\n")  # two blank lines where definitions were left out


def _span(node: ast.stmt) -> range:
    """The 1-based lines of a top-level statement, its decorators and the blank lines before it."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return range(first, (node.end_lineno or node.lineno) + 1)


def _in_docstring(text: str) -> str:
    """``text`` as it may stand in the script's docstring: backslashes kept as written, no closing quotes."""
    return text.replace("\\", "\\\\").replace('"""', "'''")


def _indent(lines: Lines, by: str = "    ") -> Lines:
    return [by + line if line else line for line in lines]


def generate(trace: Trace, result: ReplayResult, *, source: str = "the trace", version: str = "") -> str:
    """The standalone script for ``trace`` on its upstream target, judged by ``result`` (its replay here).

    :class:`NotGeneratable` for a target or an operation without a translation (the message says which)."""
    implementation = result.implementation or trace.implementation
    module, _, name = implementation.partition(":")
    if module.removeprefix("poolfuzz.") != "harness.upstream" or TARGETS.get(name) != trace.family:
        raise NotGeneratable(
            f"{implementation} is not an upstream allocator target a script is generated for "
            f"(poolfuzz.harness.upstream:{', :'.join(sorted(TARGETS))})"
        )
    if result.outcome not in ("violation", "pass"):
        raise NotGeneratable(f"the replay here is {result.outcome}, not a violation or a pass: {result.describe()}")
    if not LOADER.is_file():  # a non-editable install ships no corpus: a checkout has it
        raise NotGeneratable(f"the wheel loader {LOADER.name} is not here (it is corpus/upstream/ of a poolfuzz checkout)")
    construct, translate = _construct(trace.family, trace.config)
    body: Lines = []
    for number, step, ran in ran_steps(trace, result):
        op, args = str(step.get("op")), dict(step.get("args") or {})
        shown = f"{op}({', '.join(f'{k}={json.dumps(v)}' for k, v in args.items())})"
        if not ran:
            body.append(f"# step {number}, {shown}: skipped by the driver (no call a caller makes to this target)")
            continue
        body += [f"with at({number}, {shown!r}):", *_indent(translate(op, args))]
    if result.outcome == "violation" and result.step is None:
        body.append("# poolfuzz saw the violation in its teardown audit, which this script does not repeat")
    mamba = trace.family == "mamba_slots"
    saw = result.describe() if result.outcome == "violation" else "every check held (pass)"
    saw, source = (_in_docstring(text) for text in (saw, source))
    pins = f"sglang=={version}" if version else "sglang"
    header = [
        "#!/usr/bin/env python3",
        f'"""Standalone reproduction, generated by `poolfuzz report` from {source}.',
        "",
        *textwrap.wrap(f"Target {implementation} (family {trace.family}); poolfuzz saw: {saw}.", 116, break_long_words=False),
        "",
        "It imports nothing from poolfuzz: it runs the installed SGLang wheel's own allocator files on the CPU (the loader",
        "below, corpus/upstream/_wheel_allocators.py), makes the upstream calls poolfuzz's driver makes for each step of",
        "the trace, and checks after each call what that driver checks, in plain Python (poolfuzz/harness/traces/",
        "repro_runtime.py, repro_slots.py).  To run it on a checkout, put the checkout's python/ folder on PYTHONPATH.",
        "",
        f"    pip install --no-deps {pins} && python this_file.py",
        "",
        "Exit status 1 and a line starting REPRODUCED (with the numbers) when an invariant breaks, 0 when every check holds.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import sys",
        "from importlib import metadata",
        "",
        "# " + "-" * 30 + " the installed wheel's allocator files (corpus/upstream/_wheel_allocators.py)",
        _source_body(LOADER.read_text(), LEFT_OUT[mamba][0]),
        "",
        "",
        "# " + "-" * 30 + " the checks (poolfuzz/harness/traces/repro_runtime.py" + (", repro_slots.py)" if mamba else ")"),
        _source_body(inspect.getsource(repro_runtime), LEFT_OUT[mamba][1]),
        *(["", "", _source_body(inspect.getsource(repro_slots))] if mamba else []),
        "",
        "",
        "# " + "-" * 30 + " the trace",
        "def reproduce() -> None:",
        *_indent(construct),
        *_indent(body or ["pass  # no step: the pool as built"]),
        "",
        "",
        "def main() -> int:",
        "    try:",
        '        installed = metadata.version("sglang")',
        "    except metadata.PackageNotFoundError:  # a checkout's python/ folder on PYTHONPATH",
        '        installed = "(a source folder)"',
        '    print(f"sglang {installed} from {SRT.parent}")',
        "    try:",
        "        reproduce()",
        "    except Reproduced as found:",
        "        print(found.report())",
        "        return 1",
        '    print("not reproduced: every check held")',
        "    return 0",
        "",
        "",
        'if __name__ == "__main__":',
        "    sys.exit(main())",
    ]
    return "\n".join(header) + "\n"


def run_script(text: str, *, site: Path | None = None, timeout: float = 120) -> tuple[int | None, str]:
    """Run a generated script as its reader would, in a fresh isolated interpreter (``-I``: no PYTHONPATH, no user
    site, not the repository's folder); ``site`` (the folder holding ``sglang/`` of ``--sglang-src``) goes first on
    its path.  Returns the exit status (``None`` past ``timeout``) and its ``REPRODUCED`` line, else its last line."""
    with tempfile.TemporaryDirectory(prefix="poolfuzz-repro-") as folder:
        script = Path(folder) / "repro.py"
        script.write_text(text)
        head = f"import sys; sys.path.insert(0, {str(site)!r}); " if site is not None else ""
        boot = f"{head}import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", boot], cwd=folder, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return None, f"no answer in {timeout:.0f} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    said = next((line for line in lines if line.startswith("REPRODUCED")), lines[-1] if lines else "")
    return done.returncode, said

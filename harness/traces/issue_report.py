"""``poolfuzz report TRACE``: an upstream-ready Markdown issue for a finding on an upstream target (issue 44).

The issue is built from the trace and a replay of it on the copy in use (``--sglang-src``, else the installed
package), in the order a maintainer reads one:

* a title in the engine's words (the known finding's, from ``corpus/known.toml``, else the upstream class and
  what went wrong);
* the classification and reachability (:mod:`poolfuzz.harness.upstream.classify`, the steps off the callers' path);
* the server arguments (the trace's config) and the request pattern (its operations);
* the versions affected: the reviewed range of ``known.toml``, and ``replay --across`` when asked for
  (``--across sglang==A..B``: it fetches wheels, so never by default);
* the shortest trace and a realistic one (within the kit's floors, :mod:`poolfuzz.harness.traces.realistic`), each step
  with the upstream calls its caller contract says it makes (``harness/kits/*/contracts/``);
* both judges' accounts: poolfuzz's invariant with its numbers, and upstream's own checks where the target has
  them (the engine's), else what upstream's class said (it accepted every call);
* a standalone reproduction that imports nothing from poolfuzz: generated from the trace for an upstream allocator
  target (:mod:`poolfuzz.harness.traces.repro_script`: one file, the wheel's loader and the checks written out in
  it, each step the upstream call the driver makes; exit 1 and ``REPRODUCED`` when the bug shows, 0 when not), with
  the finding's committed hand-written ``corpus/upstream/repro_*.py`` named beside it; where no script is
  generated (the engines, the caches, vLLM's block pool) the committed one in full, else what one needs.
  ``--repro FILE`` writes the generated script (else the committed one, with its sibling loader).

Exit status: 0 the report was written, 1 the trace does not reproduce here (nothing to report), 2 bad input (no
such file, not a trace, a trace of our own pool with no upstream target), one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poolfuzz.harness.judge.contract import contract_of
from poolfuzz.harness.judge.families import UnknownTargetError, family, load_factory
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.known_replay import committed_finding
from poolfuzz.harness.traces.realistic import unrealistic
from poolfuzz.harness.traces.replay import ReplayResult, plural, replay_trace
from poolfuzz.harness.traces.repro_script import NotGeneratable, generate, run_script
from poolfuzz.harness.traces.schema import TraceError, load_trace
from poolfuzz.harness.upstream import distribution_of
from poolfuzz.harness.upstream.classify import classify
from poolfuzz.harness.upstream.known import (
    KNOWN_FILE,
    REPOSITORY,
    KnownFinding,
    known_finding_of,
    load_known,
    upstream_code,
    upstream_label,
)

REPROS = REPOSITORY / "corpus" / "upstream"
"""Where the committed standalone reproductions live (``repro_*.py``, each naming its finding's number)."""
SIBLING = "_wheel_allocators.py"
"""The reproductions' shared loader of the installed wheel's files (no poolfuzz import)."""
SIBLINGS = "_wheel_*.py"
"""Every sibling loader a committed reproduction may import (the allocators', admission's, vLLM's; none imports poolfuzz)."""

__all__ = ["ReportError", "Report", "build_report", "committed_repro", "main", "render", "write_repro"]


class ReportError(ValueError):
    """Input that cannot be reported: the CLI's one line and exit status 2."""


@dataclass
class Report:
    """What one issue is made of; :func:`render` writes it as Markdown."""

    path: Path
    trace: Trace
    result: ReplayResult
    finding: KnownFinding | None
    code: dict[str, str]
    classification: dict[str, str] | None
    realistic: tuple[Path, Trace] | None
    repro: Path | None
    across: list[str]
    script: str | None = None
    """The reproduction generated from the trace (:func:`~poolfuzz.harness.traces.repro_script.generate`), or ``None``."""
    not_generated: str = ""
    """Why no script was generated (the target or an operation has no translation), when ``script`` is ``None``."""
    checked: tuple[int | None, str] | None = None
    """The generated script run here (:func:`~poolfuzz.harness.traces.repro_script.run_script`): its exit status and
    ``REPRODUCED`` (or last) line; ``None`` when not run."""

    @property
    def script_shows(self) -> bool:
        """A generated script that is the reproduction: not run here, or run and exits 1, or the trace passes here."""
        checked = self.checked is None or self.checked[0] == 1 or self.result.outcome != "violation"
        return self.script is not None and checked


def committed_repro(finding: KnownFinding | None) -> Path | None:
    """The committed ``repro_*.py`` whose first line names ``finding``'s number, or ``None``."""
    if finding is None:
        return None
    for script in sorted(REPROS.glob("repro_*.py")):
        first = script.read_text().split("\n", 1)[0]
        if re.search(rf"\bfinding {finding.number}\b", first):
            return script
    return None


def write_repro(report: Report, destination: Path) -> Path:
    """Write the reproduction to ``destination``: the generated script (one file) unless it ran here without showing
    the violation and a committed one exists, else that one with its sibling loaders beside it; ``ReportError``
    without either."""
    if report.script is not None and (report.script_shows or report.repro is None):
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(report.script)
        return destination
    if report.repro is None:
        raise ReportError(f"{report.path}: no standalone reproduction for this trace ({report.not_generated})")
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(report.repro, destination)
    for loader in sorted(REPROS.glob(SIBLINGS)):
        shutil.copyfile(loader, destination.parent / loader.name)
    return destination


def build_report(path: Path, *, across: list[str] | None = None, check_script: bool = True) -> Report:
    """Load, check and replay ``path``; :class:`ReportError` for input that has nothing to report upstream.

    ``check_script``: run the generated reproduction here, on the copy the replay used, so the issue says what it did."""
    if not path.is_file():
        raise ReportError(f"{path}: no such file")
    try:
        trace = load_trace(path)
    except TraceError as exc:
        raise ReportError(" ".join(str(exc).split())) from None
    try:
        fam = family(trace.family)
    except UnknownTargetError as exc:
        raise ReportError(f"{path}: {exc}") from None
    implementation = trace.implementation or fam.default
    code = upstream_code(trace.family, implementation)
    if code is None:
        raise ReportError(f"{path}: a trace of {implementation}, poolfuzz's own pool: there is no upstream target to report to")
    result = replay_trace(trace)
    if result.outcome == "unavailable":
        raise ReportError(f"{path}: {result.describe()}")
    known = load_known()
    finding = None
    if result.outcome == "violation":
        finding = known_finding_of(trace.family, result.implementation, result.invariant, path, known=known)
    finding = finding or committed_finding(path, trace, known, KNOWN_FILE)
    classified = classify(trace.family, result.implementation, result.invariant, str(path))
    try:
        script, not_generated = generate(trace, result, source=f"`{_shown(path)}`", version=code["version"]), ""
    except NotGeneratable as exc:
        script, not_generated = None, str(exc)
    checked = run_script(script, site=_site(code, result.implementation)) if script is not None and check_script else None
    return Report(
        path=path,
        trace=trace,
        result=result,
        finding=finding,
        code=code,
        classification=classified.to_json() if classified else None,
        realistic=_realistic(path, trace, finding),
        repro=committed_repro(finding),
        across=across or [],
        script=script,
        not_generated=not_generated,
        checked=checked,
    )


def _site(code: dict[str, str], implementation: str) -> Path | None:
    """The folder holding the package of ``--sglang-src`` (``None``: the installed copy), for the script's run here."""
    if code.get("origin", "installed") == "installed":
        return None
    declared = distribution_of(implementation.partition(":")[2])
    return None if declared is None else declared.locate().site


def _realistic(path: Path, trace: Trace, finding: KnownFinding | None) -> tuple[Path, Trace] | None:
    """The trace itself when within the family's realistic floors, else the first such committed trace of the finding."""
    candidates = [path] + ([KNOWN_FILE.parent / name for name in finding.traces] if finding else [])
    for candidate in candidates:
        try:
            loaded = trace if candidate == path else load_trace(candidate)
        except TraceError:
            continue
        if unrealistic(loaded.family, loaded.config, loaded.steps) is None:
            return candidate, loaded
    return None


# ------------------------------------------------------------------ rendering
def _shown(path: Path) -> Path:
    """``path`` relative to the repository when inside it."""
    return path.resolve().relative_to(REPOSITORY) if path.resolve().is_relative_to(REPOSITORY) else path


def _args(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items())


def upstream_steps(trace: Trace, implementation: str) -> list[str]:
    """Each step as ``N. op(args)``, then the upstream calls its caller contract says that operation makes."""
    try:
        contract = contract_of(load_factory(implementation))
    except UnknownTargetError:
        contract = None
    rules = contract.by_op if contract is not None else {}
    lines = []
    for number, step in enumerate(trace.steps, 1):
        op = str(step.get("op"))
        line = f"{number}. `{op}({_args(step.get('args') or {})})`"
        rule = rules.get(op)
        if rule is not None:
            line += f" -> upstream `{'`, `'.join(rule.calls) or '(no call)'}`: {rule.shape}"
        lines.append(line)
    return lines or ["(no step: the violation is in the pool as built)"]


def _title(report: Report) -> str:
    if report.finding is not None:
        return report.finding.title
    result = report.result
    what = result.message.split(":")[0] if result.outcome == "violation" else f"replays as {result.outcome}"
    return f"{report.code['title']} {result.implementation.partition(':')[2]}: {what}"


def _judges(result: ReplayResult) -> list[str]:
    if result.outcome != "violation":
        return [f"- poolfuzz: {result.describe()}", "- upstream: nothing to account for"]
    numbers = {k: v for k, v in result.numbers.items() if k not in ("upstream", "theirs")}
    shown = "".join(f"\n  - `{k}` = `{v}`" for k, v in numbers.items())
    theirs = result.numbers.get("upstream") or result.numbers.get("theirs")
    upstream = (
        f"- upstream's own check: {theirs}"
        if theirs
        else "- upstream: every call returned normally and no check of its own fired (the class accepted the state above)"
    )
    return [f"- poolfuzz (`{result.invariant}`, {result.where}): {result.message}{shown}", upstream]


def render(report: Report) -> str:
    """The issue as Markdown."""
    trace, result, finding = report.trace, report.result, report.finding
    kind = report.classification or {"kind": "unclassified", "note": ""}
    lines = [f"# {_title(report)}", ""]
    if finding is not None:
        lines += [f"Known finding {finding.number} (`{finding.key}`, {finding.document}): {finding.summary}", ""]
    lines += [
        "## Classification and reachability",
        "",
        f"**{kind['kind']}**: {kind['note']}",
        "",
        f"Found by poolfuzz on {upstream_label(report.code)}, target `{result.implementation}` (family `{trace.family}`).",
        "",
        "## Server arguments and request pattern",
        "",
        *[f"- `{k}` = `{json.dumps(v)}`" for k, v in sorted(trace.config.items())],
        "",
        f"Request pattern: {', '.join(str(s.get('op')) for s in trace.steps) or 'none'} ({plural(len(trace.steps), 'step')}).",
        "",
        "## Versions affected",
        "",
        f"- reviewed: {finding.upstream} (corpus/known.toml)" if finding else "- reviewed: not yet (a new finding)",
        f"- here: {result.outcome} on {upstream_label(report.code)}",
    ]
    if report.across:
        lines += ["", "```", *report.across, "```"]
    else:
        lines.append(f"- per release: `poolfuzz replay {report.path} --across {report.code['distribution']}==LOW..HIGH`")
    lines += ["", "## Shortest trace, as upstream calls", "", f"`{report.path}`:", "", *upstream_steps(trace, result.implementation)]
    lines += ["", "## Realistic trace", ""]
    if report.realistic is None:
        lines.append("None committed within the family's realistic floors; `poolfuzz fuzz` shrinks one (harness/traces/realistic.py).")
    elif report.realistic[0] == report.path:
        lines.append("The shortest trace is already within the realistic floors a server builds.")
    else:
        lines += [f"`{_shown(report.realistic[0])}`:", "", *upstream_steps(report.realistic[1], result.implementation)]
    lines += ["", "## Both judges' accounts", "", *_judges(result), "", "## Standalone reproduction", "", *_reproduction(report)]
    return "\n".join(lines) + "\n"


def _reproduction(report: Report) -> list[str]:
    """The generated script (folded) and what it did here, the committed hand-written one named beside it; else (none
    generated, or its checks do not show the violation) the committed one in full, else what one needs."""
    pin, where = f"pip install --no-deps {report.code['distribution']}=={report.code['version']} && python", ""
    if report.code.get("origin", "installed") != "installed":  # --sglang-src: the copy replayed here is a folder
        pin, where = "PYTHONPATH=FOLDER python", f" (FOLDER: the folder holding `sglang/` of `{report.code['origin']}`)"
    committed = report.repro.relative_to(REPOSITORY) if report.repro is not None else None
    lines: list[str] = []
    reason = f"No reproduction is generated for this trace: {report.not_generated}."
    if report.script is not None:
        lines += [
            "Generated from the shortest trace: one file that imports nothing from poolfuzz (torch and the wheel only), "
            "makes the trace's upstream calls in order and checks each as poolfuzz's driver does; it exits 1 and prints "
            f"`REPRODUCED` with the numbers when the bug shows, 0 when every check holds. Run: `{pin} repro.py`{where}",
            "",
            f"<details><summary>repro.py ({len(report.script.splitlines())} lines)</summary>",
            "",
            "```python",
            report.script.rstrip(),
            "```",
            "",
            "</details>",
        ]
        code, said = report.checked or (None, "")
        if report.checked is not None:
            lines += ["", f"Checked here, on {upstream_label(report.code)}: it exits {code}: `{said}`"]
        if report.script_shows:
            if committed is not None:
                lines += ["", f"A hand-written reproduction of this finding: `{committed}` (with the `{SIBLINGS}` loaders beside it)."]
            return lines
        lines.append("")
        reason = (
            "The generated script's checks (each call's answer and the free sizes, what the allocator's callers observe) "
            "do not show what poolfuzz's driver saw."
        )
    if committed is not None:
        return [
            *lines,
            f"{reason} The committed one, `{committed}` (with the `{SIBLINGS}` loaders beside it; imports nothing from poolfuzz; exits 1 "
            f"when it reproduces). Run: `{pin} {committed}`{where}",
            "",
            "```python",
            report.repro.read_text().rstrip() if report.repro is not None else "",
            "```",
        ]
    return [
        *lines,
        f"{reason} One needs: the installed wheel's own files for the class, run without the package's heavy imports "
        f"(`corpus/upstream/{SIBLING}` does it for SGLang's allocators; `harness/upstream/"
        f"{report.code['distribution']}_files.py` names the files this target loads and the stand-ins they need), the "
        "target's constructor with the server arguments above, and the upstream calls of the shortest trace in order, "
        "then a check of the invariant poolfuzz reports (exit 1 when it holds no longer).",
    ]


# ----------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poolfuzz report",
        description="Write an upstream-ready Markdown issue for a trace of an upstream target.",
        epilog="Exit status: 0 written, 1 the trace does not reproduce here, 2 bad input.",
    )
    parser.add_argument("trace", type=Path, metavar="TRACE", help="a trace file of an upstream target")
    parser.add_argument("--out", type=Path, metavar="FILE.md", help="write the issue here (default: standard output)")
    parser.add_argument(
        "--repro",
        type=Path,
        metavar="FILE.py",
        help="write the standalone reproduction here (generated: one file; else the committed one, its loader beside it)",
    )
    parser.add_argument(
        "--across", metavar="PACKAGE==LOW..HIGH", help="replay the trace across these releases for the versions (fetches wheels)"
    )
    return parser


def _across(path: Path, spec: str | None) -> list[str]:
    if spec is None:
        return []
    from poolfuzz.harness.traces.across import AcrossError, parse_across, replay_across, report

    try:
        across = parse_across(spec)
    except AcrossError as exc:
        raise ReportError(str(exc)) from None
    return report(replay_across([path], across, progress=lambda line: print(line, file=sys.stderr, flush=True)), across)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = build_report(args.trace, across=_across(args.trace, args.across) if args.trace.is_file() else None)
        if args.repro is not None:
            write_repro(report, args.repro)
    except ReportError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    text = render(report)
    if args.out is not None:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    if report.result.outcome != "violation":
        print(f"report: {args.trace} does not reproduce here ({report.result.describe()})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

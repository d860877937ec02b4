"""``replay --across``: replay upstream traces against several releases, to say when a bug came and if it went.

``poolfuzz replay corpus/upstream/ --across sglang==0.5.19..0.5.23`` (or a list,
``sglang==0.5.20,0.5.23``; ``vllm==...`` likewise) fetches each release's wheel once with
``pip download --no-deps`` into a cache folder (``--across-cache``, default
``~/.cache/poolfuzz/releases``), unzips it there, and replays every trace against it in a
process of its own, with the loaders pointed at that folder (``POOLFUZZ_SGLANG_SRC`` /
``POOLFUZZ_VLLM_SRC``, :doc:`docs/compatibility.md`): the loaders keep module state, so
releases never share a process.  The report is one block per trace, a line per release
(``reproduces``, ``passes``, ``another violation``, ``not loadable`` with the loader's
one-line reason, ``not available`` when the wheel could not be fetched) and a last line
naming where it reproduces and where it passes.

A range names every release the package index lists between its ends, both included;
pre-releases only when an end is one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from poolfuzz.harness.traces.replay import expected_outcome, replay_trace, trace_files
from poolfuzz.harness.traces.schema import TraceError, load_trace

PACKAGES = {"sglang": "POOLFUZZ_SGLANG_SRC", "vllm": "POOLFUZZ_VLLM_SRC"}
"""The packages a release can be replayed across, and the variable that points their loaders at a folder."""
DEFAULT_CACHE = Path.home() / ".cache" / "poolfuzz" / "releases"
PIP_SECONDS = 300

__all__ = ["Across", "AcrossError", "fetch_release", "index_versions", "is_cached", "parse_across", "replay_across"]


class AcrossError(ValueError):
    """A ``--across`` that cannot be carried out as given (a usage error): a bad spec, a range the index lacks."""


@dataclass(frozen=True)
class Across:
    """``sglang==0.5.19..0.5.23``, parsed: the package, and the releases or the range's two ends."""

    package: str
    versions: tuple[str, ...] = ()
    low: str | None = None
    high: str | None = None

    @property
    def variable(self) -> str:
        return PACKAGES[self.package]


_SPEC = re.compile(r"^(?P<package>[A-Za-z0-9_.-]+)==(?P<versions>.+)$")


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise AcrossError(f"--across: {text!r} is not a version") from None


def parse_across(text: str) -> Across:
    """``PACKAGE==A..B`` or ``PACKAGE==A,B,...``, for a package of :data:`PACKAGES`."""
    match = _SPEC.match(text.strip())
    if match is None:
        raise AcrossError(f"--across: expected PACKAGE==LOW..HIGH or PACKAGE==V1,V2,..., got {text!r}")
    package, versions = match["package"].lower(), match["versions"]
    if package not in PACKAGES:
        raise AcrossError(f"--across: {package!r} has no upstream loader; known: {', '.join(PACKAGES)}")
    if ".." in versions:
        low, _, high = versions.partition("..")
        if _version(low) > _version(high):
            raise AcrossError(f"--across: the range {versions} runs backwards")
        return Across(package, low=low, high=high)
    listed = tuple(v.strip() for v in versions.split(",") if v.strip())
    for version in listed:
        _version(version)
    if not listed:
        raise AcrossError(f"--across: no version in {text!r}")
    return Across(package, versions=listed)


def index_versions(package: str) -> list[str]:
    """Every release of ``package`` the package index lists (``pip index versions``), oldest first."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package], capture_output=True, text=True, timeout=PIP_SECONDS, check=False
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if line is None:
        raise AcrossError(
            f"--across: the package index lists no release of {package} ({(done.stderr.strip().splitlines() or ['no output'])[-1]})"
        )
    return sorted((v.strip() for v in line.partition(":")[2].split(",") if v.strip()), key=Version)


def releases(across: Across, listed: Callable[[str], list[str]] = index_versions) -> list[str]:
    """The releases ``across`` names: its list, or the index's releases inside its range."""
    if across.versions:
        return list(across.versions)
    assert across.low is not None and across.high is not None
    low, high = Version(across.low), Version(across.high)
    pre = low.is_prerelease or high.is_prerelease
    inside = [v for v in listed(across.package) if low <= Version(v) <= high and (pre or not Version(v).is_prerelease)]
    if not inside:
        raise AcrossError(f"--across: the package index lists no {across.package} release in {across.low}..{across.high}")
    return inside


def is_cached(package: str, version: str, cache: Path) -> bool:
    """Whether ``package==version`` is already unzipped under ``cache`` (no download needed)."""
    return (cache / f"{package}-{version}" / package).is_dir()


def fetch_release(package: str, version: str, cache: Path) -> Path:
    """The unzipped wheel of ``package==version`` under ``cache`` (fetched on first use); ``OSError`` or
    ``subprocess.CalledProcessError`` when it cannot be had."""
    folder = cache / f"{package}-{version}"
    if is_cached(package, version, cache):
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".{package}-{version}-") as scratch:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
                f"{package}=={version}",
                "-d",
                scratch,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=PIP_SECONDS,
        )
        wheel = next(Path(scratch).glob("*.whl"), None)
        if wheel is None:
            raise OSError(f"pip download left no wheel of {package}=={version}")
        unpacked = Path(scratch) / "unpacked"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        os.replace(unpacked, folder)  # whole or not at all: a half-unzipped release is never used
    return folder


@dataclass(frozen=True)
class Row:
    """One trace on one release."""

    version: str
    verdict: str
    """``reproduces``, ``passes``, ``another violation``, ``error``, ``not loadable`` or ``not available``."""
    detail: str = ""


def judge_here(paths: Sequence[Path]) -> list[dict[str, str]]:
    """Replay ``paths`` in this process (its loaders pointed where the parent said) as JSON-ready rows."""
    rows = []
    for path in trace_files(list(paths)):
        try:
            trace = load_trace(path)
        except TraceError as exc:
            rows.append({"path": str(path), "verdict": "error", "detail": str(exc)})
            continue
        result = replay_trace(trace)
        outcome, invariant = expected_outcome(trace, result.implementation)
        if result.outcome == "unavailable":
            verdict, detail = "not loadable", result.message.splitlines()[0] if result.message else ""
        elif result.outcome == "violation":
            same = outcome == "violation" and result.invariant == invariant
            verdict = "reproduces" if same else "another violation"
            detail = f"[{result.invariant}] {result.where}".strip()
        elif result.outcome == "pass":
            verdict, detail = "passes", f"{result.steps} steps"
        else:
            verdict, detail = "error", result.describe()
        rows.append({"path": str(path), "verdict": verdict, "detail": detail})
    return rows


def _run_release(across: Across, folder: Path, paths: Sequence[Path]) -> list[dict[str, str]]:
    env = {**os.environ, across.variable: str(folder)}
    done = subprocess.run(
        [sys.executable, "-m", "poolfuzz.harness.traces.across", *map(str, paths)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the replay process exited {done.returncode}: {tail}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def replay_across(
    paths: Sequence[Path],
    across: Across,
    *,
    cache: Path = DEFAULT_CACHE,
    listed: Callable[[str], list[str]] = index_versions,
    fetch: Callable[[str, str, Path], Path] = fetch_release,
    progress: Callable[[str], None] | None = None,
) -> dict[str, list[Row]]:
    """Each trace under ``paths``, by path, with its row on every release ``across`` names (oldest first).

    ``progress`` gets one line per release before it is fetched and replayed (a download of a wheel
    of hundreds of MB takes minutes, and the table is printed only at the end): ``replay --across:
    sglang 0.5.22 (2 of 3): downloading into CACHE`` or ``... cached in CACHE``.
    """
    versions = sorted(releases(across, listed), key=Version)
    files = [str(p) for p in trace_files(list(paths))]
    table: dict[str, list[Row]] = {path: [] for path in files}
    for number, version in enumerate(versions, 1):
        if progress is not None:
            where = "cached in" if is_cached(across.package, version, cache) else "downloading into"
            count = f"{len(files)} trace{'' if len(files) == 1 else 's'}"
            progress(f"replay --across: {across.package} {version} ({number} of {len(versions)}): {where} {cache}, then {count}")
        try:
            folder = fetch(across.package, version, cache)
            rows = {row["path"]: row for row in _run_release(across, folder, [Path(p) for p in files])}
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            reason = getattr(exc, "stderr", None) or str(exc)
            for path in files:
                table[path].append(Row(version, "not available", str(reason).strip().splitlines()[-1][:200]))
            continue
        for path in files:
            row = rows.get(path, {"verdict": "error", "detail": "not replayed"})
            table[path].append(Row(version, row["verdict"], row["detail"]))
    return table


def _spans(versions: list[str], wanted: set[str]) -> str:
    """``0.5.19-0.5.21, 0.5.23``: the runs of ``versions`` (in order) that are in ``wanted``."""
    runs: list[list[str]] = []
    for version in versions:
        if version in wanted:
            if runs and runs[-1][-1] == versions[versions.index(version) - 1]:
                runs[-1].append(version)
            else:
                runs.append([version])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def report(table: dict[str, list[Row]], across: Across) -> list[str]:
    lines: list[str] = []
    for path, rows in table.items():
        try:
            trace = load_trace(path)
            expected = f"[{trace.expect.get('invariant')}]" if trace.expect.get("outcome") == "violation" else "pass"
        except TraceError:
            expected = "unreadable"
        lines.append(f"{path}  (expects {expected})")
        width = max(len(r.version) for r in rows) if rows else 0
        lines += [f"  {across.package} {r.version:{width}}  {r.verdict}" + (f": {r.detail}" if r.detail else "") for r in rows]
        versions = [r.version for r in rows]
        parts = [
            f"{label} on {_spans(versions, {r.version for r in rows if r.verdict == verdict})}"
            for verdict, label in (
                ("reproduces", "reproduces"),
                ("passes", "passes"),
                ("another violation", "fails otherwise"),
                ("not loadable", "not loadable"),
                ("not available", "not available"),
            )
            if any(r.verdict == verdict for r in rows)
        ]
        lines.append("  => " + "; ".join(parts))
    return lines


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main_across(paths: Sequence[Path], spec: str, cache: Path | None) -> int:
    """``replay --across``: 0 when every release was replayed, 1 when one could not be (not available),
    2 for a usage error (printed)."""
    try:
        across = parse_across(spec)
        table = replay_across(paths, across, cache=cache or DEFAULT_CACHE, listed=index_versions, fetch=fetch_release, progress=_progress)
    except AcrossError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    for line in report(table, across):
        print(line, flush=True)
    return 1 if any(r.verdict == "not available" for rows in table.values() for r in rows) else 0


if __name__ == "__main__":  # one release's replay process: JSON lines on stdout
    for row in judge_here([Path(p) for p in sys.argv[1:]]):
        print(json.dumps(row), flush=True)

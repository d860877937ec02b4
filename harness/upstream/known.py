"""The reviewed list of known upstream findings (``corpus/known.toml``), and how a failure is told to be one.

A fuzz run that re-finds a known upstream defect must say so and go on, not fail as if it were new
(issue 44).  ``corpus/known.toml`` lists each known finding once, reviewed like code: its key and number,
the target it breaks (family and implementations), the invariants it shows, its classification, the
*shapes* of its shortest traces, the committed traces that show it, the upstream versions it was made on
and the document that explains it.  :func:`load_known` reads and checks it; a malformed file is one
:class:`KnownFindingsError` naming the file, the entry and the field (the CLI's exit status 2).

A failure is matched by its :class:`Fingerprint`, made to survive reshrinking: two shrinks of one bug differ
in sizes, arguments and step counts, rarely in these:

* the target: family and implementation (``poolfuzz.harness.upstream:Engine``);
* the invariant broken (a finding lists every one it shows: which check fires first depends on the state);
* the classification (:mod:`poolfuzz.harness.upstream.classify`: ``reachable``, ``latent`` or ``divergence``);
* the shape of the shortest trace: the *set* of operation names it needs, not their counts or arguments
  (finding 5 shrinks to one ``arrive`` or to one ``crowd``; finding 1 to ``extend``, ``decode`` or to
  ``extend``, ``alloc``, ``decode``), so a finding lists each shape its shrinks took.

Everything else (sizes, the config, the arguments) is left out on purpose: it is what shrinking changes.
"""

from __future__ import annotations

import functools
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from poolfuzz.harness.upstream.distributions import DISTRIBUTIONS
from poolfuzz.harness.upstream.sources import distribution_version

REPOSITORY = Path(__file__).resolve().parents[2]
KNOWN_FILE = REPOSITORY / "corpus" / "known.toml"
"""The checkout's reviewed list; traces it names are relative to its folder, documents to the repository."""
KNOWN_SCHEMA = 1
CLASSIFICATIONS = ("reachable", "latent", "divergence")


class KnownFindingsError(ValueError):
    """A ``known.toml`` that cannot be used: the file, the entry (key or index) and the field at fault."""

    def __init__(self, path: Path, entry: str, field_name: str, problem: str) -> None:
        self.path, self.entry, self.field, self.problem = path, entry, field_name, problem
        where = ", ".join(part for part in (f"entry {entry}" if entry else "", f"field {field_name!r}" if field_name else "") if part)
        super().__init__(f"{path}: {where + ': ' if where else ''}{problem}")


@dataclass(frozen=True)
class Fingerprint:
    """What identifies a finding across shrinks (see the module docstring)."""

    family: str
    implementation: str
    invariant: str
    classification: str | None
    operations: frozenset[str]

    def describe(self) -> str:
        ops = ", ".join(sorted(self.operations)) or "no step"
        return f"{self.family}={self.implementation} [{self.invariant}] {self.classification or 'unclassified'} ({ops})"


class KnownRecord(TypedDict):
    """The report's ``known`` record of a failure that is a known finding (:meth:`KnownFinding.to_json`)."""

    key: str
    number: int
    title: str
    distribution: str
    versions: str
    upstream: str
    document: str


@dataclass(frozen=True)
class KnownFinding:
    """One entry of ``known.toml``."""

    key: str
    number: int
    title: str
    family: str
    implementations: tuple[str, ...]
    distribution: str
    versions: str
    invariants: tuple[str, ...]
    classification: str
    shapes: tuple[frozenset[str], ...]
    traces: tuple[str, ...]
    """Committed traces that show it, relative to the file's folder."""
    document: str
    summary: str

    def matches(self, fingerprint: Fingerprint) -> bool:
        return (
            fingerprint.family == self.family
            and fingerprint.implementation in self.implementations
            and fingerprint.invariant in self.invariants
            and fingerprint.classification == self.classification
            and fingerprint.operations in self.shapes
        )

    def could_be(self, family: str, implementation: str, invariant: str | None) -> bool:
        """Whether a failure not yet shrunk might turn out to be this finding (the shape is not known yet)."""
        return family == self.family and implementation in self.implementations and invariant in self.invariants

    @property
    def upstream(self) -> str:
        """``SGLang 0.5.22 to 0.5.23``: the code and versions it was made on."""
        declared = DISTRIBUTIONS.get(self.distribution)
        return f"{declared.title if declared else self.distribution} {self.versions}"

    def to_json(self) -> KnownRecord:
        """The report's ``known`` record of a failure that is this finding."""
        return {
            "key": self.key,
            "number": self.number,
            "title": self.title,
            "distribution": self.distribution,
            "versions": self.versions,
            "upstream": self.upstream,
            "document": self.document,
        }


# ------------------------------------------------------------------- loading
_FIELDS: dict[str, tuple[type, bool]] = {
    "key": (str, True),
    "number": (int, True),
    "title": (str, True),
    "family": (str, True),
    "implementations": (list, True),
    "distribution": (str, True),
    "versions": (str, True),
    "invariants": (list, True),
    "classification": (str, True),
    "shapes": (list, True),
    "traces": (list, False),
    "document": (str, True),
    "summary": (str, True),
}


def load_known(path: Path | None = None) -> tuple[KnownFinding, ...]:
    """The findings of ``path`` (default :data:`KNOWN_FILE`), checked; ``()`` when the file does not exist."""
    path = KNOWN_FILE if path is None else Path(path)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise KnownFindingsError(path, "", "", f"cannot read it: {exc}") from None
    return _load(path.resolve(), stamp)


@functools.lru_cache(maxsize=8)
def _load(path: Path, _stamp: int) -> tuple[KnownFinding, ...]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise KnownFindingsError(path, "", "", f"cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise KnownFindingsError(path, "", "", f"not TOML: {exc}") from None
    extra = set(data) - {"schema", "finding"}
    if extra:
        raise KnownFindingsError(path, "", sorted(extra)[0], "unknown top-level field (expected schema and [[finding]] tables)")
    if data.get("schema") != KNOWN_SCHEMA:
        raise KnownFindingsError(path, "", "schema", f"expected schema = {KNOWN_SCHEMA}, got {data.get('schema')!r}")
    entries = data.get("finding", [])
    if not isinstance(entries, list):
        raise KnownFindingsError(path, "", "finding", "expected an array of [[finding]] tables")
    found: list[KnownFinding] = []
    for index, entry in enumerate(entries):
        finding = _entry(path, index, entry)
        for other in found:
            if other.key == finding.key or other.number == finding.number:
                same = "key" if other.key == finding.key else "number"
                raise KnownFindingsError(path, finding.key, same, f"the {same} of entry {other.key} too")
        found.append(finding)
    return tuple(found)


def _entry(path: Path, index: int, entry: Any) -> KnownFinding:
    name = f"#{index + 1}"
    if not isinstance(entry, dict):
        raise KnownFindingsError(path, name, "", "expected a [[finding]] table")
    if isinstance(entry.get("key"), str) and entry["key"]:
        name = entry["key"]

    def fail(field_name: str, problem: str) -> KnownFindingsError:
        return KnownFindingsError(path, name, field_name, problem)

    for field_name in entry:
        if field_name not in _FIELDS:
            raise fail(field_name, f"unknown field (known: {', '.join(_FIELDS)})")
    for field_name, (kind, required) in _FIELDS.items():
        if field_name not in entry:
            if required:
                raise fail(field_name, "missing")
            continue
        value = entry[field_name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise fail(field_name, f"expected {'an array' if kind is list else 'an integer' if kind is int else 'a string'}, got {value!r}")
        if isinstance(value, str) and not value.strip():
            raise fail(field_name, "empty")
    strings = {
        f: _strings(entry[f], lambda problem, f=f: fail(f, problem)) for f in ("implementations", "invariants", "traces") if f in entry
    }
    for f in ("implementations", "invariants"):
        if not strings[f]:
            raise fail(f, "empty")
    shapes = []
    for shape in entry["shapes"]:
        if not isinstance(shape, list) or not shape or not all(isinstance(op, str) and op for op in shape):
            raise fail("shapes", f"each shape is a non-empty array of operation names, got {shape!r}")
        shapes.append(frozenset(shape))
    if not shapes:
        raise fail("shapes", "empty")
    _check_names(entry, fail)
    traces = strings.get("traces", ())
    for trace in traces:
        if not (path.parent / trace).is_file():
            raise fail("traces", f"{trace} is not a file under {path.parent}")
    document = entry["document"]
    if not (REPOSITORY / document.partition("#")[0]).is_file():
        raise fail("document", f"{document.partition('#')[0]} is not a file of the repository")
    return KnownFinding(
        key=entry["key"],
        number=entry["number"],
        title=entry["title"],
        family=entry["family"],
        implementations=strings["implementations"],
        distribution=entry["distribution"],
        versions=entry["versions"],
        invariants=strings["invariants"],
        classification=entry["classification"],
        shapes=tuple(shapes),
        traces=traces,
        document=document,
        summary=" ".join(entry["summary"].split()),
    )


def _strings(value: list[Any], fail: Any) -> tuple[str, ...]:
    if not all(isinstance(item, str) and item for item in value):
        raise fail(f"expected an array of non-empty strings, got {value!r}")
    return tuple(value)


def _check_names(entry: Mapping[str, Any], fail: Any) -> None:
    """Family, invariants, classification and distribution must name what exists."""
    from poolfuzz.harness.judge.families import FAMILIES
    from poolfuzz.harness.judge.invariants import INVARIANTS

    if entry["family"] not in FAMILIES:
        raise fail("family", f"no family {entry['family']!r} (families: {', '.join(FAMILIES)})")
    for invariant in entry["invariants"]:
        if invariant not in INVARIANTS:
            raise fail("invariants", f"no invariant {invariant!r} (poolfuzz list)")
    if entry["classification"] not in CLASSIFICATIONS:
        raise fail("classification", f"expected one of {', '.join(CLASSIFICATIONS)}, got {entry['classification']!r}")
    if entry["distribution"] not in DISTRIBUTIONS:
        raise fail("distribution", f"expected one of {', '.join(DISTRIBUTIONS)}, got {entry['distribution']!r}")


# ------------------------------------------------------------------ matching
def fingerprint(family: str, implementation: str, invariant: str, trace: str | Path | None) -> Fingerprint:
    """The fingerprint of a violation of ``invariant`` by ``implementation`` whose (shrunk) trace is at ``trace``."""
    from poolfuzz.harness.upstream.classify import classify

    classification = classify(family, implementation, invariant, str(trace) if trace else None)
    return Fingerprint(family, implementation, invariant, classification.kind if classification else None, _operations(trace))


def _operations(trace: str | Path | None) -> frozenset[str]:
    if not trace:
        return frozenset()
    try:
        data = json.loads(Path(trace).read_text())
    except (OSError, ValueError):
        return frozenset()
    return frozenset(str(step.get("op")) for step in data.get("steps") or [] if isinstance(step, dict))


def match(found: Fingerprint, known: Iterable[KnownFinding]) -> KnownFinding | None:
    """The known finding ``found`` is, or ``None`` (a new finding)."""
    return next((finding for finding in known if finding.matches(found)), None)


def known_finding_of(
    family: str, implementation: str, invariant: str | None, trace: str | Path | None, *, known: Iterable[KnownFinding] | None = None
) -> KnownFinding | None:
    """The known finding a violation is (its trace shrunk), or ``None``; ``None`` for errors and for targets that
    no known finding names, without classifying anything."""
    findings = tuple(load_known() if known is None else known)
    if invariant is None or not any(f.could_be(family, implementation, invariant) for f in findings):
        return None
    return match(fingerprint(family, implementation, invariant, trace), findings)


def known_for(family: str, implementation: str, known: Iterable[KnownFinding] | None = None) -> tuple[KnownFinding, ...]:
    """The known findings of one target."""
    return tuple(f for f in (load_known() if known is None else known) if f.family == family and implementation in f.implementations)


# -------------------------------------------------------------------- labels
def upstream_code(family_name: str, implementation: str) -> dict[str, str] | None:
    """``{"distribution", "title", "version", "origin"}`` when ``implementation`` runs upstream's own code (an
    ``poolfuzz.harness.upstream:NAME`` target, or a builder that runs one under another server configuration:
    :func:`~poolfuzz.harness.upstream.classify.upstream_target_of`), else ``None``.  The version is the copy's that the
    targets load (``--sglang-src``'s, else the installed one)."""
    from poolfuzz.harness.upstream import distribution_of
    from poolfuzz.harness.upstream.classify import upstream_target_of

    target = upstream_target_of(family_name, implementation)
    if target is None:
        return None
    module, _, name = target.partition(":")
    if module != "poolfuzz.harness.upstream":
        return None
    declared = distribution_of(name)
    if declared is None:
        return None
    try:
        source = declared.locate()
        version, origin = source.version, source.origin
    except Exception:  # noqa: BLE001 - not installed: the target is refused elsewhere, the label says so
        version, origin = distribution_version(declared.name) or "not installed", "installed"
    return {"distribution": declared.name, "title": declared.title, "version": version, "origin": origin}


def upstream_label(code: Mapping[str, Any] | None) -> str:
    """``upstream SGLang 0.5.23`` (with the source folder when not the installed copy), or ``""``."""
    if not code:
        return ""
    origin = code.get("origin") or "installed"
    return f"upstream {code.get('title') or code.get('distribution')} {code.get('version')}" + (
        "" if origin == "installed" else f" ({origin})"
    )

"""The trace record: the ordered driver steps of one run, as data.

A trace is what outlives refactors: hypothesis's example database is a cache
keyed by source digests and drops entries when a machine changes, while a trace
names operations and concrete arguments only (docs/corpus.md has the format,
harness/traces/trace.schema.json its JSON Schema).  Every driver records into one; the
file side (validation, the corpus store, replay, shrinking) lives in
:mod:`poolfuzz.harness.traces`, above the judge.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
Args = dict[str, Any]
"""One step's arguments, by argument name: the JSON values a driver operation takes and a trace records."""
DEFAULT_AUDIT_PERIOD = 8
"""The driver's full-audit schedule when a trace does not record one (``Driver``'s default)."""


@dataclass
class Trace:
    family: str
    implementation: str
    config: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    expect: dict[str, Any] = field(default_factory=lambda: {"outcome": "pass"})
    provenance: dict[str, Any] = field(default_factory=dict)
    audit_period: int = DEFAULT_AUDIT_PERIOD
    """The driver ran its full audit every this many steps; replay keeps the schedule."""

    def record(self, op: str, args: Args) -> None:
        self.steps.append({"op": op, "args": _plain(args)})

    def expect_violation(self, invariant_id: str) -> None:
        """Record that this trace breaks ``invariant_id`` on its own implementation (a found counterexample)."""
        self.expect = {"outcome": "violation", "invariant": invariant_id, "implementation": self.implementation}

    @property
    def recorded_device(self) -> str:
        """The device the trace ran on (its config's ``device``; CPU for a trace that names none)."""
        return str(self.config.get("device", "cpu"))

    def describe(self) -> str:
        return f"{self.family} trace ({len(self.steps)} steps, implementation {self.implementation or 'default'})"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "family": self.family,
            "implementation": self.implementation,
            "config": self.config,
            "steps": self.steps,
            "expect": self.expect,
            "audit_period": self.audit_period,
            "provenance": self.provenance,
        }

    def dumps(self) -> str:
        """Canonical text: sorted keys, fixed separators, so equal traces are equal bytes."""
        return json.dumps(self.to_json(), sort_keys=True, indent=1, ensure_ascii=True) + "\n"

    def steps_text(self) -> str:
        """The steps as readable calls, one a line."""
        lines = []
        for number, step in enumerate(self.steps, 1):
            args = ", ".join(f"{k}={v!r}" for k, v in sorted(step["args"].items()))
            lines.append(f"  {number:3d}. {step['op']}({args})")
        return "\n".join(lines)


def _plain(value: Any) -> Any:
    """JSON-able copy of an argument: tensors and tuples become lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ------------------------------------------------------------------ provenance
def provenance(*, seed: int | str | None = None, note: str = "") -> dict[str, Any]:
    """Where a trace came from: tool versions, the seed if known, today's date (UTC) and a note."""
    from importlib import metadata

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {
        "poolfuzz": version("poolfuzz"),
        "hypothesis": version("hypothesis"),
        "torch": version("torch"),
        "seed": seed,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "note": note,
    }


def fill_provenance(trace: Trace, *, seed: int | str | None = None, note: str = "") -> Trace:
    """Fill the provenance fields ``trace`` lacks (a note or seed already there is kept); returns ``trace``."""
    for key, value in provenance(seed=seed, note=note).items():
        if trace.provenance.get(key) in (None, ""):
            trace.provenance[key] = value
    return trace

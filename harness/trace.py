"""Traces: the ordered driver steps of one run, as durable JSON.

A trace is what outlives refactors: hypothesis's example database is a cache
keyed by source digests and drops entries when a machine changes, while a trace
names operations and concrete arguments only (docs/corpus.md has the format).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


class TraceError(ValueError):
    """A trace file that cannot be used: corrupt, truncated, inconsistent or from an unknown schema."""

    def __init__(self, source: str, field_name: str, problem: str) -> None:
        self.source = source
        self.field = field_name
        super().__init__(f"{source}: field {field_name!r}: {problem}")


@dataclass
class Trace:
    family: str
    implementation: str
    config: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    expect: dict[str, Any] = field(default_factory=lambda: {"outcome": "pass"})
    provenance: dict[str, Any] = field(default_factory=dict)

    def record(self, op: str, args: dict[str, Any]) -> None:
        self.steps.append({"op": op, "args": _plain(args)})

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

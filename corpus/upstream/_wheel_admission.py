"""The installed SGLang wheel's admission code, compiled from its own files on a CPU without importing ``sglang``: for the
engine reproductions beside this file, which import nothing from poolfuzz.

``PrefillAdder``'s methods (managers/schedule_policy.py) are compiled one by one from the wheel's source into a namespace
that holds what admission reads on a non-AMD GPU without encoder replay, and :class:`EmptyTree` stands for a radix cache
with nothing cached.  The allocators and budgets they call are the wheel's own (``_wheel_allocators.py``).
"""

from __future__ import annotations
import __future__  # the compiler flag of upstream's own `from __future__ import annotations`

import ast
import contextlib
import dataclasses
import enum
import os
import types
from pathlib import Path
from typing import Any, Optional

from _wheel_allocators import SRT  # the sibling loader (the reproductions put this folder on the path)


def compiled(path: Path, namespace: dict[str, Any], names: tuple[str, ...], owner: str | None = None) -> dict[str, Any]:
    """The named top-level definitions of an upstream file (or methods of its class ``owner``), from its own source."""
    tree = ast.parse(path.read_text())
    scope = tree.body
    if owner is not None:
        scope = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner).body
    body = [node for node in scope
            if (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names)
            or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets))]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec",
                 flags=__future__.annotations.compiler_flag, dont_inherit=True), namespace)  # the file's own future import
    missing = [name for name in names if name not in namespace]
    assert not missing, f"{path.name} has no {missing}: not the 0.5.23 layout"
    return {name: namespace[name] for name in names}


def prefill_adder(methods: tuple[str, ...]) -> tuple[dict[str, Any], Any]:
    """``PrefillAdder``'s ``methods`` compiled from the wheel's schedule_policy.py, and its ``AddReqResult``.

    Their module namespace holds what admission on a non-AMD GPU without encoder replay reads; ``UnifiedRadixCache`` is a
    class no tree here is an instance of (the reproductions' trees are empty stand-ins)."""
    never = type("Never", (), {})
    policy: dict[str, Any] = {
        "os": os, "Enum": enum.Enum, "auto": enum.auto, "dataclass": dataclasses.dataclass,
        "contextmanager": contextlib.contextmanager, "nullcontext": contextlib.nullcontext, "Optional": Optional,
        "UnifiedRadixCache": never, "_IS_HIP": False, "PREFILL_TILE_BUDGET": 0,  # not an AMD GPU
        "get_exec": lambda: types.SimpleNamespace(features=types.SimpleNamespace(enable_encoder_swa_bounded_replay=False)),
        "get_schedule": lambda: types.SimpleNamespace(schedule_policy="fcfs"),  # server_args.py's default is "fcfs"
    }
    compiled_methods = compiled(SRT / "managers/schedule_policy.py", policy, methods, owner="PrefillAdder")
    compiled(SRT / "managers/schedule_policy.py", policy, ("CLIP_MAX_NEW_TOKENS", "AddReqResult", "_PrefillAdmission"))
    return compiled_methods, policy["AddReqResult"]


class EmptyTree:
    """An empty radix cache for admission: nothing cached, nothing evictable, locks that hold nothing."""

    disable = False
    buffer_pipeline = None

    def evictable_size(self) -> int:
        return 0

    def supports_mamba(self) -> bool:
        return False

    def lock(self, node: Any) -> None:
        return None

    def unlock(self, lock: Any) -> None:
        return None

    def finish_storage_prefetch_admission(self, handle: Any, **_: Any) -> None:
        return None

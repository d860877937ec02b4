"""Families and their implementations: which pool class each machine fuzzes.

Every family has a default implementation in :mod:`pools`.  ``FAMILY=module:attr``
swaps in any callable with the same constructor signature: that is how a user
fuzzes their own pool, and how canaries prove the harness has teeth.  The same
substitution is read from the ``--target`` CLI option, the pytest ``--target``
option and the ``POOLFUZZ_TARGETS`` environment variable (``;``-separated).

A target that does not validate its input (upstream SGLang, for one) sets the
attribute ``poolfuzz_check_misuse = False``; its machines then issue valid calls only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


class UnknownTargetError(LookupError):
    """A family name or ``module:attr`` spec that does not resolve."""


@dataclass(frozen=True)
class Family:
    name: str
    default: str
    driver: str
    machine: str
    summary: str


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("req_to_token", "pools:ReqToTokenPool", "harness.judge.drivers.rows:RowPoolDriver",
               "harness.machines.rows:RowPoolMachine", "request rows, tail pop"),
        Family("decode_req_to_token", "pools:DecodeReqToTokenPool", "harness.judge.drivers.rows:DecodeRowPoolDriver",
               "harness.machines.rows:DecodeRowPoolMachine", "decode request rows with pre-allocation, head pop"),
        Family("mamba_slots", "pools:MambaSlotAllocator", "harness.judge.drivers.mamba:MambaSlotDriver",
               "harness.machines.mamba:MambaSlotMachine", "Mamba state slots with group windows"),
        Family("hybrid_req_to_token", "pools:HybridReqToTokenPool", "harness.judge.drivers.hybrid:HybridDriver",
               "harness.machines.mamba:HybridMachine", "request rows plus Mamba slots, all-or-nothing"),
        Family("token_kv", "pools:TokenToKVPoolAllocator", "harness.judge.drivers.kv:TokenKVDriver",
               "harness.machines.kv:TokenKVMachine", "KV token slots, page size 1"),
        Family("paged_kv", "pools:PagedTokenToKVPoolAllocator", "harness.judge.drivers.kv:PagedKVDriver",
               "harness.machines.kv:PagedKVMachine", "paged KV allocator: alloc, free groups, extend, decode"),
        Family("scheduler", "harness.judge.drivers.scheduler:build_scheduler_pools", "harness.judge.drivers.scheduler:SchedulerDriver",
               "harness.machines.scheduler:SchedulerMachine", "rows, Mamba slots and paged KV driven as scheduler steps"),
    )
}

ENV_VAR = "POOLFUZZ_TARGETS"


def resolve(spec: str) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UnknownTargetError(f"target {spec!r} is not of the form module:attr")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownTargetError(f"target {spec!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownTargetError(f"target {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownTargetError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["FAMILY=module:attr", ...]`` to a mapping, validating family names."""
    overrides: dict[str, str] = {}
    for item in items:
        item = item.strip()
        if not item:
            continue
        name, sep, spec = item.partition("=")
        if not sep:
            raise UnknownTargetError(f"target override {item!r} is not of the form FAMILY=module:attr")
        family(name.strip())
        overrides[name.strip()] = spec.strip()
    return overrides


def env_overrides() -> dict[str, str]:
    return parse_overrides(os.environ.get(ENV_VAR, "").split(";"))


def implementation_for(name: str, overrides: dict[str, str] | None = None) -> str:
    """The ``module:attr`` spec that fuzzes family ``name``."""
    chosen = {**env_overrides(), **(overrides or {})}
    return chosen.get(name, family(name).default)


def load_factory(spec: str) -> Callable[..., Any]:
    factory = resolve(spec)
    if not callable(factory):
        raise UnknownTargetError(f"target {spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


def validates_input(factory: Any) -> bool:
    return bool(getattr(factory, "poolfuzz_check_misuse", True))

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
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from poolfuzz.harness.judge.kit import Family
from poolfuzz.harness.judge.limits import register_limits
from poolfuzz.harness.judge.moved import current_module, legacy_module
from poolfuzz.harness.judge.plugins import plugin_families


class UnknownTargetError(LookupError):
    """A family name or ``module:attr`` spec that does not resolve."""


KITS = (
    "poolfuzz.harness.kits.rows",
    "poolfuzz.harness.kits.mamba",
    "poolfuzz.harness.kits.kv",
    "poolfuzz.harness.kits.scheduler",
    "poolfuzz.harness.kits.engine",
    "poolfuzz.harness.kits.prefix_cache",
    "poolfuzz.harness.kits.block_pool",
    "poolfuzz.harness.kits.swa",
    "poolfuzz.harness.kits.vllm_engine",
)
"""Our family kits, one line each: a kit is a package whose ``__init__`` declares ``FAMILIES`` (:mod:`poolfuzz.harness.kits`)."""


def _declared(module_name: str) -> tuple[Family, ...]:
    module = importlib.import_module(module_name)
    declared = tuple(getattr(module, "FAMILIES", ()))
    assert declared and all(isinstance(f, Family) for f in declared), f"kit {module_name} declares no FAMILIES"
    return declared


FAMILIES: dict[str, Family] = {f.name: f for kit in KITS for f in _declared(kit)}
"""Every registered family by name: our kits' in :data:`KITS` order, then the plug-ins'."""

for _plugged in plugin_families(FAMILIES, Family):
    FAMILIES[_plugged.name] = _plugged
for _registered in FAMILIES.values():
    register_limits(_registered.name, _registered.limits)


ENV_VAR = "POOLFUZZ_TARGETS"


def resolve(spec: str) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted); a module that has moved is read at its new name
    (:mod:`poolfuzz.harness.judge.moved`), so a trace saved before the move still resolves."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UnknownTargetError(f"target {spec!r} is not of the form module:attr")
    try:
        obj: Any = _import_target_module(current_module(module_name))
    except ImportError as exc:
        renamed = legacy_module(module_name)
        try:
            obj = importlib.import_module(renamed) if renamed else None
        except ImportError:
            obj = None
        if obj is None:
            raise UnknownTargetError(f"target {spec!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownTargetError(f"target {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def _import_target_module(name: str) -> Any:
    """Import a target's module; one not found is looked for in the current directory too.

    ``poolfuzz`` and ``python -m pytest`` put the current directory on ``sys.path``; the
    ``poolfuzz`` console script and plain ``pytest`` do not, so ``--target req_to_token=mypool:MyPool``
    run from the project that holds ``mypool.py`` would not import there.  When the module's top-level
    package is not importable and the current directory holds it (``NAME.py`` or ``NAME/``), the
    directory is appended to ``sys.path`` (after the installed packages, so it shadows none of them:
    it is only consulted for what they lack) and the import is tried again.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = name.partition(".")[0]
        cwd = os.getcwd()
        if exc.name != top or "" in sys.path or cwd in sys.path:
            raise
        if not (os.path.isfile(os.path.join(cwd, f"{top}.py")) or os.path.isdir(os.path.join(cwd, top))):
            raise
        sys.path.append(cwd)
        importlib.invalidate_caches()
        return importlib.import_module(name)


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownTargetError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def parse_target(item: str) -> tuple[str, str]:
    """One ``--target`` value, ``FAMILY`` or ``FAMILY=module:attr``, to ``(family, spec)`` (``spec`` empty for
    ``FAMILY``); the family must be registered.  The one parser of target names, for every command."""
    name, sep, spec = (part.strip() for part in item.strip().partition("="))
    if not name:
        raise UnknownTargetError(f"target {item.strip()!r} names no family")
    if sep and not spec:
        raise UnknownTargetError(f"target {item.strip()!r} is not of the form FAMILY=module:attr")
    family(name)
    return name, spec


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["FAMILY=module:attr", ...]`` to a mapping (blank items skipped); each must name its implementation."""
    overrides: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        name, spec = parse_target(item)
        if not spec:
            raise UnknownTargetError(f"target override {item.strip()!r} is not of the form FAMILY=module:attr")
        overrides[name] = spec
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


def upstream_default(name: str) -> bool:
    """Whether family ``name``'s default implementation is upstream code (``engine``), not one of our pools.

    Such a family's default may break an invariant by upstream's own defect (a known finding), so the
    suite's "the production pool finds no violation" tests leave it to its own tests.
    """
    fam = family(name)
    return fam.default in fam.upstream


def family_unavailable(name: str) -> str | None:
    """Why family ``name``'s default implementation cannot be built here, or ``None``.

    A family whose default is an upstream target (``engine``: SGLang's own scheduler path) loads
    upstream when it resolves, so a machine without the package says so here in one line, and
    ``fuzz`` with no ``--target``, ``selfcheck`` and the test suite skip it with that reason.
    """
    try:
        load_factory(family(name).default)
    except UnknownTargetError as exc:
        return str(exc)
    return None


#: Constructor arguments a target need not take: the driver records them and passes only what is accepted.
OPTIONAL_ARGUMENTS = frozenset({"device"})


def check_target(name: str, spec: str) -> Callable[..., Any]:
    """The factory ``spec`` names, once it is known to fit family ``name``; else :class:`UnknownTargetError`.

    A substitute takes the family's configuration (its constructor binds the family's
    ``bench_config``, ``device`` optional) and, when it is a class, has every method of the
    family's protocol.  Without this check ``--target paged_kv=poolfuzz.pools:ReqToTokenPool`` builds
    nothing, raises ``TypeError`` inside the first example and is reported as a *finding*.
    """
    fam = family(name)
    factory = load_factory(spec)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C extension without a signature: nothing to check
        signature = None
    if signature is not None:
        accepted = _accepted_keywords(signature)
        config = {k: v for k, v in fam.bench_kwargs.items() if k not in OPTIONAL_ARGUMENTS or accepted is None or k in accepted}
        try:
            signature.bind(**config)
        except TypeError as exc:
            raise UnknownTargetError(
                f"target {name}={spec} does not take {name}'s configuration ({', '.join(sorted(config))}): {exc}"
            ) from None
    if fam.protocol and isinstance(factory, type):
        missing = [m for m in protocol_methods(resolve(fam.protocol)) if not hasattr(factory, m)]
        if missing:
            raise UnknownTargetError(f"target {name}={spec} is not a {name} pool: it lacks {', '.join(missing)} of {fam.protocol}")
    return factory


def _accepted_keywords(signature: inspect.Signature) -> set[str] | None:
    """Names a call may pass by keyword; ``None`` when ``**kwargs`` takes any."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return {p.name for p in signature.parameters.values() if p.kind in kinds}


def protocol_methods(protocol: type) -> list[str]:
    """The public methods a ``typing.Protocol`` declares, its bases' included (a property may be an
    instance attribute of the implementation, so only plain methods are required of the class)."""
    names: dict[str, None] = {}
    for klass in reversed(protocol.__mro__):
        if klass is object or not getattr(klass, "_is_protocol", False):
            continue
        for attr, value in vars(klass).items():
            if not attr.startswith("_") and inspect.isfunction(value):
                names[attr] = None
    return list(names)


def validates_input(factory: Any) -> bool:
    return bool(getattr(factory, "poolfuzz_check_misuse", True))

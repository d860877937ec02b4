"""Every hypothesis setting poolfuzz uses is built here: profiles and :func:`build_settings`.

User-facing profiles: ``ci``, ``dev``, ``nightly`` and ``debug``.  Internal ones,
one per engine: ``fuzz-round`` (a nightly worker's round), ``selfcheck`` (a canary
chase) and ``seeding`` (reproducible corpus seeding).

Every profile is registered under ``poolfuzz-<name>`` (:data:`PREFIX`): a project whose own
suite runs our machines (the pytest plugin) keeps its own ``ci`` or ``dev`` profile, which an
unprefixed registration would have replaced (re-registering the active profile reloads it).
poolfuzz's own entry points take the short names: ``HYPOTHESIS_PROFILE=ci``,
:func:`build_settings("ci") <build_settings>`, :func:`load_default_profile` (this repository's
test suite; under ``CI`` it loads ``poolfuzz-ci`` over hypothesis's built-in ``ci``).

Deadlines are off everywhere: torch and Triton pay cold-start costs that make
timing-based failures flaky (pytorch/FBGEMM#5932).  ``report_multiple_bugs`` is
off so a failure is one exception with one shrunk trace.

A derandomised run is reproducible only if every poolfuzz module is imported
first (:func:`import_every_module`): Hypothesis mixes literal constants mined
from every *local* module in ``sys.modules`` into what it generates, so without
this the examples a ``ci`` test draws depend on which modules earlier tests in
the same process happened to import.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import DirectoryBasedExampleDatabase

PREFIX = "poolfuzz-"
"""Our profiles' namespace in hypothesis's global profile registry."""
_OURS: set[str] = set()


def _register(name: str, parent: settings | None = None, **values: Any) -> None:
    _OURS.add(name)
    settings.register_profile(PREFIX + name, parent, **values)


def registered_name(name: str) -> str:
    """The name hypothesis knows profile ``name`` by: ours are prefixed, a project's own kept as is."""
    return PREFIX + name if name in _OURS else name


def profile(name: str) -> settings:
    """Profile ``name`` (ours by its short name, or any registered one); hypothesis's ``InvalidArgument`` if unknown."""
    return settings.get_profile(registered_name(name))


_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much, HealthCheck.large_base_example]
"""Health checks a pool machine fails by design.  ``large_base_example``: a move-table machine draws every
argument of every step (about five draws a step), so even hypothesis's smallest example of a 50-step run is
hundreds of choices; a fuzz round under ``fuzz-round`` reported that as a failure of four targets."""
_BASE = settings(deadline=None, report_multiple_bugs=False, suppress_health_check=_QUIET)

_register(
    "ci",
    derandomize=True,
    database=None,
    max_examples=40,
    stateful_step_count=30,
    print_blob=False,
    phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
    parent=_BASE,
)
_register("dev", database=DirectoryBasedExampleDatabase(".hypothesis/examples"), max_examples=100, stateful_step_count=50, parent=_BASE)
_register("nightly", _BASE, max_examples=2_000, stateful_step_count=200)
_register("debug", parent=profile("dev"), verbosity=Verbosity.verbose, max_examples=20)

_register(
    "fuzz-round",
    parent=profile("nightly"),
    derandomize=False,
    verbosity=Verbosity.quiet,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    print_blob=False,
)
_register(
    "selfcheck",
    parent=_BASE,
    database=None,
    derandomize=False,
    verbosity=Verbosity.quiet,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.generate, Phase.target, Phase.shrink],
)
_register(
    "seeding",
    parent=_BASE,
    database=None,
    derandomize=True,
    max_examples=500,
    stateful_step_count=30,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
)

PROFILES = ("ci", "dev", "nightly", "debug")
"""The profiles a person selects; the others are the engines' own."""


def build_settings(profile_name: str | None = None, **overrides: Any) -> settings:
    """Profile ``profile_name`` (default: the active one) with ``overrides``; the only settings constructor in poolfuzz.

    Derandomised settings import every poolfuzz module first (:func:`import_every_module`).
    """
    base = settings() if profile_name is None else profile(profile_name)
    built = settings(base, **overrides)
    if built.derandomize:
        import_every_module()
    return built


def pinned_settings(**overrides: Any) -> settings:
    """The derandomised ``ci`` profile with ``overrides``, whatever profile is active.

    For checks whose expected outcome is fixed (which invariant catches a planted
    bug): under a random profile the search may reach another violation first.
    """
    return build_settings("ci", **overrides)


PACKAGES = ("poolfuzz.pools", "poolfuzz.strategies", "poolfuzz.harness")
"""The packages whose modules Hypothesis mines for constants (its "local" code)."""
_imported = False


def import_every_module() -> None:
    """Import every module of :data:`PACKAGES` once, so Hypothesis's constant pool no longer depends on history.

    Hypothesis (6.131 and later) extracts the literal constants of every local
    module in ``sys.modules`` (``hypothesis.internal.constants_ast``) and
    draws from them now and then, derandomised or not; the pool grows as modules
    are imported.  A pinned canary check under ``pytest -n auto`` found its bug or
    not depending on whether an earlier test in the same worker had imported
    ``poolfuzz.harness.bench.run``.  With every module loaded up front the pool is the
    same in every process.  Optional extras that cannot be imported here (Triton,
    Redis) are skipped, as they are skipped everywhere else in such a process.
    """
    global _imported
    if _imported:
        return
    _imported = True
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass


def settings_for(**overrides: Any) -> settings:
    """The active profile with ``overrides`` applied."""
    return build_settings(None, **overrides)


def default_profile_name() -> str:
    """``HYPOTHESIS_PROFILE`` if set, else ``ci`` under CI, else ``dev``."""
    return os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")


def load_default_profile() -> str:
    """Load the default profile (see :func:`default_profile_name`); a derandomised one imports every module first."""
    name = default_profile_name()
    if profile(name).derandomize:
        import_every_module()
    settings.load_profile(registered_name(name))
    return name

"""A family kit's declaration: :class:`Family`, the one typed object the registry holds per pool family.

A kit is one folder (``harness/kits/<kit>/`` here, any package outside) whose ``__init__``
declares ``FAMILIES`` (or ``FAMILY``): each :class:`Family` names its parts as
``module:attr`` strings, resolved only when used, so declaring a kit imports nothing of
it.  :mod:`poolfuzz.harness.judge.families` lists our kits; the ``poolfuzz.families`` entry point
group adds others (:mod:`poolfuzz.harness.judge.plugins`).  The helpers below are the pieces
several of our kits' declarations share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poolfuzz.harness.judge.ops import Operations

if TYPE_CHECKING:
    from poolfuzz.harness.judge.config import PoolConfig
    from poolfuzz.harness.judge.limits import FamilyLimits


@dataclass(frozen=True, kw_only=True)
class Family:
    """One pool family's kit: everything the harness needs to fuzz, replay, bench and check it.

    Every reference is a ``module:attr`` (or module) string, resolved only when used,
    so the registry imports nothing above the judge and a family whose optional
    dependency is missing still lists.  Adding a family is one kit folder declaring it plus
    one line in :data:`poolfuzz.harness.judge.families.KITS` (``docs/adding-a-family.md``); a package
    outside this repository adds one through the ``poolfuzz.families`` entry point
    (:mod:`poolfuzz.harness.judge.plugins`).
    """

    name: str
    summary: str
    default: str
    """The pool factory fuzzed when no ``--target`` substitutes another."""
    driver: str
    """The :class:`~poolfuzz.harness.judge.driver.Driver` subclass that judges each step."""
    moves: str
    """The family's :class:`~poolfuzz.strategies.table.MoveTable` (or a function returning it): its hypothesis machine,
    walk and bench workload are generated from it, so each input is declared once."""
    bench_config: PoolConfig | tuple[tuple[str, Any], ...] = ()
    """The pool configuration the bench workload runs on (and a substitute target must take): the family's typed
    config, or (a plug-in's) ``(key, value)`` pairs."""
    canaries: tuple[str, ...] = ()
    """Modules whose ``CANARIES`` dicts plant this family's historical bugs (a module may serve several)."""
    upstream: tuple[str, ...] = ()
    """Target specs of upstream implementations of this family (``poolfuzz.harness.upstream``)."""
    invariants: tuple[str, ...] = ()
    """The invariant ids this family's driver checks (``harness list`` shows them)."""
    protocol: str = ""
    """The ``typing.Protocol`` (``poolfuzz.pools.protocols``) a pool class of this family satisfies: a
    substitute class lacking one of its methods is refused before anything is built."""
    device_path: bool = False
    """Whether the machine tests also run this family with the pools' device-path checks forced on the CPU."""
    optional_imports: tuple[str, ...] = ()
    """Optional dependencies of the family's pools (``triton``): the machine tests and ``harness mutate`` also
    run the family with each blocked from import (:mod:`poolfuzz.harness.machines.without`), as a host without it would."""
    variants: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    """Pinned variants of the family's machine that its machine tests run on the CPU, as ``(label, pins)``, each pin
    a keyword of the ``moves`` function; ``harness mutate`` runs these (as ``name[label]``) in place of the machine."""
    rate_target: int = 0
    """Checked steps per second one fuzz worker must reach (``harness bench``); 0: no target."""
    audit_period: int = 8
    """Steps between the driver's full audits in the family's machine (the scheduler's conservation equation
    runs with the audit, so it audits every 4)."""
    drain_period: int = 128
    """Steps between drain audits (the move table's ``drain`` plan run on a copy of the pool; also at teardown);
    0: at teardown only.  Chosen from their measured cost (``docs/benchmarks.md``, "Drain audits")."""
    limits: FamilyLimits
    """The family's size limits (:mod:`poolfuzz.harness.judge.limits`): every config key it takes and every step argument that
    sizes an allocation, with its bound.  Required, so no family's traces reach a constructor unchecked."""
    realistic: tuple[tuple[str, int | Callable[[Mapping[str, Any]], int]], ...] = ()
    """The least value a server builds or sends, per config key or step argument (``op.arg``, ``op.arg[*][1]``;
    a list's floor is its length), as an int or a function of the config: the floors of the realistic shrink
    (:mod:`poolfuzz.harness.traces.realistic`), so an upstream finding also reads as something a user could hit."""
    known_findings: str = ""
    """The :class:`~poolfuzz.harness.judge.contract.KnownFindingFilter` (``module:attr``) of the calls that reach this
    family's known upstream findings, which :func:`poolfuzz.harness.upstream.findings.machine_avoiding_known_findings`
    withholds; empty: the family has none."""
    classifier: str = ""
    """How a violation by one of its upstream targets is classified (``module:attr`` of a function of the trace's
    config and operations, returning a :class:`~poolfuzz.harness.upstream.classify.Classification`): the engine's steps are
    upstream's own scheduler iterations.  Empty: one class driven alone, ``latent`` (:mod:`poolfuzz.harness.upstream.classify`)."""
    not_covered: tuple[str, ...] = ()
    """What the family's configurations do not reach, one line each with the reason (``harness list`` prints
    them): a user reads there which of their deployment's paths the fuzzer leaves alone."""
    ops: type[Operations] | None = None
    """The family driver's declared operations and their arguments (the kit's ``ops`` module,
    :mod:`poolfuzz.harness.judge.ops`): every operation and argument the ``limits`` and ``realistic`` floors name must be
    declared there, or the kit is refused as it is declared; the driver's ``ops`` must be the same class.  ``None``
    (a plug-in's kit) checks nothing."""

    def __post_init__(self) -> None:
        if self.ops is not None:
            self.ops.check_paths(f"{self.name}'s limits", self.limits.args)
            self.ops.check_paths(f"{self.name}'s realistic floors", (key for key, _ in self.realistic))

    @property
    def bench_kwargs(self) -> dict[str, Any]:
        """The bench configuration as constructor keywords."""
        return self.bench_configuration.kwargs()

    @property
    def config_class(self) -> type[PoolConfig]:
        """The family's typed configuration: its kit's class (``limits=SomeConfig.with_args(...)``), or one
        generated from a bare limits row (:func:`poolfuzz.harness.judge.config.untyped_config`)."""
        from poolfuzz.harness.judge.config import config_class

        return config_class(self.name, self.limits)

    def configured(self, config: PoolConfig | Mapping[str, Any]) -> PoolConfig:
        """``config`` as the family's typed configuration: JSON (a trace's, a command line's) is checked and built
        once, here; a typed one must be of the family's class."""
        cls = self.config_class
        if isinstance(config, cls):
            return config
        if isinstance(config, Mapping):
            return cls.from_mapping(config)
        raise TypeError(f"{self.name} takes a {cls.__name__} configuration, not a {type(config).__name__}")

    @property
    def bench_configuration(self) -> PoolConfig:
        """The typed config the bench workload runs on (``bench_config``)."""
        config = self.bench_config
        return self.configured(config if not isinstance(config, tuple) else dict(config))


COMMON_INVARIANTS = ("valid-call-accepted", "misuse-rejected", "empty-pool-guard", "conservation")
"""What every pool family that validates its input checks."""
ALLOCATOR_INVARIANTS = (*COMMON_INVARIANTS, "reserved-never-handed-out", "no-double-allocation")
"""What every free-list family checks besides: a reserved index never handed out, none handed out twice."""


def settings(**values: Any) -> tuple[tuple[str, Any], ...]:
    """Keyword values as the ``(key, value)`` pairs a frozen :class:`Family` holds (``bench_config``, ``variants``)."""
    return tuple(values.items())


def pages(count: int) -> Callable[[Mapping[str, Any]], int]:
    """A realistic floor of ``count`` pages, in tokens of the config's ``page_size``."""
    return lambda config: count * int(config.get("page_size") or 1)

"""Drivers: one step of a fuzz run, as data.

A driver owns a pool (built by the family's target factory) and its shadow
model.  Each operation is a method taking plain JSON values, so the same code
serves the hypothesis machines, trace replay and the nightly runner:

1. :meth:`Driver.step` records ``(op, args)`` in the trace;
2. the operation asks the model what the contract says must happen (a result,
   ``None`` for a short pool, or a typed ``PoolError`` for misuse);
3. it calls the pool, compares, and updates the model from the contract, never
   from the pool's internals;
4. per-call checks run every step, the full :meth:`audit` every
   ``audit_period`` steps and at :meth:`teardown`;
5. with a drain plan (:meth:`Driver.enable_drains`), every ``drain_period`` steps and at
   teardown a *drain audit* (:meth:`Driver.drain_audit`) runs the plan on a copy.

A violation is raised as :class:`~poolfuzz.harness.judge.invariants.InvariantViolation` with the
step number and the trace attached, so whoever catches it can save the trace.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.contract import contract_of
from poolfuzz.harness.judge.invariants import InvariantViolation, check
from poolfuzz.harness.judge.ops import Operations, OpsError
from poolfuzz.harness.judge.trace import Args, Trace
from poolfuzz.pools.errors import ForeignIndexError, PoolError, ReservedIndexError

F = TypeVar("F", bound=Callable[..., Any])

ConfigLike = PoolConfig | Mapping[str, Any]
"""What a driver is built from: its family's typed config, or a mapping (a trace's JSON, a test's literal) that
the driver checks and builds into one, once."""

ConstructorKwargs = dict[str, Any]
"""The keywords of a deliberately malformed constructor call (``construct``): a config with overrides the family's
:class:`PoolConfig` would refuse, so a plain mapping, never a config."""

SKIPPED = object()
"""Returned by an operation that would be misuse while misuse checking is off."""

DrainPlan = Callable[["Driver"], Iterator[tuple[str, Args]]]
"""A family's drain plan, given the driver to drain: its steps, drawn lazily (each after the last one ran)."""

MAX_DRAIN_STEPS = 256
"""A drain plan's steps are cut here: a plan that never runs dry must not hang the run."""


class DrainCopyDiverged(RuntimeError):
    """A drain audit's copy found a violation its replay does not: the copy was not independent (a harness bug)."""


_COPIED_BY_REPLAY: set[type] = set()
"""Pool classes a deep copy failed on: their drain audits copy the driver by replaying its trace."""


def family_config(name: str, config: PoolConfig | Mapping[str, Any]) -> PoolConfig:
    """``config`` as family ``name``'s typed configuration (:meth:`~poolfuzz.harness.judge.kit.Family.configured`); a driver
    of no registered family is refused (:class:`~poolfuzz.harness.judge.families.UnknownTargetError`)."""
    from poolfuzz.harness.judge.families import family

    return family(name).configured(config)


def shape_that_runs(factory: Callable[..., Any], config: PoolConfig) -> PoolConfig:
    """``config`` as the target ``factory`` runs it: a target may declare ``poolfuzz_shape``, a function of the drawn
    config (an embedding server runs every drawn shape as full attention; the vLLM target beside our pool turns a shape
    to both pools where it allows them).  The driver builds, records and judges that shape, so a trace names what
    ran and replays it on the family's default target too."""
    shape = getattr(factory, "poolfuzz_shape", None)
    if shape is None:
        return config
    shaped = shape(config)
    assert type(shaped) is type(config), f"{factory!r}'s poolfuzz_shape returned a {type(shaped).__name__}"
    return shaped  # type: ignore[no-any-return]


def operation(fn: F) -> F:
    """Mark a driver method as a replayable operation."""
    fn.__poolfuzz_operation__ = True  # type: ignore[attr-defined]
    return fn


def _check_declared(cls: type[Driver], ops: type[Operations]) -> None:
    """Refuse a driver whose operations or their parameters differ from its kit's declaration."""
    if cls.operations != ops.names():
        raise OpsError(
            f"{cls.__name__}'s operations differ from {ops.__name__}: undeclared {sorted(cls.operations - ops.names())}, "
            f"not implemented {sorted(ops.names() - cls.operations)}"
        )
    for name in sorted(cls.operations):
        taken = tuple(inspect.signature(getattr(cls, name)).parameters)[1:]
        if taken != ops.arguments_of(name):
            raise OpsError(f"{cls.__name__}.{name} takes {taken}; {ops.__name__} declares {ops.arguments_of(name)}")


def error_numbers(error: PoolError) -> list[int]:
    """The indices a typed error names: ``indices`` (double free, foreign index) or ``index`` (reserved index)."""
    if isinstance(error, ReservedIndexError):
        return [error.index]
    return list(getattr(error, "indices", []))


def offends_free(named: list[int], in_range: Callable[[int], bool], releasable: Callable[[int], bool]) -> Callable[[PoolError, int], bool]:
    """What a rejected free of ``named`` ids (0 the padding id) may name, for ``expect_rejected(offending=...)``:
    0 for a reserved index, named ids out of range for a foreign one, and named ids repeated in the call
    or not ``releasable`` for a double free."""

    def offends(error: PoolError, number: int) -> bool:
        if isinstance(error, ReservedIndexError):
            return number == 0
        if isinstance(error, ForeignIndexError):
            return number in named and number != 0 and not in_range(number)
        return number in named and (named.count(number) > 1 or not releasable(number))

    return offends


class Driver:
    """Base class: step bookkeeping, misuse expectations and the audit schedule."""

    family: ClassVar[str] = ""
    operations: ClassVar[frozenset[str]] = frozenset()
    ops: ClassVar[type[Operations] | None] = None
    """The kit's declaration of this driver's operations and their arguments (:mod:`poolfuzz.harness.judge.ops`): the
    ``@operation`` methods must be exactly those, with those parameters, or the class is refused as it is built.
    ``None`` (a plug-in's driver) checks nothing."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.operations = frozenset(
            name for klass in cls.__mro__ for name, fn in vars(klass).items() if getattr(fn, "__poolfuzz_operation__", False)
        )
        if cls.ops is not None:
            _check_declared(cls, cls.ops)

    def __init__(
        self, factory: Callable[..., Any], config: ConfigLike, *, implementation: str = "", check_misuse: bool = True, audit_period: int = 8
    ) -> None:
        self.config: PoolConfig = shape_that_runs(factory, family_config(self.family, config))
        """The pool's configuration, typed (a subclass narrows it to its family's class); a mapping given here
        is checked and built once (:meth:`~poolfuzz.harness.judge.kit.Family.configured`), then shaped as the target
        runs it (:func:`shape_that_runs`)."""
        self.check_misuse = check_misuse
        self.audit_period = max(1, audit_period)
        self.steps = 0
        self.trace = Trace(family=self.family, implementation=implementation, config=self.config.to_json(), audit_period=self.audit_period)
        self.factory = factory
        self.contract = None if check_misuse else contract_of(factory)
        """The calls the target's own callers make (:mod:`poolfuzz.harness.judge.contract`): with valid calls only, the
        only ones issued."""
        self.refused_by_contract = 0
        self.off_path: list[tuple[int, str, str]] = []
        """``(step, op, what the callers do instead)`` for each step the class accepts but no caller sends today."""
        self.pool = factory(**self.config.kwargs())
        self.events: list[str] = []
        self.drain_plan: DrainPlan | None = None
        self.drain_period = 0
        self.drains = 0
        """Drain audits run so far (passing ones: a failing one raises)."""

    # ---------------------------------------------------------------- stepping
    def step(self, op: str, **args: Any) -> Any:
        """Record and run one operation; violations carry the step and the trace."""
        if op not in self.operations:
            raise KeyError(f"{type(self).__name__} has no operation {op!r}; known: {sorted(self.operations)}")
        if self.contract is not None:
            note = self.contract.judge(self, op, args)
            if note is None:
                self.refused_by_contract += 1  # the class forbids this call: not a valid one
                return None
            if note:
                self.off_path.append((self.steps + 1, op, note))
        self.steps += 1
        self.trace.record(op, args)
        try:
            result = getattr(self, op)(**args)
            if result is SKIPPED:
                if self.off_path and self.off_path[-1][0] == self.steps:
                    self.off_path.pop()
                self.trace.steps.pop()
                self.steps -= 1
                return None
            if self.steps % self.audit_period == 0:
                self.audit()
        except InvariantViolation as violation:
            raise self._annotate(violation)  # noqa: B904 - the same violation, annotated with its step
        if self.drain_period and self.steps % self.drain_period == 0 and type(self.pool) not in _COPIED_BY_REPLAY:
            self.drain_audit()  # a copy by replay costs the whole trace again: those pools drain at teardown only
        return result

    # ------------------------------------------------------------ drain audits
    def enable_drains(self, plan: DrainPlan, period: int) -> None:
        """Run ``plan`` on a copy of this driver every ``period`` steps and at teardown (0: at teardown only;
        a pool that must be copied by replay, :meth:`_drain_copy`, drains at teardown only too)."""
        self.drain_plan, self.drain_period = plan, max(0, period)

    def drain_audit(self, *, in_place: bool = False) -> None:
        """Drain a copy of the pool and its model through ordinary steps; this driver is left as it was
        (``in_place``: drain this driver itself, as :meth:`teardown` does, the driver's last use).

        Bugs that corrupt ordering or ageing state (which node is oldest, which block
        is next in the free queue) show only when a later sequence drains that state:
        a checkpoint that re-stamps a path can hide a wrong age for ever.  The plan
        (evict everything in policy order, allocate until refused, free everything)
        asks every such question now, and every answer is judged by the steps' own
        checks.  A violation is raised with the drained driver's trace (this trace plus
        the drain steps), so it replays as it was found; the message says a drain found it.
        """
        plan = self.drain_plan
        if plan is None:
            return
        drained = self if in_place else self._drain_copy()
        drained.drain_plan, drained.drain_period = None, 0
        start = drained.steps
        try:
            for number, (op, args) in enumerate(plan(drained)):
                if number >= MAX_DRAIN_STEPS:
                    break
                drained.step(op, **args)
            drained.audit_now()
        except InvariantViolation as violation:
            found = violation if in_place else self._confirmed(violation, drained.trace.steps)
            found.args = (f"{found.args[0]}\n  found by a drain audit after step {start} (the drain's steps follow it in the trace)",)
            raise found from None
        self.drains += 1

    def _confirmed(self, violation: InvariantViolation, steps: list[dict[str, Any]]) -> InvariantViolation:
        """The violation a copy's drain found, found again by a fresh driver replaying its steps.

        A copy that shares state with its original (a NumPy view of the original's
        tensor, :mod:`poolfuzz.pools.host_views`) would report a bug of the copy, not of the
        pool; a finding must reproduce, so only a replayed one is raised.
        """
        try:
            self._replayed(steps)
        except InvariantViolation as again:
            if again.invariant_id == violation.invariant_id:
                return again
        raise DrainCopyDiverged(
            f"a drain audit on a copy of the {self.family} driver found [{violation.invariant_id}], which a fresh "
            f"driver replaying the same {len(steps)} steps does not: the copy shares state with the original "
            f"(a harness bug; give the pool's views to poolfuzz.pools.host_views)"
        ) from violation

    def _replayed(self, steps: list[dict[str, Any]]) -> Driver:
        """A new driver of this pool's factory and configuration that has run ``steps`` (and audited after them)."""
        fresh = type(self)(
            self.factory,
            self.config,
            implementation=self.trace.implementation,
            check_misuse=self.check_misuse,
            audit_period=self.audit_period,
        )
        for recorded in steps:
            fresh.step(recorded["op"], **recorded["args"])
        fresh.audit_now()
        return fresh

    def _drain_copy(self) -> Driver:
        """A copy of this driver, pool and model: a deep copy, or where the pool cannot be copied (an upstream
        class holding a module) a new driver that has replayed this one's trace (pools are deterministic:
        corpus replay rests on the same fact).

        A deep copy shares the trace's recorded steps (a new list of the same dicts, which nothing
        rewrites): deep-copying every step's arguments was most of a copy's cost.
        """
        if type(self.pool) not in _COPIED_BY_REPLAY:
            trace = copy.copy(self.trace)
            trace.steps = list(self.trace.steps)
            try:
                return copy.deepcopy(self, {id(self.trace): trace})
            except (TypeError, copy.Error):  # "cannot pickle 'module' object" and kin
                _COPIED_BY_REPLAY.add(type(self.pool))
        return self._replayed(self.trace.steps)

    def audit_now(self) -> None:
        """A full audit between steps (before a burst of catalogue steps), violations annotated with the step."""
        try:
            self.audit()
        except InvariantViolation as violation:
            raise self._annotate(violation)  # noqa: B904 - the same violation, annotated with its step

    def teardown(self) -> None:
        """The final full audit; also where leaks that no single step shows surface.  Then a drain audit, in place:
        nothing uses a driver after its teardown but its trace, which then ends with the drain's steps."""
        try:
            self.audit()
        except InvariantViolation as violation:
            raise self._annotate(violation, at_teardown=True)  # noqa: B904 - the same violation, annotated
        self.drain_audit(in_place=True)

    def _annotate(self, violation: InvariantViolation, at_teardown: bool = False) -> InvariantViolation:
        violation.step = None if at_teardown else self.steps
        violation.trace = self.trace
        where = "at teardown" if at_teardown else f"at step {self.steps}"
        violation.args = (f"{violation.args[0]}\n  {where} of {self.trace.describe()}",)
        return violation

    def event(self, label: str) -> None:
        """A rare state reached; machines forward these to ``hypothesis.event``."""
        self.events.append(label)

    @operation
    def construct(self, overrides: dict[str, Any]) -> Any:
        """Build another pool from this config with ``overrides``: a malformed configuration must be refused.

        Misuse only: :meth:`constructor_errors` names the typed errors the contract
        allows for it.  A configuration it finds valid, a family that models none,
        or a target that does not validate its input is not a call to make.
        """
        config: ConstructorKwargs = {**self.config.kwargs(), **overrides}
        errors = self.constructor_errors(config)
        if not errors or not self.check_misuse:
            return SKIPPED
        self.expect_rejected(lambda: self.factory(**config), errors, f"constructor with {overrides}")
        self.event(f"misuse: malformed constructor ({', '.join(sorted(overrides))})")
        return None

    def constructor_errors(self, config: ConstructorKwargs) -> tuple[type[PoolError], ...]:
        """The errors a constructor must raise for ``config``, the keyword arguments of a deliberately malformed
        call (so a plain mapping, not a checked :class:`PoolConfig`); empty when it is valid or not modelled."""
        return ()

    # --------------------------------------------------------- contract helpers
    def observe(self) -> Hashable:
        """Everything a misuse must leave unchanged, as a comparable value."""
        raise NotImplementedError

    def audit(self) -> None:
        """Compare the whole pool with the model."""
        raise NotImplementedError

    def expect_rejected(
        self,
        call: Callable[[], Any],
        error: type[PoolError] | tuple[type[PoolError], ...],
        what: str,
        *,
        offending: Callable[[PoolError, int], bool] | None = None,
    ) -> None:
        """Run a call the contract forbids: it must raise ``error`` (or one of them) and change nothing.

        With ``offending``, the error must also carry the numbers that broke the
        contract: at least one, and each one ``offending(error, number)`` accepts
        (a double free naming a live slot, or nothing, points whoever reads it
        at the wrong index).
        """
        names = " or ".join(e.__name__ for e in (error if isinstance(error, tuple) else (error,)))
        before = self.observe()
        try:
            call()
        except error as raised:
            if offending is not None:
                named = error_numbers(raised)
                check(
                    bool(named) and all(offending(raised, n) for n in named),
                    "misuse-rejected",
                    f"{what} raised {type(raised).__name__} naming {named}, not the numbers that broke the contract",
                )
        except Exception as other:  # another PoolError, or a crash instead of a typed rejection
            raise InvariantViolation(
                "misuse-rejected", f"{what} raised {type(other).__name__}, expected {names}", error=str(other)
            ) from other
        else:
            raise InvariantViolation("misuse-rejected", f"{what} was accepted; expected {names}")
        after = self.observe()
        check(before == after, "misuse-rejected", f"{what} raised but changed the pool", before=before, after=after)

    def expect_refused(
        self,
        call: Callable[[], Any],
        what: str,
        *,
        crash_id: str = "valid-call-accepted",
        state: Callable[[], Hashable] | None = None,
        **numbers: Any,
    ) -> None:
        """Run a valid call the model says the pool is too short to serve.

        Capacity running out is back-pressure, not an error: the call must return
        ``None`` and leave the pool exactly as it was (``empty-pool-guard``).  The
        tail-pop ``free_slots[-0:]`` bug (SGLang #32208) and kernels launched before
        the capacity check (#34399) both broke this.  ``state`` replaces
        :meth:`observe` where a refusal may legally reorder what it looks at;
        ``crash_id`` names the invariant a crash (an exception instead of ``None``) breaks.
        """
        look = state or self.observe
        before = look()
        result = self.expect_accepted(call, what, crash_id=crash_id)
        check(result is None, "empty-pool-guard", f"{what} succeeded although the pool is short", **numbers)
        after = look()
        check(after == before, "empty-pool-guard", f"refused {what} changed the pool", before=before, after=after)

    def expect_accepted(self, call: Callable[[], Any], what: str, *, crash_id: str = "valid-call-accepted") -> Any:
        """Run a call the contract allows: any exception is a violation."""
        try:
            return call()
        except InvariantViolation:
            raise
        except Exception as exc:
            raise InvariantViolation(crash_id, f"{what} raised {type(exc).__name__}: {exc}") from exc

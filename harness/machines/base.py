"""The machine base: hypothesis draws, the driver judges.

Rules draw small arguments and call :meth:`PoolMachine.do`, which runs one
driver step.  Everything a machine knows about correctness lives in its driver,
so replaying a trace runs exactly the checks a fuzz run ran.

Every machine also has the ``run_catalogue`` rule: the family's catalogue
(:attr:`PoolMachine.catalogue`, moves from its :mod:`strategies` table, one per kind
of misuse its pool must reject and per corner it must serve) run in order, each
move from its own seed with its setup steps.  Search alone reaches a rare kind
in a 30-step example only by luck; the catalogue issues every kind on purpose,
at a deliberate rate: at most once per :data:`CATALOGUE_SPACING` driver steps per
catalogue entry, so in long runs it is about a third of the steps (misuse steps
are cheap: validation, then nothing changes).  Its arguments are drawn through a
:class:`~poolfuzz.strategies.choosers.DataChooser`, so hypothesis shrinks them too.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import event, target
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.driver import Driver
from poolfuzz.harness.judge.families import family, resolve
from poolfuzz.strategies.choosers import Chooser, DataChooser
from poolfuzz.strategies.table import Move, MoveTable, corner_steps

CATALOGUE_SPACING = 2
"""Driver steps between two catalogue runs, per catalogue entry."""
CATALOGUE_SETUPS = 8
"""Setup steps a catalogue move may take toward its state (a block shared under one hash takes six)."""


class PoolMachine(RuleBasedStateMachine):
    """Base class; concrete machines add ``@initialize`` and ``@rule`` methods."""

    family: ClassVar[str] = ""
    factory: ClassVar[Callable[..., Any]]
    implementation: ClassVar[str] = ""
    check_misuse: ClassVar[bool] = True
    audit_period: ClassVar[int] = 8
    device: ClassVar[str] = "cpu"
    driver_class: ClassVar[type[Driver] | None] = None
    """A driver variant (a canary or test planting a bug in the harness's own calls); ``None``: the family's."""
    catalogue: ClassVar[tuple[Move[Any], ...]] = ()
    """One walk move per kind of misuse and corner of the family; misuse ones run only with misuse checking on."""
    table: ClassVar[MoveTable | None] = None
    """The family's move table, whose view the catalogue reads (``None``: a hand-written machine's moves read
    the driver)."""

    def __init__(self) -> None:
        super().__init__()
        self.driver: Driver | None = None
        self.view: Any = None
        self.peak_occupancy = 0.0
        self.failed = False
        self.next_catalogue = 0

    def start(self, config: PoolConfig) -> None:
        """Build the driver on ``config``, on this machine's device."""
        driver_cls = self.driver_class or resolve(family(self.family).driver)
        self.driver = driver_cls(
            type(self).factory,
            family(self.family).configured(config).on_device(self.device),
            implementation=self.implementation,
            check_misuse=self.check_misuse,
            audit_period=self.audit_period,
        )
        self.view = self.table.view(self.driver) if self.table is not None else self.driver
        plan = self.table.drain_plan() if self.table is not None else None
        if plan is not None:
            self.driver.enable_drains(plan, family(self.family).drain_period)

    @property
    def misuse_enabled(self) -> bool:
        return self.check_misuse

    def do(self, op: str, **args: Any) -> Any:
        assert self.driver is not None, "rules run after initialize"
        try:
            result = self.driver.step(op, **args)
        except BaseException:
            self.failed = True  # hypothesis still calls teardown: its audit must not mask this failure
            raise
        for label in self.driver.events:
            event(label)
        self.driver.events.clear()
        self.peak_occupancy = max(self.peak_occupancy, self.occupancy())
        return result

    def catalogue_due(self) -> bool:
        return bool(self.catalogue) and self.driver is not None and self.driver.steps >= self.next_catalogue

    @precondition(lambda self: self.catalogue_due())
    @rule(data=st.data())
    def run_catalogue(self, data: st.DataObject) -> None:
        """Every move of :attr:`catalogue` once, in order (its setup steps first), drawn through ``data``."""
        self.issue_catalogue(DataChooser.over(data))

    def issue_catalogue(self, choose: Chooser) -> None:
        """The catalogue's moves, each with up to :data:`CATALOGUE_SETUPS` setup steps.

        A full audit runs first: a pool the steps so far broke is named by the
        invariant they broke, not by the first catalogue call to trip over it.
        """
        assert self.driver is not None
        self.driver.audit_now()
        moves = [m for m in self.catalogue if self.misuse_enabled or not m.misuse]
        for move in moves:
            for op, args in corner_steps(move, self.view, choose, self.driver.event, setups=CATALOGUE_SETUPS):
                self.do(op, **args)
        self.next_catalogue = self.driver.steps + CATALOGUE_SPACING * len(moves)

    def known_handle(self, pick: int | None) -> int | None:
        """``None`` (a new request), or the ``pick``-th handle ever created, modulo their number.

        Drawing existing handles from bundles inside ``st.lists`` would abort the
        example whenever a bundle is empty; an index into the driver's handles never does.
        """
        handles = getattr(self.driver, "reqs", {})
        if pick is None or not handles:
            return None
        return sorted(handles)[pick % len(handles)]

    def occupancy(self) -> float:
        """Fraction of the pool in use; machines override to steer ``target()`` toward full pools."""
        return 0.0

    def teardown(self) -> None:
        """The catalogue once more on the final state (so every example issues it), then the final audit."""
        if self.driver is not None and not self.failed:
            target(self.peak_occupancy, label="peak occupancy")
            if self.catalogue:
                self.issue_catalogue(random.Random(self.driver.steps))  # teardown draws nothing: seeded by the trace
            self.driver.teardown()

"""The hypothesis machine of a family with a move table, generated from the table.

Two rules: ``init_pool`` draws the configuration with the table's ``configs``, and
``take_move`` makes a weighted pick among the table's moves and issues it (its setup
steps first, when the state lacks what the move needs), every value drawn through a
:class:`~poolfuzz.strategies.choosers.DataChooser`.  The inherited ``run_catalogue`` rule issues
the catalogue.  Nothing is written twice: the walk (:mod:`poolfuzz.harness.fuzz.walk`) and the
bench workload draw from the same moves with a plain ``random.Random``.
"""

from __future__ import annotations

import bisect
import itertools
from functools import cache
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule
from hypothesis.strategies import SearchStrategy

from poolfuzz.harness.judge.config import PoolConfig
from poolfuzz.harness.judge.families import UnknownTargetError, family, implementation_for, load_factory, resolve, validates_input
from poolfuzz.harness.machines.base import PoolMachine
from poolfuzz.strategies.choosers import DataChooser
from poolfuzz.strategies.table import corner_steps, load_table

PICK_TRIES = 4
"""Picks a ``take_move`` step makes before it gives up on a state that offers none of them (a no-op step)."""


class TableMachine(PoolMachine):
    """A machine whose every step is a move of :attr:`table`; subclasses set ``family`` and ``table``."""

    @initialize(data=st.data())
    def init_pool(self, data: st.DataObject) -> None:
        assert self.table is not None
        config = self.table.configs(DataChooser.over(data))
        self.moves = tuple(m for m in self.table.moves if self.check_misuse or not m.misuse)
        assert self.moves, f"{self.family}'s table has no move for a target that does not validate input"
        self.cumulative = tuple(itertools.accumulate(m.weight for m in self.moves))
        self.start(config)
        assert self.driver is not None
        for label in self.table.corners(self.driver.config):  # the shape that runs: a target may ask for other pools
            self.driver.event(label)

    @rule(data=st.data())
    def take_move(self, data: st.DataObject) -> None:
        """A weighted pick of a move (misuse ones only with misuse checking on), issued with its setup steps."""
        assert self.driver is not None
        choose = DataChooser.over(data)
        for _ in range(PICK_TRIES):
            move = self.moves[bisect.bisect(self.cumulative, choose.random() * self.cumulative[-1])]
            issued = False
            reached: list[str] = []  # a corner counts once its step ran: a caller contract may refuse it
            for op, args in corner_steps(move, self.view, choose, reached.append):
                refused = self.driver.refused_by_contract
                self.do(op, **args)
                issued = True
                if self.driver.refused_by_contract == refused:
                    for label in reached:
                        self.driver.event(label)
                reached.clear()
            if issued:
                return

    def occupancy(self) -> float:
        if self.table is None or self.table.occupancy is None or self.view is None:
            return 0.0
        return self.table.occupancy(self.view)


@cache
def table_machine(family_name: str) -> type[PoolMachine]:
    """The generated machine class of ``family_name`` (its ``moves`` spec names the table)."""
    fam = family(family_name)
    table = load_table(resolve(fam.moves))
    attrs: dict[str, Any] = {
        "family": family_name,
        "table": table,
        "catalogue": table.catalogue,
        "audit_period": fam.audit_period,
        "__module__": __name__,
        "__qualname__": f"TableMachine[{family_name}]",
    }
    return type(f"TableMachine[{family_name}]", (TableMachine,), attrs)


def config_strategy(family_name: str) -> SearchStrategy[PoolConfig]:
    """The configurations the family's machine draws: its table's ``configs``, through a chooser."""
    table = load_table(resolve(family(family_name).moves))

    @st.composite
    def configs(draw: Any) -> PoolConfig:
        return table.configs(DataChooser(draw))

    return configs()


def make_machine(
    family_name: str,
    spec: str | None = None,
    *,
    overrides: dict[str, str] | None = None,
    check_misuse: bool | None = None,
    device: str = "cpu",
) -> type[PoolMachine]:
    """A machine class for ``family_name`` bound to ``spec`` (or the active override, or the default)."""
    spec = spec or implementation_for(family_name, overrides)
    factory = load_factory(spec)
    base = machine_class(family_name)
    misuse = validates_input(factory) if check_misuse is None else check_misuse
    name = f"{base.__name__}[{spec}@{device}]"
    return type(
        name,
        (base,),
        {"factory": staticmethod(factory), "implementation": spec, "check_misuse": misuse, "device": device, "__module__": base.__module__},
    )


def machine_class(family_name: str) -> type[PoolMachine]:
    """The family's machine, generated from its move table; :class:`UnknownTargetError` if the table does not load."""
    family(family_name)
    try:
        return table_machine(family_name)
    except UnknownTargetError:
        raise
    except Exception as exc:
        raise UnknownTargetError(f"{family(family_name).moves}: {type(exc).__name__}: {exc}") from exc

"""What every engine family's driver shares: a judged step at every step, and the mirror over poolfuzz's pools.

An engine holds work in flight between steps, so an audit skipped for a step can miss the one moment a block a
queued batch still reads is handed to another request (``in-flight-reuse``): the period is 1, whatever the run
asks.  With ``pools="both"`` a second target, built from the same shape over ``poolfuzz.pools`` (``pools="poolfuzz"``),
takes the same steps, and the family's audit compares the two on what a user sees (``implementations-agree``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolfuzz.harness.judge.driver import ConfigLike, Driver


class EngineTargetDriver(Driver):
    """A :class:`~poolfuzz.harness.judge.driver.Driver` of an engine target; the family's config has a ``pools`` field."""

    def __init__(self, factory: Callable[..., Any], config: ConfigLike, **kwargs: Any) -> None:
        kwargs["audit_period"] = 1
        super().__init__(factory, config, **kwargs)
        self.targets_in_step: list[Any] = [self.pool]
        """The target under test, then its mirror over poolfuzz's pools when the shape says ``pools="both"``."""
        if getattr(self.config, "pools", None) == "both":
            self.targets_in_step.append(factory(**self.config.replaced(pools="poolfuzz").kwargs()))

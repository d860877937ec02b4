"""Choosers: the one interface a move table draws its arguments through.

A family's moves (:mod:`poolfuzz.strategies.table`) are written once, against :class:`Chooser`:
the handful of ``random.Random`` methods they need.  Two engines back it:

- the walk passes a plain :class:`random.Random` (it *is* a chooser), so a draw costs
  what ``random`` costs and a walk step stays in the microseconds;
- a hypothesis machine passes a :class:`DataChooser`, which turns every call into a
  draw of the matching strategy (:meth:`DataChooser.over` binds it to an ``st.data()``
  object, drawing integers straight from its choice sequence).  Each value is then a choice hypothesis's
  shrinker sees and minimises (a smaller size, an earlier element, an unshuffled
  list), instead of the 0-255 seed of a private ``random.Random`` the machines used to
  draw, whose inner choices no shrinker could touch: the traces hypothesis reported
  waited on our replay shrinker for what hypothesis could have done itself.

Only this subset is part of the interface; a move that needs more adds it here, backed
in both engines.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

if TYPE_CHECKING:
    from hypothesis.internal.conjecture.data import ConjectureData

T = TypeVar("T")

RANDOM_STEPS = 1 << 16
"""Resolution of :meth:`DataChooser.random`: a uniform float is one of this many steps in ``[0, 1)``."""
_BYTE = 1 << 8


@cache
def _integers_label() -> int | None:
    """The span label ``st.integers`` draws under, where hypothesis's choice layer is the one
    :meth:`DataChooser.over` writes to (internals: ``None`` where they moved)."""
    try:
        from hypothesis.internal.conjecture.data import ConjectureData
        from hypothesis.strategies._internal.lazy import unwrap_strategies

        label = unwrap_strategies(st.integers(0, 1)).label
    except (ImportError, AttributeError):  # pragma: no cover - a hypothesis without that layer takes the public path
        return None
    drawn_by_hand = all(hasattr(ConjectureData, name) for name in ("draw_integer", "start_span", "stop_span"))
    return label if isinstance(label, int) and drawn_by_hand else None


class Chooser(Protocol):
    """What a move may ask for; ``random.Random`` satisfies it, and so does :class:`DataChooser`."""

    def randint(self, a: int, b: int) -> int: ...

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int: ...

    def choice(self, seq: Sequence[T]) -> T: ...

    def choices(self, population: Sequence[T], weights: Sequence[float] | None = None, *, k: int = 1) -> list[T]: ...

    def sample(self, population: Sequence[T], k: int) -> list[T]: ...

    def shuffle(self, x: MutableSequence[Any]) -> None: ...

    def random(self) -> float: ...


class DataChooser:
    """A :class:`Chooser` over hypothesis's ``st.data()``: each call is one draw the shrinker understands.

    Every value shrinks toward the simplest: integers toward their lower bound, choices
    toward the first element, samples and shuffles toward the original order, and
    :meth:`random` toward 0.0 (so ``random() < p`` shrinks toward the branch taken with
    probability ``p``: write the rarer branch as the one that test selects).
    """

    __slots__ = ("_draw", "_choices")

    def __init__(self, draw: Callable[[SearchStrategy[Any]], Any], choices: ConjectureData | None = None) -> None:
        """``draw`` is ``data.draw`` of an ``st.data()`` object, or the ``draw`` of an ``st.composite``;
        ``choices``, where given, is the choice sequence ``draw`` writes to (:meth:`over`)."""
        self._draw = draw
        self._choices = choices

    @classmethod
    def over(cls, data: st.DataObject) -> DataChooser:
        """A chooser drawing from ``data`` without ``data.draw``'s per-draw bookkeeping.

        ``DataObject.draw`` snapshots the global ``random`` state around every draw (to catch
        strategies that use it; ours use none) and labels it for hypothesis's report, which a
        machine's trace already says better: measured with hypothesis 6.170, five sixths of a
        draw's cost, a quarter of a machine test's time.  Here a composite draw goes to the
        underlying ``ConjectureData.draw`` and :meth:`randint` draws the integer choice that
        ``st.integers`` draws, with the same bounds, weights and span, so the choice sequence, its
        shrinking and the example database are what the public path gives
        (``tests/test_choosers.py`` compares the two).  A hypothesis without that layer gets the public path.
        """
        choices = getattr(data, "conjecture_data", None)
        if choices is None or _integers_label() is None:
            return cls(data.draw)
        return cls(choices.draw, choices)

    def draw(self, strategy: SearchStrategy[T]) -> T:
        return self._draw(strategy)  # type: ignore[no-any-return]

    def randint(self, a: int, b: int) -> int:
        if a > b:
            raise ValueError(f"empty range for randint({a}, {b})")
        if a == b:
            return a
        choices = self._choices
        if choices is None:
            return self._draw(st.integers(min_value=a, max_value=b))  # type: ignore[no-any-return]
        label = _integers_label()
        assert label is not None, "over() binds choices only where the label resolved"
        # As IntegersStrategy.do_draw: a wide range makes its bounds and near-bounds likelier.
        weights = {a: 2 / 128, a + 1: 1 / 128, b - 1: 1 / 128, b: 2 / 128} if b - a > 127 else None
        choices.start_span(label)
        try:
            return choices.draw_integer(min_value=a, max_value=b, weights=weights)
        finally:
            choices.stop_span()

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        """``random.randrange``'s arguments; shrinks toward ``start``."""
        low, high = (0, start) if stop is None else (start, stop)
        count = len(range(low, high, step))
        if count == 0:
            raise ValueError(f"empty range for randrange({low}, {high}, {step})")
        return low + step * self.randint(0, count - 1)

    def choice(self, seq: Sequence[T]) -> T:
        if not seq:
            raise IndexError("cannot choose from an empty sequence")
        return seq[self.randint(0, len(seq) - 1)]

    def choices(self, population: Sequence[T], weights: Sequence[float] | None = None, *, k: int = 1) -> list[T]:
        """``k`` picks with replacement; weights are honoured as ``random`` does, by a uniform draw each."""
        if weights is None:
            return [self.choice(population) for _ in range(k)]
        total = float(sum(weights))
        picks = []
        for _ in range(k):
            point, running = self.random() * total, 0.0
            for item, weight in zip(population, weights):
                running += weight
                if point < running:
                    picks.append(item)
                    break
            else:
                picks.append(population[-1])
        return picks

    def sample(self, population: Sequence[T], k: int) -> list[T]:
        n = len(population)
        if not 0 <= k <= n:
            raise ValueError(f"sample of {k} from a population of {n}")
        if k == 0:
            return []
        indices = self._draw(st.lists(st.integers(min_value=0, max_value=n - 1), min_size=k, max_size=k, unique=True))
        return [population[i] for i in indices]

    def shuffle(self, x: MutableSequence[Any]) -> None:
        if len(x) > 1:
            x[:] = self._draw(st.permutations(list(x)))

    def random(self) -> float:
        """Two byte draws, high then low.  Hypothesis draws a wide integer range far from uniformly (measured,
        2,000 examples: 68% of ``integers(0, 65535)`` fall in its lowest tenth), so one 16-bit draw would hand
        a weighted pick's first move most picks; a byte's draws spread within 1.6x of uniform."""
        return (self.randint(0, _BYTE - 1) * _BYTE + self.randint(0, _BYTE - 1)) / RANDOM_STEPS

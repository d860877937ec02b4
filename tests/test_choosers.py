"""A chooser bound to hypothesis's choice sequence draws what the strategies draw.

:meth:`DataChooser.over` skips ``DataObject.draw`` and writes integer choices itself, so the machines' draws
cost a fifth of what they did; these tests hold it to the strategies it replaces: over the same choice
sequence, every ``Chooser`` method gives the same values and consumes exactly the same choices either way.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, seed, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture.data import ConjectureData

from poolfuzz.strategies.choosers import Chooser, DataChooser


def every_method(choose: Chooser) -> list[Any]:
    """One call of each method, narrow and wide ranges (a range over 127 draws with weights), weighted picks."""
    items = list(range(6))
    choose.shuffle(items)
    return [
        choose.randint(0, 5),
        choose.randint(3, 3),
        choose.randint(-10, 500),
        choose.randrange(2, 50, 3),
        choose.randrange(9),
        choose.choice("abcde"),
        choose.choices(range(10), weights=[5, 1, 1, 1, 1, 1, 1, 1, 1, 9], k=3),
        choose.choices("xyz", k=2),
        choose.sample(range(20), 4),
        items,
        choose.random(),
    ]


def replayed_through_strategies(choices: tuple[Any, ...]) -> tuple[list[Any], int]:
    """``every_method`` over ``choices`` with each value drawn from its strategy; the values and how many choices."""
    data = ConjectureData.for_choices(choices)
    values = every_method(DataChooser(data.draw))
    return values, data.index


@settings(max_examples=60, derandomize=True, database=None)
@given(st.data())
def test_the_bound_chooser_draws_the_values_and_choices_the_strategies_draw(data: st.DataObject) -> None:
    fast = DataChooser.over(data)
    assert fast._choices is data.conjecture_data, "this hypothesis has the choice layer: the fast path is the one taken"
    drawn = every_method(fast)
    choices = data.conjecture_data.choices
    assert replayed_through_strategies(choices) == (drawn, len(choices))


@settings(max_examples=60, derandomize=True, database=None)
@given(st.data())
def test_choices_written_through_the_strategies_replay_to_the_same_values_through_the_bound_chooser(data: st.DataObject) -> None:
    drawn = every_method(DataChooser(data.draw))
    choices = data.conjecture_data.choices
    replay = ConjectureData.for_choices(choices)
    assert every_method(DataChooser(replay.draw, replay)) == drawn
    assert replay.index == len(choices)


def generated_with_seed(bind: Any) -> list[list[Any]]:
    """Every example's values of ``every_method`` under one fixed seed, each drawn through ``bind(data)``."""
    examples: list[list[Any]] = []

    @seed(20261206)
    @settings(max_examples=80, database=None)
    @given(st.data())
    def generate(data: st.DataObject) -> None:
        examples.append(every_method(bind(data)))

    generate()
    return examples


def test_one_seed_generates_the_same_examples_through_the_bound_chooser_as_through_data_draw() -> None:
    """Generation, not only replay: the same weights (a wide range's bounds likelier) and the same spans
    (hypothesis's mutator copies spans by label) give the same examples from the same seed.  Either
    left out of :meth:`DataChooser.randint`'s fast path makes the two lists differ (tried)."""
    public = generated_with_seed(lambda data: DataChooser(data.draw))
    assert len({repr(values) for values in public}) > 40, "the seed generates varied examples, not one repeated"
    assert generated_with_seed(DataChooser.over) == public

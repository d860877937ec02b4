"""Values overridden for the length of a block (:mod:`poolfuzz.harness.upstream.overrides`)."""

from __future__ import annotations

import pytest

from poolfuzz.harness.upstream.overrides import overridden


def test_an_overridden_value_holds_inside_the_block_and_the_old_one_is_back_after_it() -> None:
    mapping = {"kept": "old", "other": "untouched"}
    with overridden(mapping, {"kept": "new", "added": "1"}):
        assert mapping == {"kept": "new", "other": "untouched", "added": "1"}
    assert mapping == {"kept": "old", "other": "untouched"}


def test_a_block_that_raises_still_puts_every_value_back() -> None:
    mapping = {"kept": "old"}
    with pytest.raises(RuntimeError), overridden(mapping, {"kept": "new", "added": "1"}):
        raise RuntimeError("the block failed")
    assert mapping == {"kept": "old"}

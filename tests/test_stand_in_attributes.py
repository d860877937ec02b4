"""Stand-ins that hold the attributes they are given and answer any other by a rule
(:class:`~poolfuzz.harness.upstream.sglang_runtime.Attributes`): a ``runtime_context`` namespace refuses it, a
scheduler collaborator's sink answers it with a no-op."""

from __future__ import annotations

from typing import Any

import pytest

from poolfuzz.harness.upstream.placeholders import StandInReached
from poolfuzz.harness.upstream.sglang_runtime import ConfigBag
from poolfuzz.harness.upstream.sglang_scheduler import Sink


def test_a_runtime_namespace_reads_its_leaves_and_refuses_any_other_naming_namespace_and_leaf() -> None:
    bag = ConfigBag("schedule", schedule_policy="fcfs")
    assert bag.schedule_policy == "fcfs"
    with pytest.raises(StandInReached, match=r"runtime_context\.get_schedule\(\)\.retraction_policy, which the engine target"):
        _ = bag.retraction_policy


def test_a_sink_answers_any_call_with_nothing_and_keeps_what_is_set_on_it() -> None:
    sink: Any = Sink("metrics_reporter", num_generated_tokens=0)  # upstream adds to it (batch_result_processor.py:985)
    assert sink.report_prefill_stats(1, batch=None) is None
    sink.num_generated_tokens += 3
    assert sink.num_generated_tokens == 3 and repr(sink) == "<sink metrics_reporter>"


def test_neither_answers_a_dunder_it_was_not_given() -> None:
    for stand_in in (ConfigBag("spec"), Sink("load_publisher")):
        with pytest.raises(AttributeError):
            _ = stand_in.__wrapped__

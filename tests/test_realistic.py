"""Realistic traces: a finding shrunk within the pools and requests a server builds, beside its minimal trace.

The floors are the family kit's ``realistic`` field; these tests hold what the mode
promises: it names the value below a floor, lifts without touching its input, never
shrinks below a floor, and finds a failing realistic trace where the bug is reachable.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from poolfuzz.harness.fuzz.realistic import find_realistic, realistic_note
from poolfuzz.harness.fuzz.summary import failure_lines
from poolfuzz.harness.fuzz.walk import WalkRun
from poolfuzz.harness.judge.families import FAMILIES
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.traces.realistic import lift, lift_step, shrink_realistic, unrealistic, within_floors
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.shrink import shrink_trace

PAGE_1_DECODE = "poolfuzz.harness.kits.kv.canaries:PageSize1DecodeConsumesNothing"
"""Upstream SGLang finding 1 put back in our paged allocator: decode at page size 1 consumes nothing."""


def test_every_floor_names_a_config_key_or_an_operation_of_its_family() -> None:
    for fam in FAMILIES.values():
        for key, floor in fam.realistic:
            assert isinstance(floor, int) or callable(floor), (fam.name, key)
            assert "." in key or key in fam.bench_kwargs, (fam.name, key)


def test_the_first_value_below_a_floor_is_named_with_its_field() -> None:
    config = {"size": 3, "page_size": 2, "size_swa": 2, "device": "cpu"}
    steps = [{"op": "extend", "args": {"batch": [[None, 2], [None, 0]]}}]
    assert unrealistic("swa_kv", config, steps) == "config.size = 3 < 4"
    assert unrealistic("swa_kv", {**config, "size": 4}, steps) == "steps[0].args.batch[1][1] = 0 < 1"
    assert unrealistic("swa_kv", {**config, "size": 4}, [{"op": "decode", "args": {"handles": [0]}}]) is None


def test_a_floor_on_a_list_is_a_floor_on_its_length() -> None:
    config = {"size": 16, "page_size": 2, "eviction_policy": "lru"}
    assert unrealistic("prefix_cache", config, [{"op": "request", "args": {"prompt": []}}]) == "steps[0].args.prompt = 0 < 1"
    assert lift_step("prefix_cache", "request", {"prompt": []}, config) == {"prompt": [1]}
    assert lift_step("prefix_cache", "request", {"prompt": [5, 6]}, config) == {"prompt": [5, 6]}


def test_lifting_raises_what_is_below_its_floor_and_leaves_its_input_alone() -> None:
    config = {"size": 2, "size_swa": 0, "page_size": 2}
    steps: list[dict[str, Any]] = [
        {"op": "extend", "args": {"batch": [[None, 0], [3, 5]]}},
        {"op": "tail", "args": {"handle": None, "extend_len": 0, "swa_tail_len": 0}},
    ]
    before = copy.deepcopy(steps)
    lifted_config, lifted_steps = lift("swa_kv", config, steps)
    assert steps == before and config == {"size": 2, "size_swa": 0, "page_size": 2}
    assert lifted_config == {"size": 4, "size_swa": 2, "page_size": 2}  # two pages full, one SWA
    assert lifted_steps[0]["args"]["batch"] == [[None, 1], [3, 5]]
    assert lifted_steps[1]["args"] == {"handle": None, "extend_len": 1, "swa_tail_len": 0}
    assert unrealistic("swa_kv", lifted_config, lifted_steps) is None


def page_1_finding() -> tuple[Trace, str]:
    walk = WalkRun("paged_kv", seed=0, spec=PAGE_1_DECODE, shrink=False)
    finding = walk.run(max_steps=20_000)
    assert finding is not None and finding.violation is not None
    return finding.trace, finding.violation.invariant_id


def test_the_realistic_trace_of_a_finding_fails_within_every_floor_where_the_minimal_one_does_not() -> None:
    trace, invariant = page_1_finding()
    minimal = shrink_trace(trace, invariant_id=invariant, target=PAGE_1_DECODE)
    realistic = find_realistic("paged_kv", PAGE_1_DECODE, invariant_id=invariant, trace=trace, seconds=10)
    assert realistic is not None
    assert unrealistic("paged_kv", minimal.config, minimal.steps) is not None
    assert unrealistic("paged_kv", realistic.config, realistic.steps) is None
    replayed = replay_trace(realistic)
    assert replayed.outcome == "violation" and replayed.invariant == realistic.expect["invariant"]


def test_a_lifted_trace_shrinks_within_the_floors_and_expects_the_invariant_it_shows() -> None:
    """An empty pool and a request of no tokens, lifted to a four-slot pool and a one-token request: the decode
    then writes where the request's page says it must not (``page-layout``), and the trace says so."""
    trace = Trace("paged_kv", PAGE_1_DECODE, {"size": 0, "page_size": 1, "need_sort": False, "kernel": "vectorized", "device": "cpu"})
    trace.record("extend", {"batch": [[None, 0]]})
    trace.record("decode", {"handles": [0]})
    lifted = shrink_realistic(trace, invariant_id="empty-pool-guard", target=PAGE_1_DECODE)
    assert lifted is not None and unrealistic("paged_kv", lifted.config, lifted.steps) is None
    assert lifted.config["size"] == 4 and lifted.steps[0]["args"]["batch"] == [[None, 1]]
    assert lifted.expect["invariant"] == "page-layout" == replay_trace(lifted).invariant


def test_a_trace_below_its_floors_is_not_shrunk_within_them() -> None:
    trace, invariant = page_1_finding()
    minimal = shrink_trace(trace, invariant_id=invariant, target=PAGE_1_DECODE)
    assert within_floors(minimal, invariant_id=invariant, target=PAGE_1_DECODE) is None


def test_our_own_pools_get_no_realistic_search(tmp_path: Any) -> None:
    trace, invariant = page_1_finding()
    assert realistic_note("paged_kv", PAGE_1_DECODE, invariant_id=invariant, trace=trace, seed=0, corpus=tmp_path) == ("", None)


def test_the_summary_names_the_realistic_trace_and_the_invariant_it_shows() -> None:
    failure = {
        "message": "[empty-pool-guard] refused",
        "invariant": "empty-pool-guard",
        "trace": "min.json",
        "steps": 2,
        "replay": "poolfuzz replay min.json",
        "realistic": {"trace": "real.json", "steps": 3, "invariant": "no-double-allocation"},
    }
    lines = failure_lines("paged_kv=poolfuzz.harness.upstream:PagedKV", failure)
    assert lines[-1] == ("    realistic trace (pools and requests a server builds, shows as [no-double-allocation]): real.json (3 steps)")


def test_no_realistic_search_runs_when_the_run_has_no_time_left(tmp_path: Any) -> None:
    trace, invariant = page_1_finding()
    note, found = realistic_note(
        "paged_kv", "poolfuzz.harness.upstream:PagedKV", invariant_id=invariant, trace=trace, seed=0, corpus=tmp_path, seconds=0.1
    )
    assert found is None and "no time left" in note
    assert list(tmp_path.iterdir()) == []


def test_the_search_stops_when_asked() -> None:
    """With nothing to lift, only the walk could find a trace; a stop asked for at once ends it with none."""
    started = time.monotonic()
    assert find_realistic("paged_kv", PAGE_1_DECODE, invariant_id="empty-pool-guard", seconds=30, stop=lambda: True) is None
    assert time.monotonic() - started < 5

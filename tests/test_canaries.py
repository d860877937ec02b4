"""Every canary is a real bug the harness catches, by the invariant its registry entry names.

Each canary runs through :func:`poolfuzz.harness.machines.run.run_machine` under the ``ci``
profile (derandomised, so the outcome is the same on every run) with a
400-example, 20-step budget.  The margin matters: hypothesis mixes constants
mined from our modules' source into its draws, so an unrelated edit moves them;
at 100 examples, moving the block-pool combination canaries into their own
module left one paged_kv canary unfound.  The
check is on the *first* failing example, unshrunk (``shrink=False``: neither
hypothesis's shrinker nor the replay shrinker): the invariant a bug trips
when the fuzzer meets it is what a user sees, and shrinking took nine tenths
of this file's time (45 s for one canary; the replay shrinker alone, a third).  Shrinking is checked where it is
the point: the canaries' committed regression traces in ``corpus/`` are
shrunk examples that must still trip their invariant on the canary and pass on
our pools (``tests/test_corpus.py``), and the fuzz runner saves shrunk traces
(``tests/test_fuzz.py``, ``tests/test_corpus.py``).  A canary whose family machine has not landed yet is
skipped with the reason.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from poolfuzz.harness.canaries import CANARIES, canary_machine, machine_available
from poolfuzz.harness.judge.families import FAMILIES, load_factory, resolve
from poolfuzz.harness.judge.invariants import INVARIANTS
from poolfuzz.harness.machines import pinned_settings, run_machine, violation_of

NAMES = sorted(CANARIES)


def ci_budget() -> settings:
    return pinned_settings(max_examples=400, stateful_step_count=20, phases=[Phase.explicit, Phase.generate, Phase.target])


@pytest.mark.parametrize("name", NAMES)
def test_each_registry_entry_resolves_to_a_callable_and_a_known_invariant(name: str) -> None:
    entry = CANARIES[name]
    assert entry.invariant in INVARIANTS
    assert entry.bug and entry.upstream
    assert callable(load_factory(entry.spec))
    if entry.driver is not None:
        assert callable(resolve(entry.driver))
    if entry.family not in FAMILIES:
        pytest.skip(f"family {entry.family!r} is not registered yet")


def test_there_are_at_least_twelve_canaries_and_none_lives_in_pools() -> None:
    assert len(CANARIES) >= 12
    assert not [c.spec for c in CANARIES.values() if c.spec.startswith("pools")]


@pytest.mark.parametrize("name", NAMES)
def test_each_canary_is_caught_by_its_expected_invariant_under_the_ci_profile(name: str) -> None:
    entry = CANARIES[name]
    missing = machine_available(entry.family)
    if missing is not None:
        pytest.skip(missing)
    with pytest.raises(Exception) as raised:
        run_machine(canary_machine(name), settings=ci_budget(), shrink=False)
    violation = violation_of(raised.value)
    assert violation is not None, f"{name} crashed the harness instead: {raised.value!r}"
    assert violation.invariant_id == entry.invariant, str(violation)

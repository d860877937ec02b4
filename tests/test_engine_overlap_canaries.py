"""The overlap canaries (harness/kits/engine/overlap_canaries.py): each plants one real bug shape of SGLang's overlap
path on one scheduler instance, is caught by its expected invariant on a short scripted stream, and leaves every
other target's upstream classes as they were."""

from __future__ import annotations

from typing import Any

import pytest

from poolfuzz.harness.judge.families import family_unavailable
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.engine.ops import EngineOps as Ops
from tests.engine_walk import run_engine

REASON = family_unavailable("engine")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"the engine target cannot load here: {REASON}")

SHAPE: dict[str, Any] = {
    "cache": "unified-rust",
    "page_size": 1,
    "rows": 4,
    "tokens": 48,
    "context": 64,
    "chunk": 8,
    "new_token_ratio": 0.1,
}

STREAM: tuple[tuple[str, dict[str, Any]], ...] = (
    (Ops.arrive, {"stem": 0, "length": 20, "tail": 2, "max_new": 6}),
    (Ops.arrive, {"stem": 1, "length": 6, "tail": 1, "max_new": 12}),
    (Ops.run, {"iterations": 6}),
    (Ops.abort, {"pick": 1}),
    (Ops.run, {"iterations": 3}),
    (Ops.iterate, {"eos": [0]}),
    (Ops.crowd, {"count": 4, "max_new": 20}),
    (Ops.run, {"iterations": 12}),
)
"""A chunked prompt beside a short one, an abort of a running request, an EOS finish, then a crowd decoding to its
budgets: every overlap path a canary plants in, in a few dozen iterations."""


def _overlap_canaries() -> dict[str, Any]:
    from poolfuzz.harness.kits.engine.overlap_canaries import CANARIES

    return CANARIES


WALKED = {"engine-overlap-middle-chunks-never-decremented": 26}
"""Canaries the scripted stream does not reach, and the seed of a 60-move walk of the engine table that does (the
leaked row shows after an abort and a pause around a chunked prompt)."""


def _first_violation(factory: Any, walk_seed: int | None = None) -> InvariantViolation | None:
    return run_engine(factory, SHAPE, STREAM, walk_seed, moves=60)[1]


@pytest.mark.parametrize("name", sorted(_overlap_canaries()))
def test_an_overlap_canary_is_caught_by_its_expected_invariant(name: str) -> None:
    from poolfuzz.harness.canaries import collected
    from poolfuzz.harness.judge.families import resolve

    canary = collected()[name]
    assert canary.family == "engine"
    violation = _first_violation(resolve(canary.spec), WALKED.get(name))
    assert violation is not None, f"{name} went uncaught"
    assert violation.invariant_id == canary.invariant, str(violation)


def test_the_same_stream_runs_clean_on_upstreams_overlap_loop_and_the_planting_leaks_to_no_other_loop() -> None:
    from poolfuzz.harness.judge.families import resolve
    from poolfuzz.harness.kits.engine.driver import build_engine

    for name in sorted(_overlap_canaries()):
        resolve(_overlap_canaries()[name].spec)(**SHAPE)  # every canary planted once in this process
    loop = build_engine(**SHAPE)
    assert loop.overlap and "process_batch_result" not in vars(loop.s) and "free_group_end" not in vars(loop.allocator)
    assert _first_violation(build_engine) is None
    assert all(_first_violation(build_engine, seed) is None for seed in WALKED.values())

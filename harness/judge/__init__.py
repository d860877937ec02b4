"""The judge: what a pool must do, and the checks that say whether it did.

The bottom layer of the harness, importing nothing above it (no hypothesis, machines, fuzz or
strategies), so the same checks serve fuzzing, replay, the walks and the benchmarks:
:mod:`~poolfuzz.harness.judge.families` (the registry of kits, plug-ins included), :mod:`~poolfuzz.harness.judge.kit`
(a kit's declaration), :mod:`~poolfuzz.harness.judge.driver` (one step: ask the model, call the pool, check;
each kit's model and driver, in :mod:`poolfuzz.harness.kits`, build on it),
:mod:`~poolfuzz.harness.judge.invariants` (the public invariant ids), :mod:`~poolfuzz.harness.judge.trace` and
:mod:`~poolfuzz.harness.judge.limits` (what one trace may ask of this machine).
"""

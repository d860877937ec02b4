"""``poolfuzz ci``: the CI mode over an engine's checkout (``--sglang-src PATH`` / ``--vllm-src PATH``).

One command an engine's own CI runs (``docs/ci.md``): replay the committed upstream corpus against the
checkout, then walk every upstream target the checkout supports for a fixed number of steps with a
seed derived from ``--seed`` and the target, so the same commit gives the same result; write JUnit XML
and a JSON report, keep every found trace as an artifact, and exit 1 on new findings only (known ones,
``corpus/known.toml``, are recorded), 2 on bad input.

:mod:`~poolfuzz.harness.ci.plan` (which distributions, targets, traces, seeds and budgets),
:mod:`~poolfuzz.harness.ci.walks` (one target's walk, in its own process), :mod:`~poolfuzz.harness.ci.replays` (the
replay phase), :mod:`~poolfuzz.harness.ci.outputs` (JUnit XML, the JSON report, the artifacts folder) and
:mod:`~poolfuzz.harness.ci.command` (the command); :mod:`~poolfuzz.harness.ci.records` declares the plan and the report's records.
"""

"""``poolfuzz bench``: what the checks cost and how fast the fuzzer reaches bugs, measured side by side.

Checked against bare pool calls on each family's generated bench workload
(:mod:`~poolfuzz.harness.bench.workloads`), ours against upstream's classes
(:mod:`~poolfuzz.harness.bench.versus_upstream`), the page-index kernels, time to detect every canary and
one-worker fuzz rates (:mod:`~poolfuzz.harness.bench.detect`), and branch coverage of ``pools/`` by the
machines alone (:mod:`~poolfuzz.harness.bench.coverage`).  Speed is measured here, never asserted in tests.
"""

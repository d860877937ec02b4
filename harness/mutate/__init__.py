"""Mutation testing of the fuzzer: plant small bugs in ``pools/`` and see which ones the machines catch.

``poolfuzz mutate`` (``poolfuzz.harness.mutate.command``) generates mutants from
the AST of each pools module (:mod:`~poolfuzz.harness.mutate.mutants`, operators in
:mod:`~poolfuzz.harness.mutate.operators`), splits off those that only change an error's
text (:mod:`~poolfuzz.harness.mutate.classify`), records once which lines each machine
executes (:mod:`~poolfuzz.harness.mutate.targets`), and runs each mutant in worker
processes (:mod:`~poolfuzz.harness.mutate.worker`, :mod:`~poolfuzz.harness.mutate.runner`) by
swapping the mutated function's code object in place (:mod:`~poolfuzz.harness.mutate.swap`).
Only the hypothesis state machines count as killers: this measures the fuzzer,
not the unit tests.  :mod:`~poolfuzz.harness.mutate.report` prints the tables and writes JSON.
"""

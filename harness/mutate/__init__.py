"""Mutation testing of the fuzzer: plant small bugs in ``pools/`` and see which ones the machines catch.

``python -m harness mutate`` (``harness.mutate.command``) generates mutants from
the AST of each pools module (:mod:`~harness.mutate.mutants`, operators in
:mod:`~harness.mutate.operators`), splits off those that only change an error's
text (:mod:`~harness.mutate.classify`), records once which lines each machine
executes (:mod:`~harness.mutate.targets`), and runs each mutant in worker
processes (:mod:`~harness.mutate.worker`, :mod:`~harness.mutate.runner`) by
swapping the mutated function's code object in place (:mod:`~harness.mutate.swap`).
Only the hypothesis state machines count as killers: this measures the fuzzer,
not the unit tests.  :mod:`~harness.mutate.report` prints the tables and writes JSON.
"""

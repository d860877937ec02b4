"""Traces as files: the corpus, loading and validating them, replaying, shrinking and keeping them.

A trace (:class:`harness.judge.trace.Trace`) is the ordered driver steps of one run.
:mod:`~harness.traces.schema` is the only way a file becomes one (its JSON Schema, then what a
schema cannot say: the family's driver signatures and size limits); :mod:`~harness.traces.replay`
runs one through its family's driver again; :mod:`~harness.traces.shrink` shortens a failing one;
:mod:`~harness.traces.corpus` and :mod:`~harness.traces.keep` file them so a found counterexample
is never lost; :mod:`~harness.traces.replay_cli` is ``poolfuzz replay``.
"""

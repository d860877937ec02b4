"""Traces as files: the corpus, loading and validating them, replaying, shrinking and keeping them.

A trace (:class:`poolfuzz.harness.judge.trace.Trace`) is the ordered driver steps of one run.
:mod:`~poolfuzz.harness.traces.schema` is the only way a file becomes one (its JSON Schema, then what a
schema cannot say: the family's driver signatures and size limits); :mod:`~poolfuzz.harness.traces.replay`
runs one through its family's driver again; :mod:`~poolfuzz.harness.traces.shrink` shortens a failing one;
:mod:`~poolfuzz.harness.traces.corpus` and :mod:`~poolfuzz.harness.traces.keep` file them so a found counterexample
is never lost; :mod:`~poolfuzz.harness.traces.replay_cli` is ``poolfuzz replay``.
"""

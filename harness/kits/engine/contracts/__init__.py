"""The caller contract of the engine kit's target (:mod:`poolfuzz.harness.judge.contract`): SGLang 0.5.23's scheduler
memory path."""

"""The caller contract of the block-pool kit's upstream target (:mod:`poolfuzz.harness.judge.contract`): vLLM 0.33.0's
``BlockPool``."""

"""The caller contract of the Mamba kit's upstream target (:mod:`poolfuzz.harness.judge.contract`): ``mamba_slots``."""

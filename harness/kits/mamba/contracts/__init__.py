"""The caller contract of the Mamba kit's upstream target (:mod:`harness.judge.contract`): ``mamba_slots``."""

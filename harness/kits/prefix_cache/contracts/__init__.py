"""The caller contracts of the prefix-cache kit's upstream targets (:mod:`poolfuzz.harness.judge.contract`): the Python
``RadixCache`` and the wheel's Rust tree core."""

"""The caller contracts of the KV kit's upstream targets (:mod:`poolfuzz.harness.judge.contract`): ``token_kv`` and
``paged_kv``, the calls SGLang 0.5.23's own callers make, each cited by the line that makes it."""

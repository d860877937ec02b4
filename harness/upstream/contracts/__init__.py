"""One caller contract per upstream target (:mod:`harness.judge.contract`): the calls SGLang's and vLLM's own
callers make, each cited by the upstream line that makes it.  A target's wrapper names its table with
``poolfuzz_contract``; ``python -m harness list --contracts`` prints them all."""

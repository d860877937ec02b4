"""The ``vllm_engine`` driver's operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`)."""

from __future__ import annotations

from poolfuzz.harness.judge.ops import Operations, op


class VllmEngineOps(Operations):
    """``vllm_engine``: what users and the model choose: arrivals, the tokens a step's results carry, aborts,
    runs of steps and a prefix-cache reset; with speculation, the drafts proposed and how many are accepted."""

    arrive = op("stem", "length", "tail", "max_new")
    iterate = op("eos", "stop")
    run = op("iterations")
    abort = op("pick")
    reset_cache = op()
    speculate = op("drafts", "accepted", "eos")

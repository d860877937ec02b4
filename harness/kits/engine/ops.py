"""The ``engine`` driver's operations and their arguments, declared once (:mod:`poolfuzz.harness.judge.ops`)."""

from __future__ import annotations

from poolfuzz.harness.judge.ops import Operations, op


class EngineOps(Operations):
    """``engine``: what users and the model choose: arrivals (one or a crowd, with a priority or without, or with an
    option the scheduler refuses), which live
    requests sample EOS at a result, runs of iterations, aborts (one, or all), the weight-update pause, time passing
    for a waiting request (the waiting timeout), sessions opened, continued and closed, and on a HiCache server how long
    its copies to host take and the operator's storage requests, on a PD server how long its transfers take and which peer is
    lost; the scheduler decides every memory call."""

    arrive = op("stem", "length", "tail", "max_new")
    prioritized = op("stem", "length", "tail", "max_new", "priority")
    refused = op("stem", "length", "tail", "max_new", "option")
    crowd = op("count", "max_new")
    iterate = op("eos")
    speculate = op("eos", "accepts")
    run = op("iterations")
    abort = op("pick")
    abort_all = op()
    expire = op("pick")
    pause = op("flush")
    open_session = op("session")
    close_session = op("session")
    session_arrive = op("stem", "length", "tail", "max_new", "session", "native")
    transfer_delay = op("iterations")
    hicache_admin = op("request")
    peer_fail = op("pick")

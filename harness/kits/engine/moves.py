"""The ``engine`` family's move table: server shapes, arrivals, EOS at results, aborts, iterations.

The fuzzer chooses what users and the model choose, never a memory call: the scheduler
(upstream's, in :class:`poolfuzz.harness.upstream.engine.EngineLoop`) decides what memory does with it.
Server shapes are small on purpose (a few rows, a few dozen KV slots), so admission refusals,
chunked prefill, eviction and decode retraction happen within a handful of iterations; prompts
come from stems that share prefixes so the tree splits and hits.
"""

from __future__ import annotations

from poolfuzz.harness.kits.arrivals import arrival
from poolfuzz.harness.kits.engine.config import DISAGGREGATION_MODES, HICACHE_WRITE_POLICIES, EngineTargetConfig
from poolfuzz.harness.kits.engine.ops import EngineOps as Ops
from poolfuzz.harness.upstream.engine_config import CACHES
from poolfuzz.harness.upstream.engine_mamba import MAMBA_REQUESTS_RATIO
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import DriverView, Move, MoveTable, Step, viewed_table

POOL_CHOICES = ("upstream", "both")
"""Upstream's pools alone, or in step with poolfuzz's (``implementations-agree``)."""


class EngineView(DriverView):
    """What the engine moves may read: how many requests wait and run, and the server shape."""

    __slots__ = ()

    @property
    def waiting(self) -> int:
        """The waiting queue, and on a PD server its PD queues (bootstrap, in-flight; prealloc, transfer, retracted)."""
        loop = self._driver.loop
        return len(loop.waiting_queue) + len(getattr(loop, "pd_queued", list)())

    @property
    def pd_queued(self) -> int:
        """A PD server's requests in its PD queues (0 elsewhere)."""
        return len(getattr(self._driver.loop, "pd_queued", list)())

    @property
    def queue(self) -> int:
        """The scheduler's waiting queue alone."""
        return len(self._driver.loop.waiting_queue)

    @property
    def scheduled(self) -> int:
        """The waiting and running requests: where the driver's abort list puts the PD-queued ones."""
        loop = self._driver.loop
        return len(loop.waiting_queue) + len(loop.running_batch.reqs)

    @property
    def running(self) -> int:
        return self._driver.loop.running_batch.batch_size()

    @property
    def rows(self) -> int:
        return int(self._driver.loop.config.rows)

    @property
    def config(self) -> EngineTargetConfig:
        config: EngineTargetConfig = self._driver.loop.config
        return config

    @property
    def chunked(self) -> str | None:
        chunked = self._driver.loop.chunked_req
        return None if chunked is None else str(chunked.rid)

    @property
    def pending_chunked_abort(self) -> bool:
        """An abort of the chunked request is recorded and waits for the next iteration's top
        (``_pending_chunked_abort_req``, scheduler.py:3676-3678, :3897)."""
        return getattr(self._driver.loop, "pending_chunked_abort", None) is not None

    def occupancy(self) -> float:
        loop = self._driver.loop
        return 1.0 - loop.allocator.available_size() / max(1, loop.config.tokens)


def engine_config(choose: Chooser) -> EngineTargetConfig:
    """A server shape: cache kind, page size, rows, KV slots, context, chunked prefill, and a model kind.

    A third of the shapes are a hybrid sliding-window model (what 0.5.23 builds for one: the SWA
    allocator under ``UnifiedRadixCache`` with FULL and SWA components), with a small window, an
    SWA pool sized as the configurator sizes it, and an eviction interval small enough that out-of-window
    frees happen within a request (the default 128 would never fire at these lengths).

    A quarter are a hybrid Mamba model (``HybridReqToTokenPool`` under ``UnifiedRadixCache`` with FULL
    and MAMBA, page size 1; :mod:`poolfuzz.harness.upstream.engine_mamba`): the fewest state slots the
    configurator allows for the rows (three per row, kv_cache_configurator.py:3134-3150) or a few more,
    so cached states are evicted to make room (``ensure_mamba_capacity``, allocation.py:298-324).  A
    third of those also have a sliding window: the model that is both, which 0.5.23's default memory
    path builds (``HybridReqToTokenPool`` under the SWA allocator, a FULL + SWA + MAMBA tree).
    """
    kind = choose.randrange(0, 12)
    mamba = 4 <= kind < 7
    swa = kind < 4 or (mamba and choose.randrange(0, 3) == 0)
    page_size = 1 if mamba else choose.choice((1, 1, 4))
    rows = choose.randint(2, 6)
    pages = choose.randint(6, 24)
    tokens = pages * page_size * (2 if page_size == 1 else 1)
    cache = choose.choice(CACHES[1:] if swa or mamba else CACHES)
    # The scheduler's new-token ratio starts at 0.7 and decays toward its floor between retractions
    # (new_token_ratio_tracker); a low ratio admits more, so decode runs out and retracts.
    chunk = choose.choice((None, None, 8, 16))
    ratio = choose.choice((0.7, 0.1, 0.1))
    pools = "upstream" if swa or mamba else choose.choice(POOL_CHOICES)
    config = EngineTargetConfig(
        cache=cache,
        page_size=page_size,
        rows=rows,
        tokens=tokens,
        context=64,
        chunk=chunk,
        new_token_ratio=ratio,
        pools=pools,
        sliding_window=None,
        swa_tokens=0,
        swa_eviction_interval=128,
        mamba_slots=0,
    )
    if swa:
        # As pool_configurator._solve_pool_sizes (model_executor/pool_configurator.py:879-881) sizes it: the
        # full pool times --swa-full-tokens-ratio (default 0.8), page-aligned; a pool the startup check
        # validate_swa_pool_size (:198-216) would refuse is grown to the smallest one it accepts.
        window = choose.choice((2, 4, 8))
        ratio = choose.choice((0.8, 0.8, 0.5, 0.3))
        swa_tokens = int(tokens * ratio) // page_size * page_size
        floor = (window + page_size) // page_size * page_size + page_size
        config = config.replaced(sliding_window=window, swa_tokens=max(swa_tokens, floor), swa_eviction_interval=choose.choice((1, 4, 128)))
    if mamba:
        config = config.replaced(mamba_slots=MAMBA_REQUESTS_RATIO * rows + choose.choice((0, 0, 1, 4)))
    # Every server runs the overlap loop (scheduler.py:500-502); the normal loop is the variant.
    config = config.replaced(loop=choose.choice(("overlap", "overlap", "normal")))
    # An embedding model is a target of its own (driver.build_embedding_engine), not a drawn shape: the overlap canaries
    # build from drawn shapes, and a planted chunk bug shows on an embedding server as a hang, not as the leak it plants.
    config = config.replaced(**scheduling_arguments(choose, rows))
    config = config.replaced(**speculation(choose, config))
    config = config.replaced(**sessions(choose, config))
    config = config.replaced(**hierarchical_cache(choose, config))
    return config.replaced(**disaggregation(choose, config))


def disaggregation(choose: Chooser, config: EngineTargetConfig) -> dict[str, object]:
    """Half of the full-attention shapes over upstream's pools alone without speculation, sessions or HiCache are a PD
    server (:mod:`poolfuzz.harness.upstream.engine_disagg`), prefill or decode (a ``both`` shape stays one: the mirror
    canaries need it), on the drawn loop.  Drawn last, so a seed's earlier draws stay what they were."""
    if (
        config.pools != "upstream"
        or config.hybrid_swa
        or config.hybrid_ssm
        or config.speculative_num_steps
        or config.embedding
        or config.session_radix_cache
        or config.hicache is not None
        or choose.randrange(0, 2)
    ):
        return {}
    mode = choose.choice(DISAGGREGATION_MODES)
    return {"disaggregation": mode}


def hierarchical_cache(choose: Chooser, config: EngineTargetConfig) -> dict[str, object]:
    """Half of the full-attention ``UnifiedRadixCache`` shapes without speculation or sessions run HiCache's device-host
    tier, write-through or write-back (:mod:`poolfuzz.harness.upstream.engine_hicache`), over upstream's pools (a drawn
    ``both`` becomes ``upstream``: poolfuzz's side has no host tier).  Drawn last, so a seed's earlier draws stay what
    they were."""
    if (
        config.cache == "radix"
        or config.hybrid_swa
        or config.hybrid_ssm
        or config.speculative_num_steps
        or config.embedding
        or config.session_radix_cache
        or choose.randrange(0, 2)
    ):
        return {}
    return {"hicache": choose.choice(HICACHE_WRITE_POLICIES), "pools": "upstream"}


def sessions(choose: Chooser, config: EngineTargetConfig) -> dict[str, object]:
    """Half of the shapes that can (``UnifiedRadixCache`` over the Python tree core, upstream's pools, no speculation) have
    ``--enable-session-radix-cache`` on; the session moves open, continue and close sessions there.  Drawn last, so a seed's
    earlier draws stay what they were."""
    if config.cache != "unified-python" or config.pools != "upstream" or config.embedding or config.speculative_num_steps:
        return {}
    return {"session_radix_cache": choose.randrange(0, 2) == 0}


def speculation(choose: Chooser, config: EngineTargetConfig) -> dict[str, object]:
    """A quarter of the full-attention shapes are an EAGLE server (``speculative_num_steps``, spec v2; see
    :mod:`poolfuzz.harness.upstream.engine_spec`), over upstream's pools (the combinations it runs on here).  Drawn last,
    so a seed's earlier draws stay what they were."""
    on = choose.randrange(0, 4) == 0
    if not on or config.sliding_window is not None or config.mamba_slots:
        return {}
    return {"speculative_num_steps": choose.choice((1, 2, 3, 5)), "pools": "upstream"}


def scheduling_arguments(choose: Chooser, rows: int) -> dict[str, object]:
    """The server arguments that change who enters the waiting queue, in what order, and who leaves it: a third schedule
    by priority (with preemption, its default), two in five cap the queue (``--max-queued-requests``, at the rows or half),
    a quarter of the others refuse requests that name a priority (``--abort-on-priority-when-disabled``), and one in
    five has the running timeout on (``SGLANG_REQ_RUNNING_TIMEOUT``; the ``expire`` move says when a request ran too long).
    Drawn after the rest of the shape, so a seed's earlier draws stay what they were."""
    priority = choose.randrange(0, 3) == 0
    queued = choose.choice((None, None, None, rows, max(1, rows // 2)))
    refuse = not priority and choose.randrange(0, 4) == 0
    running_timeout = choose.randrange(0, 5) == 0
    return {
        "priority_scheduling": priority,
        "max_queued_requests": queued,
        "abort_on_priority_when_disabled": refuse,
        "running_timeout": running_timeout,
    }


def engine_corners(config: EngineTargetConfig) -> list[str]:
    """The shape's labels: its cache, page size, chunking, model kind and whose pools."""
    model = "hybrid SWA" if config.sliding_window else "hybrid Mamba" if config.mamba_slots else "full attention"
    model = "embedding model" if config.embedding else model
    return [
        f"cache {config.cache}",
        f"page_size {config.page_size}",
        "chunked prefill" if config.chunk else "no chunking",
        model,
        f"pools {config.pools}",
        f"speculative decoding (K={config.speculative_num_steps})" if config.speculative_num_steps else "no speculation",
        *([f"HiCache {config.hicache}"] if config.hicache else []),
        *([f"PD {config.disaggregation}"] if config.disaggregation else []),
    ]


def _arrive(view: EngineView, choose: Chooser) -> Step | None:
    if view.waiting >= 2 * view.rows:
        return None
    return Ops.arrive, arrival(choose, length=20, tail=6, max_new=12)


def _iterate(view: EngineView, choose: Chooser) -> Step | None:
    """An iteration, with EOS for some live requests; on an EAGLE server, half of them with the verify's accept lengths
    chosen too (:func:`_speculate`).  In its place, half the time right after an abort of the chunked request, a pause
    (:func:`_pause_before_chunked_abort`), and one time in six on a HiCache server, a HiCache step (:func:`_hicache_step`).
    One move, so a shape without these draws exactly what it drew before."""
    if view.pending_chunked_abort and choose.randrange(0, 2) == 0:
        return _pause_before_chunked_abort(view, choose)
    if view.config.hicache and choose.randrange(0, 6) == 0:
        return _hicache_step(view, choose)
    if view.config.disaggregation and choose.randrange(0, 3) == 0:
        return _peer_step(view, choose)
    if view.config.speculative_num_steps and choose.randrange(0, 2) == 0:
        return _speculate(view, choose)
    live = view.running + view.waiting
    if live == 0:
        # An idle iteration runs on_idle's checks; with nothing live, only now and then.
        return (Ops.iterate, {"eos": []}) if choose.randrange(0, 5) == 0 else None
    eos = sorted({choose.randrange(0, live) for _ in range(choose.choice((0, 0, 0, 1, 2)))})
    return Ops.iterate, {"eos": eos}


def _speculate(view: EngineView, choose: Chooser) -> Step | None:
    """An iteration of an EAGLE server whose verify the fuzzer chooses: each live request's accepted drafts (0..K), and
    EOS inside some runs."""
    steps = view.config.speculative_num_steps
    live = view.running + view.waiting
    if not steps or live == 0:
        return None
    accepts = [choose.randint(0, steps) for _ in range(min(live, 8))]
    eos = sorted({choose.randrange(0, live) for _ in range(choose.choice((0, 0, 1)))})
    return Ops.speculate, {"eos": eos, "accepts": accepts}


def _crowd(view: EngineView, choose: Chooser) -> Step | None:
    if view.waiting >= view.rows:
        return None
    return Ops.crowd, {"count": view.rows, "max_new": choose.randint(16, 40)}


def _run(view: EngineView, choose: Chooser) -> Step | None:
    if view.running + view.waiting == 0:
        return None
    return Ops.run, {"iterations": choose.randint(4, 32)}


def _abort(view: EngineView, choose: Chooser) -> Step | None:
    if view.running + view.waiting == 0:
        return None
    return Ops.abort, {"pick": choose.randrange(0, 8)}


def _arrival_with(view: EngineView, choose: Chooser, name: str, argument: str, choices: int) -> Step | None:
    """An arrival drawn as :func:`_arrive` draws it, sent as ``name`` with one more argument drawn from ``range(choices)``."""
    step = _arrive(view, choose)
    if step is None:
        return None
    return name, {**step[1], argument: choose.randrange(0, choices)}


def _prioritized(view: EngineView, choose: Chooser) -> Step | None:
    """An arrival with a priority, where the server reads one (priority scheduling) or refuses one; the spread (0-49)
    crosses the preemption threshold (10) both ways."""
    config = view.config
    if view.waiting >= 2 * view.rows or not (config.priority_scheduling or config.abort_on_priority_when_disabled):
        return None
    return _arrival_with(view, choose, Ops.prioritized, "priority", 50)


def _refused(view: EngineView, choose: Chooser) -> Step | None:
    """An arrival with a request option the scheduler refuses (a logprob or routed-experts start past the prompt, a
    session never opened): it still takes a row and a slot for its one-token prefill."""
    if view.config.embedding:
        return None
    return _arrival_with(view, choose, Ops.refused, "option", 3)


def _abort_all(view: EngineView, choose: Chooser) -> Step | None:
    """Abort every request (``AbortReq(abort_all=True)``); rare, since it empties the server."""
    if view.running + view.waiting == 0 or choose.randrange(0, 4):
        return None
    return Ops.abort_all, {}


def _expire(view: EngineView, choose: Chooser) -> Step | None:
    """Time passes for a waiting request (the waiting timeout on) or a running one (the running timeout on)."""
    config = view.config
    if not ((view.waiting and config.waiting_timeout) or (view.running and config.running_timeout)):
        return None
    return Ops.expire, {"pick": choose.randrange(0, 8)}


def _abort_chunked(view: EngineView, choose: Chooser) -> Step | None:
    """Abort the request whose prefill is being chunked (``abort_request`` defers it to
    ``process_pending_chunked_abort``, scheduler.py:3776-3826): the driver's last live request is the chunked one."""
    if view.chunked is None:
        return None
    return Ops.abort, {"pick": -1}


def _pause(view: EngineView, choose: Chooser) -> Step | None:
    """A weight-update pause (RL servers pause, flush and resume between rollouts) while requests are live."""
    if view.running + view.waiting == 0 and view.chunked is None:
        return None
    return Ops.pause, {"flush": choose.randrange(0, 2) == 0}


def _arrive_or_session(view: EngineView, choose: Chooser) -> Step | None:
    """An arrival (:func:`_arrive`); on a server with session radix caching, half the time a session step instead: a
    session opened (one in five), a session request (three in five) or a session closed.  One move, so a shape without
    sessions draws exactly what it drew before."""
    if not view.config.session_radix_cache or choose.randrange(0, 2):
        return _arrive(view, choose)
    pick = choose.randrange(0, 5)
    if pick == 0:
        return _open_session(view, choose)
    if pick == 4:
        return _close_session(view, choose)
    return _session_arrive(view, choose)


def _open_session(view: EngineView, choose: Chooser) -> Step:
    """A client opens one of three sessions (an open one is refused), on a server with session radix caching."""
    return Ops.open_session, {"session": choose.randrange(0, 3)}


def _close_session(view: EngineView, choose: Chooser) -> Step:
    """A client closes one of the three sessions, open or not."""
    return Ops.close_session, {"session": choose.randrange(0, 3)}


def _session_arrive(view: EngineView, choose: Chooser) -> Step | None:
    """An arrival drawn as :func:`_arrive` draws it, in one of the three sessions: with ``session_params`` (continuing the
    session's latest finished request), or, one in three, as a radix-native request with a top-level ``session_id``."""
    step = _arrive(view, choose)
    if step is None:
        return None
    return Ops.session_arrive, {**step[1], "session": choose.randrange(0, 3), "native": choose.randrange(0, 3) == 0}


def _hicache_step(view: EngineView, choose: Chooser) -> Step:
    """On a HiCache server: how many iterations the copies to host submitted next take (0: done at once, a CPU's), or,
    one time in four, an operator's storage request (detach or clear the backend)."""
    if choose.randrange(0, 4) == 0:
        return Ops.hicache_admin, {"request": choose.randrange(0, 2)}
    return Ops.transfer_delay, {"iterations": choose.choice((0, 1, 2, 4))}


def _peer_step(view: EngineView, choose: Chooser) -> Step:
    """On a PD server: how many iterations longer the transfers concluding next take (0: at once, the fake backend's), a
    PD-queued request's peer lost, or an abort of a request that has not reached a batch: a PD-queued one (bootstrap or
    in-flight; prealloc, transfer or retracted) or one of the waiting queue (bootstrapped; on a decode server, transferred,
    holding its KV), two, one and two times in five.  The driver's abort lists the waiting requests first and the PD-queued
    ones after the running ones."""
    pick = choose.randrange(0, 5)
    if pick == 0:
        return Ops.peer_fail, {"pick": choose.randrange(0, 8)}
    queued = view.pd_queued + view.queue
    if pick >= 3 and queued:
        nth = choose.randrange(0, queued)
        return Ops.abort, {"pick": nth if nth < view.queue else view.scheduled + nth - view.queue}
    return Ops.transfer_delay, {"iterations": choose.choice((0, 1, 2, 4))}


def _pause_before_chunked_abort(view: EngineView, choose: Chooser) -> Step:
    """A weight-update pause between an abort of the chunked request and the iteration that would carry it out: the pause
    retracts the request (scheduler.py:5864-5869), so ``process_pending_chunked_abort`` finds it past chunked prefill
    holding nothing and drops the marker (:3794-3799).  Drawn only in that window, which one ``abort_chunked`` opens."""
    return Ops.pause, {"flush": choose.randrange(0, 2) == 0}


def engine_table() -> MoveTable[EngineView]:
    """Iterations commonest (each one runs upstream's whole memory path), arrivals next, aborts rare."""
    return viewed_table(
        EngineView,
        engine_config,
        (
            Move(Ops.iterate, 6, _iterate),
            Move(Ops.arrive, 4, _arrive_or_session),
            Move(Ops.crowd, 2, _crowd),
            Move(Ops.run, 2, _run, corner="decode under memory pressure"),
            Move(Ops.abort, 1, _abort),  # rare: a request aborted is a request that never reaches decode
            Move("abort_chunked", 1, _abort_chunked, corner="abort of a chunked request"),
            Move(Ops.pause, 1, _pause, corner="weight-update pause"),
            Move(Ops.prioritized, 3, _prioritized, corner="arrival with a priority"),
            Move(Ops.abort_all, 1, _abort_all, corner="abort of all requests"),
            Move(Ops.refused, 1, _refused, corner="a request option refused"),
            Move(Ops.expire, 2, _expire, corner="a timeout"),
        ),
        corners=engine_corners,
    )

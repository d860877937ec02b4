"""The ``engine`` family's driver: scheduler iterations of SGLang's memory path, judged after each one.

The pool under test is an :class:`poolfuzz.harness.upstream.engine.EngineLoop`: upstream's ``ReqToTokenPool``,
KV allocator and prefix cache driven by upstream's own scheduler calls.  The fuzzer chooses only
what a user and a model choose: which requests arrive (prompts that share prefixes on purpose,
output budgets), which running requests sample EOS at a result, which get aborted, and when the
scheduler iterates.  What the scheduler then does with memory (admission, chunking, eviction,
retraction, checkpoints, releases) is upstream's decision, so every call order reached is one the
0.5.23 scheduler produces.  After every step both judges of :mod:`poolfuzz.harness.kits.engine.checks` run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from poolfuzz.harness.engines import judges
from poolfuzz.harness.engines.driver import EngineTargetDriver
from poolfuzz.harness.engines.interface import Submission
from poolfuzz.harness.judge.driver import SKIPPED, ConfigLike, operation
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.kits.engine.checks import judge
from poolfuzz.harness.kits.engine.config import EngineTargetConfig, takes_the_shape
from poolfuzz.harness.kits.engine.observe import surface
from poolfuzz.harness.kits.engine.ops import EngineOps
from poolfuzz.harness.kits.engine.target import SGLangEngine
from poolfuzz.harness.upstream.sglang_modules import active

STEMS: tuple[tuple[int, ...], ...] = ((11, 12, 13, 14, 15, 16, 17, 18), (11, 12, 13, 14, 21, 22, 23, 24), (31, 32, 33, 34, 35, 36, 37, 38))
"""Prompt stems: the first two share a four-token prefix (a split), the third shares nothing."""


class EngineDriver(EngineTargetDriver):
    """Arrivals, iterations and aborts on one :class:`~poolfuzz.harness.upstream.engine.EngineLoop`, or two in step.

    With ``pools="both"`` every step runs on a loop over upstream's pools and on a mirror over
    poolfuzz's (:mod:`poolfuzz.harness.upstream.engine_ours`); after each step both are judged and their
    observable states compared (``implementations-agree``).
    """

    family = "engine"
    ops = EngineOps
    config: EngineTargetConfig

    def __init__(self, factory: Callable[..., Any], config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        self.loop = self.pool
        self.loops = self.targets_in_step
        self.targets = [SGLangEngine(loop) for loop in self.loops]
        self.checkers = [target.checker for target in self.targets]

    def step(self, op: str, **args: Any) -> Any:
        """One step with upstream's modules in place for all of it (one :func:`active` window, not one per call)."""
        with active(self.loop.m):
            return super().step(op, **args)

    def audit_now(self) -> None:
        with active(self.loop.m):
            super().audit_now()

    # ------------------------------------------------------------------ operations
    @operation
    def arrive(self, stem: int, length: int, tail: int, max_new: int) -> None:
        """A request arrives: ``length`` tokens of stem ``stem`` plus ``tail`` distinct tokens."""
        self._arrive(stem, length, tail, max_new, None)
        return None

    @operation
    def prioritized(self, stem: int, length: int, tail: int, max_new: int, priority: int) -> Any:
        """A request with a priority arrives (a server with priority scheduling, or one that refuses priorities); on the
        re-enacted loop, which has no priorities, the step is skipped."""
        if not hasattr(self.loop, "abort_all"):
            return SKIPPED
        self._arrive(stem, length, tail, max_new, priority)
        return None

    @operation
    def refused(self, stem: int, length: int, tail: int, max_new: int, option: int) -> Any:
        """A request with an option upstream's ``_handle_generate_request`` refuses (``REFUSED_OPTIONS``, picked by
        ``option``): queued finished with an abort, it leaves at a one-token prefill.  Skipped on the re-enacted loop and
        on an embedding server (these are generate-request options)."""
        from poolfuzz.harness.upstream.engine_scheduler import REFUSED_OPTIONS

        if not hasattr(self.loop, "abort_all") or self.loop.config.embedding:
            return SKIPPED
        names = sorted(REFUSED_OPTIONS)
        self._arrive(stem, length, tail, max_new, None, names[option % len(names)])
        return None

    @operation
    def open_session(self, session: int) -> Any:
        """A client opens session ``s{session}`` (``open_session``); skipped on a server without session radix caching."""
        if not self._sessions():
            return SKIPPED
        opened = self.loop.open_session(f"s{session}")
        self.event("a session opened" if opened else "a session open refused (already open)")
        return None

    @operation
    def close_session(self, session: int) -> Any:
        """A client closes session ``s{session}`` (``close_session``), open or not; skipped as :meth:`open_session` is."""
        if not self._sessions():
            return SKIPPED
        self.loop.close_session(f"s{session}")
        self.event("a session closed")
        return None

    @operation
    def session_arrive(self, stem: int, length: int, tail: int, max_new: int, session: int, native: bool) -> Any:
        """A request of session ``s{session}`` arrives: with ``session_params`` continuing the session's latest finished
        request (refused if the session is not open), or, ``native``, with a top-level ``session_id`` (a radix-native session
        request); skipped as :meth:`open_session` is."""
        if not self._sessions():
            return SKIPPED
        self._arrive(stem, length, tail, max_new, None, session=("native:" if native else "") + f"s{session}")
        return None

    @operation
    def transfer_delay(self, iterations: int) -> Any:
        """On a HiCache server, the device-to-host copies submitted from now on complete ``iterations`` iterations later
        (the acks the scheduler's ``check_hicache_events`` takes, in order); on a PD server, the transfers concluding from now
        on poll ``Transferring`` that many iterations longer (``engine_disagg.PeerClock``); skipped elsewhere."""
        pd = self._disaggregated()
        if not (self._hicache() or pd):
            return SKIPPED
        self.loop.set_transfer_delay(iterations)
        what = "PD transfers" if pd else "HiCache copies to host"
        self.event(f"{what} take {min(iterations, 2)}{'+' if iterations > 2 else ''} iterations")
        return None

    @operation
    def peer_fail(self, pick: int) -> Any:
        """On a PD server, the peer of one PD-queued request is lost: its fake sender or receiver reports ``Failed`` at its
        next poll; skipped elsewhere, or with no request in a PD queue."""
        if not self._disaggregated():
            return SKIPPED
        if self.loop.fail_transfer(pick) is None:
            return SKIPPED
        self.event("a PD peer lost")
        return None

    def _disaggregated(self) -> bool:
        """A PD server (``disaggregation``), on upstream's loops."""
        return getattr(self.loop.config, "disaggregation", None) is not None and all(hasattr(t.loop, "fail_transfer") for t in self.targets)

    @operation
    def hicache_admin(self, request: int) -> Any:
        """On a HiCache server, an operator's storage request: detach the storage backend (refused unless fully idle) or
        clear it; skipped elsewhere."""
        if not self._hicache():
            return SKIPPED
        kind = ("detach", "clear")[request % 2]
        done = self.loop.hicache_admin(kind)
        self.event(f"HiCache storage {kind}" + ("" if done else " refused"))
        return None

    def _hicache(self) -> bool:
        """A HiCache server on upstream's loops (a canary's re-enacted loop builds none)."""
        return all(getattr(t.loop, "transfers", None) is not None for t in self.targets)

    def _sessions(self) -> bool:
        """Sessions are driven on a server with session radix caching whose loops are upstream's scheduler (a canary's
        re-enacted loop built from such a shape has no session handlers)."""
        return bool(getattr(self.loop.config, "session_radix_cache", False)) and all(hasattr(t.loop, "open_session") for t in self.targets)

    def _arrive(
        self, stem: int, length: int, tail: int, max_new: int, priority: int | None, option: str | None = None, session: str | None = None
    ) -> None:
        base = STEMS[stem % len(STEMS)]
        prompt = [base[i % len(base)] for i in range(max(1, length))] + [40 + self.steps % 50 + i for i in range(tail)]
        request = Submission(tuple(prompt), max(1, max_new))
        admitted = [self._submit(target, request, priority, option, session) for target in self.targets]
        if admitted[0] is None:
            self.event("a request refused at the queue's door (queue limit, priority, or too long)")
        elif getattr(admitted[0], "to_finish", None) is not None:
            self.event("a request queued finished with an abort (too long, past the KV budget, or a refused option)")

    @staticmethod
    def _submit(target: SGLangEngine, request: Submission, priority: int | None, option: str | None, session: str | None = None) -> Any:
        # only the request fields a step sets: the re-enacted loop's arrive takes none of them
        fields = {name: value for name, value in (("priority", priority), ("option", option), ("session", session)) if value is not None}
        return target.loop.arrive(list(request.prompt), request.max_new_tokens, **fields)

    @operation
    def crowd(self, count: int, max_new: int) -> None:
        """``count`` requests with long outputs arrive at once: decode outgrows memory and retracts."""
        for i in range(count):
            request = Submission((11, 12, 13, 14, 50 + (self.steps + i) % 40), max(1, max_new))
            for target in self.targets:
                target.submit(request)
        self.event("a crowd arrived")
        return None

    @operation
    def iterate(self, eos: list[int]) -> str:
        """One scheduler iteration; the live requests at positions ``eos`` sample EOS at its result."""
        from poolfuzz.harness.upstream.engine import EOS

        kinds = []
        for target in self.targets:
            loop = target.loop
            live = list(loop.running_batch.reqs) + list(loop.waiting_queue)
            tokens = {live[i].rid: EOS for i in eos if i < len(live)}
            with upstream_raises(loop):
                kinds.append(target.step(tokens).kind)
        self.event(f"iteration: {kinds[0]}")
        return kinds[0]

    @operation
    def speculate(self, eos: list[int], accepts: list[int]) -> Any:
        """One iteration on an EAGLE server (``speculative_num_steps`` K) whose verify the fuzzer chooses: the live request
        at position ``i`` accepts ``accepts[i]`` drafts (0..K, plus the bonus token), those at ``eos`` sample EOS inside
        their run (:func:`~poolfuzz.harness.upstream.engine_spec.verify_result`).  Skipped on a server without speculation."""
        loop = self.loop
        if not getattr(loop.config, "speculative_num_steps", 0):
            return SKIPPED
        live = list(loop.running_batch.reqs) + list(loop.waiting_queue)
        loop.accepted = {live[i].rid: n for i, n in enumerate(accepts) if i < len(live)}
        try:
            return self.iterate(eos)
        finally:
            loop.accepted = {}

    @operation
    def run(self, iterations: int) -> None:
        """``iterations`` scheduler iterations with no EOS: requests decode to their budgets (retracting if short)."""
        for _ in range(iterations):
            self.iterate([])
            self.audit_now()
        return None

    @operation
    def abort(self, pick: int) -> Any:
        """Abort a queued, running or chunked request (the ``abort_request`` path)."""
        loop = self.loop
        chunked = [loop.chunked_req.rid] if loop.chunked_req is not None else []
        # a PD server's bootstrap, prealloc and transfer queues too, before the chunked request (abort_chunked picks it last)
        pd = [r.rid for r in getattr(loop, "pd_queued", list)()]
        live = [r.rid for r in loop.waiting_queue] + [r.rid for r in loop.running_batch.reqs] + pd + chunked
        if not live:
            return SKIPPED
        rid = live[pick % len(live)]
        wheres = [target.abort(rid) for target in self.targets]
        self.event(f"abort of a {wheres[0]} request")
        return None

    @operation
    def abort_all(self) -> Any:
        """``AbortReq(abort_all=True)`` on upstream's scheduler loops (every queued, chunked and running request); the
        re-enacted loop has no such path (skipped)."""
        if not hasattr(self.loop, "abort_all"):
            return SKIPPED
        named = [target.loop.abort_all() for target in self.targets]
        self.event(f"abort of all requests ({min(named[0], 4)}{'+' if named[0] > 4 else ''} live)")
        return None

    @operation
    def expire(self, pick: int) -> Any:
        """A waiting request waits past ``SGLANG_REQ_WAITING_TIMEOUT``, or a running one runs past
        ``SGLANG_REQ_RUNNING_TIMEOUT`` (servers with the knob on); the next iteration's ``ingest_requests`` aborts it.
        Skipped where no knob names a request."""
        if not hasattr(self.loop, "expire"):
            return SKIPPED
        expired = [target.loop.expire(pick) for target in self.targets]
        if expired[0] is None:
            return SKIPPED
        self.event("a request timed out")
        return None

    @operation
    def pause(self, flush: bool) -> Any:
        """The weight-update pause (``pause_generation`` in retract mode, ``flush_cache`` if ``flush``, then
        ``continue_generation``) on upstream's scheduler loops; the re-enacted loop has no such path (skipped).
        The flush is asked only of a loop over upstream's pools alone: ``pools/`` has no ``clear``, and in a ``both`` run
        flushing one side would part the two sides' observable states."""
        if not hasattr(self.loop, "pause"):
            return SKIPPED
        flush = flush and len(self.targets) == 1 and self.loop.config.pools == "upstream"
        flushed = [target.loop.pause(flush=flush) for target in self.targets]
        self.event("a weight-update pause (retract)" + (", cache flushed" if flushed[0] else ""))
        return None

    # ------------------------------------------------------------------ judging
    def observe(self) -> Hashable:
        return fingerprint(self.loop)

    def audit(self) -> None:
        """The engine judges over each loop (:func:`~poolfuzz.harness.kits.engine.checks.judge`), then upstream's pools and
        poolfuzz's compared (``implementations-agree``)."""
        compared = len(self.targets) == 2
        observations = [judge(target.loop, target.checker, with_surface=compared) for target in self.targets]
        if len(observations) == 2:
            judges.agree(*observations)

    def teardown(self) -> None:
        """Drain: every request finishes (EOS), judged each iteration, then the idle iteration's checks run."""
        with active(self.loop.m):
            self._drain()

    def _drain_bound(self) -> int:
        """Iterations enough to drain with EOS everywhere: each request's chunks, one decode, and slack for
        the retractions a crowded pool forces (the bound only stops a loop that never drains)."""
        loop = self.loop
        reqs = list(loop.waiting_queue) + list(loop.running_batch.reqs) + ([loop.chunked_req] if loop.chunked_req else [])
        reqs += list(getattr(loop, "pd_queued", list)())
        chunk = loop.config.chunk or loop.config.context
        return 4 * loop.config.rows + 8 + sum(2 + -(-(len(r.origin_input_ids) + len(r.output_ids)) // chunk) for r in reqs)

    def _drain(self) -> None:
        from poolfuzz.harness.upstream.engine import EOS

        for _ in range(self._drain_bound()):
            # Drained once an iteration formed no batch with nothing live (``fully_idle``) and nothing arrived
            # since: ``is_idle`` alone is true right after a prefill, whose batch joins the running batch only
            # at the next iteration (scheduler.py:3943-3957).
            if self.loop.fully_idle and self.loop.is_idle():
                break
            for loop in self.loops:
                # Every request the next batch may hold: the running batch, the last prefill (it joins the running
                # batch next), the chunked request and the queue (a re-prefilled request finishes at its prefill).
                live = list(loop.running_batch.reqs) + list(loop.waiting_queue) + ([loop.chunked_req] if loop.chunked_req else [])
                live += list(loop.last_batch.reqs) if loop.last_batch is not None else []
                with upstream_raises(loop):
                    loop.iterate({r.rid: EOS for r in live})
            self.audit_now()
        else:
            self.event("teardown did not drain: the idle checks see a busy loop")
        for loop in self.loops:
            with upstream_raises(loop):
                loop.iterate({})  # the idle iteration: on_idle's pool and request-pool checks
        super().teardown()


@contextlib.contextmanager
def upstream_raises(loop: Any) -> Iterator[None]:
    """An exception upstream raises inside its own scheduler path (an iteration, the teardown's drain) is the
    ``valid-call-accepted`` violation: every call it made was one the scheduler chose."""
    try:
        yield
    except InvariantViolation:
        raise
    except Exception as exc:
        raise InvariantViolation(
            "valid-call-accepted",
            f"scheduler iteration over {loop.config.pools} pools raised {type(exc).__name__}: {exc}",
            iteration=loop.iterations,
        ) from exc


def fingerprint(loop: Any) -> tuple[Any, ...]:
    """What a user of the loop can observe (:func:`poolfuzz.harness.kits.engine.observe.surface`), as one value."""
    return tuple(value for _, value in surface(loop))


@takes_the_shape
def build_engine(**shape: Any) -> Any:
    """The loop for one server shape (:class:`~poolfuzz.harness.kits.engine.config.EngineTargetConfig`, its keywords the
    config's fields); ``pools="both"`` builds the upstream-pools loop, and the driver adds the poolfuzz mirror.
    CPU only: ``device`` is recorded, as every family's is, and must be ``"cpu"``."""
    from poolfuzz.harness.upstream.engine import EngineLoop
    from poolfuzz.harness.upstream.engine_scheduler import SchedulerLoop

    config = EngineTargetConfig(**shape)
    if config.device != "cpu":
        raise ValueError(f"the engine target runs on CPU (upstream's Triton paths need a GPU build of sglang), not {config.device}")
    one = config.replaced(pools="upstream") if config.pools == "both" else config
    if config.loop == "reenacted":
        return EngineLoop(one)
    return SchedulerLoop(one, overlap=config.loop == "overlap" and not config.hybrid_ssm)


build_engine.poolfuzz_contract = "poolfuzz.harness.kits.engine.contracts.engine:CONTRACT"  # type: ignore[attr-defined]


def with_waiting_timeout(config: EngineTargetConfig) -> EngineTargetConfig:
    """A drawn shape with ``SGLANG_REQ_WAITING_TIMEOUT`` on."""
    return config.replaced(waiting_timeout=True)


@takes_the_shape
def build_engine_with_waiting_timeout(**shape: Any) -> Any:
    """Upstream's loop with ``SGLANG_REQ_WAITING_TIMEOUT`` on (``--target engine=...:build_engine_with_waiting_timeout``).

    Finding 5's hang stops a plain run within seconds; with the timeout a hung queue head is aborted, as a
    server configured so would, and fuzzing goes on past it over every shape.  The driver records that shape
    (``poolfuzz_shape``)."""
    return build_engine(**with_waiting_timeout(EngineTargetConfig(**shape)).kwargs())


build_engine_with_waiting_timeout.poolfuzz_contract = "poolfuzz.harness.kits.engine.contracts.engine:CONTRACT"  # type: ignore[attr-defined]
build_engine_with_waiting_timeout.poolfuzz_shape = with_waiting_timeout  # type: ignore[attr-defined]


def embedding_server(config: EngineTargetConfig) -> EngineTargetConfig:
    """A drawn shape as an embedding server runs it: full attention, no speculation or PD, ``embedding`` on, the overlap loop
    for the re-enacted one (which has no embedding path), and ``UnifiedRadixCache`` over the Rust core for the legacy
    ``RadixCache``, which 0.5.23 never builds for a model (mem_cache/registry.py:83-146): so a finding here is the
    server's, classified as the engine's are (contracts/engine.py::classify_failure)."""
    loop = "overlap" if config.loop == "reenacted" else config.loop
    cache = "unified-rust" if config.cache == "radix" else config.cache
    # an embedding server runs without PD here (EngineTargetConfig.disaggregation: generation models)
    return config.replaced(
        sliding_window=None,
        swa_tokens=0,
        mamba_slots=0,
        speculative_num_steps=0,
        loop=loop,
        cache=cache,
        embedding=True,
        disaggregation=None,
    )


@takes_the_shape
def build_embedding_engine(**shape: Any) -> Any:
    """Upstream's loop serving an embedding model (``--target engine=...:build_embedding_engine``): every drawn shape runs
    as :func:`embedding_server` makes it (requests through ``handle_embedding_request``, each leaving at its prefill with
    its prompt cached; ``EngineTargetConfig.embedding``).  The driver records that shape (``poolfuzz_shape``)."""
    return build_engine(**embedding_server(EngineTargetConfig(**shape)).kwargs())


build_embedding_engine.poolfuzz_contract = "poolfuzz.harness.kits.engine.contracts.engine:CONTRACT"  # type: ignore[attr-defined]
build_embedding_engine.poolfuzz_shape = embedding_server  # type: ignore[attr-defined]


@takes_the_shape
def build_poolfuzz_engine(**shape: Any) -> Any:
    """The same loop over poolfuzz's row pool and KV allocator alone (``--target engine=...:build_poolfuzz_engine``).

    Every drawn shape runs over ``pools/``; a hybrid-SWA or hybrid-Mamba shape runs as full attention, since
    ``pools/`` has neither an SWA allocator nor a ``HybridReqToTokenPool`` behind the 0.5.23 interface
    (``poolfuzz.pools.swa`` predates it; ``poolfuzz.pools.mamba`` keeps slots on the request, not in ``req.kv`` records,
    and :mod:`poolfuzz.harness.upstream.engine_ours` has no adapter for it yet)."""
    return build_engine(**over_our_pools(EngineTargetConfig(**shape)).kwargs())


def over_our_pools(config: EngineTargetConfig) -> EngineTargetConfig:
    """A drawn shape as :func:`build_poolfuzz_engine` runs it: over ``pools/``, full attention, no speculation or PD."""
    return config.replaced(
        pools="poolfuzz", sliding_window=None, swa_tokens=0, mamba_slots=0, speculative_num_steps=0, disaggregation=None
    )


build_poolfuzz_engine.poolfuzz_shape = over_our_pools  # type: ignore[attr-defined]

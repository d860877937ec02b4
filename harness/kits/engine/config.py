"""The engine family's server shape, declared once: what SGLang 0.5.23's memory configurator would build.

:class:`EngineTargetConfig` is the only declaration of the shape.  A trace's ``config`` is read into it (and
written from it, byte for byte); the move table draws it; the limits are its fields' bounds; the shapes
0.5.23 builds are its own check (:meth:`EngineTargetConfig.__post_init__`, an :class:`EngineShapeError`
when it is built, so replay refuses an unbuildable trace as bad input); and every target's keywords are its
fields (:func:`takes_the_shape` gives ``build_engine`` and its peers their signature), so the loop
(:class:`poolfuzz.harness.upstream.engine.EngineLoop`) and its builders read this object and nothing else.

Nothing here loads upstream: the registry imports it with the kit's declaration.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolfuzz.harness.judge.config import PoolConfig, bounded, setting, takes_config
from poolfuzz.harness.judge.limits import CELLS, CONTEXT, PAGE, ROWS, TOKENS, Footprint, LimitError

CACHES = ("radix", "unified-rust", "unified-python")
"""``radix``: the legacy Python ``RadixCache``; ``unified-*``: ``UnifiedRadixCache`` over a tree core."""
POOLS = ("upstream", "poolfuzz")
"""Whose ``ReqToTokenPool`` and KV allocator one loop runs: upstream's, or ours behind upstream's interface."""
TARGET_POOLS = (*POOLS, "both")
"""What a target may name: one loop's pools, or ``both`` (the driver runs upstream's and ours side by side)."""

LOOPS = ("overlap", "normal", "reenacted")
"""Which scheduler loop runs: upstream's ``Scheduler`` methods as ``event_loop_overlap`` (every server's default,
scheduler.py:500-502) or ``event_loop_normal`` runs them (:mod:`poolfuzz.harness.upstream.engine_scheduler`), or the
hand-written re-enactment of the normal loop (:mod:`poolfuzz.harness.upstream.engine`), kept while tests compare the two."""

MAX_DRAFT_STEPS = 256
"""The most EAGLE draft steps a replayed shape may ask for (``speculative_num_steps``): a bound against absurd traces, as
every limit is (the moves draw 1-5; production runs 1-7), so drawn shapes stay well inside it."""

MAMBA_REQUESTS_RATIO = 3
"""``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` (kv_cache_configurator.py:227): with the radix cache on, no
extra buffer and ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK`` off (environ.py:1637), ``_calculate_mamba_ratio``
is 3 (:3062-3086) and ``max_running_requests`` is capped at ``max_mamba_cache_size // 3`` (:3134-3150)."""


class EngineShapeError(LimitError):
    """A server shape 0.5.23 does not build (a combination, or a pool its startup checks refuse).

    A :class:`~poolfuzz.harness.judge.limits.LimitError`, so a trace naming one is refused as bad input
    (replay: ``BAD``, exit 2) before any step runs, like a size past the family's limits.
    """

    def __init__(self, problem: str) -> None:
        super().__init__("engine", "config", None, None, f"is not a shape 0.5.23 builds: {problem}")


DISAGGREGATION_MODES = ("prefill", "decode")
"""``--disaggregation-mode`` as driven (``null``, the default, is every other shape)."""

HICACHE_WRITE_POLICIES = ("write_through", "write_back")
"""``--hicache-write-policy`` (arg_groups/fields/memory.py:121-130) as driven: ``write_through`` backs a node up once it is
hit (threshold 1), ``write_back`` only when it is evicted (unified_radix_cache.py:559-561)."""


@dataclass(frozen=True, kw_only=True)
class EngineTargetConfig(PoolConfig):
    """One server: ``rows`` requests, ``tokens`` KV slots in pages of ``page_size``, contexts of ``context``."""

    family = "engine"
    footprints = (Footprint("rows x context", CELLS, lambda n: n("rows", 0) * n("context", 0)),)

    cache: str = setting("radix")
    """:data:`CACHES`."""
    page_size: int = bounded(1, PAGE, default=1)
    rows: int = bounded(1, ROWS, default=8)
    tokens: int = bounded(1, TOKENS, default=256)
    context: int = bounded(8, CONTEXT, default=128)
    chunk: int | None = bounded(1, CONTEXT, nullable=True, default=None)
    """``chunked_prefill_size``; ``None`` disables chunked prefill."""
    new_token_ratio: float = setting(0.7)
    """``new_token_ratio_tracker.current``: the share of ``max_new_tokens`` admission reserves for decode."""
    pools: str = setting("upstream")
    """:data:`TARGET_POOLS`: ``poolfuzz`` puts ``pools/``'s row pool and KV allocator under the same loop."""
    sliding_window: int | None = bounded(1, CONTEXT, nullable=True, default=None)
    """A hybrid sliding-window model's window; ``None`` is full attention.  With a window the loop
    builds what ``kv_cache_configurator.py:2874`` builds: ``SWATokenToKVPoolAllocator`` (full and SWA
    pools) under ``UnifiedRadixCache`` with the FULL and SWA components (``registry.py:165-169``)."""
    swa_tokens: int = bounded(0, TOKENS, default=0)
    """The SWA pool's slots (``swa_max_total_num_tokens``), used with ``sliding_window``."""
    swa_eviction_interval: int = bounded(1, CONTEXT, default=128)
    """``SGLANG_SWA_EVICTION_INTERVAL`` (environ.py, default 128): tokens past the window before
    ``maybe_evict_swa`` frees a request's out-of-window SWA slots (schedule_batch.py:4063-4066)."""
    mamba_slots: int = bounded(0, ROWS, default=0)
    """A hybrid Mamba (linear attention) model's state slots (``max_mamba_cache_size``); 0 is no Mamba.
    With slots the loop builds what ``kv_cache_configurator.py`` builds for a hybrid-SSM model:
    ``HybridReqToTokenPool`` (a ``MambaPool`` of one float32 layer and its ``mamba_allocator``,
    :1700-1753) over ``TokenToKVPoolAllocator`` (:2914-2922), under ``UnifiedRadixCache`` with the FULL
    and MAMBA components (``registry.py:165-169``); see :mod:`poolfuzz.harness.upstream.engine_mamba`.  It needs
    ``rows <= mamba_slots // 3`` (``max_running_requests`` is capped so, kv_cache_configurator.py:3134-3150).

    Not built here, with the reason: page size > 1 (``MambaComponent`` asserts page 1 without the extra
    buffer, components/mamba.py:74-79); the extra buffer (``track_mask_cpu.pin_memory()`` at
    schedule_batch.py:3830 raises on a CPU torch); the legacy ``RadixCache`` (no Mamba component; a
    hybrid-SSM server gets UnifiedRadixCache, registry.py:146); poolfuzz's pools (``engine_ours`` has
    no adapter putting ``poolfuzz.pools.mamba`` behind the 0.5.23 ``req.kv`` interface).  With ``sliding_window`` too
    it is the model that is both (an Inkling-class hybrid): ``HybridReqToTokenPool`` (:1593-1597) under
    ``SWATokenToKVPoolAllocator`` (:2874-2884) and a FULL + SWA + MAMBA tree, as 0.5.23's default
    (non-unified) memory path builds it; it loads and runs on CPU."""
    loop: str = setting("overlap")
    """:data:`LOOPS`.  A hybrid Mamba shape runs ``normal`` when ``overlap`` is asked: without the extra buffer (which
    does not run on a CPU torch, see ``mamba_slots``) the server forces overlap off (arg_groups/overrides.py:477-487)."""
    waiting_timeout: bool = setting(False)
    """``SGLANG_REQ_WAITING_TIMEOUT > 0`` (default -1, off): the scheduler aborts a request that waited past the
    timeout (``_poll_timeout_aborts``, scheduler.py:3598-3620).  The loop has no clock; a request left waiting
    on a server where nothing runs waits past any timeout, so with the knob on such an iteration aborts the
    queue head as the timeout would, and the server goes on (the way past finding 5's hang)."""

    running_timeout: bool = setting(False)
    """``SGLANG_REQ_RUNNING_TIMEOUT > 0`` (environ.py:686, default -1, off): a request that has run past the timeout is
    aborted with a message (``_poll_timeout_aborts``, scheduler.py:3622-3650, then ``abort_request``'s ``to_finish`` with
    503, :5805-5810); the fuzzer decides when a running request has run too long (the ``expire`` move)."""
    embedding: bool = setting(False)
    """An embedding model (``is_generation`` False, scheduler.py:893): every request asks for no tokens
    (``EmbeddingReqInput`` sets ``max_new_tokens`` 0, io_struct.py:1366), arrives through ``handle_embedding_request``
    (:3653) and leaves at its prefill's result, its prompt cached (the embedding half of ``process_batch_result_prefill``,
    batch_result_processor.py:453-500).  Full attention over upstream's loops only."""
    priority_scheduling: bool = setting(False)
    """``--enable-priority-scheduling`` (arg_groups/fields/schedule.py:103): requests carry a priority, the policy sorts the
    queue by it (schedule_policy.py), and a request more than ``priority_scheduling_preemption_threshold`` (10, the default)
    above a running one preempts it (``PrefillAdder.preempt_to_schedule``, schedule_policy.py:1707-1778: the running request
    is released with ``release_req`` and re-queued, scheduler.py:4310-4325); preemption is on with it by default
    (``enable_priority_preemption``, scheduler.py:1469-1472)."""
    max_queued_requests: int | None = bounded(1, ROWS, nullable=True, default=None)
    """``--max-queued-requests`` (schedule.py:35, default ``None``): an arrival that finds the queue full is refused, or,
    under priority scheduling, evicts a queued request of lower priority (``_abort_on_queued_limit``, scheduler.py:3552-3596).
    Retracted and preempted requests re-enter the queue through the same check (``_add_request_to_queue``, :3480-3492)."""
    abort_on_priority_when_disabled: bool = setting(False)
    """``--abort-on-priority-when-disabled`` (schedule.py:114): without priority scheduling, a request that names a priority
    is refused at the queue's door (``_set_or_validate_priority``, scheduler.py:3520-3543)."""
    speculative_num_steps: int = bounded(0, MAX_DRAFT_STEPS, default=0)
    """EAGLE speculative decoding with ``--speculative-num-steps`` K (0: off), ``--speculative-eagle-topk`` 1 and
    ``--speculative-num-draft-tokens`` K + 1, spec v2 (the only speculative worker 0.5.23 ships,
    ``speculative/eagle_worker_v2.py``).  Each decode step reserves ``2 * (K + 1)`` slots past the committed length
    (``get_alloc_reserve_per_decode``, mem_cache/allocation_sizing.py:64-70) through ``eagle_prepare_for_decode`` ->
    ``alloc_for_spec_decode`` (speculative/eagle_utils.py:857-921, mem_cache/allocation.py:780-848); the fake model's
    verify accepts 0..K drafts plus the bonus token, which ``_resolve_spec_v2_tokens`` commits
    (batch_result_processor.py:770-846); see :mod:`poolfuzz.harness.upstream.engine_spec`.  Upstream's loops over upstream's
    pools, full attention, a generation model only (see :func:`_shape_problems` for why each other combination is not run)."""

    session_radix_cache: bool = setting(False)
    """``--enable-session-radix-cache`` (the memory group; kv_cache_builder.py:412 -> ``CacheInitParams``): the tree tags each
    finished session request's KV with its session (``UnifiedSessionRefTracker``, unified_cache/session_ref_tracker.py) and
    releases the tag when the session closes (``close_session``, scheduler.py:6149-6157); ``open_session`` opens the
    session's generation (:6139-6142), a request naming a session gets one (:3035-3038 for a top-level ``session_id``,
    :3081-3084 for ``session_params``).  0.5.23 runs it on ``UnifiedRadixCache`` over the Python tree core only: the Rust core
    refuses it (rust_tree_core/adapter.py:385-389; the registry falls back for that reason, tree_core_registry.py:45-46) and
    the legacy cache has no session tracker (registry.py:252-258).  Upstream's loops over upstream's pools, a generation
    model."""

    hicache: str | None = setting(None)
    """HiCache's device-host tier, ``--enable-hierarchical-cache`` with this ``--hicache-write-policy`` (``write_through`` or
    ``write_back``; ``None``: off), ``--hicache-io-backend direct`` and ``--hicache-mem-layout layer_first``: the tree backs
    nodes up to a host pool twice the device pool's size, evicts them to it and loads them back on a hit
    (:mod:`poolfuzz.harness.upstream.engine_hicache`).  Full attention on ``UnifiedRadixCache`` (the plain-KV strategy,
    hybrid_pool_assembler.py:2296-2317), over upstream's pools and loops; not with speculative decoding or an embedding
    model here."""

    disaggregation: str | None = setting(None)
    """PD disaggregation, ``--disaggregation-mode`` ``prefill`` or ``decode`` (``None``: off) with
    ``--disaggregation-transfer-backend fake`` (:mod:`poolfuzz.harness.upstream.engine_disagg`): a prefill server bootstraps
    each request, prefills it and holds its KV until the transfer to its decode peer lands; a decode server preallocates
    each request's row and KV, receives the transfer, and decodes.  Full attention over upstream's pools and loops, a
    generation model without speculation, HiCache or sessions; either loop (the overlap prefill loop without continuous input
    polling, its default)."""

    @property
    def hybrid_swa(self) -> bool:
        return self.sliding_window is not None

    @property
    def hybrid_ssm(self) -> bool:
        """A hybrid Mamba shape (``is_hybrid_ssm`` in the scheduler, scheduler.py:605)."""
        return self.mamba_slots > 0

    def __post_init__(self) -> None:
        super().__post_init__()  # types and bounds first: the shape rules compare checked values
        for problem in _shape_problems(self):
            raise EngineShapeError(problem)


def _plain_upstream_server(config: EngineTargetConfig) -> bool:
    """Full attention for a generation model, without speculation, on upstream's own loops and pools: the only server
    HiCache's device-host tier and PD disaggregation are driven on (neither's hybrid, speculative or embedding
    combinations are wired here; the re-enacted loop and poolfuzz's side have neither)."""
    return not (
        config.hybrid_swa
        or config.hybrid_ssm
        or config.loop == "reenacted"
        or config.pools != "upstream"
        or config.speculative_num_steps
        or config.embedding
    )


def _shape_problems(config: EngineTargetConfig) -> list[str]:
    """What 0.5.23 would not build about ``config`` (the first is raised); ``both`` must build on poolfuzz's pools too."""
    problems: list[str] = []
    if config.cache not in CACHES:
        problems.append(f"cache must be one of {CACHES}, not {config.cache!r}")
    if config.pools not in TARGET_POOLS:
        problems.append(f"pools must be one of {TARGET_POOLS}, not {config.pools!r}")
    if config.loop not in LOOPS:
        problems.append(f"loop must be one of {LOOPS}, not {config.loop!r}")
    if min(config.context, config.tokens) - 1 <= 0:
        # The server's startup check (tp_worker.py:420-425: max_req_len = min(context_len - 1, max_total_num_tokens - 1) > 0).
        problems.append(f"the pool ({config.tokens} tokens) is too small for any request: max_req_len must be positive")
    if config.tokens % config.page_size:
        problems.append(f"tokens ({config.tokens}) must be a positive multiple of page_size ({config.page_size})")
    if config.sliding_window is not None:
        if config.cache == "radix" or config.pools != "upstream":
            problems.append(
                "a sliding window runs on UnifiedRadixCache over upstream's SWA allocator only "
                "(the legacy RadixCache has no SWA component; pools/ has no 0.5.23-interface SWA allocator)"
            )
        elif config.swa_tokens < config.page_size or config.swa_tokens % config.page_size:
            problems.append(
                f"sliding_window ({config.sliding_window}) must be >= 1 and swa_tokens ({config.swa_tokens}) "
                f"a positive multiple of page_size ({config.page_size})"
            )
        elif config.sliding_window + config.page_size >= config.swa_tokens:
            # The server refuses this at startup (validate_swa_pool_size, model_executor/pool_configurator.py:198-216):
            # prefill charges window + page of SWA headroom per request, so no request could ever be admitted.
            problems.append(
                f"SWA pool ({config.swa_tokens} tokens) cannot hold even one request: sliding_window "
                f"({config.sliding_window}) + page_size ({config.page_size}) must stay below it"
            )
    if config.embedding and (config.hybrid_swa or config.hybrid_ssm or config.loop == "reenacted"):
        problems.append("an embedding model runs here with full attention on upstream's loops (the re-enacted loop has no embedding path)")
    if config.hybrid_ssm:
        if config.cache == "radix" or config.pools != "upstream" or config.page_size != 1:
            problems.append(
                "a Mamba shape runs on UnifiedRadixCache over upstream's pools at page size 1 "
                "(see EngineTargetConfig.mamba_slots for why each other combination does not run)"
            )
        elif config.rows > config.mamba_slots // MAMBA_REQUESTS_RATIO:
            problems.append(
                f"rows ({config.rows}) must be at most mamba_slots // {MAMBA_REQUESTS_RATIO} "
                f"({config.mamba_slots // MAMBA_REQUESTS_RATIO}): kv_cache_configurator.py:3134-3150 caps "
                "max_running_requests there"
            )
    if config.speculative_num_steps:
        problems += _speculation_problems(config)
    if config.hicache is not None and (
        config.hicache not in HICACHE_WRITE_POLICIES or config.cache == "radix" or not _plain_upstream_server(config)
    ):
        # HiCache attaches to UnifiedRadixCache only (registry.py:196); the SWA and Mamba host strategies and the
        # speculative and embedding combinations are not driven here; the re-enacted loop and poolfuzz's side have no host tier.
        problems.append(
            "HiCache (write_through or write_back) runs on a full-attention UnifiedRadixCache over upstream's loops and pools, "
            "without speculation, for a generation model"
        )
    if config.session_radix_cache and (
        config.cache != "unified-python" or config.loop == "reenacted" or config.pools != "upstream" or config.embedding
    ):
        # rust_tree_core/adapter.py:385-389 and registry.py:252-258 refuse the other caches; the re-enacted loop and poolfuzz's
        # side have no session handlers; sessions continue generation requests.
        problems.append(
            "session radix caching runs on UnifiedRadixCache over the Python tree core, on upstream's loops and pools, for a generation model"
        )
    if config.disaggregation is not None and (
        config.disaggregation not in DISAGGREGATION_MODES
        or not _plain_upstream_server(config)
        or config.hicache is not None
        or config.session_radix_cache
    ):
        problems.append(
            "PD disaggregation (prefill or decode) runs on full attention over upstream's pools and loops, "
            "for a generation model without speculation, HiCache or sessions"
        )
    return problems


def _speculation_problems(config: EngineTargetConfig) -> list[str]:
    """Why a speculative shape does not run here: each a combination the engine target does not drive, with the reason."""
    if config.loop == "reenacted" or config.pools != "upstream" or config.embedding:
        # alloc_for_spec_decode is reached only through upstream's own prepare_for_decode (schedule_batch.py:3754-3762);
        # pools/ predates the 0.5.23 spec-decode allocation interface; an embedding model generates nothing to draft.
        return ["speculative decoding runs on upstream's scheduler loops over upstream's pools, for a generation model"]
    if config.hybrid_ssm or config.hybrid_swa:
        # Mamba + spec needs the extra buffer (mamba_lazy_spec_prepare, spec_utils.py:1253-1258), which does not run on a CPU
        # torch (schedule_batch.py:3830); SWA + spec (maybe_evict_swa in eagle_prepare_for_decode) is not driven yet.
        return ["speculative decoding is driven on full-attention shapes only (hybrid Mamba needs the extra buffer; SWA is not driven yet)"]
    return []


takes_the_shape = takes_config(EngineTargetConfig)
"""Give a builder that takes ``**shape`` the config's fields as its keyword-only signature and annotations
(:func:`~poolfuzz.harness.judge.config.takes_config`): the registry, the trace loader and a config that left a key
out all read the one declaration."""

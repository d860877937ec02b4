"""The ``vllm_engine`` family's server shape, declared once: what vLLM 0.33.0's v1 engine core would build.

:class:`VllmEngineConfig` is the only declaration: a trace's ``config`` is read into it, the move table draws
it, the limits are its fields' bounds, and :mod:`poolfuzz.harness.kits.vllm_engine.target` builds the scheduler's
configuration stand-in and its ``KVCacheConfig`` from it and nothing else.  A shape vLLM refuses at startup
is refused when the config is built (:class:`VllmShapeError`), so replay refuses such a trace as bad input.

Nothing here loads upstream: the registry imports it with the kit's declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from poolfuzz.harness.judge.config import PoolConfig, bounded, setting
from poolfuzz.harness.judge.limits import BLOCKS, CONTEXT, PAGE, ROWS, TOKENS, LimitError

DRAFTS = 1 << 8
"""The most draft tokens a step's config may name: far past any server's K (the moves draw 1-4), so only an absurd trace is refused."""

POOLS = ("upstream", "poolfuzz", "both")
"""Whose block pool vLLM's scheduler runs over: vLLM's ``BlockPool``, ours (``poolfuzz.pools.block_pool`` behind its
interface, :mod:`poolfuzz.harness.kits.vllm_engine.ours`), or ``both`` (the driver runs the two side by side and compares
what a user sees, ``implementations-agree``)."""


SPECULATIVE_METHODS = (None, "ngram", "ngram_gpu", "eagle")
"""``speculative_config.method`` (vllm/config/speculative.py, vllm/config/vllm.py:611-692): ``None`` drafts nothing;
``ngram`` (the CPU drafter) and ``ngram_gpu`` draft with no forward pass of their own (no lookahead slots, up to K
drafts a step); ``eagle`` drafts from the target's hidden states (K lookahead slots, a prefill lookahead of 1, the
trailing-block drop, and with prefix caching one lookahead token in each block hash).

The two n-gram drafters are one shape to the scheduler: nothing on its path reads the method.  ``Scheduler`` reads
of ``speculative_config`` only ``num_speculative_tokens_per_batch_size``, ``use_eagle()``, ``use_eagle_block_drop()``,
``needs_eagle_block_drop()``, ``disable_eagle_block_drop`` (v1/core/sched/scheduler.py:324-334) and
``max_num_new_slots_for_drafting`` (:720-721), and of ``VllmConfig`` the lookahead counts (:297-315, :342), whose
properties test ``use_eagle``/``use_dflash``/``use_dspark``/``uses_draft_model`` only (config/vllm.py:626-692): false,
0 and 0 for both drafters (speculative.py:2058-2186).  ``async_scheduler.py`` does not read it either.  The config
stand-in holds no ``method`` field, so a read would raise (``target.py::speculative_config``).  What differs is
which runs *with async scheduling*: :func:`_shape_problems`."""

ASYNC_NGRAM = "ngram_gpu"
"""The n-gram drafter vLLM 0.33.0 runs under async scheduling with the V1 model runner (config/vllm.py:1652-1666:
``NgramGPUTypes`` is among the methods that keep it)."""


class VllmShapeError(LimitError):
    """A server shape vLLM 0.33.0 does not start (its startup checks refuse it)."""

    def __init__(self, problem: str) -> None:
        super().__init__("vllm_engine", "config", None, None, f"is not a shape vLLM 0.33.0 starts: {problem}")


V = TypeVar("V", bound="VllmEngineConfig")


@dataclass(frozen=True, kw_only=True)
class VllmEngineConfig(PoolConfig):
    """One server: ``num_blocks`` KV blocks of ``block_size`` tokens (block 0 the null block), the scheduler's limits."""

    family = "vllm_engine"
    takes_device = False  # the scheduler holds no tensors; the trace records the device only

    block_size: int = bounded(1, PAGE, default=16)
    """``cache_config.block_size``: tokens per KV block (and per block hash)."""
    num_blocks: int = bounded(2, BLOCKS, default=64)
    """``KVCacheConfig.num_blocks`` (``cache_config.num_gpu_blocks``)."""
    max_num_seqs: int = bounded(1, ROWS, default=8)
    """``scheduler_config.max_num_seqs``: requests running at once."""
    max_num_batched_tokens: int = bounded(1, TOKENS, default=64)
    """``scheduler_config.max_num_batched_tokens``: the token budget of one step."""
    max_model_len: int = bounded(1, CONTEXT, default=64)
    """``model_config.max_model_len``: a longer prompt is refused at admission; a request stops there."""
    long_prefill_token_threshold: int = bounded(0, CONTEXT, default=0)
    """``scheduler_config.long_prefill_token_threshold``: 0 is off; else a prefill chunk's cap."""
    enable_chunked_prefill: bool = setting(True)
    enable_prefix_caching: bool = setting(True)
    async_scheduling: bool = setting(False)
    """The engine core runs ``AsyncScheduler`` with two batches in flight: step N's results land after step N+1 is
    scheduled (``update_from_output(N)`` after ``schedule(N+1)``)."""
    sliding_window: int | None = bounded(1, CONTEXT, nullable=True, default=None)
    """``None``: no sliding-window layers.  A window: a ``SlidingWindowSpec`` group beside the others over the same
    block pool (full + sliding window: ``HybridKVCacheCoordinator``)."""
    attention_chunk_size: int | None = bounded(1, CONTEXT, nullable=True, default=None)
    """``None``: no chunked local attention.  A chunk: a ``ChunkedLocalAttentionSpec`` group (Llama 4's local layers,
    ``ChunkedLocalAttentionManager``: blocks left of the current chunk become the null block)."""
    mamba: bool = setting(False)
    """A ``MambaSpec`` group (``MambaManager``): per-request state blocks in the same pool.  Its cache mode follows
    prefix caching as vLLM derives it (:attr:`mamba_cache_mode`)."""
    full_attention: bool = setting(True)
    """A ``FullAttentionSpec`` group.  Off only for a model of one other kind (pure Mamba, pure chunked local)."""
    pools: str = setting("upstream")
    """:data:`POOLS`: ``poolfuzz`` puts ``poolfuzz.pools.block_pool`` in the place of vLLM's ``BlockPool``."""
    speculative_method: str | None = setting(None)
    """:data:`SPECULATIVE_METHODS`: speculative decoding off, n-gram (CPU ``ngram``, sync only; ``ngram_gpu``) or EAGLE
    drafts (the fake model proposes them and chooses how many are accepted)."""
    num_speculative_tokens: int = bounded(0, DRAFTS, default=0)
    """``speculative_config.num_speculative_tokens`` (K): 0 exactly when ``speculative_method`` is ``None``."""

    @property
    def mamba_cache_mode(self) -> str:
        """``cache_config.mamba_cache_mode`` as ``MambaModelConfig.verify_and_update_config`` derives it
        (model_executor/models/config.py:763-784): ``align`` with prefix caching, ``none`` without (an explicit mode is
        overwritten either way, so the shape has no field of its own)."""
        return "align" if self.mamba and self.enable_prefix_caching else "none"

    @property
    def mamba_block_size(self) -> int:
        """``cache_config.mamba_block_size`` as the same hook sets it: the block size with prefix caching (the
        granularity of its checkpoints), else ``max_model_len`` (one state block holds a whole request)."""
        return self.block_size if self.enable_prefix_caching else self.max_model_len

    def group_kinds(self) -> tuple[str, ...]:
        """The KV cache groups in the order ``kv_cache_config`` builds them: ``full``, ``swa``, ``local``, ``mamba``."""
        kinds = (
            ("full", self.full_attention),
            ("swa", self.sliding_window is not None),
            ("local", self.attention_chunk_size is not None),
            ("mamba", self.mamba),
        )
        return tuple(kind for kind, present in kinds if present)

    @property
    def cache_block_size(self) -> int:
        """``cache_config.block_size`` once the engine core has read the groups (v1/engine/core.py:337-350): the
        smallest group block size, so a pure ``none``-mode Mamba model's is ``max_model_len``."""
        return min((self.mamba_block_size if kind == "mamba" else self.block_size) for kind in self.group_kinds())

    def blocks_per_request(self) -> int:
        """Blocks one ``max_model_len`` request may need at once over every group (the startup check's bound): an
        attention group its whole length (a window or chunk bounds it lower; counted whole, so the check is
        conservative), a Mamba group its resident states (``MambaSpec.max_memory_usage_bytes``,
        kv_cache_interface.py:1131-1137: 2 + K in align mode, 1 + K otherwise)."""
        attention = -(-self.max_model_len // self.block_size)
        total = 0
        for kind in self.group_kinds():
            if kind == "mamba":
                total += (2 if self.mamba_cache_mode == "align" else 1) + self.num_speculative_tokens
            else:
                total += attention
        return total

    def __post_init__(self) -> None:
        super().__post_init__()
        for problem in _shape_problems(self):
            raise VllmShapeError(problem)

    @classmethod
    def from_mapping(cls: type[V], config: Mapping[str, object]) -> V:
        """A trace's config; one written before the n-gram drafters were told apart (async with ``ngram``, a shape
        vLLM refuses) is read as ``ngram_gpu``, the drafter vLLM runs there: the scheduler reads the same fields for
        both (:data:`SPECULATIVE_METHODS`), so the trace replays the run it recorded."""
        if config.get("async_scheduling") is True and config.get("speculative_method") == "ngram":
            config = {**config, "speculative_method": ASYNC_NGRAM}
        return super().from_mapping(config)


def _shape_problems(config: VllmEngineConfig) -> list[str]:
    problems = []
    if config.pools not in POOLS:
        problems.append(f"pools must be one of {POOLS}, not {config.pools!r}")
    problems.extend(group_problems(config))
    if config.group_kinds() and config.blocks_per_request() > config.num_blocks - 1:
        # vLLM refuses to start when one request of max_model_len does not fit (kv_cache_utils'
        # check_enough_kv_cache_memory: "max_model_len ... is larger than the maximum number of tokens").
        problems.append(
            f"{config.num_blocks - 1} usable blocks of {config.block_size} over the groups {config.group_kinds()} hold "
            f"fewer than one max_model_len ({config.max_model_len}) request ({config.blocks_per_request()} blocks)"
        )
    if not config.enable_chunked_prefill and config.max_num_batched_tokens < config.max_model_len:
        # SchedulerConfig's validation: without chunked prefill one step must hold a whole prompt.
        problems.append("without chunked prefill max_num_batched_tokens must be at least max_model_len")
    if config.max_num_batched_tokens < config.max_num_seqs:
        problems.append("max_num_batched_tokens must be at least max_num_seqs (SchedulerConfig's validation)")
    if config.speculative_method not in SPECULATIVE_METHODS:
        problems.append(f"speculative_method must be one of {SPECULATIVE_METHODS}, not {config.speculative_method!r}")
    if config.async_scheduling and config.speculative_method == "ngram":
        # config/vllm.py:1652-1666: with the V1 model runner a method outside the EAGLE family, ngram_gpu, draft_model,
        # dspark and dflash is incompatible with async scheduling; --async-scheduling then raises ValueError
        # (:1676-1679) and the default turns async off (:1711-1717).  The V2 runner (use_v2_model_runner) is not driven.
        problems.append(f"async scheduling with the CPU 'ngram' drafter is refused by the V1 model runner; use {ASYNC_NGRAM!r}")
    if (config.speculative_method is None) != (config.num_speculative_tokens == 0):
        problems.append("num_speculative_tokens is 0 exactly when there is no speculative_method (SpeculativeConfig)")
    if config.speculative_method == "eagle" and config.enable_prefix_caching and config.pools != "upstream":
        # Not vLLM's refusal: EAGLE's lookahead block hashes (vllm/config/vllm.py:678-692) are not bridged to ours.
        problems.append("EAGLE with prefix caching hashes a lookahead token per block; poolfuzz.pools.block_pool has none (ours.py)")
    return problems


def group_problems(config: VllmEngineConfig) -> list[str]:
    """Group layouts vLLM 0.33.0 refuses, or that this target refuses rather than fake (each with its line)."""
    problems = []
    if not config.group_kinds():
        problems.append("a model needs at least one KV cache group (full attention, a window, a chunk or Mamba)")
    if config.mamba and config.enable_prefix_caching and not config.enable_chunked_prefill:
        # model_executor/models/config.py:772-774: "Chunked prefill is required for Mamba prefix caching."
        problems.append("Mamba with prefix caching (mamba_cache_mode 'align') needs chunked prefill")
    if config.attention_chunk_size is not None and config.speculative_method == "eagle" and config.enable_prefix_caching:
        # single_type_kv_cache_manager.py:1336-1338 asserts "Hybrid KV cache is not supported for eagle + chunked local
        # attention." at a hit lookup; 0.33.0 reaches it only with the EAGLE drop off (its hash lookahead), 0.31.0 and
        # 0.32.0 raise it on the first prefix lookup.
        problems.append("EAGLE with chunked local attention and prefix caching is not supported by vLLM (its assert)")
    if config.mamba and config.enable_prefix_caching and config.pools != "upstream":
        # Not vLLM's refusal: align mode calls BlockPool.cache_partial_block / move_block_hashes
        # (single_type_kv_cache_manager.py:2028-2136), which poolfuzz.pools.block_pool has no bridge for (ours.py).
        problems.append("Mamba align mode caches partial blocks; poolfuzz.pools.block_pool has no cache_partial_block (ours.py)")
    return problems

"""The ``vllm_engine`` family's move table: server shapes, arrivals, EOS and stop tokens at results, aborts.

The fuzzer chooses what users and the model choose, never a memory call: vLLM's scheduler decides what memory
does with it.  Shapes are small on purpose (a few dozen blocks of 2-8 tokens, a handful of sequences), so
chunked prefill, prefix hits, preemption and the free queue's reuse happen within a few steps; prompts come
from stems that share prefixes, so blocks are cached and hit.
"""

from __future__ import annotations

from poolfuzz.harness.kits.arrivals import arrival
from poolfuzz.harness.kits.vllm_engine.config import ASYNC_NGRAM, VllmEngineConfig
from poolfuzz.harness.kits.vllm_engine.ops import VllmEngineOps as Ops
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import DriverView, Move, MoveTable, Step, viewed_table


class VllmEngineView(DriverView):
    """What the moves may read: how many requests the scheduler holds, and the server shape."""

    __slots__ = ()

    @property
    def live(self) -> int:
        return len(self._driver.engine.scheduler.requests)

    @property
    def seqs(self) -> int:
        return int(self._driver.config.max_num_seqs)

    @property
    def spec_tokens(self) -> int:
        return int(self._driver.config.num_speculative_tokens)

    def occupancy(self) -> float:
        pool = self._driver.engine.scheduler.kv_cache_manager.block_pool
        return 1.0 - pool.get_num_free_blocks() / max(1, len(pool.blocks) - 1)


LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("full",),
    ("full",),
    ("full", "swa"),
    ("full", "swa"),
    ("local",),
    ("full", "local"),
    ("mamba",),
    ("full", "mamba"),
    ("full", "swa", "mamba"),
)
"""The KV cache group layouts drawn: full attention, and each hybrid vLLM builds (full + sliding window as Gemma,
full + chunked local as Llama 4, full + Mamba as Jamba/Bamba/Nemotron-H, full + SWA + Mamba); chunked local alone and
Mamba alone (Mamba2) as single groups.  Full and full + SWA weigh double, as before the others were added."""


def vllm_config(choose: Chooser) -> VllmEngineConfig:
    """A server shape vLLM starts: block size, blocks, sequences, token budget, chunking, caching, sync or async,
    a group layout (:data:`LAYOUTS`), n-gram or EAGLE drafts in half the shapes (the n-gram drafter ``ngram`` sync,
    ``ngram_gpu`` async, as vLLM allows); vLLM's block pool alone, or in step with ours (``pools="both"``).  The
    blocks are one ``max_model_len`` request over every group plus 0-16 spare."""
    block_size = choose.choice((2, 4, 4, 8))
    layout = choose.choice(LAYOUTS)
    window = choose.choice((4, 8)) if "swa" in layout else None
    chunk = block_size * choose.choice((1, 2, 4)) if "local" in layout else None
    max_model_len = choose.choice((16, 32, 32, 48))
    spare = choose.randint(0, 16)
    chunked = choose.randrange(0, 4) != 0
    budget = choose.choice((8, 16, 32)) if chunked else max_model_len
    seqs = choose.randint(1, min(6, budget))
    caching = choose.randrange(0, 4) != 0
    if "mamba" in layout and not chunked:
        caching = False  # Mamba prefix caching needs chunked prefill (model_executor/models/config.py:772-774)
    pools = choose.choice(("upstream", "upstream", "both"))
    if "mamba" in layout and caching:
        pools = "upstream"  # align mode's partial-block caching is not bridged to our pool (config.py::group_problems)
    method = choose.choice((None, None, "ngram", "eagle"))
    if method == "eagle" and caching and (pools != "upstream" or "local" in layout):
        # EAGLE's lookahead block hashes are not bridged to our pool; vLLM asserts EAGLE + chunked local unsupported
        method = "ngram"
    threshold = choose.choice((0, 0, 4, 8)) if chunked else 0
    async_scheduling = choose.randrange(0, 2) == 0
    if method == "ngram" and async_scheduling:
        method = ASYNC_NGRAM  # vLLM refuses async with the CPU drafter (config.py::_shape_problems)
    k = 0 if method is None else choose.randint(1, 4)
    if 0 < threshold <= k:
        # vLLM finding 2 (docs/upstream-findings-vllm.md, corpus/upstream/repro_vllm_padded_decode_past_prefill_cap.py):
        # a cap of at most K clips a padded 1 + K decode and fails scheduler.py:1579 as soon as a one-token request
        # waits beside a decode, ending the run.  The cap is drawn at 1 + K instead, the edge where the padding fits.
        threshold = k + 1
    need = blocks_per_request(layout, block_size, max_model_len, "mamba" in layout and caching, k)
    return VllmEngineConfig(
        block_size=block_size,
        num_blocks=need + 1 + spare,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        long_prefill_token_threshold=threshold,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=caching,
        async_scheduling=async_scheduling,
        sliding_window=window,
        attention_chunk_size=chunk,
        mamba="mamba" in layout,
        full_attention="full" in layout,
        pools=pools,
        speculative_method=method,
        num_speculative_tokens=k,
    )


def blocks_per_request(layout: tuple[str, ...], block_size: int, max_model_len: int, align: bool, k: int) -> int:
    """:meth:`VllmEngineConfig.blocks_per_request` before the config exists (the same count, from the drawn parts)."""
    attention = -(-max_model_len // block_size)
    return sum(((2 if align else 1) + k) if kind == "mamba" else attention for kind in layout)


GROUP_WORDS = {"full": "full attention", "swa": "sliding window", "local": "chunked local", "mamba": "mamba"}


def corners(config: VllmEngineConfig) -> list[str]:
    return [
        "async" if config.async_scheduling else "sync",
        " + ".join(GROUP_WORDS[kind] for kind in config.group_kinds()),
        f"mamba_cache_mode {config.mamba_cache_mode}" if config.mamba else "no mamba",
        "prefix caching" if config.enable_prefix_caching else "no prefix caching",
        "chunked prefill" if config.enable_chunked_prefill else "no chunking",
        f"block_size {config.block_size}",
        f"pools {config.pools}",
        f"speculation {config.speculative_method}" if config.speculative_method else "no speculation",
    ]


def _arrive(view: VllmEngineView, choose: Chooser) -> Step | None:
    if view.live >= 3 * view.seqs:
        return None
    return Ops.arrive, arrival(choose, length=24, tail=8, max_new=24)


def _positions(view: VllmEngineView, choose: Chooser) -> list[int]:
    return sorted({choose.randrange(0, view.live) for _ in range(choose.choice((0, 0, 0, 1, 2)))}) if view.live else []


def _iterate(view: VllmEngineView, choose: Chooser) -> Step | None:
    if view.live == 0 and choose.randrange(0, 5):
        return None
    return Ops.iterate, {"eos": _positions(view, choose), "stop": _positions(view, choose)}


def _run(view: VllmEngineView, choose: Chooser) -> Step | None:
    return (Ops.run, {"iterations": choose.randint(4, 24)}) if view.live else None


def _abort(view: VllmEngineView, choose: Chooser) -> Step | None:
    return (Ops.abort, {"pick": choose.randrange(0, 8)}) if view.live else None


def _speculate(view: VllmEngineView, choose: Chooser) -> Step | None:
    k = view.spec_tokens
    if not k or not view.live:
        return None
    return Ops.speculate, {"drafts": choose.randint(0, k), "accepted": choose.randint(0, k), "eos": _positions(view, choose)}


def _reset(view: VllmEngineView, choose: Chooser) -> Step | None:
    return Ops.reset_cache, {}


def vllm_engine_table() -> MoveTable[VllmEngineView]:
    """Steps commonest (each runs the whole scheduler), arrivals next, aborts and cache resets rare."""
    return viewed_table(
        VllmEngineView,
        vllm_config,
        (
            Move(Ops.iterate, 6, _iterate),
            Move(Ops.arrive, 4, _arrive),
            Move(Ops.run, 2, _run, corner="decode under memory pressure (preemption)"),
            Move(Ops.speculate, 3, _speculate, corner="speculative drafts accepted and rejected"),
            Move(Ops.abort, 1, _abort),
            Move(Ops.reset_cache, 1, _reset),
        ),
        corners=corners,
    )

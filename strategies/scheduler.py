"""Scheduler-machine inputs: pool configurations and the small arguments of each scheduler step.

Pools are tiny on purpose (a handful of rows, Mamba slots and KV pages) so a
30-step run reaches exact capacity, one-page-short batches and full reuse of
freed pages; prompt and chunk lengths straddle page boundaries at every page size.
Empty pools are the single-pool machines' business: here every pool has room
for at least one request, so runs get past admission.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

Config = dict[str, Any]
MAX_CONTEXT_LENS = (16, 24, 48)


def scheduler_page_sizes(*, kernel: str) -> SearchStrategy[int]:
    """Page sizes 1..8 (1 is where upstream's decode page count was wrong); triton: powers of two only."""
    if kernel == "triton":
        return st.sampled_from([4, 1, 2, 8])
    return st.sampled_from([4, 1, 3, 2, 8, 5])


MODES = ("plain", "prefix_cache", "sliding_window")
"""The KV side's option: paged KV alone, with a ``RadixCache``, or an SWA allocator (exclusive)."""
EVICTION_POLICIES = ("lru", "fifo", "mru", "filo")


def scheduler_configs(
    *, kernels: Sequence[str] = ("loop", "vectorized"), hybrid: bool | None = None, page_size: int | None = None,
    mode: str | None = None,
) -> SearchStrategy[Config]:
    """Configs for :func:`harness.judge.drivers.scheduler.build_scheduler_pools`; the machine adds ``device``.

    ``hybrid``, ``page_size`` and ``mode`` (one of :data:`MODES`) pin those keys (``None``
    draws them).  The options are exclusive and leave Mamba rows out: SGLang 0.5.23 pairs
    hybrid-SWA and hybrid-Mamba models with their own caches (``SWARadixCache``,
    ``MambaRadixCache``), not ``RadixCache``.  The SWA allocator needs page size > 1
    (``alloc_extend``/``alloc_decode``); its window is 1 to 12 tokens and its pool 3 to 12
    pages, so windows smaller and larger than a page both occur.
    """
    modes = [m for m in MODES if (mode is None or m == mode) and (m == "plain" or not hybrid)
             and (m != "sliding_window" or page_size != 1)]
    assert modes, f"no scheduler mode fits mode={mode}, hybrid={hybrid}, page_size={page_size}"

    def for_kernel(kernel: str, chosen: str) -> SearchStrategy[Config]:
        sizes = st.just(page_size) if page_size is not None else scheduler_page_sizes(kernel=kernel)
        if chosen == "sliding_window" and page_size is None:
            sizes = st.sampled_from([2, 4, 8] if kernel == "triton" else [2, 4, 3, 8, 5])
        window = chosen == "sliding_window"
        return st.fixed_dictionaries({
            "kernel": st.just(kernel),
            "page_size": sizes,
            "size": st.integers(min_value=1, max_value=6),
            "kv_pages": st.integers(min_value=1 if chosen == "plain" else 3, max_value=16),
            "max_context_len": st.sampled_from(MAX_CONTEXT_LENS),
            "hybrid": (st.booleans() if hybrid is None else st.just(hybrid)) if chosen == "plain" else st.just(False),
            "mamba_size": st.integers(min_value=1, max_value=6),
            "need_sort": st.booleans(),
            "prefix_cache": st.just(chosen == "prefix_cache"),
            "eviction_policy": st.sampled_from(EVICTION_POLICIES) if chosen == "prefix_cache" else st.just("lru"),
            "sliding_window": st.one_of(st.integers(min_value=1, max_value=4), st.integers(min_value=1, max_value=12))
            if window else st.none(),
            "swa_pages": st.integers(min_value=3, max_value=12) if window else st.just(0),
        })

    return st.tuples(st.sampled_from(list(kernels)), st.sampled_from(modes)).flatmap(lambda km: for_kernel(*km))


def admissions(*, max_batch: int = 4, max_prompt: int = 48) -> SearchStrategy[list[list[int]]]:
    """A batch of new requests as ``[prompt_len, first_chunk]``: short prompts most often, whole or chunked.

    The driver clips the chunk to the prompt, so any pair is valid.
    """
    prompt = st.one_of(st.integers(min_value=0, max_value=8), st.integers(min_value=0, max_value=max_prompt))
    chunk = st.one_of(st.integers(min_value=0, max_value=12), st.integers(min_value=0, max_value=max_prompt // 2),
                      st.just(max_prompt))
    request = st.tuples(prompt, chunk).map(list)
    return st.lists(request, min_size=1, max_size=max_batch)


STEMS = (
    (1, 2, 3, 4, 5, 6, 7, 8),
    (1, 2, 3, 4, 6, 6, 6, 6),
    (2, 2, 2, 2, 2, 2, 2, 2),
)
"""Shared prompt pieces: they agree on their first half, so prompts built from them share
whole pages at every page size up to 8 and diverge inside a page at the larger ones."""


def prompt_tokens(*, max_stems: int = 4, max_tail: int = 6) -> SearchStrategy[list[int]]:
    """A prompt's token ids: a few :data:`STEMS` then a short tail from a 4-token alphabet, so cache hits happen."""
    stems = st.lists(st.sampled_from(STEMS), min_size=1, max_size=max_stems).map(lambda parts: [t for p in parts for t in p])
    tail = st.lists(st.integers(min_value=0, max_value=3), max_size=max_tail)
    return st.tuples(stems, tail).map(lambda parts: parts[0] + parts[1])


def prompt_batches(*, max_batch: int = 4) -> SearchStrategy[list[list[int]]]:
    """Token ids for up to ``max_batch`` prompts (a batch shorter than its admission reuses them in turn)."""
    return st.lists(prompt_tokens(), min_size=1, max_size=max_batch)


def picks(*, max_size: int = 4) -> SearchStrategy[list[int]]:
    """Which live requests a step names: indices into the eligible handles (taken modulo their count)."""
    return st.lists(st.integers(min_value=0, max_value=15), min_size=1, max_size=max_size)


def chunk_sizes(*, max_chunk: int = 24) -> SearchStrategy[int]:
    """The next prefill chunk: zero (a zero-length extend) to a few pages."""
    return st.integers(min_value=0, max_value=max_chunk)


def retract_keeps(*, max_keep: int = 48) -> SearchStrategy[int]:
    """Tokens a retract wants to keep; the driver clips to the request's length."""
    return st.integers(min_value=0, max_value=max_keep)

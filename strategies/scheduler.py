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


def scheduler_configs(
    *, kernels: Sequence[str] = ("loop", "vectorized"), hybrid: bool | None = None, page_size: int | None = None
) -> SearchStrategy[Config]:
    """Configs for :func:`harness.judge.drivers.scheduler.build_scheduler_pools`; the machine adds ``device``.

    ``hybrid`` and ``page_size`` pin those keys (``None`` draws them).
    """

    def for_kernel(kernel: str) -> SearchStrategy[Config]:
        return st.fixed_dictionaries({
            "kernel": st.just(kernel),
            "page_size": scheduler_page_sizes(kernel=kernel) if page_size is None else st.just(page_size),
            "size": st.integers(min_value=1, max_value=6),
            "kv_pages": st.integers(min_value=1, max_value=16),
            "max_context_len": st.sampled_from(MAX_CONTEXT_LENS),
            "hybrid": st.booleans() if hybrid is None else st.just(hybrid),
            "mamba_size": st.integers(min_value=1, max_value=6),
            "need_sort": st.booleans(),
        })

    return st.sampled_from(list(kernels)).flatmap(for_kernel)


def admissions(*, max_batch: int = 4, max_prompt: int = 48) -> SearchStrategy[list[list[int]]]:
    """A batch of new requests as ``[prompt_len, first_chunk]``: short prompts most often, whole or chunked.

    The driver clips the chunk to the prompt, so any pair is valid.
    """
    prompt = st.one_of(st.integers(min_value=0, max_value=8), st.integers(min_value=0, max_value=max_prompt))
    chunk = st.one_of(st.integers(min_value=0, max_value=12), st.integers(min_value=0, max_value=max_prompt // 2),
                      st.just(max_prompt))
    request = st.tuples(prompt, chunk).map(list)
    return st.lists(request, min_size=1, max_size=max_batch)


def picks(*, max_size: int = 4) -> SearchStrategy[list[int]]:
    """Which live requests a step names: indices into the eligible handles (taken modulo their count)."""
    return st.lists(st.integers(min_value=0, max_value=15), min_size=1, max_size=max_size)


def chunk_sizes(*, max_chunk: int = 24) -> SearchStrategy[int]:
    """The next prefill chunk: zero (a zero-length extend) to a few pages."""
    return st.integers(min_value=0, max_value=max_chunk)


def retract_keeps(*, max_keep: int = 48) -> SearchStrategy[int]:
    """Tokens a retract wants to keep; the driver clips to the request's length."""
    return st.integers(min_value=0, max_value=max_keep)

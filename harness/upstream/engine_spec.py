"""Speculative decoding (EAGLE, spec v2) on SGLang 0.5.23's scheduler memory path: upstream's files and the fake verify.

0.5.23 ships one speculative worker generation, spec v2 (``speculative/eagle_worker_v2.py``; there is no v1 worker, and
``ScheduleBatch.new_tokens_required_next_decode`` takes the spec-v2 estimate for every algorithm, schedule_batch.py:3413-3419).
Its memory path splits in two, and both halves run from upstream's files here:

* **allocation**, in the scheduler: ``update_running_batch`` -> ``check_decode_mem`` (the spec-v2 estimate,
  schedule_batch.py:3421-3430) -> ``prepare_for_decode`` -> ``spec_prepare_for_decode`` (speculative/spec_utils.py:1249)
  -> ``eagle_prepare_for_decode`` (speculative/eagle_utils.py:857) -> ``page_aligned_decode_alloc_lens``
  (mem_cache/allocation_sizing.py:73) and ``alloc_for_spec_decode`` (mem_cache/allocation.py:780-848): each request's
  ``kv_allocated_len`` grows to ``page_ceil(kv_committed_len + 2 * (K + 1))``, ``kv_committed_len`` does not move;
* **commit and release**, in the result processor: ``_resolve_spec_v2_tokens`` (batch_result_processor.py:770-846)
  adds each request's accepted run (drafts + bonus) to ``kv_committed_len``; ``release_kv_cache`` frees the committed
  part and ``_release_overallocated_kv_indices`` (mem_cache/common.py:447-476) the rest: the rejected drafts' slots and
  the unused reserve.

What does not run, with the reason:

* **the row-write kernel** ``assign_req_to_token_pool_func`` (allocation.py:737-763) launches Triton on a GPU and
  ``sgl_kernel.assign_req_to_token_pool_cpu`` on a CPU (:43-46, :745-754); neither is here (no GPU; sgl_kernel is not
  installed).  Its CPU branch runs, with :func:`assign_req_to_token_pool_cpu`, a torch row write, in place of the op;
* **the worker** (``EagleWorkerV2.forward_batch_generation``): the draft and target models, the only fake.  With
  ``topk`` 1 its verify writes KV data into slots the scheduler allocated and moves no slot between owners
  (``move_accept_tokens_to_target_kvcache`` runs for trees only, eagle_worker_common.py:495-511), so the fake
  (:func:`verify_result`) returns what it reports to the scheduler: the accept lengths and tokens the fuzzer chose,
  as a real ``GenerationBatchResult``.  The draft relay (``batch.spec_info = next_draft_input``, scheduler.py:4747-4752)
  stays ``None``: it carries hidden states and the next draft tokens, which no memory statement reads.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch

from poolfuzz.harness.kits.engine.config import EngineTargetConfig
from poolfuzz.harness.upstream.engine_build import tree_cache
from poolfuzz.harness.upstream.engine_config import EOS
from poolfuzz.harness.upstream.engine_disagg import published_disaggregation
from poolfuzz.harness.upstream.overrides import overridden
from poolfuzz.harness.upstream.sglang_files import sglang_copy
from poolfuzz.harness.upstream.sglang_runtime import RUNTIME, ConfigBag
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError

SPEC_MODULES = ("sglang.srt.speculative.spec_info", "sglang.srt.speculative.eagle_utils", "sglang.srt.speculative.spec_utils")
"""The speculative modules the scheduler's decode path calls into (``spec_prepare_for_decode`` is imported at call time,
schedule_batch.py:3756), executed from their files (:data:`~poolfuzz.harness.upstream.sglang_files.REAL_PREFIXES`)."""
ALLOCATION = "sglang.srt.mem_cache.allocation"
SIZING = "sglang.srt.mem_cache.allocation_sizing"


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """``sgl_kernel.assign_req_to_token_pool_cpu`` as a torch row write: row ``req_pool_indices[i]`` gets, at positions
    ``[start_offset[i], end_offset[i])``, the next ``end - start`` slots of ``out_cache_loc`` in batch order (what the
    Triton ``assign_req_to_token_pool``, allocation.py:697-727, computes per program: its ``out_offset`` is the sum of
    the earlier rows' lengths).  The invariant: every slot ``alloc_for_spec_decode`` allocated lands in exactly one row
    position, the one ``kv_allocated_len`` then covers."""
    offset = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        assert 0 <= start <= end <= pool_len, f"row write [{start}, {end}) outside a row of {pool_len}"
        req_to_token[row, start:end] = out_cache_loc[offset : offset + end - start].to(req_to_token.dtype)
        offset += end - start
    assert offset == len(out_cache_loc), f"{len(out_cache_loc)} slots allocated, {offset} written"


def spec_leaves(steps: int) -> dict[str, Any]:
    """The ``spec`` namespace of an EAGLE server with ``steps`` draft steps and topk 1 (arg_groups/fields/spec.py defaults
    otherwise), each leaf with its reader: the algorithm (common.py:452, allocation_sizing.py:40), the steps, topk and
    draft tokens (``get_alloc_len_per_decode``, allocation_sizing.py:39-50; eagle_utils.py:890) and the launch-time bound
    (``max_speculative_num_draft_tokens``, runtime_context.py:1982-1998)."""
    return {
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": steps,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": steps + 1,
        "max_speculative_num_draft_tokens": steps + 1,
    }


@contextlib.contextmanager
def published_speculation(config: EngineTargetConfig) -> Iterator[None]:
    """For the block, the process's published configuration is this server's: the ``spec`` namespace of
    :func:`spec_leaves` and ``schedule.page_size`` (``get_alloc_page_size``, allocation_sizing.py:22-25).  Upstream
    rereads them on every call (``release_kv_cache`` asks whether spec is on before it asserts no over-allocation,
    common.py:452-464), and other loops in the process run without speculation, so they hold per call.  A no-op
    without speculation."""
    if not config.speculative_num_steps:
        yield
        return
    spec = ConfigBag("spec", **spec_leaves(config.speculative_num_steps))
    with overridden(RUNTIME.bags, {"spec": spec}), overridden(RUNTIME.bags["schedule"].__dict__, {"page_size": config.page_size}):
        yield


F = TypeVar("F", bound=Callable[..., Any])


def speculating(method: F) -> F:
    """A loop method with the loop's speculative configuration published (:func:`published_speculation`): upstream reads
    it on arrival (``Req.is_prefill_only``, schedule_batch.py:1505) and at every release (common.py:452), so an abort or
    a pause that releases needs it as an iteration does.  A PD server's configuration too
    (:func:`~poolfuzz.harness.upstream.engine_disagg.published_disaggregation`: its queues read it on arrival and abort)."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with published_speculation(self.config), published_disaggregation(self.config.disaggregation):
            return method(self, *args, **kwargs)

    return call  # type: ignore[return-value]


def load_speculation() -> Any:
    """Execute :data:`SPEC_MODULES` (once a process) and give ``alloc_for_spec_decode`` its CPU row write; the loaded
    ``SpeculativeAlgorithm.EAGLE`` (speculative/spec_info.py:32-46), or one refusal.

    ``spec_utils.py:11`` imports ``huggingface_hub.snapshot_download``, which only a draft model's download calls (worker
    startup), and a ``--no-deps`` install lacks it: an inert module answers while the file executes, and is removed after."""
    copy = sglang_copy()
    absent = "huggingface_hub" not in sys.modules and _absent("huggingface_hub")
    if absent:
        inert = types.ModuleType("huggingface_hub", "poolfuzz: absent; spec_utils.py's draft-model download alone uses it")
        inert.snapshot_download = _never_called  # type: ignore[attr-defined]
        sys.modules["huggingface_hub"] = inert
    try:
        loaded, problems = copy.load((*SPEC_MODULES, ALLOCATION, SIZING))
    finally:
        if absent:
            sys.modules.pop("huggingface_hub", None)
    if problems:
        raise UpstreamUnavailableError(next(iter(problems.values())))
    allocation = loaded[ALLOCATION]
    # The CPU branch of assign_req_to_token_pool_func (allocation.py:745-754) with the op of :43-46; the flag gates nothing
    # else in the module.
    allocation.__dict__.update(_is_cpu=True, assign_req_to_token_pool_cpu=assign_req_to_token_pool_cpu)
    return loaded["sglang.srt.speculative.spec_info"].SpeculativeAlgorithm.EAGLE


def _absent(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return True
    return False


def _never_called(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("poolfuzz: huggingface_hub is absent; the engine target downloads no draft model")


def spec_rows(loop: Any) -> tuple[Any, Any]:
    """The row pool ``kv_cache_configurator`` builds for a speculative server, and the tree over it: rows of the context
    plus ``get_req_to_token_extra_context_len()`` (allocation_sizing.py:96-115, read at kv_cache_configurator.py:42), which
    holds the decode reserve past the longest request (eagle_utils.py:884-897 asserts it at page > 1 with topk > 1)."""
    config = loop.config
    sizing = sglang_copy().load((SIZING,))[0][SIZING]
    with published_speculation(config):
        extra = int(sizing.get_req_to_token_extra_context_len())
    rows = loop.m.memory_pool.ReqToTokenPool(
        size=config.rows, max_context_len=config.context + extra, device="cpu", enable_memory_saver=False
    )
    return rows, tree_cache(loop.m, config, rows, loop.allocator)


def default_accepted_drafts(rid: str, iteration: int, steps: int) -> int:
    """The drafts a request's verify accepts when the fuzzer names no length (an ``iterate`` or ``run`` step): a cycle
    over ``0..steps`` by request and iteration, so plain runs reach every accept length, deterministically."""
    number = int("".join(ch for ch in rid if ch.isdigit()) or 0)
    return (number + iteration) % (steps + 1)


def verify_result(utils: Any, batch: Any, steps: int, accepted: Mapping[str, int], eos: frozenset[str], default_token: int) -> Any:
    """The fake model's verify of one decode batch: a real ``GenerationBatchResult`` (managers/utils.py:56) as the EAGLE
    worker returns it to the scheduler, padded ``steps + 1`` tokens per request (``speculative_num_draft_tokens``, the
    stride ``_resolve_spec_v2_tokens`` reads, batch_result_processor.py:86-93) and ``accept_lens`` counting the bonus
    token (``num_non_draft_tokens_per_req`` 1).  Request ``rid`` accepts ``accepted[rid]`` drafts (clipped to
    ``0..steps``); one named in ``eos`` samples EOS in the middle of its run, so a stop can land before the run's end
    and the tokens past it stay committed but unowned (``owned_kv_len``, schedule_batch.py:1552-1565)."""
    stride = steps + 1
    tokens = torch.full((len(batch.reqs) * stride,), default_token, dtype=torch.int64)
    lengths = []
    for i, req in enumerate(batch.reqs):
        length = 1 + max(0, min(steps, accepted.get(str(req.rid), 0)))
        if str(req.rid) in eos:
            tokens[i * stride + length // 2] = EOS
        lengths.append(length)
    return utils.GenerationBatchResult(
        next_token_ids=tokens,
        accept_lens=torch.tensor(lengths, dtype=torch.int32),
        speculative_num_draft_tokens=stride,
        num_non_draft_tokens_per_req=1,
    )

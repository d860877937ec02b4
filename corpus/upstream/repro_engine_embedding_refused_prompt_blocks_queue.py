"""Standalone reproduction of engine finding 6 (an embedding prompt past ``max_req_input_len`` is queued without an
abort, and a prompt the KV pool can never hold then blocks the waiting queue for ever).

SGLang 0.5.23, an embedding model (``is_generation`` False), full attention:

* the startup sizes the prompt limit from the smaller of the context length and the KV pool:
  ``max_req_len = min(context_len - 1, kv_capacity - 1)``, ``max_req_input_len = max_req_len - 5``
  (managers/tp_worker.py:568-572).  The tokenizer only refuses prompts of the context length or more
  (tokenizer_manager.py:1337-1350), so a prompt the pool cannot hold, shorter than the context, reaches the scheduler;
* ``Scheduler._handle_embedding_request`` (managers/scheduler.py:3653-3756) runs ``validate_input_length``
  (managers/utils.py:259-289), and when it refuses the prompt, only queues it (scheduler.py:3751-3753).  The generate
  path aborts it first (``req.set_finish_with_abort(error_msg)``, scheduler.py:3251-3254);
* the unaborted request keeps its whole prompt.  At each iteration ``_get_new_batch_prefill_raw`` walks the waiting
  queue in order (scheduler.py:4204) and asks ``PrefillAdder.add_one_req`` (managers/schedule_policy.py:1395) to place
  it: the full-attention ``PrefillBudget.check_prefill`` (mem_cache/prefill_budget.py:114-130) wants
  ``extend + max_new + page`` below what the pool holds, a prompt that with its page reaches the pool's size never is, so the answer is
  ``NO_TOKEN`` and the loop breaks at the queue head (scheduler.py:4278-4300).  Nothing runs, so no later iteration
  changes the pool: every request behind it starves, with nothing running.  ``SGLANG_REQ_WAITING_TIMEOUT``
  (environ.py:685, off by default) would abort the head after its timeout (scheduler.py:3605).

The script runs the wheel's own code, nothing of poolfuzz: ``Scheduler._handle_embedding_request`` and
``validate_input_length`` compiled from their files, ``PrefillAdder.add_one_req`` with the admission methods it calls
compiled from schedule_policy.py, the wheel's ``TokenToKVPoolAllocator`` and ``PrefillBudget`` (through
``_wheel_allocators.py`` beside it).  Stand-ins: the request (``Req``: the fields admission reads, and
``set_finish_with_abort``), an empty tree cache (nothing is ever cached: nothing runs), the queue append of
``_add_request_to_queue`` (scheduler.py:3480-3495: no priority, no queue limit), the queue walk above, and what
follows a placement (``_commit_prefill_admission`` records it, ``budget_state`` goes on; the stuck queue never gets there).

    pip install --no-deps sglang==0.5.23 && python corpus/upstream/repro_engine_embedding_refused_prompt_blocks_queue.py

It checks the fuzzer's shortest trace (a 22-token pool, context 64: a 22-token prompt, then a 5-token one) and a
server-sized shape (a 32k-context embedding model on an 8k-token pool, chunked prefill 2048: a 10,000-token prompt,
then a 5-token one), and exits 1 when both queues are stuck (REPRODUCED), 0 when not.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import types
from http import HTTPStatus
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _wheel_admission import EmptyTree, compiled, prefill_adder  # the sibling loaders, on the path set above
from _wheel_allocators import SRT, build, load

ITERATIONS = 1000


class Req:
    """What ``_handle_embedding_request`` builds (schedule_batch.py ``Req``): the fields admission reads."""

    def __init__(self, rid: str, input_text: str, input_ids: list[int], sampling_params: Any, **_: Any) -> None:
        self.rid, self.origin_input_ids, self.sampling_params = rid, list(input_ids), sampling_params
        self.to_finish: str | None = None
        self.output_ids: list[int] = []
        self.prefix_len = self.host_hit_length = self.swa_host_hit_length = 0
        self.auxiliary_swa_host_hit_length = self.mamba_host_hit_length = 0
        self.last_node = None
        self.kv = types.SimpleNamespace(holds_mamba=False, req_pool_idx=None)
        self.full_untruncated_fill_ids: list[int] = []

    def set_finish_with_abort(self, error_msg: str, **_: Any) -> None:
        self.to_finish = error_msg

    def init_next_round_input(self, tree_cache: Any) -> None:  # the empty tree matches no prefix
        self.full_untruncated_fill_ids = self.origin_input_ids + self.output_ids

    def needs_host_load_back(self) -> bool:
        return False


def main() -> int:
    version = metadata.version("sglang")
    assert version == "0.5.23", f"this reproduces sglang 0.5.23; installed: {version}"
    allocators, _ = build()
    load("sglang.srt.mem_cache.prefill_budget", SRT / "mem_cache/prefill_budget.py")  # base.py's create_prefill_budget

    never = type("Never", (), {})  # classes an isinstance check compares with, never met here
    serving = types.SimpleNamespace(allow_auto_truncate=False)  # the default (--allow-auto-truncate off)
    utils = compiled(SRT / "managers/utils.py", {"logger": logging.getLogger("sglang"), "Optional": Optional},
                     ("validate_input_length",))
    handle = compiled(SRT / "managers/scheduler.py", {
        "Req": Req, "HTTPStatus": HTTPStatus, "get_serving": lambda: serving, "MultimodalInputs": never,
        "MultimodalProcessorOutput": never, "_MultimodalInputProcessingError": never, **utils,
    }, ("_handle_embedding_request",), owner="Scheduler")["_handle_embedding_request"]
    methods, add_req_result = prefill_adder((
        "add_one_req", "_select_prefill_admission", "_check_prefill_budget", "ceil_paged_tokens",
        "_request_slot_reserve_for_req", "_swa_new_tokens", "_mamba_gap_budget_for_req", "_replay_len",
        "_lock_node", "_defer_staged_for_capacity_if_idle", "_check_prefill_tile_budget"))

    # (KV pool tokens, context length, chunked prefill size, the prompts in arrival order)
    shapes = ((22, 64, None, (22, 5)), (8192, 32768, 2048, (10_000, 5)))
    stuck = 0
    for pool_tokens, context_len, chunk, prompts in shapes:
        stuck += reproduces(allocators, handle, methods, add_req_result, pool_tokens, context_len, chunk, prompts)
    print("REPRODUCED: the refused embedding request holds the queue head, nothing runs, the request behind it starves"
          if stuck == len(shapes) else "not reproduced")
    return 1 if stuck == len(shapes) else 0


def reproduces(allocators: types.SimpleNamespace, handle: Any, methods: dict[str, Any], add_req_result: Any,
               pool_tokens: int, context_len: int, chunk: int | None, prompts: tuple[int, ...]) -> bool:
    """Two embedding requests through upstream's arrival and admission on an idle pool, for ``ITERATIONS`` iterations."""
    pool = allocators.token.TokenToKVPoolAllocator(pool_tokens, torch.float16, "cpu", None, False)
    kv_capacity = pool.available_size()
    max_req_len = min(context_len - 1, kv_capacity - 1)  # tp_worker.py:568-571
    waiting: list[Req] = []
    scheduler = types.SimpleNamespace(
        max_req_input_len=max_req_len - 5, tokenizer=None, waiting_queue=waiting,  # tp_worker.py:572
        _maybe_namespace_elastic_radix_cache=lambda req: None, _record_kv_event_lora_name=lambda req, name: None,
        _add_request_to_queue=waiting.append)
    for number, length in enumerate(prompts):
        assert length < context_len, "the tokenizer would refuse it (tokenizer_manager.py:1338)"
        recv = types.SimpleNamespace(  # TokenizedEmbeddingReqInput: max_new_tokens 0 (io_struct.py:1366)
            rid=f"r{number}", input_text="", input_ids=list(range(1, length + 1)),
            sampling_params=types.SimpleNamespace(max_new_tokens=0, ignore_eos=False), positional_embed_overrides=None,
            token_type_ids=None, routed_dp_rank=None, priority=None, dimensions=None, lora_id=None, lora_name=None,
            http_worker_ipc=None, time_stats=None, return_pooled_hidden_states=False, multi_item_delimiter_indices=None,
            token_indices_to_pool=None, decision_layout=None, mm_inputs=None)
        handle(scheduler, recv, contextlib.ExitStack())
    tree = EmptyTree()
    admitted: list[Req] = []
    iterations = 0
    while iterations < ITERATIONS and not admitted:
        iterations += 1
        adder = types.SimpleNamespace(
            prefill_max_requests=None, tree_cache=tree, token_to_kv_pool_allocator=pool, page_size=pool.page_size,
            memory_budget=pool.create_prefill_budget(tree, num_mixed_decode_tokens=0),  # schedule_policy.py:656
            per_req_token_overhead=pool.page_size, _mamba_slot_cost=0, rem_mamba_slots=None,  # :733-737
            rem_chunk_tokens=chunk, exact_chunk_fill=False, can_run_list=[], running_batch=None, dllm_config=None,
            rem_input_tokens=chunk or pool_tokens, kv_shard_scratch_spec=None, prefill_delayer_single_pass=None)
        for name, method in methods.items():
            setattr(adder, name, types.MethodType(method, adder))
        adder._commit_prefill_admission = lambda req, admission, reserve, chosen=adder.can_run_list: chosen.append(req)
        adder.budget_state = lambda: add_req_result.CONTINUE
        for req in list(waiting):  # _get_new_batch_prefill_raw's walk (scheduler.py:4204-4300), FCFS
            if req.to_finish is not None:  # an aborted request leaves at its prefill, as the generate path's does
                waiting.remove(req)
                continue
            req.init_next_round_input(tree)
            result = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
            if result != add_req_result.CONTINUE:
                break
        for req in adder.can_run_list:
            waiting.remove(req)
        admitted += adder.can_run_list
    head = waiting[0] if waiting else None
    print(f"pool {kv_capacity} tokens, context {context_len}, chunked prefill {chunk}: prompts {list(prompts)} -> "
          f"max_req_input_len {scheduler.max_req_input_len}; after {iterations} iterations the queue holds "
          f"{[len(r.origin_input_ids) for r in waiting]} tokens (head aborted: {head is not None and head.to_finish is not None}), "
          f"admitted {[len(r.origin_input_ids) for r in admitted]}, pool free {pool.available_size()}")
    return (head is not None and head.to_finish is None and len(head.origin_input_ids) >= scheduler.max_req_input_len
            and len(waiting) == len(prompts) and not admitted)


if __name__ == "__main__":
    sys.exit(main())

"""Standalone reproduction of engine finding 7: on a hybrid-SWA server, a prefill chunk that the SWA budget cuts leaves the
pass open, a second request is cut the same way, and it replaces the first as the pass's chunked request.  The first
request's prefill then counts as complete: it decodes with most of its prompt never prefilled.

SGLang 0.5.23, hybrid sliding-window model (``SWATokenToKVPoolAllocator``), chunked prefill on:

* ``PrefillAdder.add_one_req`` (managers/schedule_policy.py:1395) asks ``_select_prefill_admission`` (:1595) for the
  request's shape.  ``SWAPrefillBudget.check_prefill`` (mem_cache/prefill_budget.py:230-268) finds the request's SWA
  need at or above the whole SWA pool (a "permanent shortfall") and answers with a chunk *cap* below
  ``rem_chunk_tokens``: the request is cut there, ``is_chunked`` (:1674);
* ``_commit_prefill_admission`` (:1685-1693) sets ``self.new_chunked_req = req`` and charges the cut chunk to
  ``rem_chunk_tokens`` (``_update_prefill_budget``, :942-943), which stays positive, so ``budget_state`` (:874-893) answers
  ``CONTINUE`` and the scheduler's walk (managers/scheduler.py:4204-4300) offers the next queued request;
* the next request is cut by the SWA cap too, and ``_commit_prefill_admission`` overwrites ``new_chunked_req`` with it.
  Only that one becomes ``self.chunked_req`` (scheduler.py:4324-4327).  The first request is in the batch with
  ``extend_end`` short of its prompt, and nothing records that its prefill is unfinished: its result is processed as a
  finished prefill (it samples its first output token), and it joins the running batch.  The only guard, "Only one
  unfinished chunked request can be tracked" (schedule_policy.py:1655-1660), looks at the scheduler's chunked request
  (``has_chunked_req``), not the one this pass made, and only under ``shortest-prefill-first``.

What the user sees: the first request's prompt tail is never prefilled (the model answers a truncated prompt, silently);
its ``seqlen`` counts the whole prompt while its KV row holds only the chunk.  Under the overlap loop (every server's
default), its next decode's ``maybe_evict_swa`` (schedule_batch.py:4068-4123) frees the row's unwritten positions, the
SWA mapping's "no slot" index 0, and the SWA allocator's own assert fails (allocator/swa.py:665); poolfuzz's engine
target found it that way (``corpus/engine/engine-swa-cap-overwrites-chunked-req.json``).

The script runs the wheel's own code, nothing of poolfuzz: ``PrefillAdder.add_one_req`` with the admission, commit and
budget methods it calls compiled from schedule_policy.py, the wheel's ``SWATokenToKVPoolAllocator`` and
``SWAPrefillBudget`` (through ``_wheel_allocators.py`` beside it).  Stand-ins: the request (``Req``: the fields admission
reads), an empty tree cache with a sliding window (nothing cached, nothing evictable, locks that hold nothing), and the
scheduler's walk of the waiting queue and its hand-off of ``new_chunked_req`` (scheduler.py:4204-4327), in a loop.

    pip install --no-deps sglang==0.5.23 && python corpus/upstream/repro_engine_swa_cap_overwrites_chunked_req.py

It checks the fuzzer's trace (full pool 16, SWA pool 6, window 4, page 1, chunk 6: a 9-token prompt, then a 5-token one)
and a server-shaped one (page 64, window 128, an SWA pool of 4,096 tokens, chunked prefill 8,192: two 12,000-token
prompts), and exits 1 when both lose a chunked request (REPRODUCED), 0 when not.
"""

from __future__ import annotations

import sys
import types
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _wheel_admission import EmptyTree, prefill_adder  # the sibling loaders, on the path set above
from _wheel_allocators import SRT, build, load

ADMISSION = (
    "add_one_req", "_select_prefill_admission", "_check_prefill_budget", "ceil_paged_tokens", "floor_chunked_tokens",
    "_request_slot_reserve_for_req", "_swa_new_tokens", "_mamba_gap_budget_for_req", "_replay_len", "_lock_node",
    "_defer_staged_for_capacity_if_idle", "_check_prefill_tile_budget", "_commit_prefill_admission",
    "_update_prefill_budget", "_account_prefill_cache_admission", "budget_state")
"""The ``PrefillAdder`` methods one admission runs, compiled from the wheel's schedule_policy.py."""


class Req:
    """A queued request with nothing cached (schedule_batch.py ``Req``): the fields admission reads."""

    def __init__(self, rid: str, prompt: int, max_new_tokens: int) -> None:
        self.rid, self.origin_input_ids = rid, list(range(1, prompt + 1))
        self.sampling_params = types.SimpleNamespace(max_new_tokens=max_new_tokens, ignore_eos=False)
        self.output_ids: list[int] = []
        self.prefix_len = self.host_hit_length = self.swa_host_hit_length = self.storage_hit_length = 0
        self.auxiliary_swa_host_hit_length = self.mamba_host_hit_length = 0
        self.last_node = self.lock = self.cache_request_handle = None
        self.retracted_stain = False
        self.kv = types.SimpleNamespace(holds_mamba=False, req_pool_idx=None)
        self.full_untruncated_fill_ids = self.origin_input_ids + self.output_ids  # init_next_round_input, no prefix
        self.extend_end: int | None = None

    def needs_host_load_back(self) -> bool:
        return False

    def fulfilled_storage_hit_len(self, prefix_len: int) -> int:
        return 0


class EmptySWATree(EmptyTree):
    """An empty UnifiedRadixCache with an SWA component: nothing cached on either side."""

    def __init__(self, window: int) -> None:
        self.sliding_window_size = window

    def full_evictable_size(self) -> int:
        return 0

    def swa_evictable_size(self) -> int:
        return 0


def main() -> int:
    version = metadata.version("sglang")
    assert version == "0.5.23", f"this reproduces sglang 0.5.23; installed: {version}"
    allocators, kvcache_class = build()
    load("sglang.srt.mem_cache.prefill_budget", SRT / "mem_cache/prefill_budget.py")  # swa.py's create_prefill_budget
    methods, add_req_result = prefill_adder(ADMISSION)

    # (full pool, SWA pool, window, page, chunked prefill size, (prompt, max_new) in arrival order)
    shapes = ((16, 6, 4, 1, 6, ((9, 4), (5, 1))),
              (200_000, 4096, 128, 1, 8192, ((12_000, 256), (12_000, 1))))
    lost = 0
    for full_tokens, swa_tokens, window, page, chunk, requests in shapes:
        lost += reproduces(allocators, kvcache_class, methods, add_req_result, full_tokens, swa_tokens, window,
                           page, chunk, requests)
    print("REPRODUCED: a chunk the SWA budget cut lost its chunked-request record; that request counts as prefilled"
          if lost == len(shapes) else "not reproduced")
    return 1 if lost == len(shapes) else 0


def reproduces(allocators: types.SimpleNamespace, kvcache_class: type, methods: dict[str, Any], add_req_result: Any,
               full_tokens: int, swa_tokens: int, window: int, page: int, chunk: int,
               requests: tuple[tuple[int, int], ...]) -> bool:
    """One prefill pass of upstream's admission over the queued ``requests`` on an idle hybrid-SWA pool."""
    assert window + page < swa_tokens, "validate_swa_pool_size (pool_configurator.py:198-216) would refuse this pool"
    pool = allocators.swa.SWATokenToKVPoolAllocator(full_tokens, swa_tokens, page, torch.float16, "cpu",
                                                    kvcache_class(), False)
    tree = EmptySWATree(window)
    adder = types.SimpleNamespace(  # PrefillAdder.__init__'s fields for this shape (schedule_policy.py:612-737)
        prefill_max_requests=None, tree_cache=tree, token_to_kv_pool_allocator=pool, page_size=page,
        memory_budget=pool.create_prefill_budget(tree, num_mixed_decode_tokens=0), per_req_token_overhead=page,
        _mamba_slot_cost=0, rem_mamba_slots=None, mamba_chunk_grid=1, rem_chunk_tokens=chunk, rem_input_tokens=chunk,
        rem_dllm_tokens=None, exact_chunk_fill=False, can_run_list=[], running_batch=None, dllm_config=None,
        kv_shard_scratch_spec=None, prefill_delayer_single_pass=None, new_chunked_req=None,
        log_hit_tokens=0, log_input_tokens=0, log_replay_tokens=0, log_device_hit_tokens=0, log_host_hit_tokens=0,
        log_storage_hit_tokens=0, reprocessed_log_hit_tokens=0, reprocessed_log_input_tokens=0)
    for name, method in methods.items():
        setattr(adder, name, types.MethodType(method, adder))
    waiting = [Req(f"r{number}", prompt, max_new) for number, (prompt, max_new) in enumerate(requests)]
    chunked_records: list[str] = []
    for req in waiting:  # _get_new_batch_prefill_raw's walk (scheduler.py:4204-4300), no chunked request yet
        if adder.budget_state() == add_req_result.OTHER:
            break
        result = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if adder.new_chunked_req is not None and (not chunked_records or chunked_records[-1] != adder.new_chunked_req.rid):
            chunked_records.append(adder.new_chunked_req.rid)
        if result != add_req_result.CONTINUE:
            break
    chunked_req = adder.new_chunked_req  # scheduler.py:4324-4327: the one request the scheduler tracks as chunked
    cut_short = [req for req in adder.can_run_list if req.extend_end < len(req.full_untruncated_fill_ids)]
    untracked = [req for req in cut_short if req is not chunked_req]
    print(f"full {full_tokens}, SWA {swa_tokens}, window {window}, page {page}, chunk {chunk}: prompts "
          f"{[len(r.origin_input_ids) for r in waiting]} -> batch prefills "
          f"{[(r.rid, r.extend_end, len(r.full_untruncated_fill_ids)) for r in adder.can_run_list]} (rid, to, of); "
          f"new_chunked_req set to {chunked_records}, tracked: {chunked_req.rid if chunked_req else None}; "
          f"cut short but finished: {[r.rid for r in untracked]}")
    return bool(untracked)


if __name__ == "__main__":
    sys.exit(main())

"""Standalone reproduction of engine finding 5 (``swa-admission-hangs``): a hybrid-SWA server accepts a
request its admission can never place, and the queue head then waits for ever on an idle pool.

SGLang 0.5.23, hybrid sliding-window model (``SWATokenToKVPoolAllocator``), chunked prefill off
(``--chunked-prefill-size -1``):

* at arrival, ``init_req_max_new_tokens`` (managers/scheduler.py:2693) asks the allocator's
  ``max_new_tokens_for_memory``.  ``SWATokenToKVPoolAllocator`` does not override it, so the base
  version (mem_cache/allocator/base.py:88-105) checks the *full* pool only, and the request is queued;
* at admission, ``SWAPrefillBudget.check_prefill`` (mem_cache/prefill_budget.py:230-268) charges
  ``estimate_swa_kv_tokens`` = (extend - window) + min(extend + max_new, window) + page = extend + page
  SWA slots.  When that reaches the SWA pool it is a "permanent shortfall", but without a chunk limit
  there is nothing to shrink, so it answers ``(False, None)``: ``add_one_req`` returns ``NO_TOKEN`` and
  the scheduler's loop breaks at the queue head (scheduler.py:4280-4300) without aborting it;
* nothing runs, so no later iteration changes the pools: every iteration is the same refusal.  With the
  default ``--swa-full-tokens-ratio 0.8``, every prompt between 80% of the full pool and all of it hangs
  the server this way.  The startup check ``validate_swa_pool_size`` (model_executor/pool_configurator.py:
  198-216) exists to stop exactly this hang ("the scheduler spins in the waiting queue"), but only for
  pools below one window.

The script runs the wheel's own ``allocator/base.py`` and ``prefill_budget.py`` (nothing of poolfuzz; its loader is
``_wheel_allocators.py`` beside it),
on an idle pool: no request runs, nothing is cached.

    pip install --no-deps sglang==0.5.23 && python corpus/upstream/repro_swa_admission_hangs.py

It checks a toy shape and a server-sized one (a 200k-token full pool, the default 0.8 SWA ratio, a 4k window,
page 64, a 180k-token prompt), prints both answers for each, and exits 1 when the hang reproduces, 0 when not.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _wheel_allocators import SRT, load  # the sibling loader, on the path set above


def main() -> int:
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.allocator"):
        package = types.ModuleType(name)
        package.__path__ = []  # type: ignore[attr-defined]
        sys.modules[name] = package
    # prefill_budget.py imports one helper from allocator/swa.py: False for a paged SWA pool (no per-request ring).
    swa = types.ModuleType("sglang.srt.mem_cache.allocator.swa")
    swa.is_swa_req_ring = lambda allocator: False  # type: ignore[attr-defined]
    sys.modules[swa.__name__] = swa
    base = load("sglang.srt.mem_cache.allocator.base", SRT / "mem_cache/allocator/base.py")
    budget_module = load("sglang.srt.mem_cache.prefill_budget", SRT / "mem_cache/prefill_budget.py")

    # (full pool, SWA pool, window, page, prompt, max_new): a toy shape, and a server-sized one (SWA pool at the
    # default --swa-full-tokens-ratio 0.8 of a 200k-token full pool, a 4k window, page 64, a 180k-token prompt).
    shapes = ((32, 10, 8, 1, 10, 5), (200_000, 160_000, 4096, 64, 180_000, 512))
    hung = 0
    for full_tokens, swa_tokens, window, page, prompt, max_new in shapes:
        hung += reproduces(base, budget_module, full_tokens, swa_tokens, window, page, prompt, max_new)
    print("REPRODUCED: queued at arrival, never admitted on an idle pool" if hung == len(shapes) else "not reproduced")
    return 1 if hung == len(shapes) else 0


def reproduces(base: types.ModuleType, budget_module: types.ModuleType, full_tokens: int, swa_tokens: int,
               window: int, page: int, prompt: int, max_new: int) -> bool:
    """Upstream's arrival clip and admission check for one request on an idle hybrid-SWA pool."""
    assert window + page < swa_tokens, "validate_swa_pool_size (pool_configurator.py:198-216) would refuse this pool"

    class IdleSWAAllocator:
        """The sizes SWATokenToKVPoolAllocator reports with nothing allocated (allocator/swa.py)."""

        page_size = page
        size_swa = swa_tokens

        def full_available_size(self) -> int:
            return full_tokens

        def swa_available_size(self) -> int:
            return swa_tokens

        def available_size(self) -> int:
            return min(full_tokens, swa_tokens)

    class EmptyTree:
        """An empty UnifiedRadixCache with an SWA component: nothing evictable."""

        sliding_window_size = window

        def full_evictable_size(self) -> int:
            return 0

        def swa_evictable_size(self) -> int:
            return 0

    allocator = IdleSWAAllocator()
    accepted = base.BaseTokenToKVPoolAllocator.max_new_tokens_for_memory(
        allocator, prompt, max_new, token_capacity=full_tokens, sliding_window_size=window, chunk_size=None)
    budget = budget_module.SWAPrefillBudget(allocator, EmptyTree())
    paged_prompt = -(-prompt // page) * page
    total_tokens = paged_prompt + (accepted or 0) + page  # what add_one_req charges (schedule_policy.py:1407-1427)
    admitted = budget.check_prefill(extend_input_len=prompt, total_tokens=total_tokens, max_new_tokens=accepted or 0,
                                    input_tokens=prompt, swa_host_hit_length=0, chunk_limit=None)
    print(f"full {full_tokens}, SWA {swa_tokens}, window {window}, page {page}: a {prompt}-token prompt asking {max_new} "
          f"new tokens -> arrival max_new_tokens_for_memory = {accepted} (None would abort it); idle-pool check_prefill = {admitted}")
    return accepted is not None and accepted > 0 and admitted[0] is False


if __name__ == "__main__":
    sys.exit(main())

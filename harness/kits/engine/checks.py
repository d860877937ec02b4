"""The engine family's judging: upstream's own runtime checker, and the engine judges over the same state.

Two independent judges look at the loop after every iteration:

* **upstream's** ``SchedulerInvariantChecker`` (``managers/scheduler_components/invariant_checker.py``),
  called directly as the scheduler would with ``SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY`` and
  ``SGLANG_CHECK_KV_PAGE_INVARIANTS`` set: the full-pool leak equation with the owners' uncached
  tokens (``self_check_during_busy``, :313-345), the KV page owner check (:350-426), and at idle the
  request-pool check (:428-450); on hybrid Mamba its ``_check_mamba_pool`` (:196-241), which runs only
  at idle (:477), never while busy;
* **ours**: the engine judges of :mod:`poolfuzz.harness.engines.judges`, written once for every engine, over the
  loop's raw state as :mod:`poolfuzz.harness.kits.engine.observe` reads it (pages, rows and Mamba slots with their
  holders, the tree's locks, the last iteration's progress, upstream's verdicts as the accounts).

What stays here is what only SGLang has: building upstream's checker (:class:`UpstreamChecker`), and the
checks of SGLang's own structures the engine-neutral observation does not carry (:func:`sglang_checks`):
a decoding request's prompt held whole, the full-to-SWA index of a hybrid-SWA allocator, and the Mamba slot every
``HybridReqToTokenPool`` row gets.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from poolfuzz.harness.engines import judges
from poolfuzz.harness.engines.interface import Observation
from poolfuzz.harness.judge.invariants import check
from poolfuzz.harness.kits.engine.observe import live_requests, observe


class UpstreamChecker:
    """Upstream's ``SchedulerInvariantChecker`` over the loop's pools, built as scheduler.py:2523 builds it."""

    def __init__(self, loop: Any) -> None:
        from poolfuzz.harness.upstream.sglang_modules import active

        with active(loop.m):
            self._build(loop)

    def _build(self, loop: Any) -> None:
        m = loop.m
        ic, obs = m.invariant_checker, m.pool_stats_observer
        self.loop = loop
        swa = loop.config.hybrid_swa
        ssm = loop.config.hybrid_ssm
        full_tokens = loop.config.tokens if swa else None
        swa_tokens = loop.config.swa_tokens if swa else None
        self.observer = obs.SchedulerPoolStatsObserver(
            tree_cache=loop.tree_cache, token_to_kv_pool_allocator=loop.allocator,
            req_to_token_pool=loop.req_to_token_pool, session_controller=None, hisparse_coordinator=None,
            is_hybrid_swa=swa, is_hybrid_ssm=ssm, enable_hisparse=False, full_tokens_per_layer=full_tokens,
            swa_tokens_per_layer=swa_tokens, max_total_num_tokens=loop.config.tokens,
        )
        self.checker = ic.SchedulerInvariantChecker(
            is_hybrid_swa=swa, is_hybrid_ssm=ssm, disaggregation_mode="null", page_size=loop.config.page_size,
            full_tokens_per_layer=full_tokens, swa_tokens_per_layer=swa_tokens, max_total_num_tokens=loop.config.tokens,
            tree_cache=loop.tree_cache, token_to_kv_pool_allocator=loop.allocator,
            req_to_token_pool=loop.req_to_token_pool, pool_stats_observer=self.observer,
            get_last_batch=lambda: loop.last_batch, get_running_batch=lambda: loop.running_batch,
            scheduler_stage_metrics=None, get_chunked_req=lambda: loop.chunked_req,
        )

    def verdict(self) -> tuple[bool, str] | None:
        """(leak, message) as upstream checks at this point of the loop, or ``None`` where it does not check.

        Fully idle: ``on_idle`` (scheduler.py:5292-5297) runs the pool check without uncached tokens
        and the request-pool check.  After a batch: ``self_check_during_busy`` (invariant_checker.py:313)
        with the owners' uncached tokens, then the page owner check (``_check_kv_page_invariants``,
        which asserts).  Between them (no batch formed, requests still queued) upstream checks nothing.
        """
        ps = self.observer.get_pool_stats()
        swa = self.loop.config.hybrid_swa
        if self.loop.fully_idle:
            leak, message = self.checker._check_full_pool(ps, uncached=0)
            if swa:
                swa_leak, swa_message = self.checker._check_swa_pool(ps)
                leak, message = leak or swa_leak, f"{message}; {swa_message}"
            self.checker._check_req_pool()
            return bool(leak), str(message)
        if self.loop.last_batch is None:
            return None
        if getattr(self.loop, "pd_kv_holders", list)():
            # The busy check's owners leave out a PD server's queued requests holding KV (_requests_owning_rows,
            # invariant_checker.py:274-294), whose pages it would count as leaked: not checked then (docs/engine.md).
            return None
        full_uncached, swa_uncached = self.checker._get_total_uncached_sizes()
        leak, message = self.checker._check_full_pool(ps, uncached=full_uncached)
        if swa:
            swa_leak, swa_message = self.checker._check_swa_pool(ps, uncached=swa_uncached)
            leak, message = leak or swa_leak, f"{message}; {swa_message}"
        self.checker._check_kv_page_invariants()
        return bool(leak), str(message)

    def mamba_verdict(self) -> tuple[bool, str] | None:
        """Upstream's Mamba pool check where it runs: fully idle only (``_check_all_pools``, invariant_checker.py:477,
        under ``is_hybrid_ssm and supports_mamba()``: available + evictable + protected + session-held == size,
        :196-241).  ``self_check_during_busy`` never checks the Mamba pool, so busy is ``None``."""
        loop = self.loop
        if not (loop.config.hybrid_ssm and loop.tree_cache.supports_mamba()) or not loop.fully_idle:
            return None
        leak, message = self.checker._check_mamba_pool(self.observer.get_pool_stats())
        return bool(leak), str(message)


def judge(loop: Any, upstream: UpstreamChecker, *, with_surface: bool = True) -> Observation:
    """Both judges over the loop's state (see the module docstring); the observation they judged."""
    from poolfuzz.harness.upstream.sglang_modules import active

    with active(loop.m):
        observation = observe(loop, upstream, with_surface=with_surface)
        judges.judge(observation, engine_checks=lambda: sglang_checks(loop))
    return observation


def sglang_checks(loop: Any) -> None:
    """The checks of SGLang's own structures, run after the pools' partitions (:func:`prompt_prefilled`,
    :func:`swa_window`, :func:`mamba_rows`)."""
    prompt_prefilled(loop)
    if loop.config.hybrid_swa:
        swa_window(loop)
    if loop.config.hybrid_ssm:
        mamba_rows(loop)


def prompt_prefilled(loop: Any) -> None:
    """``prompt-prefilled``: a request in the running batch (it decodes next) holds KV for its whole prompt.

    A prefill pass that cuts a request's chunk and then forgets it is chunked sends it to decode with its prompt's tail
    never computed: the model answers a truncated prompt, and the request's ``seqlen`` counts positions its row never
    got, which SWA eviction then frees (finding 7: a second SWA-capped chunk replaces the first as
    ``new_chunked_req``, schedule_policy.py:1692).  Finished requests (their release may already have run) and the
    chunked request are not decoding.
    """
    short = [
        (str(req.rid), int(req.kv.kv_allocated_len), len(req.origin_input_ids))
        for req in loop.running_batch.reqs
        if req is not loop.chunked_req and req.kv.holds_kv and not req.finished()
        and req.kv.kv_allocated_len < len(req.origin_input_ids)
    ]
    check(not short, "prompt-prefilled", "a request decodes with part of its prompt never prefilled",
          requests=short[:8])


def swa_window(loop: Any) -> None:
    """``swa-mapping`` on ``full_to_swa_index_mapping``: no SWA slot is mapped twice, and a live request's last
    ``sliding_window`` positions (the window its next token reads) map to SWA slots.

    The SWA pool's partition (every SWA page free or mapped, none both) is the engine judges'; these are the
    slot-level facts of SGLang's index.  The out-of-window free of a live token's page
    (``free_swa_out_of_window_slots`` past the cursor) and a double SWA free (SGLang PR #27586) break them.
    """
    mapping = loop.allocator.full_to_swa_index_mapping[:-1]
    counts = Counter(int(v) for v in mapping[mapping > 0].tolist())
    twice = sorted(v for v, n in counts.items() if n > 1)
    check(not twice, "swa-mapping", "two full slots map to one SWA slot", swa_slots=twice[:8])
    swa_kind = loop.m.component_type.ComponentType.SWA
    window = int(loop.config.sliding_window or 0)
    rows = loop.req_to_token_pool.req_to_token
    for req in loop.owners():
        kv = req.kv
        start = max(int(kv.get_evicted_seqlen(swa_kind)), kv.kv_allocated_len - window)
        slots = rows[kv.req_pool_idx, start : kv.kv_allocated_len].long()
        unmapped = [pos + start for pos, v in enumerate(mapping[slots].tolist()) if v <= 0]
        check(not unmapped, "swa-mapping", f"request {req.rid}'s last {window} positions (its window) map to no SWA slot",
              request=req.rid, positions=unmapped[:8], allocated=kv.kv_allocated_len)


def mamba_rows(loop: Any) -> None:
    """``scheduler-conservation``: a live request holding a request row holds a Mamba slot (``HybridReqToTokenPool.alloc``
    gives every row one)."""
    rowless = [req.rid for req in live_requests(loop) if req.kv.holds_kv and not req.kv.holds_mamba]
    check(not rowless, "scheduler-conservation", "a request holds a request row but no Mamba slot "
          "(HybridReqToTokenPool.alloc gives every row one)", requests=rowless[:8])

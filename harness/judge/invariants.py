"""The catalogue of named invariants.

Invariant ids are public API: reports, traces, canaries and tests name them, so
renaming one is a breaking change.  Each entry says what must hold and which
historical bug it exists to catch.

Checks come in two costs.  *Per-call* checks run after every step and look only
at what the call touched (proportional to the batch).  *Audits* compare the whole
pool against the shadow model; drivers run them every ``audit_period`` steps and
at teardown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poolfuzz.harness.judge.trace import Trace


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    guards_against: str


_CATALOGUE = (
    Invariant(
        "no-double-allocation",
        "An index is never live twice; the indices one call returns are unique and were free.",
        "double frees that put an index on a free list twice (vLLM #42571, SGLang debug duplicate-page check)",
    ),
    Invariant(
        "reserved-never-handed-out",
        "Row 0, Mamba slot 0 and KV page 0 are never returned; row 0 of req_to_token stays zero.",
        "padding row handed to a request (SGLang #24243, #17404, #1557)",
    ),
    Invariant(
        "generation-monotonic",
        "req_generation[row] rises by exactly one per fresh binding and never falls, across clear too.",
        "generation zeroed on clear, colliding with the previous owner (fixed in 0.5.23)",
    ),
    Invariant(
        "empty-pool-guard",
        "A request succeeds iff the pool has room; a short pool returns None and changes nothing; need 0 consumes nothing.",
        "the free_slots[-0:] slice (seed 000); capacity checked after the kernel (SGLang #34399)",
    ),
    Invariant(
        "conservation",
        "free + live + reserved-in-group + pending-free == capacity, disjoint, no duplicates; available_size() agrees.",
        "slot leaks and over-frees (SGLang #6888, #26941, seed 001)",
    ),
    Invariant(
        "in-bounds",
        "Every index addresses an existing row, slot or page of the backing tensors; aux tables have req_to_token rows.",
        "aux tables sized with pool.size (SGLang #24439, #24244)",
    ),
    Invariant(
        "group-window",
        "Group end returns exactly the unconsumed reservations; deferred frees release exactly what was enqueued, at end.",
        "Mamba group end leaking slots (seed 001); free-group aliasing (SGLang #34067)",
    ),
    Invariant(
        "clear-restores",
        "After clear the pool behaves as a fresh one, with every group closed.",
        "clear() leaving a free group or Mamba group open (SGLang #4698, sglang-pools.md hazard 3)",
    ),
    Invariant(
        "page-layout",
        "Extend/decode: slot % ps == position % ps, phase-1 slots continue last_loc, pages consumed in batch order, "
        "exactly get_num_new_pages consumed.",
        "kernel truncation (SGLang #9271), page-size-1 decode consuming no page, vectorised phase arithmetic (seed 002)",
    ),
    Invariant(
        "misuse-rejected",
        "Double free, foreign or reserved index and bad sizes raise the typed PoolError and leave the pool unchanged.",
        "silent duplicate frees upstream (sglang-pools.md hazard 6)",
    ),
    Invariant(
        "valid-call-accepted",
        "A call the contract allows does not raise.",
        "over-eager validation, or a crash such as indexing an empty free list (seed 002)",
    ),
    Invariant(
        "kernel-agreement",
        "Every page-index implementation writes exactly what the loop oracle writes, reading no page past those it consumes.",
        "vectorised or Triton rewrites drifting from the reference (seed 002, SGLang #9271)",
    ),
    Invariant(
        "scheduler-conservation",
        "Every KV page, request row and Mamba slot is free or owned by exactly one live request, and "
        "req_to_token[row, :len] holds exactly the request's slots.",
        "leaks and double frees across admit/extend/decode/retract/finish (SGLang #4977, #18694)",
    ),
    Invariant(
        "cache-accounting",
        "A prefix cache's evictable_size() + protected_size() == total_size() == the KV indices its tree holds, each counted once.",
        "sizes counted from the key instead of the value after page truncation (SGLang PR #10637); a shared page "
        "counted twice in evictable_size() (SGLang #35270)",
    ),
    Invariant(
        "lock-balance",
        "No lock count goes negative (an unlock of a path nobody holds is refused), and protected_size() is exactly "
        "the tokens on paths some live holder locked; each lock call moves exactly the newly (un)locked tokens.",
        "dec_lock_ref without an underflow guard: lock_ref == -1 and the node evictable under a reader "
        "(prefix-cache reference 1.2; SGLang PR #29291, #27147)",
    ),
    Invariant(
        "evict-spares-locked",
        "evict(n) frees only unlocked cached KV, a node's extensions with or before it, never a locked path or an "
        "index a live request or the tree still holds; it leaves protected_size() alone and reports what it freed.",
        "eviction of a locked node, freeing KV a running request still reads (SGLang #27147, PR #38045)",
    ),
    Invariant(
        "eviction-order",
        "evict(n) takes whole unlocked leaves (and the parents they expose) in the eviction policy's order, until n "
        "tokens are freed or none is left: lru/mru by last access, fifo/filo by creation, where the upper half of a "
        "split keeps its child's creation (SGLang 0.5.23's default UnifiedTreeCore) unless the target declares the "
        "legacy RadixCache rule (created at the split).",
        "a cache evicting in another order than its policy, dropping the prefixes the policy keeps; two "
        "implementations of one policy disagreeing (FIFO/FILO split ages, docs/upstream-findings.md finding 4)",
    ),
    Invariant(
        "implementations-agree",
        "Two implementations of one interface, given the same call sequence, leave the same observable state "
        "(sizes, who waits and runs, what each request's row maps).",
        "a reimplementation that diverges from the one it replaces on a sequence no example test ran (a pool swap, "
        "a vectorised loop, a new tree core)",
    ),
    Invariant(
        "scheduler-progress",
        "A scheduler iteration with requests waiting and nothing running or chunked admits one: otherwise no later "
        "iteration changes the pools or the tree, and the server hangs with the queue head waiting for ever.",
        "admission rules that refuse, on an idle server, a request the startup checks accept (a strict budget "
        "comparison, a request's own locked prefix counted against it): a hang at warmup or after a burst",
    ),
    Invariant(
        "checker-agreement",
        "SGLang's own runtime checker (invariant_checker.py: the leak equation and the KV page owner check) and "
        "poolfuzz's raw page partition agree on whether a KV page leaked; a disagreement means one of them is wrong.",
        "an accounting method (evictable_size, protected_size, kv_private_tokens) drifting from the pages it "
        "counts, so the scheduler's leak check passes over a real leak or fires on a sound pool",
    ),
    Invariant(
        "in-flight-reuse",
        "An id (KV page or block, row, slot) that scheduled work whose results have not landed still reads stays "
        "with its reader, the batch or a cache that keeps its content until the work lands: it is neither freed nor "
        "handed to another holder while the work is in flight.",
        "an overlap or asynchronous scheduler releasing a finished request's KV while a batch scheduled before the "
        "finish was known still reads it, so the next allocation hands it to another request (the hazard every "
        "engine that schedules ahead of its results must defer frees against)",
    ),
    Invariant(
        "match-returns-inserted",
        "match_prefix returns the longest cached page-aligned prefix and exactly the indices inserted for it; "
        "insert reports exactly the length already cached.",
        "matches reusing a partial page another prefix wrote (SGLang PR #28692, #35635); a wrong cached length "
        "freeing live KV or leaking duplicates",
    ),
    Invariant(
        "prefix-hit-sound",
        "A prefix-cache hit an engine admits reuses, in every KV cache group, only blocks whose hash is the request's "
        "own hash for that block range, ends on a hash block before the request's last token, and is 0 with prefix "
        "caching off.",
        "a lookup answered from a stale memo or a hash left in the map after its block was evicted and reused "
        "(vLLM #45238, #45614: hybrid prefix caching), so a request computes on another prompt's KV",
    ),
    Invariant(
        "kv-accounting",
        "SGLang's leak equation: available + evictable + protected + uncached == total KV slots, where uncached sums "
        "ceil_align(row, page) - cache_protected_len over live requests; the allocator's free set is the model's.",
        "release paths that leak insert duplicates or free the cached part of a row (SGLang's idle leak checker, "
        "scheduler_components/invariant_checker.py)",
    ),
    Invariant(
        "prompt-prefilled",
        "A request the scheduler decodes holds KV for its whole prompt: every prefill pass that cuts a request's chunk "
        "keeps it as the chunked request until its last chunk runs.",
        "an admission pass that cuts two chunks and tracks only the second (SGLang 0.5.23, hybrid SWA: the SWA budget's "
        "cap leaves the chunk budget open), so the first request decodes on a truncated prompt",
    ),
    Invariant(
        "swa-mapping",
        "full_to_swa_index_mapping: a live full slot maps to its own live SWA slot while its token is in the window "
        "and to 0 once it left it (or was allocated outside an SWA tail); a free or pending full slot maps to 0; no "
        "SWA slot is mapped twice; a full page's peers lie in one SWA page at the same offsets; the trailing -1 stays.",
        "stale entries freeing SWA pages twice or freeing a live one: non-tail slots of alloc_extend_swa_tail not "
        "zeroed (SGLang #25805), a paged free unmapping only the named tokens (#27779), a tombstone's stale entry "
        "(PR #27586)",
    ),
    Invariant(
        "ref-count",
        "A block's ref_cnt never goes negative and equals the references handed out (allocations, touches) minus "
        "those released; a non-null block is in the free queue iff its ref_cnt is 0 (a touch takes it off); the "
        "on_reuse watcher of an unpin_blocks fires when get_new_blocks hands that block out, or a reset succeeds.",
        "a double free driving ref_cnt to -1 or queueing a block twice (vLLM #42571); a prefix hit left in the free "
        "queue and handed out while in use",
    ),
    Invariant(
        "free-queue-order",
        "The free queue's order is exactly what the calls make of it (vLLM 0.33.0 block_pool.py): get_new_blocks "
        "takes its front in order; free_blocks sends blocks reaching ref_cnt 0 to the front when unhashed (or caching "
        "is off) and to the tail when hashed, each in call order; unpin_blocks sends them to the tail, hashed or not; "
        "evict_blocks and touch's hash checks move no other block.",
        "cached blocks reused before uncached ones, losing shared prefixes (vLLM v1 FreeKVCacheBlockQueue order); "
        "a freed block queued on the wrong side, or the queue reordered by a call that must not move it",
    ),
    Invariant(
        "cache-map",
        "The hash map and every block's own hash agree both ways; a lookup answers the first block cached under "
        "the hash; a block loses its hash when reused, evicted or reset; reset_prefix_cache succeeds iff only the "
        "null block is in use.",
        "a reused block left in the map, so a prefix hit reads another request's KV (vLLM #4761); stale block hashes "
        "after reuse (vLLM #44237)",
    ),
    Invariant(
        "async-placeholders",
        "Under vLLM's async scheduling a request's num_output_placeholders (tokens scheduled whose results have not "
        "landed) is never negative, and a request that is not running has none: preemption rolls them back "
        "(v1/core/sched/scheduler.py:1836) and a waiting request was never scheduled since.",
        "async + preemption placeholder underflow and placeholders surviving preemption (vLLM #46066, #47900, #38624)",
    ),
)

INVARIANTS: dict[str, Invariant] = {inv.id: inv for inv in _CATALOGUE}


class InvariantViolation(AssertionError):
    """A named invariant failed.  ``numbers`` holds the offending values.

    The driver fills in where it happened (``step``, ``None`` at teardown, and the
    ``trace`` so far); a runner that saves the shrunk trace records ``trace_path``.
    """

    step: int | None
    trace: Trace | None
    trace_path: Path | None

    def __init__(self, invariant_id: str, message: str, **numbers: Any) -> None:
        assert invariant_id in INVARIANTS, f"unknown invariant id {invariant_id!r}"
        self.invariant_id = invariant_id
        self.detail = message
        self.numbers = numbers
        self.step = None
        self.trace = None
        self.trace_path = None
        shown = "".join(f"\n    {k} = {v!r}" for k, v in numbers.items())
        super().__init__(f"[{invariant_id}] {message}{shown}")


def check(condition: bool, invariant_id: str, message: str, **numbers: Any) -> None:
    """Raise :class:`InvariantViolation` unless ``condition`` holds."""
    if not condition:
        raise InvariantViolation(invariant_id, message, **numbers)


def check_unique(values: list[int], invariant_id: str, what: str) -> None:
    if len(set(values)) != len(values):
        seen: set[int] = set()
        dups = sorted({v for v in values if v in seen or seen.add(v)})  # type: ignore[func-returns-value]
        raise InvariantViolation(invariant_id, f"{what} contains duplicates", duplicates=dups)


def check_slot_layout(slots: Sequence[int], *, prefix: int, last_loc: int, page_size: int, what: str, **context: Any) -> None:
    """``page-layout`` for the slots one request gets for positions ``prefix, prefix + 1, ...``.

    Each slot's offset in its page equals its position's, and the positions
    still inside the prefix's partial page continue ``last_loc`` (phase 1 of
    the extend kernel; a decode is the one-token case with ``prefix = seq - 1``).
    """
    first_new = -(-prefix // page_size) * page_size
    for position, slot in enumerate(slots, prefix):
        check(
            slot % page_size == position % page_size,
            "page-layout",
            f"{what}: slot offset differs from its position's",
            position=position,
            slot=slot,
            page_size=page_size,
            **context,
        )
        if position < first_new:
            check(
                slot == last_loc + 1 + position - prefix,
                "page-layout",
                f"{what}: a slot in the prefix's partial page does not continue last_loc",
                position=position,
                slot=slot,
                last_loc=last_loc,
                **context,
            )

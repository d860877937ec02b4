"""The calls vLLM 0.33.0's ``BlockPool``'s callers make (target ``poolfuzz.harness.upstream:VllmBlockPool``).

Each KV-cache group's ``SingleTypeKVCacheManager`` drives the pool for its requests: a new
request's prefix is looked up with ``get_cached_block`` (``find_longest_cache_hit``) and the hits
are ``touch``-ed (``add_local_computed_blocks``); its table grows by ``get_new_blocks`` after the
``KVCacheManager`` checked the free count (``kv_cache_manager.py:547``); ``cache_blocks`` hashes its
full blocks with ``cache_full_blocks`` (null and masked blocks skipped); a sliding window's passed
blocks are freed last-first and replaced by the null block (``_remove_blocks_in_range``); and a
finished request's table is freed reversed (``free``).  The scheduler evicts hashes only of blocks
running requests hold, after a KV-connector load failure (``_handle_invalid_blocks``), and resets the
prefix cache in any state (it refuses while blocks are in use).  The HiSparse coordinator is the one
caller of ``unpin_blocks``: it releases a request's *resident pages*, which its resident manager never
caches (``cache_blocks`` returns ``None``), so an unpinned block carries no hash -- that is why
``unpin_blocks`` appends to the tail what ``free_blocks`` would prepend: the page stays readable until
the pool hands it out again.  The class accepts more than that (a hashed block unpinned, a free block
evicted): those steps are issued and noted as off the callers' path (``today``), so a finding through one
is latent.  ``get_num_free_blocks``, ``get_usage`` and ``get_cached_block`` only answer questions.  Every
call-site path is relative to the ``vllm`` package folder.
"""

from __future__ import annotations

from poolfuzz.harness.judge.contract import CallRule, Cite, Contract, NotCalled
from poolfuzz.harness.judge.trace import Args
from poolfuzz.harness.judge.view import DriverView
from poolfuzz.harness.kits.block_pool.model import NULL_BLOCK, BlockPoolModel
from poolfuzz.harness.kits.block_pool.ops import BlockPoolOps

CORE = "v1/core/single_type_kv_cache_manager.py"
HISPARSE = "v1/hisparse/coordinator.py"
SCHEDULER = "v1/core/sched/scheduler.py"


def _cite(path: str, line: int, text: str, note: str = "") -> Cite:
    return Cite(path, line, text, package="vllm", note=note)


LOOKUP = _cite(
    CORE,
    795,
    "cached_block = block_pool.get_cached_block(block_hash, kv_cache_group_ids)",
    note="find_longest_cache_hit, until the first miss",
)
TOUCH_HITS = _cite(
    CORE,
    305,
    "self.block_pool.touch(new_computed_blocks)",
    note="add_local_computed_blocks: the prefix hits, held or free, null blocks for skipped ones",
)
TOUCH_COPY = _cite(
    HISPARSE, 275, "manager.block_pool.touch([block])", note="_adopt_copies: a held (or unpinned) resident page shared by id"
)
TOUCH_SPILL = _cite(HISPARSE, 595, "manager.block_pool.touch([block])", note="a spill pins a held resident page")
ALLOC_EXTERNAL = _cite(
    CORE,
    365,
    "allocated_blocks = self.block_pool.get_new_blocks(num_new_blocks)",
    note="num_new_blocks = max(0, ...) at :361-364: 0 is a count callers send",
)
ALLOC_NEW = _cite(CORE, 406, "new_blocks = self.block_pool.get_new_blocks(num_new_blocks)")
FREE_COUNT = _cite(
    "v1/core/kv_cache_manager.py",
    547,
    "if required_blocks > self.block_pool.get_num_free_blocks():",
    note="the caller's free-count check: an allocation above it is never made",
)
CACHE = _cite(
    CORE,
    532,
    "self.block_pool.cache_full_blocks(",
    note="cache_blocks: num_cached..num_full of the request's table, null/masked blocks skipped",
)
FREE = _cite(CORE, 599, "self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))")
SLIDE = _cite(
    CORE,
    680,
    "self.block_pool.free_blocks(freed)",
    note="_remove_blocks_in_range: backwards from the window's edge until a null block, each nulled",
)
UNPIN_PAGE = _cite(
    HISPARSE,
    368,
    "manager.block_pool.unpin_blocks([block], self._on_block_reused)",
    note="_unpin_page: one clean resident page of a running request",
)
UNPIN_FREE = _cite(
    HISPARSE,
    894,
    "manager.block_pool.unpin_blocks([block], self._on_block_reused)",
    note="free: the request's clean resident pages, tail first, each then dropped from its row",
)
RESIDENT_UNCACHED = _cite(CORE, 2369, "return None", note="_HiSparseAuxiliaryManager.cache_blocks: resident pages are never hashed")
RESIDENT_ALLOC = _cite(
    CORE,
    2551,
    "new_blocks = self.block_pool.get_new_blocks(num_new_blocks)",
    note="resident pages come from get_new_blocks, which drops a reused block's hash",
)
EVICT_SUFFIX = _cite(
    SCHEDULER,
    3670,
    "blocks_to_evict.update(req_block_ids[idx:])",
    note="_update_requests_with_invalid_blocks over self.running (:3746): a running request's table from its first failed block on",
)
EVICT = _cite(
    SCHEDULER,
    3760,
    "self.kv_cache_manager.evict_blocks(sync_blocks_to_evict)",
    note="-> KVCacheManager.evict_blocks (kv_cache_manager.py:681), the only caller of evict_blocks",
)
EVICT_POOL = _cite("v1/core/kv_cache_manager.py", 681, "self.block_pool.evict_blocks(block_ids)")
RESET = _cite(
    "v1/core/kv_cache_coordinator.py",
    402,
    "return all([pool.reset_prefix_cache() for pool in pools])",
    note="from Scheduler.reset_prefix_cache (sched/scheduler.py:3212), with requests running or not",
)


class BlockPoolContractView(DriverView):
    """The block pool driver as its contract's predicates see it: its model (requests, tables, hashes)."""

    __slots__ = ()

    @property
    def model(self) -> BlockPoolModel:
        return self._driver.model


def an_unhashed_resident_page(view: BlockPoolContractView, args: Args) -> bool:
    """Today: ``unpin_blocks`` of a block without a hash.  The class accepts a hashed one (its only check is
    ``ref_cnt > 0 and not is_null``, ``block_pool.py:762``), but its only caller unpins HiSparse resident pages
    (``hisparse/coordinator.py:363-368``, ``:880-894``), which come from ``get_new_blocks`` (hash dropped,
    ``block_pool.py:729``) and are never cached (``single_type_kv_cache_manager.py:2361-2369``)."""
    request = view.model.requests.get(args.get("handle", -1))
    position = args.get("position", -1)
    if request is None or not isinstance(position, int) or not 0 <= position < len(request.table):
        return True  # the driver skips it: no call is made
    return request.table[position] not in view.model.hash_of


def blocks_running_requests_hold(view: BlockPoolContractView, args: Args) -> bool:
    """Today: ``evict_blocks`` of a non-empty union of live requests' table suffixes.  The class evicts any
    in-range id (free blocks too, ``block_pool.py:851-869``), but the scheduler collects
    ``req_block_ids[idx:]`` of running requests (``sched/scheduler.py:3670``, ``:3746``) and evicts that set
    (``:3760``) in the same step.  So it never names a free block, an id no running request holds, or a
    block of a table without the blocks after it (null blocks, which evict nothing, aside)."""
    ids = set(args.get("block_ids") or ())
    if not ids:
        return False
    covered = {NULL_BLOCK}
    for request in view.model.requests.values():
        if not request.live:
            continue
        table = request.table
        for position in range(len(table) - 1, -1, -1):  # the longest suffix of the table inside the set
            block = table[position]
            if block != NULL_BLOCK and block not in ids:
                break
            covered.add(block)
    return ids <= covered


CONTRACT = Contract(
    ops=BlockPoolOps,
    view=BlockPoolContractView,
    target="poolfuzz.harness.upstream:VllmBlockPool",
    release="vllm==0.33.0",
    rules=(
        CallRule(
            BlockPoolOps.admit,
            ("touch",),
            "get_cached_block(hash, [group]) down the prompt's chain until a miss, then touch(hits): cached blocks, held or free",
            (LOOKUP, TOUCH_HITS),
        ),
        CallRule(
            BlockPoolOps.allocate,
            ("get_new_blocks",),
            "get_new_blocks(n), 0 <= n <= get_num_free_blocks() (above it, or for n < 0, the driver, as the caller, makes no call)",
            (ALLOC_EXTERNAL, ALLOC_NEW, FREE_COUNT),
        ),
        CallRule(
            BlockPoolOps.cache,
            ("cache_full_blocks",),
            "cache_full_blocks(request, its table, num_cached, num_full, block_size, group) of a live "
            "request whose new full blocks are held and unhashed",
            (CACHE,),
        ),
        CallRule(BlockPoolOps.free, ("free_blocks",), "free_blocks(reversed(a finished request's table))", (FREE,)),
        CallRule(
            BlockPoolOps.slide,
            ("free_blocks",),
            "free_blocks(the blocks a sliding window passed, last first, up to a null block)",
            (SLIDE,),
        ),
        CallRule(
            BlockPoolOps.unpin,
            ("unpin_blocks",),
            "unpin_blocks([one unhashed block of a live request], on_reuse); the page then leaves the row",
            (UNPIN_PAGE, UNPIN_FREE, RESIDENT_UNCACHED, RESIDENT_ALLOC),
            today=an_unhashed_resident_page,
            instead="only HiSparse resident pages are unpinned (hisparse/coordinator.py:368, 894), and resident "
            "pages are never cached (single_type_kv_cache_manager.py:2369): a hashed block is released "
            "with free_blocks (:599)",
        ),
        CallRule(
            BlockPoolOps.touch,
            ("touch",),
            "touch(blocks shared by id): held ones, cached free ones, the null block (skipped)",
            (TOUCH_HITS, TOUCH_COPY, TOUCH_SPILL),
        ),
        CallRule(
            BlockPoolOps.evict,
            ("evict_blocks",),
            "evict_blocks(set of ids): the suffixes of running requests' tables from a failed block on",
            (EVICT_SUFFIX, EVICT, EVICT_POOL),
            today=blocks_running_requests_hold,
            instead="the scheduler evicts req_block_ids[idx:] of running requests (sched/scheduler.py:3670, "
            "3746, 3760): held blocks, each with the rest of its table; never a free block",
        ),
        CallRule(
            BlockPoolOps.reset, ("reset_prefix_cache",), "reset_prefix_cache() in any state (False while blocks are in use)", (RESET,)
        ),
    ),
    reads=("get_num_free_blocks", "get_usage", "get_cached_block"),
    not_called=(
        NotCalled(
            BlockPoolOps.free_blocks,
            "misuse: a raw free of blocks named more often than they are held (vLLM #42571); "
            "a valid raw free the driver leaves to the request that owns the reference",
        ),
        NotCalled(BlockPoolOps.cache_misuse, "misuse: a malformed cache_full_blocks (free, cached or repeated blocks, bad counts)"),
        NotCalled(BlockPoolOps.foreign_block, "misuse: an int or another pool's block where a block is due"),
        NotCalled(BlockPoolOps.unpin_misuse, "misuse: more unpins than references, or the null block (upstream asserts, :762)"),
        NotCalled(BlockPoolOps.evict_non_int, "misuse: an id that is not an int"),
    ),
)

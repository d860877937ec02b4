"""Mutants judged equivalent: edits no caller of the pool can observe, each with the reason.

A mutation score counts a surviving mutant as a behaviour nobody checks.  Some mutants
cannot be killed by any test, because the edited code computes the same observable result
either way (a free of an empty tensor skipped, a second stamp of a path whose nodes are
never compared with each other).  Counted as survivors they hide the real gaps among them;
left out silently they would hide a wrong judgement.  So each one is listed here with the
argument for its equivalence, ``mutate`` reports them under their own kind (``equivalent``)
and leaves them out of the behavioural score, and an *equivalent* mutant a machine kills is
reported as a wrong entry (``mutate`` prints it; the argument was wrong, and the entry must go).

An entry names a mutant by what it edits, not by its line number, so it survives edits
elsewhere in the module: module, function, operator and the description ``mutate --list``
prints, the text of its line and the column.  ``tests/test_mutate.py`` checks that every entry still names a generated mutant.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Equivalent:
    """The mutant of ``module``'s ``function`` by ``operator`` at column ``col`` of the line reading ``source``
    (stripped, as ``mutate`` prints it after ``|``), described ``description``, and why it is equivalent."""

    module: str
    function: str
    operator: str
    source: str
    col: int
    description: str
    why: str

    @property
    def key(self) -> tuple[str, str, str, str, int, str]:
        return self.module, self.function, self.operator, self.source, self.col, self.description


_TOUCH_AFTER_INSERT = (
    "the insert just stamped every node on this path; stamping them again (or not) changes their ages only "
    "relative to each other, and nodes on one path are never compared: an ancestor becomes an eviction "
    "candidate only once its descendants are gone, so no policy order can tell")
_EMPTY_FREE = "a free of an empty tensor is a no-op of the allocator (it returns before touching the free list)"
HEAP_VERSION = ("a node's heap_version is read only for heap entries, and `_push` sets it before making the "
                "first one: its initial value is never compared")
PREFIX_LEN = ("common_prefix_len's fast path: without it (or comparing longer slices) the binary search below "
              "finds the same length, since a slice past one key's end differs from the other's")
FIRST_PAGE = ("its one caller, `descend`, passes a child found by its first page, so the keys share at least "
              "one token and starting the search at 1 finds the same length")
COUNTER_ORIGIN = ("the clock, id and push counters only order nodes against each other: starting one at 1 "
                  "instead of 0 shifts every value alike (the root's stamp is never compared: it is never evicted)")
CHILD_KEY = ("a child keyed by a 1-tuple instead of its token, consistently (every lookup goes through "
             "child_key): the same tree")
TRUTH = "the only caller tests the answer for truth; None and False are both false"
ASSERT = "weakens an assertion, which a correct pool never trips (an assert forced true is not mutated at all)"
INSIDE_LEN = "inside_len is read only when `inside` is set; here it is None"
ROOT_STAMP = "the root is never an eviction candidate, so its last_access is never compared"
EXTRA_PUSH = ("one more heap entry at the node's current priority: `pop_victim` skips entries of nodes not "
              "evictable, and a stale entry's version no longer matches; the order taken is the same")
DETACHED = ("an evicted leaf is already gone from its parent's children, which is what `is_attached` "
            "checks, so its own parent pointer is never followed again")
IDS = ("ids stay unique (decreasing, or offset), and they break priority ties only between leaves with equal "
       "stamps: a touch or a split gives equal stamps only to nodes on one path, of which at most one is a leaf")
VERSIONS = ("versions stay unique (decreasing) and are compared only for equality with the node's own, and "
            "as the heap's second key only between equal priorities, which include the node id and so never tie")
COMPACTION = ("when to rebuild the lazy heap (or whether): the live entries and their order are the same, "
              "only the number of stale entries differs, which changes speed, not the victim order")
SUB_CHECKS = ("a check the sub-allocators repeat: without it the full side's own call raises the same typed error "
              "before either side changes (or, on a pool too short for the batch, refuses it unchanged)")
UNREAD = "an attribute no code reads: the sub-allocators take need_sort from their own constructor arguments"
LABEL = "text only: a pool name or an argument label that ends up in an error message, never in a decision"
SAME_SIDES = ("the constructor builds both sides with one page size, so they are both paged or neither: "
              "`and` and `or` agree")
NOT_A_TENSOR = ("the length a non-tensor gets only feeds check_lengths, which rejects a non-tensor with the same "
                "BadBatchError whatever length it is told")
LAST_INDEX = ("the mapping's last entry is its -1 padding: a last_loc pointing there translates to -1 and is "
              "refused by the SWA-peer check below with the same BadBatchError")
SWA_PEER = ("paged SWA slots start at page_size >= 2 (page 0 is reserved), so a peer is never 1: `<= 1` and "
            "`<= 0` reject the same last_locs")
CLEARED = ("freshly allocated full slots map to 0 already (every free zeroes its slots' entries), and the tail's "
           "entries are set after this clear: clearing none of the head, or all of it, leaves the same mapping")
EMPTY = ("a free of an empty tensor: without the early return every step below is a no-op on no slots "
         "(the sub-allocators return early on empty frees too)")
SUB_GROUPS = ("the sub-allocators keep their own group state: without the outer check the first side's "
              "free_group_begin/end raises the same GroupStateError before anything changes")
SAME_ALLOCATOR = ("the paged allocator at page size 1 keeps the same free list in the same order as the token "
                  "allocator: every call answers the same")
INIT_REPLACED = ("a constructor's first value, replaced before any use: the allocator's clear() resets the "
                 "table and replaces the free list (replace -> _move sets buffer, views, capacity, head and tail)")
HOST_PATH = ("which of two paths answers: the NumPy host views of a CPU pool or the torch ops of a device one; "
             "they return the same values (the device-path machines run the torch path on a CPU too), so the "
             "choice changes speed only")
SLACK = ("how much room the free list's buffer keeps, or when it moves to a new one: the sequence of free pages "
         "is the same, only the number of copies differs")
PREPEND_ROOM = ("every page a free prepends was taken from the head since the list last moved (misuse is "
                "rejected before), so the head always has room and the move is never needed")
FRONT_ZERO = "every move that reaches this line has front = 0 (the prepend's move is never needed): the same slice"
EMPTY_BATCH = ("the kernel's early return for no requests or no tokens: the general path writes nothing and "
               "returns the same empty result")
SENTINEL = "one more sentinel entry past the pool, never live: no valid or rejected free reads it differently"
NEVER_LIVE = ("page 0 and the sentinel are never handed out: FREE or RESERVED, they are not LIVE, which is all a "
              "free's check reads (a reserved index is named by the error path from the index itself)")
PAGE_SIZE_1 = "at page size 1 ``indices // 1`` is the indices: the general path returns the same ids"
ONE_ID = "a single id (or none) cannot repeat: the repeat check or the dedup on it answers the same"
FRESH_FINDER = ("a new repeat finder (or a larger one) per call: its stamps are rewritten for the ids it is asked "
                "about, so it answers the same")
DEVICE_GIVEN = "its one caller always passes the table's device"
HOST_COPY = "a copy of the same int64 values instead of a view: nothing writes through it"
EXPLAIN = ("the error path after a batch check failed: every branch raises BadBatchError with the pool unchanged, "
           "so skipping or flipping one only picks another of its messages (the drivers judge the type and the "
           "unchanged pool)")
CHECKS_OFF = ("on a CPU pool the default is on; only an explicit check_layout=False differs, and checks turned off "
              "have no observable contract (as kv_allocator's same line, docs/benchmarks.md)")
SELF_CHECK = ("a self-check's failure path: it reports a corrupt tree, which a correct pool never is, so no run can "
              "take it (as an assertion's; `mutate` does not weaken assertions at all)")

EQUIVALENTS: tuple[Equivalent, ...] = (
    Equivalent("pools.radix_cache", "RadixCache._settle", "stmt-pass",
               "self._tree.touch(self._tree.descend(key))  # upstream re-matches the key to find the new last node", 13,
               "delete `self._tree.touch(self._tree.descend(key))`", _TOUCH_AFTER_INSERT),
    Equivalent("pools.radix_cache", "RadixCache._settle", "stmt-pass", "self._tree.touch(prompt_walk)", 13,
               "delete `self._tree.touch(prompt_walk)`", _TOUCH_AFTER_INSERT),
    Equivalent("pools.radix_cache", "RadixCache._settle", "cond-false", "if cache:", 12, "`cache` -> `False`",
               "it skips only the last touch: " + _TOUCH_AFTER_INSERT),
    Equivalent("pools.radix_cache", "RadixCache._settle", "cond-true", "if piece.numel():", 16, "`piece.numel()` -> `True`",
               _EMPTY_FREE),
    Equivalent("pools.radix_cache", "RadixCache._settle", "Lt->LtE", "if 0 < len(prompt_key) < len(key):", 12,
               "`0 < len(prompt_key) < len(key)` -> `0 <= len(prompt_key) < len(key)`",
               "an empty prompt key descends to the root: touching the root and splitting at it change nothing"),
    Equivalent("pools.radix_cache", "RadixCache._settle", "Lt->LtE@1", "if 0 < len(prompt_key) < len(key):", 12,
               "`0 < len(prompt_key) < len(key)` -> `0 < len(prompt_key) <= len(key)`",
               "a prompt key equal to the key ends at the node the insert just made: no split, and the touch "
               "is one more stamp of the inserted path, equivalent as the last touch is"),
    *(Equivalent("pools.radix_cache", "RadixCache._settle", "str",
                 'for what, piece in [("duplicates", duplicates)] + [("uncached tail", p) for p in tail]:', col,
                 f"`{text!r}` -> `{'XX' + text + 'XX'!r}`",
                 "the loop's `what` is read only by the AlreadyCachedError message below (message-only, but the "
                 "classifier does not follow a loop target)") for text, col in (("duplicates", 30), ("uncached tail", 61))),
    Equivalent("pools.radix_cache", "RadixCache._held_any", "cond-false", "if indices.numel() == 0:", 12,
               "`indices.numel() == 0` -> `False`",
               "on no indices the vectorised test below is `.any()` of an empty tensor: False, the same answer"),
    Equivalent("pools.radix_cache", "RadixCache._held_any", "return-none", "return False", 13, "`return False` -> `return None`",
               "the only caller tests the answer for truth; None and False are both false"),
    Equivalent("pools.prefix_cache", "kv_allocator_for", "cond-false", "if page_size == 1:", 8,
               "`page_size == 1` -> `False`", SAME_ALLOCATOR),
    Equivalent('pools.radix_tree', 'TreeNode.__init__', 'stmt-pass', 'self.heap_version = -1', 9,
               'delete `self.heap_version = -1`', HEAP_VERSION),
    Equivalent('pools.radix_tree', 'TreeNode.__init__', 'neg-drop', 'self.heap_version = -1', 29,
               '`-1` -> `1`', HEAP_VERSION),
    Equivalent('pools.radix_tree', 'TreeNode.__init__', '1->0', 'self.heap_version = -1', 30,
               '`1` -> `0`', HEAP_VERSION),
    Equivalent('pools.radix_tree', 'common_prefix_len', 'min->max', 'n = min(len(a), len(b))', 9,
               '`min(len(a), len(b))` -> `max(len(a), len(b))`', PREFIX_LEN),
    Equivalent('pools.radix_tree', 'common_prefix_len', 'slice-upper-drop', 'if a[:n] == b[:n]:', 17,
               '`b[:n]` -> `b[:]`', PREFIX_LEN),
    Equivalent('pools.radix_tree', 'common_prefix_len', '0->1', 'lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]', 14,
               '`0` -> `1`', FIRST_PAGE),
    Equivalent('pools.radix_tree', 'RadixTree.__init__', '0->1', 'self._next_id = 0', 25,
               '`0` -> `1`', COUNTER_ORIGIN),
    Equivalent('pools.radix_tree', 'RadixTree.reset', '0->1', 'self._clock = 0', 23,
               '`0` -> `1`', COUNTER_ORIGIN),
    Equivalent('pools.radix_tree', 'RadixTree.reset', '0->1', 'self.root = TreeNode(self._new_id(), (), self._empty_value, None, 0)', 75,
               '`0` -> `1`', COUNTER_ORIGIN),
    Equivalent('pools.radix_tree', 'RadixTree.reset', '0->1', 'self._pushes = 0', 24,
               '`0` -> `1`', COUNTER_ORIGIN),
#UNJUDGED 119 IsNot->Is `n is not self.root` -> `n is self.root`
#UNJUDGED 119 cond-true `n is not self.root` -> `True`
#UNJUDGED 119 cond-false `n is not self.root` -> `False`
    Equivalent('pools.radix_tree', 'RadixTree.child_key', 'cond-false', 'return key[pos] if self.page_size == 1 else key[pos : pos + self.page_size]', 28,
               '`self.page_size == 1` -> `False`', CHILD_KEY),
    Equivalent('pools.radix_tree', 'RadixTree.child_key', '1->0', 'return key[pos] if self.page_size == 1 else key[pos : pos + self.page_size]', 46,
               '`1` -> `0`', CHILD_KEY),
    Equivalent('pools.radix_tree', 'RadixTree.is_attached', 'return-none', 'return False', 17,
               '`return False` -> `return None`', TRUTH),
    Equivalent('pools.radix_tree', 'RadixTree.descend', 'slice-upper-drop', 'n = common_prefix_len(child.key, key[pos : pos + len(child.key)])', 46,
               '`key[pos:pos + len(child.key)]` -> `key[pos:]`', PREFIX_LEN),
    Equivalent('pools.radix_tree', 'RadixTree.descend', 'Gt->GtE', 'assert n > 0, "a child found by its first page shares at least that page"', 20,
               '`n > 0` -> `n >= 0`', ASSERT),
    Equivalent('pools.radix_tree', 'RadixTree.descend', '0->1', 'return Walk(path, pos, None, 0)', 38,
               '`0` -> `1`', INSIDE_LEN),
    Equivalent('pools.radix_tree', 'RadixTree.touch', 'stmt-pass', 'self.root.last_access = stamp', 9,
               'delete `self.root.last_access = stamp`', ROOT_STAMP),
    Equivalent('pools.radix_tree', 'RadixTree.touch', 'And->Or', 'if node in self._evictable and self.eviction_policy in _RECENCY_POLICIES:', 16,
               '`node in self._evictable and self.eviction_policy in _RECENCY_POLICIES` -> `node in self._evictable or self.eviction_policy in _RECENCY_POLICIES`', EXTRA_PUSH),
    Equivalent('pools.radix_tree', 'RadixTree.touch', 'cond-true', 'if node in self._evictable and self.eviction_policy in _RECENCY_POLICIES:', 16,
               '`node in self._evictable and self.eviction_policy in _RECENCY_POLICIES` -> `True`', EXTRA_PUSH),
    Equivalent('pools.radix_tree', 'RadixTree.remove_leaf', 'And->Or', 'assert not leaf.children and leaf.lock_ref == 0, f"node {leaf.id} is not an evictable leaf"', 16,
               '`not leaf.children and leaf.lock_ref == 0` -> `not leaf.children or leaf.lock_ref == 0`', ASSERT),
    Equivalent('pools.radix_tree', 'RadixTree.remove_leaf', 'stmt-pass', 'leaf.parent = None', 9,
               'delete `leaf.parent = None`', DETACHED),
    Equivalent('pools.radix_tree', 'RadixTree.refresh_leaf', 'cond-true', 'if node not in self._evictable:', 16,
               '`node not in self._evictable` -> `True`', EXTRA_PUSH),
    Equivalent('pools.radix_tree', 'RadixTree._new_id', 'augAdd->augSub', 'self._next_id += 1', 9,
               '`self._next_id += 1` -> `self._next_id -= 1`', IDS),
    Equivalent('pools.radix_tree', 'RadixTree._new_id', 'Sub->Add', 'return self._next_id - 1', 16,
               '`self._next_id - 1` -> `self._next_id + 1`', IDS),
    Equivalent('pools.radix_tree', 'RadixTree._new_id', '1->0', 'return self._next_id - 1', 32,
               '`1` -> `0`', IDS),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'augAdd->augSub', 'self._pushes += 1', 9,
               '`self._pushes += 1` -> `self._pushes -= 1`', VERSIONS),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'Gt->GtE', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 12,
               '`len(self._heap) > 2 * len(self._evictable) + 64` -> `len(self._heap) >= 2 * len(self._evictable) + 64`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'Gt->LtE', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 12,
               '`len(self._heap) > 2 * len(self._evictable) + 64` -> `len(self._heap) <= 2 * len(self._evictable) + 64`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'cond-true', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 12,
               '`len(self._heap) > 2 * len(self._evictable) + 64` -> `True`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'cond-false', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 12,
               '`len(self._heap) > 2 * len(self._evictable) + 64` -> `False`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'Add->Sub', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 30,
               '`2 * len(self._evictable) + 64` -> `2 * len(self._evictable) - 64`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'Mult->FloorDiv', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 30,
               '`2 * len(self._evictable)` -> `2 // len(self._evictable)`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', '2->3', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 30,
               '`2` -> `3`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', '64->65', 'if len(self._heap) > 2 * len(self._evictable) + 64:', 57,
               '`64` -> `65`', COMPACTION),
    Equivalent('pools.radix_tree', 'RadixTree._push', 'stmt-pass', 'self._heap = [(self.priority(n), n.heap_version, n) for n in self._evictable]', 13,
               'delete `self._heap = [(self.priority(n), n.heap_version, n) for n in self._evict…`', COMPACTION),
    Equivalent('pools.swa', '_is_empty_tensor', 'return-none', 'return isinstance(t, torch.Tensor) and t.numel() == 0', 5,
               '`return isinstance(t, torch.Tensor) and t.numel() == 0` -> `return None`', TRUTH),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.__init__', 'stmt-pass', 'check_page_size(self.pool_name, page_size)', 9,
               'delete `check_page_size(self.pool_name, page_size)`', SUB_CHECKS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.__init__', 'stmt-pass', 'self.need_sort = need_sort', 9,
               'delete `self.need_sort = need_sort`', UNREAD),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.__init__', 'stmt-pass', 'self.full_attn_allocator.pool_name = f"{self.pool_name}.full"', 9,
               "delete `self.full_attn_allocator.pool_name = f'{self.pool_name}.full'`", LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.__init__', 'fstr', 'self.full_attn_allocator.pool_name = f"{self.pool_name}.full"', 46,
               "`f'{self.pool_name}.full'` -> `f'XX{self.pool_name}.full'`", LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.__init__', 'stmt-pass', 'self.swa_attn_allocator.pool_name = f"{self.pool_name}.swa"', 9,
               "delete `self.swa_attn_allocator.pool_name = f'{self.pool_name}.swa'`", LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.__init__', 'fstr', 'self.swa_attn_allocator.pool_name = f"{self.pool_name}.swa"', 45,
               "`f'{self.pool_name}.swa'` -> `f'XX{self.pool_name}.swa'`", LABEL),
#UNJUDGED pools/swa.py 104 cond-true `check_layout is None` -> `True`
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._paged_sides', 'Or->And', 'if not isinstance(full, PagedTokenToKVPoolAllocator) or not isinstance(swa, PagedTokenToKVPoolAllocator):', 12,
               '`…locator) or not isinstance(swa, PagedTokenToKVPoolAllocator)` -> `…locator) and (not isinstance(swa, PagedTokenToKVPoolAllocator))`', SAME_SIDES),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc', 'And->Or', 'assert full is not None and swa is not None, "capacity was checked on both sides"', 16,
               '`full is not None and swa is not None` -> `full is not None or swa is not None`', ASSERT),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', 'cond-true', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 35,
               '`isinstance(seq_lens_cpu, torch.Tensor)` -> `True`', NOT_A_TENSOR),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', 'neg-drop', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 79,
               '`-1` -> `1`', NOT_A_TENSOR),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', '1->0', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 80,
               '`1` -> `0`', NOT_A_TENSOR),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', 'str', 'full._batches.check_lengths("seq_lens", seq_lens, seq_lens_cpu, bs)  # the paged allocator\'s own shape check', 37,
               "`'seq_lens'` -> `'XXseq_lensXX'`", LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', 'str', 'full._batches.check_lengths("prefix_lens", prefix_lens, prefix_lens_cpu, bs)', 37,
               "`'prefix_lens'` -> `'XXprefix_lensXX'`", LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', 'BitOr->BitAnd', 'bad = ((prefix_lens_cpu < 0) | (seq_lens_cpu < prefix_lens_cpu)).nonzero()', 16,
               '`(prefix_lens_cpu < 0) | (seq_lens_cpu < prefix_lens_cpu)` -> `(prefix_lens_cpu < 0) & (seq_lens_cpu < prefix_lens_cpu)`', SUB_CHECKS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', 'cond-false', 'if len(bad):', 12,
               '`len(bad)` -> `False`', SUB_CHECKS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._count_extend_pages', 'stmt-pass', 'raise BadBatchError(self.pool_name, f"need 0 <= prefix_len <= seq_len, got {int(prefix_lens_cpu[i])}, "', 13,
               "delete `raise BadBatchError(self.pool_name, f'need 0 <= prefix_len <= seq_len, g…`", SUB_CHECKS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._swa_last_loc', 'GtE->Gt', 'if int(loc.min()) < -1 or int(loc.max()) >= len(self.full_to_swa_index_mapping) - 1:', 35,
               '`int(loc.max()) >= len(self.full_to_swa_index_mapping) - 1` -> `int(loc.max()) > len(self.full_to_swa_index_mapping) - 1`', LAST_INDEX),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._swa_last_loc', '1->0', 'if int(loc.min()) < -1 or int(loc.max()) >= len(self.full_to_swa_index_mapping) - 1:', 91,
               '`1` -> `0`', LAST_INDEX),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._swa_last_loc', '0->1', '(has_prefix & (swa_cpu <= 0), "has no SWA peer: the prefix\'s last token left the window"),', 39,
               '`0` -> `1`', SWA_PEER),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._swa_last_loc', 'str', '(has_prefix & (swa_cpu <= 0), "has no SWA peer: the prefix\'s last token left the window"),', 43,
               '`"has no SWA peer: the prefix\'s last token left the window"` -> `"XXhas no SWA peer: the prefix\'s last token left the windowXX"`', LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator._swa_last_loc', 'str', '(~has_prefix & (swa_cpu != -1), "must be -1: the request has no prefix"),  # else a misaligned 0', 45,
               "`'must be -1: the request has no prefix'` -> `'XXmust be -1: the request has no prefixXX'`", LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_extend_swa_tail', 'stmt-pass', 'self._clear_mapping(full[:head])', 9,
               'delete `self._clear_mapping(full[:head])`', CLEARED),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_extend_swa_tail', 'slice-upper-drop', 'self._clear_mapping(full[:head])', 29,
               '`full[:head]` -> `full[:]`', CLEARED),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_decode', 'cond-true', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 35,
               '`isinstance(seq_lens_cpu, torch.Tensor)` -> `True`', NOT_A_TENSOR),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_decode', 'neg-drop', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 79,
               '`-1` -> `1`', NOT_A_TENSOR),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_decode', '1->0', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 80,
               '`1` -> `0`', NOT_A_TENSOR),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_decode', 'str', 'full._batches.check_lengths("seq_lens", seq_lens, seq_lens_cpu, bs)', 37,
               "`'seq_lens'` -> `'XXseq_lensXX'`", LABEL),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_decode', 'cond-false', 'if bs and int(seq_lens_cpu.min()) < 1:', 12,
               '`bs and int(seq_lens_cpu.min()) < 1` -> `False`', SUB_CHECKS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_decode', '1->0', 'if bs and int(seq_lens_cpu.min()) < 1:', 45,
               '`1` -> `0`', SUB_CHECKS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.alloc_decode', 'stmt-pass', 'raise BadBatchError(self.pool_name, f"decode needs seq_lens >= 1, got {seq_lens_cpu.tolist()}")', 13,
               "delete `raise BadBatchError(self.pool_name, f'decode needs seq_lens >= 1, got {s…`", SUB_CHECKS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.free', 'cond-false', 'if _is_empty_tensor(free_index):', 12,
               '`_is_empty_tensor(free_index)` -> `False`', EMPTY),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.free_swa', 'cond-false', 'if _is_empty_tensor(free_index):', 12,
               '`_is_empty_tensor(free_index)` -> `False`', EMPTY),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.free_full', 'cond-false', 'if _is_empty_tensor(free_index):', 12,
               '`_is_empty_tensor(free_index)` -> `False`', EMPTY),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.free_group_begin', 'cond-false', 'if self.in_free_group:', 12,
               '`self.in_free_group` -> `False`', SUB_GROUPS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.free_group_begin', 'stmt-pass', 'raise GroupStateError(self.pool_name, "free", "free_group_begin while a free group is open (nesting)")', 13,
               "delete `raise GroupStateError(self.pool_name, 'free', 'free_group_begin while a …`", SUB_GROUPS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.free_group_end', 'cond-false', 'if not self.in_free_group:', 12,
               '`not self.in_free_group` -> `False`', SUB_GROUPS),
    Equivalent('pools.swa', 'SWATokenToKVPoolAllocator.free_group_end', 'stmt-pass', 'raise GroupStateError(self.pool_name, "free", "free_group_end without free_group_begin")', 13,
               "delete `raise GroupStateError(self.pool_name, 'free', 'free_group_end without fr…`", SUB_GROUPS),
    Equivalent('pools.pure_swa', 'PureSWATokenToKVPoolAllocator.__init__', 'stmt-pass', 'self.need_sort = need_sort', 9,
               'delete `self.need_sort = need_sort`', UNREAD),
    Equivalent('pools.pure_swa', 'PureSWATokenToKVPoolAllocator.__init__', 'stmt-pass', 'self.swa_attn_allocator.pool_name = self.pool_name', 9,
               'delete `self.swa_attn_allocator.pool_name = self.pool_name`', LABEL),
#UNJUDGED pools/pure_swa.py 37 stmt-pass delete `self.full_attn_allocator = self.swa_attn_allocator`
    Equivalent('pools.pure_swa', 'PureSWATokenToKVPoolAllocator._no_paged_calls', 'str', 'return BadSizeError(self.pool_name, "page_size", self.page_size, f"{call} needs page_size > 1; use alloc")', 45,
               "`'page_size'` -> `'XXpage_sizeXX'`", LABEL),
    Equivalent('pools.pure_swa', 'PureSWATokenToKVPoolAllocator._no_paged_calls', 'fstr', 'return BadSizeError(self.pool_name, "page_size", self.page_size, f"{call} needs page_size > 1; use alloc")', 74,
               "`f'{call} needs page_size > 1; use alloc'` -> `f'XX{call} needs page_size > 1; use alloc'`", LABEL),
    Equivalent("pools.host_views", "HostViews.__deepcopy__", "stmt-pass", "memo[id(self)] = clone", 9,
               "delete `memo[id(self)] = clone`",
               "the memo entry matters only for a cycle through the pool itself, which no pool holds; deepcopy "
               "records the clone after __deepcopy__ returns anyway"),
    Equivalent("pools.host_views", "HostViews.__deepcopy__", "cond-true", "if name not in views:", 16,
               "`name not in views` -> `True`",
               "the views are deep-copied too, then replaced by views of the copied tensors two lines below"),
    Equivalent("pools.host_views", "HostViews.__deepcopy__", "cond-false", "if view is None:", 16,
               "`view is None` -> `False`",
               "a view that is None is taken anew from the copied tensor: a device-path pool on the CPU then reads "
               "through NumPy, with the same answers"),
    Equivalent("pools.host_views", "HostViews.__deepcopy__", "cond-true", "if name in vars(self):", 20,
               "`name in vars(self)` -> `True`",
               "an attribute set to None that the original lacked reads as None either way (getattr with a default)"),
    Equivalent("pools.host_views", "HostViews.__deepcopy__", "Continue->Break", "continue", 17,
               "`continue` -> `break`",
               "only a device-path pool has a None view, and it has no other view after it to take"),
    Equivalent("pools.host_views", "HostViews.__deepcopy__", "cond-true", "vars(clone)[name] = (np.frombuffer(source, "
               "dtype=view.dtype) if isinstance(source, bytearray)", 77, "`isinstance(source, bytearray)` -> `True`",
               "np.frombuffer over a CPU tensor shares its memory as .numpy() does: the same view"),
    Equivalent("pools.swa", "SWATokenToKVPoolAllocator.__init__", "cond-true",
               "self.check_layout = self.device.type == \"cpu\" if check_layout is None else check_layout", 58,
               "`check_layout is None` -> `True`",
               "on a CPU pool the default is on; only an explicit check_layout=False differs, and checks turned off "
               "have no observable contract (as kv_allocator's same line, docs/benchmarks.md)"),
    Equivalent('pools.page_alloc.vectorized', 'alloc_extend_vectorized', 'str', '_check_batch(("prefix_lens", prefix_lens), ("seq_lens", seq_lens), ("last_loc", last_loc))', 19,
               "`'prefix_lens'` -> `'XXprefix_lensXX'`", LABEL),
    Equivalent('pools.page_alloc.vectorized', 'alloc_extend_vectorized', 'str', '_check_batch(("prefix_lens", prefix_lens), ("seq_lens", seq_lens), ("last_loc", last_loc))', 49,
               "`'seq_lens'` -> `'XXseq_lensXX'`", LABEL),
    Equivalent('pools.page_alloc.vectorized', 'alloc_extend_vectorized', 'str', '_check_batch(("prefix_lens", prefix_lens), ("seq_lens", seq_lens), ("last_loc", last_loc))', 73,
               "`'last_loc'` -> `'XXlast_locXX'`", LABEL),
    Equivalent('pools.page_alloc.vectorized', 'alloc_extend_vectorized', 'Or->And', 'if prefix_lens.numel() == 0 or num_tokens == 0:', 8,
               '`prefix_lens.numel() == 0 or num_tokens == 0` -> `prefix_lens.numel() == 0 and num_tokens == 0`', EMPTY_BATCH),
    Equivalent('pools.page_alloc.vectorized', 'alloc_extend_vectorized', 'cond-false', 'if prefix_lens.numel() == 0 or num_tokens == 0:', 8,
               '`prefix_lens.numel() == 0 or num_tokens == 0` -> `False`', EMPTY_BATCH),
    Equivalent('pools.page_alloc.vectorized', 'alloc_decode_vectorized', 'str', '_check_batch(("seq_lens", seq_lens), ("last_loc", last_loc), ("out_indices", out_indices))', 19,
               "`'seq_lens'` -> `'XXseq_lensXX'`", LABEL),
    Equivalent('pools.page_alloc.vectorized', 'alloc_decode_vectorized', 'str', '_check_batch(("seq_lens", seq_lens), ("last_loc", last_loc), ("out_indices", out_indices))', 43,
               "`'last_loc'` -> `'XXlast_locXX'`", LABEL),
    Equivalent('pools.page_alloc.vectorized', 'alloc_decode_vectorized', 'str', '_check_batch(("seq_lens", seq_lens), ("last_loc", last_loc), ("out_indices", out_indices))', 67,
               "`'out_indices'` -> `'XXout_indicesXX'`", LABEL),
    Equivalent('pools.page_alloc.vectorized', 'alloc_decode_vectorized', 'cond-false', 'if seq_lens.numel() == 0:', 8,
               '`seq_lens.numel() == 0` -> `False`', EMPTY_BATCH),
    Equivalent('pools.page_alloc.vectorized', 'alloc_decode_vectorized', 'cond-false', 'if free_pages.numel() == 0:', 8,
               '`free_pages.numel() == 0` -> `False`', EMPTY_BATCH),
    Equivalent('pools.free_list', 'PageFreeList.__init__', '0->1', 'self._buf = torch.empty(0, dtype=torch.int64, device=device)', 33,
               '`0` -> `1`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', 'stmt-pass', 'self._host = self._buf.numpy() if self._on_host else None', 9,
               'delete `self._host = self._buf.numpy() if self._on_host else None`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', 'cond-true', 'self._host = self._buf.numpy() if self._on_host else None', 43,
               '`self._on_host` -> `True`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', 'cond-false', 'self._host = self._buf.numpy() if self._on_host else None', 43,
               '`self._on_host` -> `False`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', 'stmt-pass', 'self._capacity = 0', 9,
               'delete `self._capacity = 0`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', '0->1', 'self._capacity = 0', 26,
               '`0` -> `1`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', 'stmt-pass', 'self.head = 0', 9,
               'delete `self.head = 0`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', '0->1', 'self.head = 0', 21,
               '`0` -> `1`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', 'stmt-pass', 'self.tail = 0', 9,
               'delete `self.tail = 0`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.__init__', '0->1', 'self.tail = 0', 21,
               '`0` -> `1`', INIT_REPLACED),
    Equivalent('pools.free_list', 'PageFreeList.on_host', 'return-none', 'return self._on_host', 9,
               '`return self._on_host` -> `return None`', HOST_PATH),
    Equivalent('pools.free_list', 'PageFreeList.take', 'cond-false', 'if self._host is not None:', 12,
               '`self._host is not None` -> `False`', HOST_PATH),
    Equivalent('pools.free_list', 'PageFreeList.take_host', 'cond-false', 'if self._host is not None:', 12,
               '`self._host is not None` -> `False`', HOST_PATH),
    Equivalent('pools.free_list', 'PageFreeList.replace', '0->1', 'self._move(pages, front=0, back=max(len(pages), _MIN_SLACK))', 33,
               '`0` -> `1`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.replace', 'max->min', 'self._move(pages, front=0, back=max(len(pages), _MIN_SLACK))', 41,
               '`max(len(pages), _MIN_SLACK)` -> `min(len(pages), _MIN_SLACK)`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.append', 'Gt->GtE', 'if self.tail + count > self._capacity:', 12,
               '`self.tail + count > self._capacity` -> `self.tail + count >= self._capacity`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.append', 'cond-true', 'if self.tail + count > self._capacity:', 12,
               '`self.tail + count > self._capacity` -> `True`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.append', '0->1', 'self._move(self.view(), front=0, back=max(count, len(self), _MIN_SLACK))', 43,
               '`0` -> `1`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.append_one', 'cond-true', 'if self.tail == self._capacity:', 12,
               '`self.tail == self._capacity` -> `True`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.append_one', '0->1', 'self._move(self.view(), front=0, back=max(len(self), _MIN_SLACK))', 43,
               '`0` -> `1`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.append_one', 'cond-false', 'if self._host is not None:', 12,
               '`self._host is not None` -> `False`', HOST_PATH),
    Equivalent('pools.free_list', 'PageFreeList.prepend', 'Gt->GtE', 'if count > self.head:', 12,
               '`count > self.head` -> `count >= self.head`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.prepend', 'cond-true', 'if count > self.head:', 12,
               '`count > self.head` -> `True`', SLACK),
    Equivalent('pools.free_list', 'PageFreeList.prepend', 'cond-false', 'if count > self.head:', 12,
               '`count > self.head` -> `False`', PREPEND_ROOM),
    Equivalent('pools.free_list', 'PageFreeList.prepend', 'stmt-pass', 'self._move(self.view(), front=max(count, len(self), _MIN_SLACK), back=0)', 13,
               'delete `self._move(self.view(), front=max(count, len(self), _MIN_SLACK), back=0)`', PREPEND_ROOM),
    Equivalent('pools.free_list', 'PageFreeList.prepend', 'max->min', 'self._move(self.view(), front=max(count, len(self), _MIN_SLACK), back=0)', 43,
               '`max(count, len(self), _MIN_SLACK)` -> `min(count, len(self), _MIN_SLACK)`', PREPEND_ROOM),
    Equivalent('pools.free_list', 'PageFreeList.prepend', '0->1', 'self._move(self.view(), front=max(count, len(self), _MIN_SLACK), back=0)', 83,
               '`0` -> `1`', PREPEND_ROOM),
    Equivalent('pools.free_list', 'PageFreeList.prepend', 'cond-false', 'if self._host is not None and pages.is_cpu:', 12,
               '`self._host is not None and pages.is_cpu` -> `False`', HOST_PATH),
    Equivalent('pools.free_list', 'PageFreeList._move', 'slice-lower-drop', 'buf[front:front + size] = pages', 9,
               '`buf[front:front + size]` -> `buf[:front + size]`', FRONT_ZERO),
    Equivalent('pools.free_list', 'PageFreeList._move', 'cond-true', 'self._host = buf.numpy() if self._on_host else None', 37,
               '`self._on_host` -> `True`', HOST_PATH),
    Equivalent('pools.free_list', 'PageFreeList._move', 'Add->Sub', 'self._capacity = front + size + back', 26,
               '`front + size` -> `front - size`', SLACK),
    Equivalent('pools.page_states', 'host_tables', 'And->Or', 'return device.type == "cpu" and os.environ.get(DEVICE_PATH_ON_CPU) != "1"', 12,
               "`device.type == 'cpu' and os.environ.get(DEVICE_PATH_ON_CPU) != '1'` -> `device.type == 'cpu' or os.environ.get(DEVICE_PATH_ON_CPU) != '1'`", HOST_PATH),
    Equivalent('pools.page_states', 'host_tables', 'str', 'return device.type == "cpu" and os.environ.get(DEVICE_PATH_ON_CPU) != "1"', 75,
               "`'1'` -> `'XX1XX'`", HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.__init__', '2->3', 'self.states = torch.empty(num_pages + 2, dtype=torch.int8, device=device)', 47,
               '`2` -> `3`', SENTINEL),
    Equivalent('pools.page_states', 'PageStateTable.__init__', 'str', '"""The table itself (canaries and tests may index it like any tensor)."""', 9,
               "`'The table itself (canaries and tests may index it like any tensor).'` -> `'XXThe table itself (canaries and tests may index it like any tensor).XX'`", LABEL),
    Equivalent('pools.page_states', 'PageStateTable.__init__', 'cond-true', 'self._host: np.ndarray | None = self.states.numpy() if host_tables(device) else None', 64,
               '`host_tables(device)` -> `True`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.__init__', 'stmt-pass', 'self.reset()', 9,
               'delete `self.reset()`', INIT_REPLACED),
    Equivalent('pools.page_states', 'PageStateTable.reset', 'stmt-pass', 'self.states[0] = RESERVED', 9,
               'delete `self.states[0] = RESERVED`', NEVER_LIVE),
    Equivalent('pools.page_states', 'PageStateTable.reset', '0->1', 'self.states[0] = RESERVED', 21,
               '`0` -> `1`', NEVER_LIVE),
    Equivalent('pools.page_states', 'PageStateTable.reset', 'stmt-pass', 'self.states[-1] = RESERVED', 9,
               'delete `self.states[-1] = RESERVED`', NEVER_LIVE),
    Equivalent('pools.page_states', 'PageStateTable.reset', 'neg-drop', 'self.states[-1] = RESERVED', 21,
               '`-1` -> `1`', NEVER_LIVE),
    Equivalent('pools.page_states', 'PageStateTable.reset', '1->0', 'self.states[-1] = RESERVED', 22,
               '`1` -> `0`', NEVER_LIVE),
    Equivalent('pools.page_states', 'PageStateTable.mark', 'cond-false', 'if self._host is not None:', 12,
               '`self._host is not None` -> `False`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.mark', 'cond-true', 'self._host[pages if isinstance(pages, np.ndarray) else pages.numpy()] = state', 33,
               '`isinstance(pages, np.ndarray)` -> `True`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.page_ids', 'cond-false', 'if page_size == 1:', 12,
               '`page_size == 1` -> `False`', PAGE_SIZE_1),
    Equivalent('pools.page_states', 'PageStateTable.page_ids', '1->0', 'if page_size == 1:', 25,
               '`1` -> `0`', PAGE_SIZE_1),
    Equivalent('pools.page_states', 'PageStateTable.page_ids', 'IsNot->Is', 'if self._host is not None:', 12,
               '`self._host is not None` -> `self._host is None`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.page_ids', 'cond-true', 'if self._host is not None:', 12,
               '`self._host is not None` -> `True`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.page_ids', 'cond-false', 'if self._host is not None:', 12,
               '`self._host is not None` -> `False`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.valid_free', 'return-none', 'return False', 17,
               '`return False` -> `return None`', TRUTH),
    Equivalent('pools.page_states', 'PageStateTable.valid_free', 'Gt->GtE', 'return not (distinct and len(ids) > 1 and self._repeat_finder()(ids))', 38,
               '`len(ids) > 1` -> `len(ids) >= 1`', ONE_ID),
    Equivalent('pools.page_states', 'PageStateTable.valid_free', '1->0', 'return not (distinct and len(ids) > 1 and self._repeat_finder()(ids))', 49,
               '`1` -> `0`', ONE_ID),
    Equivalent('pools.page_states', 'PageStateTable.valid_free', 'Gt->GtE', 'if distinct and pages.shape[0] > 1:', 25,
               '`pages.shape[0] > 1` -> `pages.shape[0] >= 1`', ONE_ID),
    Equivalent('pools.page_states', 'PageStateTable.valid_free', '1->0', 'if distinct and pages.shape[0] > 1:', 42,
               '`1` -> `0`', ONE_ID),
    Equivalent('pools.page_states', 'PageStateTable.unique', 'Is->IsNot', 'if self._host is None:', 12,
               '`self._host is None` -> `self._host is not None`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.unique', 'cond-true', 'if self._host is None:', 12,
               '`self._host is None` -> `True`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.unique', 'cond-false', 'if self._host is None:', 12,
               '`self._host is None` -> `False`', HOST_PATH),
    Equivalent('pools.page_states', 'PageStateTable.unique', 'Gt->GtE', 'if len(values) > 1:', 12,
               '`len(values) > 1` -> `len(values) >= 1`', ONE_ID),
    Equivalent('pools.page_states', 'PageStateTable.unique', 'cond-true', 'if len(values) > 1:', 12,
               '`len(values) > 1` -> `True`', ONE_ID),
    Equivalent('pools.page_states', 'PageStateTable.unique', '1->0', 'if len(values) > 1:', 26,
               '`1` -> `0`', ONE_ID),
    Equivalent('pools.page_states', 'PageStateTable._repeat_finder', 'cond-true', 'if self._repeats is None:', 12,
               '`self._repeats is None` -> `True`', FRESH_FINDER),
    Equivalent('pools.page_states', 'PageStateTable._repeat_finder', '2->3', 'self._repeats = RepeatFinder(self.num_pages + 2, self.states.device)', 59,
               '`2` -> `3`', FRESH_FINDER),
    Equivalent('pools.page_states', 'RepeatFinder.__init__', 'stmt-pass', 'device = device or torch.device("cpu")', 9,
               "delete `device = device or torch.device('cpu')`", DEVICE_GIVEN),
    Equivalent('pools.page_states', 'RepeatFinder.__init__', 'Or->And', 'device = device or torch.device("cpu")', 18,
               "`device or torch.device('cpu')` -> `device and torch.device('cpu')`", DEVICE_GIVEN),
    Equivalent('pools.page_states', 'RepeatFinder.__init__', 'str', 'device = device or torch.device("cpu")', 41,
               "`'cpu'` -> `'XXcpuXX'`", DEVICE_GIVEN),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'cond-false', 'if count < 2:', 12,
               '`count < 2` -> `False`', ONE_ID),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'cond-true', 'if isinstance(ids, np.ndarray):', 12,
               '`isinstance(ids, np.ndarray)` -> `True`', HOST_PATH),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'cond-false', 'if isinstance(ids, np.ndarray):', 12,
               '`isinstance(ids, np.ndarray)` -> `False`', HOST_PATH),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'LtE->Lt', 'if count <= _SET_AT_MOST:', 16,
               '`count <= _SET_AT_MOST` -> `count < _SET_AT_MOST`', HOST_PATH),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'LtE->Gt', 'if count <= _SET_AT_MOST:', 16,
               '`count <= _SET_AT_MOST` -> `count > _SET_AT_MOST`', HOST_PATH),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'cond-true', 'if count <= _SET_AT_MOST:', 16,
               '`count <= _SET_AT_MOST` -> `True`', HOST_PATH),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'cond-false', 'if count <= _SET_AT_MOST:', 16,
               '`count <= _SET_AT_MOST` -> `False`', HOST_PATH),
    Equivalent('pools.page_states', 'RepeatFinder.__call__', 'And->Or', 'assert self._stamp_host is not None and self._positions_host is not None, "host ids need a host table"', 20,
               '`self._stamp_host is not None and self._positions_host is not None` -> `self._stamp_host is not None or self._positions_host is not None`', ASSERT),
    Equivalent('pools.paged_checks', '_host', 'False->True', 'return t.numpy().astype(np.int64, copy=False)', 44,
               '`False` -> `True`', HOST_COPY),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.__init__', 'cond-true', 'self._host_states = states.states.numpy() if self._host_table else None', 54,
               '`self._host_table` -> `True`', HOST_PATH),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.check_lengths', 'fstr', 'for label, t in ((name, device_t), (f"{name}_cpu", cpu_t)):', 45,
               "`f'{name}_cpu'` -> `f'XX{name}_cpu'`", LABEL),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.extend_pages', 'cond-true', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 35,
               '`isinstance(seq_lens_cpu, torch.Tensor)` -> `True`', NOT_A_TENSOR),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.extend_pages', 'neg-drop', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 79,
               '`-1` -> `1`', NOT_A_TENSOR),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.extend_pages', '1->0', 'bs = len(seq_lens_cpu) if isinstance(seq_lens_cpu, torch.Tensor) else -1', 80,
               '`1` -> `0`', NOT_A_TENSOR),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.extend_pages', 'str', 'self.check_shapes((("seq_lens", seq_lens, seq_lens_cpu), ("prefix_lens", prefix_lens, prefix_lens_cpu)),', 29,
               "`'seq_lens'` -> `'XXseq_lensXX'`", LABEL),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.extend_pages', 'str', 'self.check_shapes((("seq_lens", seq_lens, seq_lens_cpu), ("prefix_lens", prefix_lens, prefix_lens_cpu)),', 67,
               "`'prefix_lens'` -> `'XXprefix_lensXX'`", LABEL),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'Lt->LtE', 'if int(pre.min()) < 0:', 12,
               '`int(pre.min()) < 0` -> `int(pre.min()) <= 0`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'Lt->GtE', 'if int(pre.min()) < 0:', 12,
               '`int(pre.min()) < 0` -> `int(pre.min()) >= 0`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'cond-true', 'if int(pre.min()) < 0:', 12,
               '`int(pre.min()) < 0` -> `True`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'cond-false', 'if int(pre.min()) < 0:', 12,
               '`int(pre.min()) < 0` -> `False`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', '0->1', 'if int(pre.min()) < 0:', 29,
               '`0` -> `1`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'stmt-pass', 'raise BadBatchError(self.pool_name, f"negative prefix length in {pre.tolist()}")', 13,
               "delete `raise BadBatchError(self.pool_name, f'negative prefix length in {pre.tol…`", EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'Lt->LtE', 'short = np.flatnonzero(seq < pre)', 32,
               '`seq < pre` -> `seq <= pre`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'Lt->GtE', 'short = np.flatnonzero(seq < pre)', 32,
               '`seq < pre` -> `seq >= pre`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'cond-false', 'if len(short):', 12,
               '`len(short)` -> `False`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_lengths', 'stmt-pass', 'raise BadBatchError(self.pool_name, f"seq_len {int(seq[i])} < prefix_len {int(pre[i])}", position=i)', 13,
               "delete `raise BadBatchError(self.pool_name, f'seq_len {int(seq[i])} < prefix_len…`", EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'And->Or', 'bs = seq_lens_cpu.shape[0] if isinstance(seq_lens_cpu, torch.Tensor) and seq_lens_cpu.dim() == 1 else -1', 39,
               '`isinstance(seq_lens_cpu, torch.Tensor) and seq_lens_cpu.dim() == 1` -> `isinstance(seq_lens_cpu, torch.Tensor) or seq_lens_cpu.dim() == 1`', NOT_A_TENSOR),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'cond-true', 'bs = seq_lens_cpu.shape[0] if isinstance(seq_lens_cpu, torch.Tensor) and seq_lens_cpu.dim() == 1 else -1', 39,
               '`isinstance(seq_lens_cpu, torch.Tensor) and seq_lens_cpu.dim() == 1` -> `True`', NOT_A_TENSOR),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'neg-drop', 'bs = seq_lens_cpu.shape[0] if isinstance(seq_lens_cpu, torch.Tensor) and seq_lens_cpu.dim() == 1 else -1', 111,
               '`-1` -> `1`', NOT_A_TENSOR),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', '1->0', 'bs = seq_lens_cpu.shape[0] if isinstance(seq_lens_cpu, torch.Tensor) and seq_lens_cpu.dim() == 1 else -1', 112,
               '`1` -> `0`', NOT_A_TENSOR),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'str', 'self.check_shapes((("seq_lens", seq_lens, seq_lens_cpu),), last_loc, bs)', 29,
               "`'seq_lens'` -> `'XXseq_lensXX'`", LABEL),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'cond-true', 'if self.check_layout:', 12,
               '`self.check_layout` -> `True`', CHECKS_OFF),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'cond-false', 'if self._host_table:', 16,
               '`self._host_table` -> `False`', HOST_PATH),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'cond-true', 'loc = _host(last_loc if last_loc.is_cpu else last_loc.cpu())', 41,
               '`last_loc.is_cpu` -> `True`', HOST_PATH),
    Equivalent('pools.paged_checks', 'PagedBatchChecker.decode_pages', 'cond-false', 'loc = _host(last_loc if last_loc.is_cpu else last_loc.cpu())', 41,
               '`last_loc.is_cpu` -> `False`', HOST_PATH),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._layout_ok', 'cond-true', 'if self._host_table:', 12,
               '`self._host_table` -> `True`', HOST_PATH),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._layout_ok', 'cond-false', 'if self._host_table:', 12,
               '`self._host_table` -> `False`', HOST_PATH),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'cond-false', 'if len(wrong):', 12,
               '`len(wrong)` -> `False`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'stmt-pass', 'raise BadBatchError(self.pool_name, f"last_loc {int(loc[i])} {what} at page size {ps}", position=i)', 13,
               "delete `raise BadBatchError(self.pool_name, f'last_loc {int(loc[i])} {what} at p…`", EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'FloorDiv->Mult', 'pages = loc[_continues(pre, ext, ps)] // ps', 17,
               '`loc[_continues(pre, ext, ps)] // ps` -> `loc[_continues(pre, ext, ps)] * ps`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'And->Or', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 12,
               '`len(pages) and (int(pages.min()) < 1 or int(page…` -> `len(pages) or (int(pages.min()) < 1 or int(page…`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'cond-true', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 12,
               '`len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages)` -> `True`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'cond-false', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 12,
               '`len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages)` -> `False`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'Or->And', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 28,
               '`int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages` -> `int(pages.min()) < 1 and int(pages.max()) > self.states.num_pages`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'Lt->LtE', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 28,
               '`int(pages.min()) < 1` -> `int(pages.min()) <= 1`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'Lt->GtE', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 28,
               '`int(pages.min()) < 1` -> `int(pages.min()) >= 1`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', '1->0', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 47,
               '`1` -> `0`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'Gt->GtE', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 52,
               '`int(pages.max()) > self.states.num_pages` -> `int(pages.max()) >= self.states.num_pages`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'Gt->LtE', 'if len(pages) and (int(pages.min()) < 1 or int(pages.max()) > self.states.num_pages):', 52,
               '`int(pages.max()) > self.states.num_pages` -> `int(pages.max()) <= self.states.num_pages`', EXPLAIN),
    Equivalent('pools.paged_checks', 'PagedBatchChecker._explain_layout', 'stmt-pass', 'raise BadBatchError(self.pool_name, f"{call}: last_loc {loc.tolist()} points outside the pool")', 13,
               "delete `raise BadBatchError(self.pool_name, f'{call}: last_loc {loc.tolist()} po…`", EXPLAIN),
)

_BY_KEY = {entry.key: entry for entry in EQUIVALENTS}

SELF_CHECKS: dict[tuple[str, str], str] = {
    ("pools.radix_cache_base", "RadixCacheBase.sanity_check"): SELF_CHECK,
    ("pools.radix_cache_base", "RadixCacheBase._invariant_failed"): SELF_CHECK,
}
"""Functions whose job is to raise on a corrupt pool (``module``, ``function``) -> why their mutants are scored
apart, as ``self-check``: one that weakens the check can never be seen on a correct pool, and one that makes it
fail a correct pool is killed, which the table reports but does not count."""


def equivalence(module: str, function: str, operator: str, source: str, col: int, description: str) -> str:
    """Why the mutant so named is equivalent, or ``""`` when it is not listed (a self-check's: see ``SELF_CHECKS``)."""
    entry = _BY_KEY.get((module, function, operator, source, col, description))
    return entry.why if entry is not None else ""

"""The arguments the equivalence tables share: why a kind of mutant no run can tell from the original."""

from __future__ import annotations

TOUCH_AFTER_INSERT = (
    "the insert just stamped every node on this path; stamping them again (or not) changes their ages only "
    "relative to each other, and nodes on one path are never compared: an ancestor becomes an eviction "
    "candidate only once its descendants are gone, so no policy order can tell"
)

EMPTY_FREE = "a free of an empty tensor is a no-op of the allocator (it returns before touching the free list)"

LAST_TOUCH_SKIPPED = "it skips only the last touch: " + TOUCH_AFTER_INSERT

EMPTY_PROMPT_KEY = "an empty prompt key descends to the root: touching the root and splitting at it change nothing"

WHOLE_PROMPT_KEY = (
    "a prompt key equal to the key ends at the node the insert just made: no split, and the touch "
    "is one more stamp of the inserted path, equivalent as the last touch is"
)

LOOP_LABEL = (
    "the loop's `what` is read only by the AlreadyCachedError message below (message-only, but the "
    "classifier does not follow a loop target)"
)

NO_INDICES = "on no indices the vectorised test below is `.any()` of an empty tensor: False, the same answer"

DEEPCOPY_MEMO = (
    "the memo entry matters only for a cycle through the pool itself, which no pool holds; deepcopy "
    "records the clone after __deepcopy__ returns anyway"
)

VIEWS_RETAKEN = "the views are deep-copied too, then replaced by views of the copied tensors two lines below"

NONE_VIEW_RETAKEN = (
    "a view that is None is taken anew from the copied tensor: a device-path pool on the CPU then "
    "reads through NumPy, with the same answers"
)

NONE_ATTRIBUTE = "an attribute set to None that the original lacked reads as None either way (getattr with a default)"

LAST_NONE_VIEW = "only a device-path pool has a None view, and it has no other view after it to take"

FROMBUFFER_VIEW = "np.frombuffer over a CPU tensor shares its memory as .numpy() does: the same view"

HEAP_VERSION = (
    "a node's heap_version is read only for heap entries, and `_push` sets it before making the "
    "first one: its initial value is never compared"
)

PREFIX_LEN = (
    "common_prefix_len's fast path: without it (or comparing longer slices) the binary search below "
    "finds the same length, since a slice past one key's end differs from the other's"
)

FIRST_PAGE = (
    "its one caller, `descend`, passes a child found by its first page, so the keys share at least "
    "one token and starting the search at 1 finds the same length"
)

COUNTER_ORIGIN = (
    "the clock, id and push counters only order nodes against each other: starting one at 1 "
    "instead of 0 shifts every value alike (the root's stamp is never compared: it is never evicted)"
)

CHILD_KEY = "a child keyed by a 1-tuple instead of its token, consistently (every lookup goes through child_key): the same tree"

TRUTH = "the only caller tests the answer for truth; None and False are both false"

ASSERT = "weakens an assertion, which a correct pool never trips (an assert forced true is not mutated at all)"

INSIDE_LEN = "inside_len is read only when `inside` is set; here it is None"

ROOT_STAMP = "the root is never an eviction candidate, so its last_access is never compared"

EXTRA_PUSH = (
    "one more heap entry at the node's current priority: `pop_victim` skips entries of nodes not "
    "evictable, and a stale entry's version no longer matches; the order taken is the same"
)

DETACHED = (
    "an evicted leaf is already gone from its parent's children, which is what `is_attached` "
    "checks, so its own parent pointer is never followed again"
)

IDS = (
    "ids stay unique (decreasing, or offset), and they break priority ties only between leaves with equal "
    "stamps: a touch or a split gives equal stamps only to nodes on one path, of which at most one is a leaf"
)

VERSIONS = (
    "versions stay unique (decreasing) and are compared only for equality with the node's own, and "
    "as the heap's second key only between equal priorities, which include the node id and so never tie"
)

COMPACTION = (
    "when to rebuild the lazy heap (or whether): the live entries and their order are the same, "
    "only the number of stale entries differs, which changes speed, not the victim order"
)

SUB_CHECKS = (
    "a check the sub-allocators repeat: without it the full side's own call raises the same typed error "
    "before either side changes (or, on a pool too short for the batch, refuses it unchanged)"
)

UNREAD = "an attribute no code reads: the sub-allocators take need_sort from their own constructor arguments"

LABEL = "text only: a pool name or an argument label that ends up in an error message, never in a decision"

SAME_SIDES = "the constructor builds both sides with one page size, so they are both paged or neither: `and` and `or` agree"

NOT_A_TENSOR = (
    "the length a non-tensor gets only feeds check_lengths, which rejects a non-tensor with the same "
    "BadBatchError whatever length it is told"
)

LAST_INDEX = (
    "the mapping's last entry is its -1 padding: a last_loc pointing there translates to -1 and is "
    "refused by the SWA-peer check below with the same BadBatchError"
)

SWA_PEER = "paged SWA slots start at page_size >= 2 (page 0 is reserved), so a peer is never 1: `<= 1` and `<= 0` reject the same last_locs"

CLEARED = (
    "freshly allocated full slots map to 0 already (every free zeroes its slots' entries), and the tail's "
    "entries are set after this clear: clearing none of the head, or all of it, leaves the same mapping"
)

EMPTY = (
    "a free of an empty tensor: without the early return every step below is a no-op on no slots "
    "(the sub-allocators return early on empty frees too)"
)

SUB_GROUPS = (
    "the sub-allocators keep their own group state: without the outer check the first side's "
    "free_group_begin/end raises the same GroupStateError before anything changes"
)

SAME_ALLOCATOR = (
    "the paged allocator at page size 1 keeps the same free list in the same order as the token allocator: every call answers the same"
)

INIT_REPLACED = (
    "a constructor's first value, replaced before any use: the allocator's clear() resets the "
    "table and replaces the free list (replace -> _move sets buffer, views, capacity, head and tail)"
)

HOST_PATH = (
    "which of two paths answers: the NumPy host views of a CPU pool or the torch ops of a device one; "
    "they return the same values (the device-path machines run the torch path on a CPU too), so the "
    "choice changes speed only"
)

SLACK = (
    "how much room the free list's buffer keeps, or when it moves to a new one: the sequence of free pages "
    "is the same, only the number of copies differs"
)

PREPEND_ROOM = (
    "every page a free prepends was taken from the head since the list last moved (misuse is "
    "rejected before), so the head always has room and the move is never needed"
)

FRONT_ZERO = "every move that reaches this line has front = 0 (the prepend's move is never needed): the same slice"

EMPTY_BATCH = "the kernel's early return for no requests or no tokens: the general path writes nothing and returns the same empty result"

SENTINEL = "one more sentinel entry past the pool, never live: no valid or rejected free reads it differently"

NEVER_LIVE = (
    "page 0 and the sentinel are never handed out: FREE or RESERVED, they are not LIVE, which is all a "
    "free's check reads (a reserved index is named by the error path from the index itself)"
)

PAGE_SIZE_1 = "at page size 1 ``indices // 1`` is the indices: the general path returns the same ids"

ONE_ID = "a single id (or none) cannot repeat: the repeat check or the dedup on it answers the same"

FRESH_FINDER = (
    "a new repeat finder (or a larger one) per call: its stamps are rewritten for the ids it is asked about, so it answers the same"
)

DEVICE_GIVEN = "its one caller always passes the table's device"

HOST_COPY = "a copy of the same int64 values instead of a view: nothing writes through it"

EXPLAIN = (
    "the error path after a batch check failed: every branch raises BadBatchError with the pool unchanged, "
    "so skipping or flipping one only picks another of its messages (the drivers judge the type and the "
    "unchanged pool)"
)

CHECKS_OFF = (
    "on a CPU pool the default is on; only an explicit check_layout=False differs, and checks turned off "
    "have no observable contract (as kv_allocator's same line, docs/benchmarks.md)"
)

SELF_CHECK = (
    "a self-check's failure path: it reports a corrupt tree, which a correct pool never is, so no run can "
    "take it (as an assertion's; `mutate` does not weaken assertions at all)"
)
CPU_INDICES = (
    "on a CPU pool an int32 index tensor reads the state table and fills the int64 free list the same; "
    "the conversion matters for CUDA and foreign dtypes, which no CPU run passes"
)
DEDUP_MESSAGE = "the error path's page list: without the dedup the same DoubleFreeError names a page twice"
EMPTY_GENERAL = "the empty-free early return: the general path validates an empty tensor and frees nothing, the same result"
DECODE_FAST = "the decode fast path when no request opens a page: the kernel computes the same last_loc + 1"

SHIFT_FAST = (
    "the shift is the division's fast path at a power-of-two page size: a mutant that misses it (a wrong "
    "shift, or the test never true) divides instead, the same page ids"
)
TWO_RUNS = (
    "repeats is called on run heads only (a refused free_segment's explanation), and two run heads always "
    "differ, so a guard that also lets two ids through answers the same False"
)
PIGEONHOLE_EDGE = (
    "the more-ids-than-values guard at exactly as many ids as values: every caller has checked (or "
    "checks in the same sum) that the ids are live pages, and live pages are fewer than the values, so "
    "that many ids repeat one and both answers say so"
)

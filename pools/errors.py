"""Typed contract errors raised by every pool in :mod:`pools`.

Three tiers of failure run through the package:

* ``None`` -- the pool is short of capacity.  That is normal back-pressure, the
  scheduler retries later, and nothing was consumed.
* :class:`PoolError` -- the caller broke the contract (double free, a foreign or
  reserved index, a negative size, a malformed batch, a misused group window).
  Every pool validates *before* it mutates anything, so a raised ``PoolError``
  leaves the pool exactly as it was.
* ``assert`` -- something that cannot happen unless the pool itself is wrong.

Each error carries the offending numbers as attributes so that harness reports
and traces can name them without parsing the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _preview(values: Sequence[int], limit: int = 8) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    more = f", ... ({len(values)} total)" if len(values) > limit else ""
    return f"[{shown}{more}]"


class PoolError(Exception):
    """Base class: a call broke a pool's contract; the pool is unchanged."""

    def __init__(self, pool: str, message: str) -> None:
        self.pool = pool
        super().__init__(f"{pool}: {message}")


class DoubleFreeError(PoolError):
    """An index that is already free (or pending free) was released again.

    Upstream SGLang appends to its free lists without a membership check, so a
    double free silently duplicates an index that is later handed to two
    owners (sglang-pools.md section 8, hazard 6; vLLM #42571 is the same bug).
    """

    def __init__(self, pool: str, indices: Sequence[int], what: str = "index") -> None:
        self.indices = list(indices)
        super().__init__(pool, f"double free of {what} {_preview(self.indices)}: already free")


class ForeignIndexError(PoolError):
    """An index outside the range the pool owns, ``[low, high]`` inclusive."""

    def __init__(self, pool: str, indices: Sequence[int], low: int, high: int, what: str = "index") -> None:
        self.indices = list(indices)
        self.low = low
        self.high = high
        super().__init__(pool, f"{what} {_preview(self.indices)} outside [{low}, {high}]")


class ReservedIndexError(PoolError):
    """Row 0, Mamba slot 0 or KV page 0 was named: they are padding targets.

    Padded CUDA-graph batches read and write index 0, so it must never be
    owned by a request (SGLang #24243, #17404, #1557).
    """

    def __init__(self, pool: str, index: int, what: str = "index") -> None:
        self.index = index
        super().__init__(pool, f"{what} {index} is reserved padding and is never handed out or freed")


class BadSizeError(PoolError):
    """A size argument is negative, unaligned or otherwise impossible."""

    def __init__(self, pool: str, name: str, value: int, requirement: str) -> None:
        self.name = name
        self.value = value
        self.requirement = requirement
        super().__init__(pool, f"{name}={value} is invalid: {requirement}")


def check_count(pool: str, name: str, value: Any, minimum: int = 0) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) of at least ``minimum``, else :class:`BadSizeError`.

    A float size reached ``torch.zeros`` and failed there with torch's own
    ``TypeError``, naming neither the pool nor the argument.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadSizeError(pool, name, value, "must be an int")
    if value < minimum:
        raise BadSizeError(pool, name, value, f"must be >= {minimum}")
    return value


class BadBatchError(PoolError):
    """A request batch is malformed: mismatched lengths, ``seq < prefix``,
    a misaligned ``last_loc``, the same request twice, a stale handle..."""

    def __init__(self, pool: str, problem: str, *, position: int | None = None) -> None:
        self.problem = problem
        self.position = position
        where = f" (batch position {position})" if position is not None else ""
        super().__init__(pool, f"malformed batch{where}: {problem}")


class GroupStateError(PoolError):
    """A group window was opened twice or closed while not open.

    Upstream ``MambaSlotAllocator.alloc_group_begin`` silently drops the first
    group's reservation when called twice (a leak), and an unmatched end hides
    a scheduler bug; both are contract breaches here.
    """

    def __init__(self, pool: str, group: str, problem: str) -> None:
        self.group = group
        super().__init__(pool, f"{group} group: {problem}")


class UnknownKernelError(PoolError):
    """A page-allocation kernel name that is not registered."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = list(known)
        super().__init__("page_alloc", f"unknown kernel {name!r}; known: {', '.join(self.known)}")


class KernelUnavailableError(PoolError, ImportError):
    """A registered page kernel that cannot load here: ``triton`` without triton (or without the numpy its
    CPU interpreter needs).  An ``ImportError`` as well, so code that guarded the import keeps working."""

    def __init__(self, name: str, needs: str, cause: str) -> None:
        self.kernel = name
        super().__init__("page_alloc", f"the {name} page kernel needs {needs}: {cause}")


class InsufficientBlocksError(PoolError, ValueError):
    """More blocks were requested than the block pool has free.

    vLLM's ``BlockPool.get_new_blocks`` raises ``ValueError`` here: its callers
    must check ``get_num_free_blocks()`` first, so asking for too many is a
    contract breach, not back-pressure.  Subclassing ``ValueError`` keeps code
    written against vLLM's contract working unchanged.
    """

    def __init__(self, pool: str, requested: int, available: int) -> None:
        self.requested = requested
        self.available = available
        super().__init__(pool, f"cannot get {requested} blocks: only {available} free")


class BlockStateError(PoolError):
    """A block was named in a state the call does not accept.

    Touching a free block that holds no hash would hand it out without an
    allocation; caching a free or already-hashed block, or caching at all with
    prefix caching off, leaves the hash map naming a block that is reused
    without its hash being dropped.
    """

    def __init__(self, pool: str, block_id: int | None, ref_cnt: int | None, problem: str) -> None:
        self.block_id = block_id
        self.ref_cnt = ref_cnt
        self.problem = problem
        where = f"block {block_id} (ref_cnt={ref_cnt}): " if block_id is not None else ""
        super().__init__(pool, f"{where}{problem}")


class UnknownEvictionPolicyError(PoolError):
    """A prefix-cache eviction policy name that is not implemented."""

    def __init__(self, pool: str, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = list(known)
        super().__init__(pool, f"unknown eviction policy {name!r}; known: {', '.join(self.known)}")


class KeyValueMismatchError(PoolError):
    """A prefix-cache value does not pair with its key: a different length, or
    (page size > 1) KV indices that are not whole allocator pages.

    Upstream ``RadixCache.insert`` truncates the value to the key without a
    check, so a short value stores a node whose size counts tokens it holds no
    KV for (the key-vs-value accounting bug of SGLang PR #10637).
    """

    def __init__(self, pool: str, key_len: int, value_len: int, problem: str = "lengths differ") -> None:
        self.key_len = key_len
        self.value_len = value_len
        self.problem = problem
        super().__init__(pool, f"key of {key_len} tokens, value of {value_len} indices: {problem}")


class TreeNodeError(PoolError):
    """A prefix-cache node id or node that is not in the live tree."""

    def __init__(self, pool: str, node_id: int, problem: str) -> None:
        self.node_id = node_id
        self.problem = problem
        super().__init__(pool, f"node {node_id}: {problem}")


class LockStateError(TreeNodeError):
    """A lock or unlock the node's lock state does not allow.

    Upstream ``dec_lock_ref`` has no underflow guard: a second unlock leaves
    ``lock_ref == -1``, the node counts as evictable, and eviction frees KV a
    request still reads.  Unlocking a node that left the tree walks a parent
    chain that misses the root (SGLang PR #29291).
    """

    def __init__(self, pool: str, node_id: int, lock_ref: int, problem: str) -> None:
        self.lock_ref = lock_ref
        super().__init__(pool, node_id, f"(lock_ref={lock_ref}) {problem}")


class AlreadyCachedError(PoolError):
    """KV indices handed to the prefix cache as new (or as a request's own) are
    already held by the tree.

    Caching one page under two keys counts it twice in ``evictable_size()``
    (SGLang #35270) and frees it twice on eviction.
    """

    def __init__(self, pool: str, indices: Sequence[int], problem: str) -> None:
        self.indices = list(indices)
        self.problem = problem
        super().__init__(pool, f"indices {_preview(self.indices)} {problem}")


class TreeInvariantError(PoolError):
    """``sanity_check`` found a maintained count or link that differs from the
    one recomputed from the tree (the audit SGLang PR #38045 proposes)."""

    def __init__(self, pool: str, invariant: str, expected: object, actual: object) -> None:
        self.invariant = invariant
        self.expected = expected
        self.actual = actual
        super().__init__(pool, f"{invariant}: recomputed {expected!r}, maintained {actual!r}")

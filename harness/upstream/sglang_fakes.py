"""What a target hands SGLang's classes, or watches them through, that is not one of SGLang's modules.

* :class:`SWAKVPoolFake`: the ``kvcache`` a SWA allocator is built over, holding its full -> SWA
  mapping and nothing else (no KV buffers);
* :class:`InvariantSignals`: upstream's ``utils/invariants.expect`` calls that failed, recorded at
  upstream's default level (``SGLANG_INVARIANT_CHECK`` unset), where upstream itself detects
  nothing, so a driver can report what upstream would have flagged (``swa.peer_mapped``, the
  double-free guard of sglang PR #27586) without changing what the allocator does;
* :class:`LogicalClock`: the ``time`` the loaded ``radix_cache`` reads, so its LRU order is a pure
  function of the operation sequence (a differential against the Rust core's logical counter
  needs that; the real clock is strictly increasing between calls too, so the order is the same).

The last two are installed by :data:`poolfuzz.harness.upstream.sglang_files.SGLANG`'s ``after_exec`` hooks
the moment their upstream module executes, so every file that imports ``expect`` binds the
recording one and every SGLang target of the process sees the same clock.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from poolfuzz.harness.upstream.placeholders import StandInReached

__all__ = ["InvariantHit", "InvariantSignals", "LogicalClock", "SIGNALS", "CLOCK", "SWAKVPoolFake", "swa_kv_pool_class"]


class SWAKVPoolFake:
    """What ``SWATokenToKVPoolAllocator`` reads from its ``kvcache`` (an ``SWAKVPool`` upstream).

    The allocator registers its ``full_to_swa_index_mapping`` here (``allocator/swa.py:153``) and
    translates ``last_loc`` through it (``:264-265``); upstream's pool returns ``mapping[kv_indices]``,
    the trailing ``-1`` entry turning a ``last_loc`` of ``-1`` into ``-1``.  No KV buffers.  Made a
    subclass of the loaded ``BaseSWAKVPool`` by :func:`swa_kv_pool_class` (the allocator asserts it).
    """

    full_kv_pool: Any = None
    swa_kv_pool: Any = None
    swa_req_ring_size: int | None = None
    full_to_swa_index_mapping: torch.Tensor | None = None

    def register_mapping(self, full_to_swa_index_mapping: torch.Tensor) -> None:
        self.full_to_swa_index_mapping = full_to_swa_index_mapping

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        assert self.full_to_swa_index_mapping is not None, "the allocator registers its mapping at construction"
        return self.full_to_swa_index_mapping[kv_indices]

    def get_state_buf_infos(self) -> tuple[list[int], list[int], list[int]]:
        return [], [], []


def _no_kv_data(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise StandInReached("the SWA KV layout holds no KV data: a KV buffer was read on the memory path")


@functools.cache
def swa_kv_pool_class(base_swa_kv_pool: type) -> type:
    """:class:`SWAKVPoolFake` as a subclass of upstream's ``BaseSWAKVPool`` (one class per loaded base).

    ``BaseSWAKVPool`` is an abstract ``KVCache``: its constructor is skipped (no buffers are made)
    and every abstract buffer accessor refuses, so no code path may read KV data through it.
    """
    abstract: frozenset[str] = getattr(base_swa_kv_pool, "__abstractmethods__", frozenset())
    refusing = {name: _no_kv_data for name in abstract if not hasattr(SWAKVPoolFake, name)}
    namespace = {"__module__": __name__, "__init__": lambda self: None, **refusing}
    return type("SWAKVPoolFake", (SWAKVPoolFake, base_swa_kv_pool), namespace)


@dataclass(frozen=True)
class InvariantHit:
    """One failing upstream ``expect``: the invariant, its bucket, the message and how many elements failed."""

    name: str
    bucket: str
    message: str
    failures: int


@dataclass
class InvariantSignals:
    """Upstream ``expect`` calls that failed since the last :meth:`drain` (recorded, never raised).

    At most :attr:`limit` hits are kept (the oldest dropped): a target that never drains (the
    engine) must not grow without bound.
    """

    hits: list[InvariantHit] = field(default_factory=list)
    limit: int = 1024

    def record(self, inv: Any, value: torch.Tensor | None, msg: str) -> None:
        if value is not None and value.numel() > 0:
            failures = int((~inv.prop.ok(value)).sum())
            if failures:
                self.hits.append(InvariantHit(inv.name, inv.bucket.value, msg, failures))
                del self.hits[: -self.limit]

    def drain(self) -> list[InvariantHit]:
        hits, self.hits = self.hits, []
        return hits

    def instrument(self, invariants: ModuleType) -> None:
        """Replace ``invariants.expect`` with upstream's own, after recording whether the check held.

        Upstream's ``expect`` still decides what happens (its level, its ``recover``); this only
        adds the record, so behaviour is unchanged at every level.
        """
        upstream_expect: Callable[..., Any] = invariants.expect

        @functools.wraps(upstream_expect)
        def expect(inv: Any, value: torch.Tensor | None, *, msg: str = "") -> Any:
            self.record(inv, value, msg)
            return upstream_expect(inv, value, msg=msg)

        invariants.expect = expect  # type: ignore[attr-defined]


class LogicalClock:
    """Stands in for ``time`` inside the loaded ``radix_cache``: ``monotonic()`` ticks 1, 2, 3, ..."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)

    def monotonic(self) -> float:
        return float(next(self._ticks))

    @staticmethod
    def perf_counter() -> float:
        return time.perf_counter()

    def install(self, radix_cache: ModuleType) -> None:
        """``radix_cache``'s only clock is its module-level ``import time``."""
        vars(radix_cache)["time"] = self


SIGNALS = InvariantSignals()
"""The process's record of failing upstream ``expect`` calls (one loaded ``invariants`` module, one record)."""
CLOCK = LogicalClock()
"""The process's logical clock of the loaded ``radix_cache``."""

"""Machine for ``block_pool``: requests come and go the way vLLM's KV-cache manager moves them.

``reqs`` holds live request handles and ``finished`` the freed ones, from which
the double-free rule draws.  ``prefill`` is vLLM's path for a new request in one
rule (prefix lookup and touch, the caller's free-count check, allocation,
caching, and for a short request its finish); ``share`` touches cached blocks
by id, repeats included; the single-call rules (allocate, cache, free, slide,
evict, reset) interleave the same steps in any order.  Block ids are folded
onto the pool from small picks.  The free-count check a scheduler makes
before allocating is answered by the model, which every step has just compared
with the pool.  ``target()`` rewards full pools and the moments allocation and
the prefix cache meet (cached blocks reused, evictable blocks touched back),
where the ordering and ref-count bugs live.  Whether a call is valid is the
driver's decision; misuse rules sit behind ``misuse_allowed()``.
"""

from __future__ import annotations

from typing import Any, cast

from hypothesis import strategies as st
from hypothesis import target
from hypothesis.stateful import Bundle, consumes, initialize, multiple, precondition, rule

from harness.judge.drivers.block_pool import BlockPoolDriver
from harness.judge.models.block_pool import BlockPoolModel
from harness.machines.base import PoolMachine
from strategies.block_pool import block_counts, block_picks, block_pool_catalogue, block_pool_configs, prompts, raw_block_ids


class BlockPoolMachine(PoolMachine):
    family = "block_pool"
    catalogue = block_pool_catalogue()
    reqs = Bundle("reqs")
    finished = Bundle("finished")

    def __init__(self) -> None:
        super().__init__()
        self.just_misused = False

    @initialize(config=block_pool_configs())
    def init_pool(self, config: dict[str, Any]) -> None:
        self.start(config)

    @property
    def model(self) -> BlockPoolModel:
        return cast(BlockPoolDriver, self.driver).model

    def occupancy(self) -> float:
        """Share of the usable blocks in use, scaled down below four of them: a one-block pool is full
        after one allocation, and ``target()`` would otherwise spend the run on it."""
        usable = self.model.usable
        if not usable:
            return 0.0
        return (1.0 - self.model.num_free / usable) * min(1.0, usable / 4)

    def _fold(self, picks: list[int], onto: list[int]) -> list[int]:
        return [onto[pick % len(onto)] for pick in picks]

    def _some_cached(self) -> bool:
        return self.driver is not None and bool(self.model.hash_of)

    def evicts_a_cached_free_block(self, block_ids: list[int]) -> bool:
        """Whether ``evict(block_ids)`` names a free block that still has a hash (vLLM's scheduler never does)."""
        model = self.model
        return any(0 <= b < model.num_gpu_blocks and model.is_free(b) and b in model.hash_of for b in block_ids)

    def misuse_allowed(self) -> bool:
        """Misuse changes nothing, so never two in a row: alone in a swarm they would fill whole runs."""
        return self.misuse_enabled and not self.just_misused

    def misuse(self, op: str, **args: Any) -> Any:
        result = self.do(op, **args)
        self.just_misused = True
        return result

    def do(self, op: str, **args: Any) -> Any:
        self.just_misused = False
        return super().do(op, **args)

    def teardown(self) -> None:
        if self.driver is not None and not self.failed:
            pressure = cast(BlockPoolDriver, self.driver).cache_pressure
            target(float(pressure), label="cached blocks reused or touched back from the free queue")
        super().teardown()

    @rule(target=reqs, tokens=prompts(), finish=st.booleans())
    def prefill(self, tokens: list[int], finish: bool) -> Any:
        """vLLM's scheduling of a new request: hits touched, the rest allocated if they fit, full blocks
        cached; ``finish`` frees it at once (a short request), leaving its blocks cached and evictable."""
        handle = self.do("admit", tokens=tokens)
        if handle is None:
            return multiple()
        need = len(tokens) - len(self.model.requests[handle].table)
        if need <= self.model.num_free:
            self.do("allocate", handle=handle, num_blocks=need)
            if self.model.enable_caching:
                self.do("cache", handle=handle, num_full=len(tokens))
        if finish:
            self.do("free", handle=handle)
            return multiple()
        return handle

    @rule(handle=reqs, data=st.data())
    def allocate(self, handle: int, data: st.DataObject) -> None:
        """A few blocks, or exactly the free count (a full pool, where the next ask is the caller's to refuse)."""
        counts = block_counts(misuse=self.misuse_enabled)
        if self.model.num_free:
            counts = st.one_of(counts, st.just(self.model.num_free))
        self.do("allocate", handle=handle, num_blocks=data.draw(counts, label="num_blocks"))

    @rule(handle=reqs, num_full=st.integers(min_value=0, max_value=5))
    def cache(self, handle: int, num_full: int) -> None:
        self.do("cache", handle=handle, num_full=num_full)

    @rule(target=finished, handle=consumes(reqs))
    def free(self, handle: int) -> int:
        self.do("free", handle=handle)
        return handle

    @precondition(lambda self: self.misuse_allowed())
    @rule(handle=finished)
    def free_again(self, handle: int) -> None:
        self.misuse("free", handle=handle)

    @rule(handle=reqs, num_skipped=st.integers(min_value=1, max_value=4))
    def slide(self, handle: int, num_skipped: int) -> None:
        self.do("slide", handle=handle, num_skipped=num_skipped)

    @precondition(lambda self: self._some_cached())
    @rule(target=reqs, picks=block_picks(min_size=2), finish=st.booleans())
    def share(self, picks: list[int], finish: bool) -> Any:
        """A new request touching cached blocks by id, the evictable ones when there are any, repeats
        included (a block a sliding window revisits); ``finish`` frees it at once, as a short request does."""
        cached = sorted(self.model.hash_of)
        handle = self.do("touch", block_ids=self._fold(picks, [b for b in cached if self.model.is_free(b)] or cached))
        if handle is None:
            return multiple()
        if finish:
            self.do("free", handle=handle)
            return multiple()
        return handle

    @precondition(lambda self: self._some_cached())
    @rule(picks=block_picks())
    def evict(self, picks: list[int]) -> None:
        """Cached blocks, held (what vLLM's scheduler evicts after a failed KV load) or free."""
        self.do("evict", block_ids=self._fold(picks, sorted(self.model.hash_of)))

    @precondition(lambda self: self.misuse_allowed())
    @rule(target=reqs, call=st.sampled_from(["touch", "free_blocks", "evict"]), picks=block_picks(),
          raw=raw_block_ids())
    def misuse_by_id(self, call: str, picks: list[int], raw: list[int]) -> Any:
        """Name blocks by id where the contract forbids it: touch free uncached blocks, release blocks
        nobody holds that often, evict ids outside the pool (calls that turn out valid run as such)."""
        every = list(range(self.model.num_gpu_blocks))
        handle = self.misuse(call, block_ids=raw if call == "evict" else self._fold(picks, every))
        return handle if call == "touch" and handle is not None else multiple()

    @precondition(lambda self: self._some_cached() and self.model.usable - self.model.num_free <= 1)
    @rule()
    def reset(self) -> None:
        """Near the boundary only: with every block free (it succeeds) or one in use (it must refuse)."""
        self.do("reset")

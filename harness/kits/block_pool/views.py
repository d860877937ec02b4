"""The ``block_pool`` family's view: what its random moves and its catalogue may read of the pool."""

from __future__ import annotations

from poolfuzz.strategies.table import DriverView


class BlockPoolView(DriverView):
    """What the block-pool moves may read: requests (live, freed, their tables), the free count, cached blocks.

    Reads the driver's model, which every step has just compared with the pool, so it
    answers what a scheduler would ask the pool (``get_num_free_blocks``) and what it
    knows of its own requests.
    """

    __slots__ = ()

    @property
    def num_gpu_blocks(self) -> int:
        return int(self._driver.model.num_gpu_blocks)

    @property
    def usable(self) -> int:
        return int(self._driver.model.usable)

    @property
    def num_free(self) -> int:
        return int(self._driver.model.num_free)

    @property
    def enable_caching(self) -> bool:
        return bool(self._driver.model.enable_caching)

    def live(self) -> list[int]:
        """Handles of live requests, oldest first (the driver hands handles out in order)."""
        return [h for h, r in self._driver.model.requests.items() if r.live]

    def freed(self) -> list[int]:
        """Handles of freed requests, oldest first (a second free of one is misuse)."""
        return [h for h, r in self._driver.model.requests.items() if not r.live]

    def newest(self) -> int | None:
        """The handle of the request made last, live or not."""
        requests = self._driver.model.requests
        return next(reversed(requests)) if requests else None  # handles are handed out in order

    def is_live(self, handle: int) -> bool:
        request = self._driver.model.requests.get(handle)
        return request is not None and request.live

    def table(self, handle: int) -> list[int]:
        """The request's block ids (0 where a sliding window dropped one)."""
        return list(self._driver.model.requests[handle].table)

    def hashes(self, handle: int) -> list[int]:
        """The hashes of the request's full blocks."""
        return list(self._driver.model.requests[handle].hashes)

    def num_cached(self, handle: int) -> int:
        return int(self._driver.model.requests[handle].num_cached)

    def shape(self, handle: int) -> tuple[int, int, int]:
        """A request's blocks in its table, full blocks of its prompt and blocks cached."""
        request = self._driver.model.requests[handle]
        return len(request.table), len(request.hashes), request.num_cached

    def cached_blocks(self) -> list[int]:
        """Blocks holding a hash, in id order."""
        return sorted(self._driver.model.hash_of)

    def has_cached(self) -> bool:
        return bool(self._driver.model.hash_of)

    def is_free(self, block: int) -> bool:
        return bool(self._driver.model.is_free(block))

    def uncached_blocks(self) -> list[int]:
        """Blocks other than the null block holding no hash, in id order."""
        hash_of = self._driver.model.hash_of
        return [b for b in range(1, self.num_gpu_blocks) if b not in hash_of]

    def touchable(self) -> list[int]:
        """Blocks ``touch`` accepts: the null block, held blocks and cached free blocks."""
        return list(self._driver.model.touchable())

    def shared_hashes(self) -> list[list[int]]:
        """The blocks of every hash cached under more than one block."""
        return [list(blocks) for blocks in self._driver.model.cached.values() if len(blocks) > 1]

    def cache_misuse_ready(self, kind: str) -> bool:
        """Whether the state offers what ``cache_misuse(kind)`` needs."""
        return bool(self._driver.cache_misuse_ready(kind))

    def occupancy(self) -> float:
        """Share of the usable blocks in use, scaled down below four of them: a one-block pool is full
        after one allocation, and ``target()`` would otherwise spend the run on it."""
        usable = self.usable
        if not usable:
            return 0.0
        return (1.0 - self.num_free / usable) * min(1.0, usable / 4)

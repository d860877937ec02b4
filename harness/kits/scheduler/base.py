"""What the ``scheduler`` family's step parts share: the driver's pools, its model and the helpers over them.

:class:`SchedulerDriverBase` is the part of
:class:`~poolfuzz.harness.kits.scheduler.driver.SchedulerDriver` that the KV step
(:mod:`~poolfuzz.harness.kits.scheduler.kv`), the cache book
(:mod:`~poolfuzz.harness.kits.scheduler.cache`) and the window book
(:mod:`~poolfuzz.harness.kits.scheduler.swa`) read: they take it, never the full
driver, so imports point one way (the driver imports the parts, the parts import
this module) and no part reaches for the driver's operations.
"""

from __future__ import annotations

from typing import Any

import torch

from poolfuzz.harness.judge.driver import ConfigLike, Driver
from poolfuzz.harness.judge.invariants import check, check_unique
from poolfuzz.harness.kits.scheduler.cache_model import PrefixCacheModel
from poolfuzz.harness.kits.scheduler.config import SchedulerConfig
from poolfuzz.harness.kits.scheduler.model import SchedulerModel
from poolfuzz.pools.req_to_token import Req


class SchedulerDriverBase(Driver):
    """The pools a scheduler holds, the model of them, and the queries every step part makes.

    ``full`` is the allocator of the full-attention side: the KV allocator itself, or
    its ``full_attn_allocator`` with a sliding window.
    """

    config: SchedulerConfig

    def __init__(self, factory: Any, config: ConfigLike, **kwargs: Any) -> None:
        super().__init__(factory, config, **kwargs)
        c = self.config
        self.rows = self.pool.req_to_token_pool
        self.kv = self.pool.token_to_kv_pool_allocator
        self.hybrid = c.hybrid
        self.device = torch.device(c.device)
        self.ps = c.page_size
        self.max_len = c.max_context_len
        self.window = c.sliding_window or 0
        self.full: Any = self.kv.full_attn_allocator if self.window else self.kv
        """The allocator of the full-attention side (the only side without a window)."""
        cached = c.prefix_cache
        if cached and getattr(self.pool, "tree_cache", None) is None:
            raise ValueError("the config asks for a prefix cache but the target built none (tree_cache is None)")
        self.model = SchedulerModel(
            c.size,
            c.kv_pages,
            self.ps,
            c.mamba_size,
            self.hybrid,
            num_swa_pages=c.swa_pages if self.window else 0,
            cache=PrefixCacheModel(self.ps) if cached else None,
        )
        self.reqs: dict[int, Req] = {}

    def i64(self, values: list[int], device: torch.device | str | None = None) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=device or self.device)

    def free_pages(self, allocator: Any = None) -> list[int]:
        """Every free page of ``allocator`` (the full side by default), staged ones included."""
        return list((allocator or self.full).get_all_free_pages().tolist())

    def check_fresh(self, values: list[int], free: set[int], what: str, reserved: str) -> None:
        check_unique(values, "no-double-allocation", what)
        for value in values:
            check(value != 0, "reserved-never-handed-out", f"{what} handed out {reserved} 0")
            check(value in free, "no-double-allocation", f"{what} handed out {value}, which is not free")

    def sides(self) -> list[tuple[str, Any, set[int]]]:
        """``(name, allocator, the model's free pages)`` of each KV side a step allocates on."""
        sides = [("full", self.full, self.model.free_pages)]
        if self.window:
            sides.append(("SWA", self.kv.swa_attn_allocator, self.model.free_swa))
        return sides

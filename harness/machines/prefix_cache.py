"""The prefix-cache machine: requests, bare locks, inserts, matches and evictions over one radix cache.

Rules name holders by *picks* (indices into the eligible handles), resolved
against the driver before the step, so the trace stores concrete handles and
every step names a holder in the state it needs.  A reset clears everything, so
it comes at most once every :data:`RESET_EVERY` steps; live requests and bare locks
are capped, the oldest released first, so the pool keeps turning over.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from harness.judge.drivers.prefix_cache import PrefixCacheDriver
from harness.machines.base import PoolMachine
from strategies.prefix_cache import (
    HANDLE_ACTIONS,
    evict_counts,
    picks,
    prefix_cache_catalogue,
    prefix_cache_configs,
    prompts,
    tokens,
)

RESET_EVERY = 12
MAX_RUNNING = 3
MAX_LOCKS = 2


class PrefixCacheMachine(PoolMachine):
    family = "prefix_cache"
    audit_period = 4
    catalogue = prefix_cache_catalogue()
    def __init__(self) -> None:
        super().__init__()
        self.last_reset = 0

    @property
    def cache(self) -> PrefixCacheDriver:
        assert isinstance(self.driver, PrefixCacheDriver)
        return self.driver

    @initialize(config=prefix_cache_configs())
    def init_cache(self, config: dict[str, Any]) -> None:
        self.start(config)

    def occupancy(self) -> float:
        """Not steered: hill-climbing any one fill measure here (free pages, cached tokens) turned
        runs into long chains of inserts or of locks, and the canaries went unseen.  Eviction and
        refusals come from the small pools instead."""
        return 0.0

    def pick(self, which: int, **filters: Any) -> int:
        handles = self.cache.handles(**filters)
        return handles[which % len(handles)]

    def has(self, **filters: Any) -> bool:
        return bool(self.cache.handles(**filters))

    @rule(prompt=prompts())
    def request(self, prompt: list[int]) -> None:
        """Admit a request; at :data:`MAX_RUNNING` live ones the oldest finishes first, as a batch
        slot frees up (without the cap requests pile up and the pool only ever refuses)."""
        running = self.cache.handles(request=True)
        if len(running) >= MAX_RUNNING:
            self.do("finish", handle=running[0], cache=True)
        self.do("request", prompt=prompt)

    @precondition(lambda self: self.has(request=True))
    @rule(step=st.tuples(st.sampled_from(HANDLE_ACTIONS), picks(), tokens()))
    def step_request(self, step: tuple[str, int, list[int]]) -> None:
        """One step of a running request: generate tokens, checkpoint, or release it (cached or aborted).

        One rule of one argument rather than four rules: hypothesis filters every rule by
        its precondition and orders rules by argument count, so this keeps running
        requests as likely to move as new ones are to arrive.
        """
        action, which, generated = step
        handle = self.pick(which, request=True)
        if action == "extend":
            self.do("extend", handle=handle, tokens=generated)
        elif action == "checkpoint":
            self.do("checkpoint", handle=handle)
        else:
            self.do("finish", handle=handle, cache=action == "finish")

    @rule(prompt=prompts(empty=True))
    def lock(self, prompt: list[int]) -> None:
        """Lock a prefix for a waiting request; at :data:`MAX_LOCKS` bare locks the oldest is dropped first."""
        locks = self.cache.handles(request=False)
        if len(locks) >= MAX_LOCKS:
            self.do("unlock", handle=locks[0])
        self.do("lock", prompt=prompt)

    @precondition(lambda self: self.has(request=False))
    @rule(which=picks())
    def unlock(self, which: int) -> None:
        self.do("unlock", handle=self.pick(which, request=False))

    @rule(prompt=prompts(empty=True))
    def insert(self, prompt: list[int]) -> None:
        self.do("insert", prompt=prompt)

    @rule(prompt=prompts(empty=True))
    def match(self, prompt: list[int]) -> None:
        self.do("match", prompt=prompt)

    @rule(num_tokens=evict_counts())
    def evict(self, num_tokens: int) -> None:
        self.do("evict", num_tokens=num_tokens)

    @precondition(lambda self: self.cache.steps - self.last_reset >= RESET_EVERY)
    @rule()
    def reset(self) -> None:
        self.do("reset")
        self.last_reset = self.cache.steps

    # ------------------------------------------------------------ misuse
    @precondition(lambda self: self.misuse_enabled and bool(self.cache.unlocked_handles()))
    @rule(which=picks())
    def unlock_again(self, which: int) -> None:
        """A second unlock of a released holder, where the pool can tell (``unlocked_handles``)."""
        handles = self.cache.unlocked_handles()
        self.do("unlock", handle=handles[which % len(handles)])

    @precondition(lambda self: self.misuse_enabled)
    @rule(prompt=prompts(), extra=st.sampled_from([-1, 1, -3, 2]))
    def insert_mismatched(self, prompt: list[int], extra: int) -> None:
        self.do("insert_mismatched", prompt=prompt, extra=extra)

    @precondition(lambda self: self.misuse_enabled)
    @rule(prompt=prompts())
    def recache(self, prompt: list[int]) -> None:
        self.do("recache", prompt=prompt)

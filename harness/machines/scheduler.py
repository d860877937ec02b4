"""The scheduler machine: admit, prefill, decode, finish, retract, abort and clear over shared pools.

Rules name live requests by *picks* (indices into the eligible handles), which
the machine resolves against the model before calling the driver, so every
step is valid and the trace stores concrete handles.  The kernel the allocator
uses is part of the config: a machine can be pinned to one kernel (and to
hybrid or plain rows, a page size, or one KV mode: plain, ``prefix_cache`` or
``sliding_window``) with :func:`scheduler_machine`.  With the prefix cache on,
admissions carry token ids drawn from shared stems, so later requests hit what
earlier ones cached.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from harness.judge.drivers.scheduler import SchedulerDriver
from harness.machines.base import PoolMachine, make_machine
from pools.page_alloc import triton_available
from strategies.table import Move
from strategies.scheduler import (
    admissions,
    chunk_sizes,
    picks,
    prompt_batches,
    retract_keeps,
    scheduler_configs,
)

CLEAR_EVERY = 10
"""Steps between resets: a reset any time would keep the pools nearly empty."""


SCHEDULER_MALFORMED: tuple[dict[str, Any], ...] = (
    {"kv_pages": -1}, {"size": -1}, {"page_size": 0}, {"kernel": "gpu"},
    {"prefix_cache": True, "sliding_window": None, "eviction_policy": "newest"},
)
"""Scheduler configurations one of whose pools must refuse to be built."""


def _construct(overrides: dict[str, Any]) -> Any:
    return lambda driver, rng: ("construct", {"overrides": dict(overrides)})


class SchedulerMachine(PoolMachine):
    family = "scheduler"
    catalogue = tuple(Move(f"malformed constructor {c}", 0.02, _construct(c), misuse=True) for c in SCHEDULER_MALFORMED)
    audit_period = 4
    kernel: ClassVar[str | None] = None
    """Pinned allocator kernel; ``None`` draws one (interpreted Triton only when pinned, it is slow)."""
    hybrid: ClassVar[bool | None] = None
    page_size: ClassVar[int | None] = None
    mode: ClassVar[str | None] = None
    """Pinned KV mode (``strategies.scheduler.MODES``); ``None`` draws one."""

    def __init__(self) -> None:
        super().__init__()
        self.last_clear = 0

    @property
    def sched(self) -> SchedulerDriver:
        assert isinstance(self.driver, SchedulerDriver)
        return self.driver

    def kernels(self) -> tuple[str, ...]:
        if self.kernel is not None:
            return (self.kernel,)
        compiled_triton = self.device != "cpu" and triton_available()
        return ("loop", "vectorized", "triton") if compiled_triton else ("loop", "vectorized")

    @initialize(data=st.data())
    def init_pools(self, data: st.DataObject) -> None:
        config = scheduler_configs(kernels=self.kernels(), hybrid=self.hybrid, page_size=self.page_size, mode=self.mode)
        self.start(data.draw(config, label="config"))

    def occupancy(self) -> float:
        model = self.sched.model
        full = 1.0 - len(model.free_pages) / max(1, model.num_pages)
        return max(full, 1.0 - len(model.free_swa) / model.num_swa_pages) if model.num_swa_pages else full

    def eligible(self, **filters: Any) -> list[int]:
        return self.sched.model.handles(**filters)

    def choose(self, indices: list[int], **filters: Any) -> list[int]:
        handles = self.eligible(**filters)
        return list(dict.fromkeys(handles[i % len(handles)] for i in indices))

    def running(self) -> list[int]:
        return self.eligible(prefilling=False, max_length=self.sched.max_len)

    @rule(requests=admissions(), reserve_extra=st.integers(min_value=0, max_value=2), data=st.data())
    def admit(self, requests: list[list[int]], reserve_extra: int, data: st.DataObject) -> None:
        if self.sched.cache is None:
            self.do("admit", requests=requests, reserve_extra=reserve_extra)
            return
        prompts = data.draw(prompt_batches(), label="prompts")  # only with a cache: no entropy spent elsewhere
        tokens = [prompts[i % len(prompts)] for i in range(len(requests))]
        self.do("admit", requests=[[len(t), chunk] for t, (_, chunk) in zip(tokens, requests)],
                reserve_extra=reserve_extra, tokens=tokens)

    @precondition(lambda self: bool(self.eligible(prefilling=True)))
    @rule(which=picks(), chunk=chunk_sizes())
    def prefill(self, which: list[int], chunk: int) -> None:
        self.do("prefill", handles=self.choose(which, prefilling=True), chunk=chunk)

    @precondition(lambda self: bool(self.eligible(prefilling=True)))
    @rule(chunk=chunk_sizes())
    def prefill_all(self, chunk: int) -> None:
        """The scheduler's usual step: every chunked request continues by one chunk."""
        self.do("prefill", handles=self.eligible(prefilling=True), chunk=chunk)

    @precondition(lambda self: bool(self.running()))
    @rule(which=picks(), steps=st.integers(min_value=1, max_value=4))
    def decode(self, which: list[int], steps: int) -> None:
        for _ in range(steps):
            handles = [h for h in self.choose(which, prefilling=False) if h in self.running()]
            if handles:
                self.do("decode", handles=handles)

    @precondition(lambda self: bool(self.running()))
    @rule(steps=st.integers(min_value=1, max_value=4))
    def decode_all(self, steps: int) -> None:
        """The scheduler's usual step: the whole running batch decodes one token, ``steps`` times."""
        for _ in range(steps):
            if self.running():
                self.do("decode", handles=self.running())

    @precondition(lambda self: bool(self.eligible()))
    @rule(which=picks(max_size=3))
    def finish(self, which: list[int]) -> None:
        self.do("finish", handles=self.choose(which))

    @precondition(lambda self: bool(self.eligible()))
    @rule(which=st.integers(min_value=0, max_value=15), keep=retract_keeps())
    def retract(self, which: int, keep: int) -> None:
        handle = self.choose([which])[0]
        self.do("retract", handle=handle, keep=keep)

    @precondition(lambda self: bool(self.eligible()))
    @rule(which=st.integers(min_value=0, max_value=15))
    def abort(self, which: int) -> None:
        self.do("abort", handle=self.choose([which])[0])

    @precondition(lambda self: self.sched.steps - self.last_clear >= CLEAR_EVERY)
    @rule()
    def clear(self) -> None:
        self.do("clear")
        self.last_clear = self.sched.steps


def scheduler_machine(
    kernel: str | None = None, *, device: str = "cpu", hybrid: bool | None = None, page_size: int | None = None,
    mode: str | None = None, driver: type[SchedulerDriver] | None = None, spec: str | None = None,
    overrides: dict[str, str] | None = None,
) -> type[SchedulerMachine]:
    """A scheduler machine pinned to ``kernel`` (and ``hybrid``, ``page_size``, ``mode``), optionally with a driver variant."""
    base = make_machine("scheduler", spec, overrides=overrides, device=device)
    pins = f"kernel={kernel}, hybrid={hybrid}, page_size={page_size}, mode={mode}{', ' + driver.__name__ if driver else ''}"
    attrs = {"kernel": kernel, "hybrid": hybrid, "page_size": page_size, "mode": mode, "driver_class": driver,
             "__module__": base.__module__}
    label = f"{base.__name__}[{pins}]"
    return type(label, (base,), attrs)  # type: ignore[return-value]

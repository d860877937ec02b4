"""The scheduler machine's pinned variants: admit, prefill, decode, finish, retract, abort and clear over shared pools.

The family's machine is generated from its move table (:mod:`poolfuzz.harness.kits.scheduler.moves`,
:func:`poolfuzz.harness.machines.table.table_machine`).  :func:`scheduler_machine` builds the
same machine pinned to one kernel (and to hybrid or plain rows, a page size, or one
KV mode: plain, ``prefix_cache`` or ``sliding_window``), optionally over another
target or a driver variant: its table is :func:`~poolfuzz.harness.kits.scheduler.moves.scheduler_table`
with those pins, so the pinned keys are fixed and every other key is drawn as the
family's machine draws it.  The machine tests (``tests/test_scheduler_machine.py``)
and the mutation targets (the scheduler kit's ``variants``, :mod:`poolfuzz.harness.mutate.targets`) run these.
"""

from __future__ import annotations

from typing import Any

from poolfuzz.harness.kits.scheduler.driver import SchedulerDriver
from poolfuzz.harness.kits.scheduler.moves import KERNELS, scheduler_table
from poolfuzz.harness.machines.base import PoolMachine
from poolfuzz.harness.machines.table import make_machine
from poolfuzz.pools.page_alloc import triton_available


def scheduler_kernels(kernel: str | None, device: str) -> tuple[str, ...]:
    """The kernels a variant draws: the pinned one, else the CPU kernels, and compiled Triton off the CPU."""
    if kernel is not None:
        return (kernel,)
    return (*KERNELS, "triton") if device != "cpu" and triton_available() else KERNELS


def scheduler_machine(
    kernel: str | None = None,
    *,
    device: str = "cpu",
    hybrid: bool | None = None,
    page_size: int | None = None,
    mode: str | None = None,
    driver: type[SchedulerDriver] | None = None,
    spec: str | None = None,
    overrides: dict[str, str] | None = None,
) -> type[PoolMachine]:
    """A scheduler machine pinned to ``kernel`` (and ``hybrid``, ``page_size``, ``mode``), optionally with a driver variant."""
    base = make_machine("scheduler", spec, overrides=overrides, device=device)
    table = scheduler_table(kernels=scheduler_kernels(kernel, device), hybrid=hybrid, page_size=page_size, mode=mode)
    pins = f"kernel={kernel}, hybrid={hybrid}, page_size={page_size}, mode={mode}{', ' + driver.__name__ if driver else ''}"
    attrs: dict[str, Any] = {"table": table, "catalogue": table.catalogue, "driver_class": driver, "__module__": base.__module__}
    return type(f"{base.__name__}[{pins}]", (base,), attrs)

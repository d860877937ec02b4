"""Broken request-row pools for the nightly runner's tests (never in ``pools/``).

Each is a ``ReqToTokenPool`` with one planted defect: a bug the fuzz run must
report with a saved trace, or a crash it must survive.
"""

from __future__ import annotations

import ctypes
import resource
import time
from collections.abc import Iterable

from poolfuzz.pools.req_to_token import Req, ReqToTokenPool


class ForgetfulFree(ReqToTokenPool):
    """``free`` marks the row free but never puts it back on the free list: a leak.

    The audit's ``conservation`` check reports it within a few steps.
    """

    def free(self, req: Req) -> None:
        row = req.req_pool_idx
        super().free(req)
        self.free_slots.remove(row)  # type: ignore[arg-type]


class SegfaultOnFreeRows(ReqToTokenPool):
    """``free_rows`` dereferences NULL: the worker process dies of SIGSEGV, as a bad CUDA kernel would take it down."""

    def free_rows(self, indices: Iterable[int]) -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the test's working directory
        ctypes.string_at(0)


class SlowForgetfulFree(ForgetfulFree):
    """The same leak with every ``free`` taking 50 ms: shrinking it outlasts a budget of seconds."""

    def free(self, req: Req) -> None:
        time.sleep(0.05)
        super().free(req)


class CudaErrorOnFreeRows(ReqToTokenPool):
    """``free_rows`` fails the way a sticky CUDA error does, after which the process's context is unusable."""

    def free_rows(self, indices: Iterable[int]) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

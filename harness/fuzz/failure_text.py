"""How a worker words a failure that is not an invariant violation, and which ones end its process.

An error (a harness bug, a crashing pool, a health check) is reported with the exception
first, since the summary shows a failure's first line, then the tail of its traceback and
the steps that raised it.  A sticky CUDA error poisons every later CUDA call in the
process, so a worker that reports one ends and the parent starts another.
"""

from __future__ import annotations

import traceback

from poolfuzz.harness.judge.trace import Trace

FATAL_CUDA = ("CUDA error", "device-side assert", "illegal memory access", "cudaError", "CUBLAS_STATUS")
"""Messages of CUDA errors after which a process's CUDA context is unusable ("sticky" errors)."""

__all__ = ["FATAL_CUDA", "error_text", "poisons_cuda"]


def error_text(exc: BaseException, trace: Trace | None, steps_of: str) -> str:
    """The exception, the last frames of its traceback, and ``trace``'s steps (``steps_of``: whose they are)."""
    text = "".join(traceback.format_exception_only(exc)) + "".join(traceback.format_exception(exc)[-12:-1])
    return text + (f"steps of {steps_of}:\n{trace.steps_text()}\n" if trace is not None else "")


def poisons_cuda(message: str) -> bool:
    return any(marker in message for marker in FATAL_CUDA)

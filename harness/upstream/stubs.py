"""Stand-ins for the few SGLang helpers the allocator modules import.

Upstream ``paged.py`` imports four helpers from ``sglang.srt.utils``, the platform
object from ``sglang.srt.platforms`` and two Triton kernels from
``sglang.kernels.ops.memory.allocator``.  Importing the real ``sglang.srt.utils``
runs ``sglang/__init__.py`` and hundreds of modules, so these are written here from
their documented behaviour (sglang-pools.md sections 2.7, 2.9 and 7), not copied.

Where the allocator's behaviour depends on a helper, the stand-in reproduces
upstream's semantics exactly, *including its flaws*: :func:`get_num_new_pages`
counts a decode page with ``seq % page_size == 1``, which is 0 at page size 1.
These are upstream's semantics under test, not our fixed version
(``pools.page_alloc.counting``).

The kernels are real: on first launch :class:`LazyKernel` executes upstream's own
``kernels/ops/memory/allocator.py`` (it imports only torch and triton).  The
platform stub reports ``supports_triton=False``, as upstream's base platform does on
a CPU machine, so by default the torch ``alloc_*_naive`` path runs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

_PACKAGES = (
    "sglang",
    "sglang.srt",
    "sglang.srt.mem_cache",
    "sglang.srt.mem_cache.allocator",
    "sglang.kernels",
    "sglang.kernels.ops",
    "sglang.kernels.ops.memory",
)
_PRIVATE_KERNEL_MODULE = "harness.upstream._sglang_kernel_allocator"


# ------------------------------------------------------------ sglang.srt.utils
def get_num_new_pages(seq_lens: torch.Tensor, page_size: int, prefix_lens: torch.Tensor | None = None, decode: bool = False) -> int:
    """Pages a batch opens, as upstream 0.5.23 counts them (CPU tensors only, as upstream asserts).

    * decode: the number of requests with ``seq_len % page_size == 1``.  At page size 1
      that is never true, so upstream counts **0** pages for a decode step that needs one
      per request (sglang-pools.md section 3.5; our pools use ``(seq - 1) % ps == 0``).
    * extend: ``sum(ceil(seq / ps) - ceil(prefix / ps))``.
    """
    assert seq_lens.device.type == "cpu", "get_num_new_pages takes CPU tensors"
    if prefix_lens is None or decode:
        assert decode, "get_num_new_pages without prefix_lens is the decode count"
        return int(torch.count_nonzero(seq_lens % page_size == 1))
    assert prefix_lens.device.type == "cpu", "get_num_new_pages takes CPU tensors"
    pages_after = torch.div(seq_lens + page_size - 1, page_size, rounding_mode="floor")
    pages_before = torch.div(prefix_lens + page_size - 1, page_size, rounding_mode="floor")
    return int((pages_after - pages_before).sum())


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= ``n`` (1 for ``n <= 1``): the Triton launch's ``bs_upper``."""
    power = 1
    while power < n:
        power *= 2
    return power


def is_hip() -> bool:
    """True on a ROCm build of torch."""
    return torch.version.hip is not None


def get_bool_env_var(name: str, default: str = "false") -> bool:
    """``"true"``/``"1"`` (any case) is true; upstream also warns about other values, we do not."""
    return os.getenv(name, default).lower() in ("true", "1")


# --------------------------------------------------------------- the kernels
class LazyKernel:
    """Upstream's Triton kernel ``name``, loaded from the distribution on first launch.

    ``kernel[grid](*args)`` has the ``triton.jit`` launch syntax.  Nothing imports
    triton until a launch, which only happens when an adapter turns
    ``use_triton_kernels`` on (a CUDA device).
    """

    def __init__(self, name: str, kernel_file: Path) -> None:
        self.name = name
        self.kernel_file = kernel_file

    def __getitem__(self, grid: Any) -> Any:
        return getattr(load_kernel_module(self.kernel_file), self.name)[grid]


def load_kernel_module(kernel_file: Path) -> ModuleType:
    """Execute upstream's kernel file once, under a private module name."""
    module = sys.modules.get(_PRIVATE_KERNEL_MODULE)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(_PRIVATE_KERNEL_MODULE, kernel_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load upstream kernels from {kernel_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PRIVATE_KERNEL_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_PRIVATE_KERNEL_MODULE]
        raise
    return module


# ------------------------------------------------------------------- modules
def _module(name: str, **attrs: Any) -> ModuleType:
    module = ModuleType(name, "poolfuzz stand-in (harness.upstream.stubs)")
    module.__dict__.update(attrs)
    return module


def stub_modules(*, kernel_file: Path) -> dict[str, ModuleType]:
    """The ``sys.modules`` entries the four allocator files need while they execute.

    Packages get an empty ``__path__``: an import of any other SGLang module fails
    loudly instead of pulling in the real package.
    """
    modules = {name: _module(name, __path__=[]) for name in _PACKAGES}
    modules["sglang.srt.utils"] = _module(
        "sglang.srt.utils",
        get_num_new_pages=get_num_new_pages,
        next_power_of_2=next_power_of_2,
        is_hip=is_hip,
        get_bool_env_var=get_bool_env_var,
    )
    platform = SimpleNamespace(capabilities=SimpleNamespace(supports_triton=False))
    modules["sglang.srt.platforms"] = _module("sglang.srt.platforms", current_platform=platform)
    modules["sglang.kernels.ops.memory.allocator"] = _module(
        "sglang.kernels.ops.memory.allocator",
        alloc_extend_kernel=LazyKernel("alloc_extend_kernel", kernel_file),
        alloc_decode_kernel=LazyKernel("alloc_decode_kernel", kernel_file),
    )
    return modules

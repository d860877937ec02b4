"""The installed SGLang wheel's allocator files, loaded on a CPU without importing ``sglang``: for the
standalone reproductions beside this file, which import nothing from poolfuzz.

It runs ``mem_cache/allocator/{base,token,paged,swa}.py`` of the installed wheel under the few stand-ins
their imports need, with ``get_num_new_pages`` and ``next_power_of_2`` compiled from the wheel's own
``utils/common.py`` (page counting is part of what the reproductions test, so it is not rewritten), and
``allocator/mamba.py``, which imports only torch.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path

import torch

SRT = Path(importlib.util.find_spec("sglang").submodule_search_locations[0]) / "srt"  # type: ignore[union-attr,index]


def module(name: str, **attrs: object) -> types.ModuleType:
    made = types.ModuleType(name)
    made.__dict__.update(attrs)
    made.__path__ = []  # a package, so submodules resolve
    sys.modules[name] = made
    return made


def upstream_functions(path: Path, *names: str) -> dict[str, object]:
    """The named top-level functions of an upstream file, compiled from its own source."""
    tree = ast.parse(path.read_text())
    body: list[ast.stmt] = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    namespace: dict[str, object] = {"torch": torch, "Optional": __import__("typing").Optional}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in names}


def load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def build() -> tuple[types.SimpleNamespace, type]:
    """The wheel's allocator modules (``.base``, ``.token``, ``.paged``, ``.swa``) and the SWA kvcache stand-in."""
    common = upstream_functions(SRT / "utils" / "common.py", "get_num_new_pages", "next_power_of_2")
    for name in ("sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.srt", "sglang.srt.mem_cache",
                 "sglang.srt.mem_cache.allocator"):
        module(name)
    module("sglang.kernels.ops.memory")
    module("sglang.kernels.ops.memory.allocator", alloc_decode_kernel=None, alloc_extend_kernel=None,
           get_and_clear_swa_pages=None)  # Triton/CUDA kernels: the CPU path never calls them

    class Platform:
        class capabilities:  # upstream's attribute name
            supports_triton = False  # allocator/paged.py:155: the torch naive path, as on a CPU platform

        @staticmethod
        def get_paged_allocator_cls() -> None:
            return None

    module("sglang.srt.platforms", current_platform=Platform())
    module("sglang.srt.utils", is_npu=lambda: False, is_hip=lambda: False, get_bool_env_var=lambda *a, **k: False,
           **common)
    module("sglang.srt.utils.common", async_h2d=lambda args, *, dtype, device: torch.tensor(args, dtype=dtype).to(device),
           **common)
    module("sglang.srt.utils.invariants", Bucket=types.SimpleNamespace(FATAL_UNCONTAINABLE=0, GUARD=1),
           Invariant=lambda *a, **k: a[0], IsTrue=lambda: None, expect=lambda *a, **k: None)  # off, as by default

    class BaseSWAKVPool:  # what the allocator reads of its kvcache: the mapping it registers, no KV buffers
        full_kv_pool = swa_kv_pool = swa_req_ring_size = None
        full_to_swa_index_mapping: torch.Tensor | None = None

        def register_mapping(self, mapping: torch.Tensor) -> None:
            self.full_to_swa_index_mapping = mapping

        def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
            assert self.full_to_swa_index_mapping is not None
            return self.full_to_swa_index_mapping[kv_indices]

    module("sglang.srt.mem_cache.base_swa_memory_pool", BaseSWAKVPool=BaseSWAKVPool)
    allocator = SRT / "mem_cache" / "allocator"
    parts = {part: load(f"sglang.srt.mem_cache.allocator.{part}", allocator / f"{part}.py")
             for part in ("base", "token", "paged", "swa")}
    return types.SimpleNamespace(**parts), BaseSWAKVPool


def mamba_module() -> types.ModuleType:
    """The wheel's ``allocator/mamba.py`` (it imports only torch)."""
    return load("sglang_mamba_allocator", SRT / "mem_cache" / "allocator" / "mamba.py")

"""Standalone reproduction of upstream finding 3 (``swa-decode-keeps-one-side``), next to its traces.

SGLang 0.5.23 ``SWATokenToKVPoolAllocator.alloc_decode`` (page size > 1) allocates on the full side,
then on the SWA side, and returns ``None`` if either is short, keeping what the other side handed out:
``mem_cache/allocator/swa.py:430-465``.  This script imports nothing from poolfuzz: it runs the four
allocator files of the installed wheel (``allocator/{base,token,paged,swa}.py``) under the few
stand-ins their imports need, with ``get_num_new_pages`` and ``next_power_of_2`` taken from the
wheel's own ``utils/common.py`` (the page count is part of what is under test, so it is not rewritten).

    pip install --no-deps sglang==0.5.23 && python corpus/upstream/repro_swa_decode_keeps_one_side.py

It prints what happened and exits 1 when the leak reproduces, 0 when it does not.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from importlib import metadata
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


def build() -> tuple[type, type]:
    """Upstream's ``SWATokenToKVPoolAllocator`` and the kvcache stand-in it is built over."""
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
    for part in ("base", "token", "paged"):
        load(f"sglang.srt.mem_cache.allocator.{part}", allocator / f"{part}.py")
    swa = load("sglang.srt.mem_cache.allocator.swa", allocator / "swa.py")
    return swa.SWATokenToKVPoolAllocator, BaseSWAKVPool


def main() -> int:
    version = metadata.version("sglang")
    assert version == "0.5.23", f"this reproduces sglang 0.5.23; installed: {version}"
    allocator_class, kvcache_class = build()
    # Page size 2: 4 full slots (2 pages) and 2 SWA slots (1 page), as corpus/upstream/swa_kv-b02f42d838a427bf.json.
    pool = allocator_class(4, 2, 2, torch.float16, "cpu", kvcache_class(), False)

    def one(value: int) -> torch.Tensor:
        return torch.tensor([value], dtype=torch.int64)

    # A 2-token prompt: one page on each side, which fills the SWA side.
    first = pool.alloc_extend(one(0), one(0), one(2), one(2), one(-1), 2)
    full_before, swa_before = pool.full_available_size(), pool.swa_available_size()
    print(f"prompt got full slots {first.tolist()}; free before decode: full {full_before}, SWA {swa_before}")
    # Its decode step needs a new page on both sides; the SWA side has none.
    got = pool.alloc_decode(one(3), one(3), first[-1:].clone())
    full_after, swa_after = pool.full_available_size(), pool.swa_available_size()
    print(f"alloc_decode returned {got}; free after: full {full_after}, SWA {swa_after}")
    leaked = got is None and (full_after, swa_after) != (full_before, swa_before)
    print("REPRODUCED: a refused alloc_decode kept the full side's page, mapped to nothing" if leaked
          else "not reproduced")
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(main())

"""Standalone reproduction of upstream finding 3 (``swa-decode-keeps-one-side``), next to its traces.

SGLang 0.5.23 ``SWATokenToKVPoolAllocator.alloc_decode`` (page size > 1) allocates on the full side,
then on the SWA side, and returns ``None`` if either is short, keeping what the other side handed out:
``mem_cache/allocator/swa.py:430-465``.  This script imports nothing from poolfuzz: it runs the four
allocator files of the installed wheel (``allocator/{base,token,paged,swa}.py``) through
``_wheel_allocators.py`` beside it.

    pip install --no-deps sglang==0.5.23 && python corpus/upstream/repro_swa_decode_keeps_one_side.py

It prints what happened and exits 1 when the leak reproduces, 0 when it does not.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _wheel_allocators import build  # the sibling loader, on the path set above


def main() -> int:
    version = metadata.version("sglang")
    assert version == "0.5.23", f"this reproduces sglang 0.5.23; installed: {version}"
    allocator, kvcache_class = build()
    allocator_class = allocator.swa.SWATokenToKVPoolAllocator
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

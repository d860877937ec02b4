"""Standalone reproduction of upstream finding 1 (paged ``alloc_decode`` at page size 1), next to its traces.

SGLang 0.5.23 ``PagedTokenToKVPoolAllocator.alloc_decode`` counts a decode's new pages with
``get_num_new_pages(decode=True)``, which at page size 1 is always 0, so ``alloc_decode_naive`` returns
``last_loc + 1`` for every request and nothing leaves the free list.  This script imports nothing from
poolfuzz: it runs the wheel's ``allocator/{base,token,paged}.py`` through ``_wheel_allocators.py`` beside
it (``get_num_new_pages`` compiled from the wheel's own ``utils/common.py``).

    pip install --no-deps sglang==0.5.23 && python corpus/upstream/repro_paged_decode_page_size_1.py

The realistic trace (``docs/upstream-findings.md``): 4 slots, a 1-token prompt takes slot 1, another
allocation takes slot 2, and the prompt's decode step is handed slot 2 again.  It exits 1 when the
decode returns a live slot (reproduced), 0 when it does not.
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
    allocator, _ = build()
    pool = allocator.paged.PagedTokenToKVPoolAllocator(4, 1, torch.float16, "cpu", None, False)

    def one(value: int) -> torch.Tensor:
        return torch.tensor([value], dtype=torch.int64)

    prompt = pool.alloc_extend(one(0), one(0), one(1), one(1), one(-1), 1)  # a 1-token prompt
    other = pool.alloc(1)  # another request's slot
    print(f"prompt slot {prompt.tolist()}, other allocation {other.tolist()}, free {pool.free_pages.tolist()}")
    decoded = pool.alloc_decode(one(2), one(2), prompt[-1:].clone())  # the prompt's next token
    print(f"alloc_decode returned {decoded.tolist()}; free after {pool.free_pages.tolist()}")
    shared = bool(set(decoded.tolist()) & set(other.tolist()))
    print("REPRODUCED: the decode was handed a slot another allocation holds" if shared else "not reproduced")
    return 1 if shared else 0


if __name__ == "__main__":
    sys.exit(main())

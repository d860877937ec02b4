"""Standalone reproduction of upstream finding 2 (``MambaSlotAllocator.clear()`` inside an alloc window).

SGLang 0.5.23 ``MambaSlotAllocator.clear()`` rebuilds ``free_slots`` but keeps the open window's
reservation (``_alloc_iter``), so the next ``alloc`` takes the stale reservation while the free list
holds the same slot: two requests get one Mamba state slot.  This script imports nothing from poolfuzz:
it loads the wheel's ``allocator/mamba.py`` (which imports only torch) through ``_wheel_allocators.py``.

    pip install --no-deps sglang==0.5.23 && python corpus/upstream/repro_mamba_clear_in_window.py

It exits 1 when one slot is handed out twice (reproduced), 0 when it is not.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _wheel_allocators import mamba_module  # the sibling loader, on the path set above


def main() -> int:
    version = metadata.version("sglang")
    assert version == "0.5.23", f"this reproduces sglang 0.5.23; installed: {version}"
    pool = mamba_module().MambaSlotAllocator(3, torch.device("cpu"))
    pool.alloc_group_begin(1)  # the admission loop reserves a slot for one waiting request
    pool.clear()  # a flush inside the window
    first, second = pool.alloc(1), pool.alloc(1)
    print(f"after clear() inside the window: alloc(1) -> {first.tolist()}, alloc(1) -> {second.tolist()}")
    twice = bool(set(first.tolist()) & set(second.tolist()))
    print("REPRODUCED: one Mamba slot handed out twice" if twice else "not reproduced")
    return 1 if twice else 0


if __name__ == "__main__":
    sys.exit(main())

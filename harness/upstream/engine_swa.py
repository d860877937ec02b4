"""The KV layout object a hybrid-SWA engine loop hands ``SWATokenToKVPoolAllocator``, without KV data.

The allocator type-checks its ``kvcache`` as a ``BaseSWAKVPool`` and uses it for exactly two things
on the memory path: ``register_mapping`` (``allocator/swa.py:153``) and the full -> SWA translation
of ``last_loc`` (``:264-265``).  :class:`~harness.upstream.sglang_cache_stubs.SWAKVPoolFake` does both;
here it is made a subclass of the engine's real ``BaseSWAKVPool`` (an abstract ``KVCache``), whose
buffer accessors refuse: the engine target moves no KV data, so no code path may read it.
"""

from __future__ import annotations

from typing import Any

from harness.upstream.engine_loader import EngineModules
from harness.upstream.engine_placeholders import StandInReached
from harness.upstream.sglang_cache_stubs import SWAKVPoolFake


def _no_kv_data(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise StandInReached("the engine target holds no KV data: a KV buffer was read on the memory path")


def swa_kv_layout(modules: EngineModules) -> Any:
    """A fresh data-less ``BaseSWAKVPool`` for one allocator."""
    base = modules.base_swa_memory_pool.BaseSWAKVPool
    accessors = {name: _no_kv_data for name in ("get_key_buffer", "get_kv_buffer", "get_value_buffer", "set_kv_buffer")}
    layout = type("EngineSWAKVLayout", (SWAKVPoolFake, base), {"__init__": lambda self: None, **accessors})
    return layout()

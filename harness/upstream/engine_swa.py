"""The KV layout object a hybrid-SWA engine loop hands ``SWATokenToKVPoolAllocator``, without KV data.

The allocator type-checks its ``kvcache`` as a ``BaseSWAKVPool`` and uses it for exactly two things
on the memory path: ``register_mapping`` (``allocator/swa.py:153``) and the full -> SWA translation
of ``last_loc`` (``:264-265``).  :func:`~poolfuzz.harness.upstream.sglang_fakes.swa_kv_pool_class` does both,
as a subclass of the loaded ``BaseSWAKVPool`` (an abstract ``KVCache``) whose buffer accessors refuse:
the engine target moves no KV data, so no code path may read it.  The ``swa_kv`` target's allocators
get the same class.
"""

from __future__ import annotations

from typing import Any

from poolfuzz.harness.upstream.sglang_fakes import swa_kv_pool_class
from poolfuzz.harness.upstream.sglang_modules import EngineModules


def swa_kv_layout(modules: EngineModules) -> Any:
    """A fresh data-less ``BaseSWAKVPool`` for one allocator."""
    return swa_kv_pool_class(modules.base_swa_memory_pool.BaseSWAKVPool)()

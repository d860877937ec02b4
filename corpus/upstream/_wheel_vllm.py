"""The installed vLLM wheel's v1 scheduler, loaded on a CPU without importing ``vllm``: for the standalone
reproductions beside this file, which import nothing from poolfuzz.

It executes, from the wheel's own files, ``v1/core/`` (the schedulers in ``sched/``, ``KVCacheManager``, the
coordinator, the single-type managers, ``BlockPool``), ``v1/request.py``, ``v1/kv_cache_interface.py``,
``v1/kv_cache_spec_registry.py``, ``v1/kv_cache_layout.py``, ``v1/outputs.py``, ``v1/engine/__init__.py``,
``v1/hisparse/block_pool.py``, ``v1/metrics/stats.py`` and ``utils/math_utils.py``.  The modules those import whose
real files drag in pydantic, transformers, zmq, cbor2 or uvloop are answered by the small stand-ins below, written
for a one-rank CPU server with no KV connector, no grammar, no multimodal input and stats off; every other ``vllm``
module is a placeholder that lets a file import and refuses to be used once loading is over, so no run proceeds
on a dummy.  Needs torch, numpy and msgspec (vLLM's own dependencies).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import pickle
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec  # noqa: F401  (vLLM's own dependencies, imported before the finder answers any vllm name:
import numpy  # noqa: F401  torch's import inspects every module in sys.modules, placeholders included)
import torch  # noqa: F401

VLLM = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])  # type: ignore[union-attr,index]
"""The installed wheel's package folder (``find_spec`` of a top-level name locates it without importing it)."""

REAL = (
    "vllm.v1.core", "vllm.v1.request", "vllm.v1.kv_cache_interface", "vllm.v1.kv_cache_spec_registry",
    "vllm.v1.kv_cache_layout", "vllm.v1.outputs", "vllm.v1.engine", "vllm.v1.hisparse.block_pool",
    "vllm.v1.metrics.stats", "vllm.utils.math_utils",
)  # fmt: skip
"""Modules executed from the wheel's files (a name or any module under it)."""

_loading = [True]


class Refused(RuntimeError):
    """The scheduler used a module this loader does not execute: the reproduction would be running on a dummy."""


class Placeholder:
    """An attribute of a placeholder module: a base class, decorator or annotation at import, refused after."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self) -> Refused:
        return Refused(f"the scheduler used {self._name}, which this loader does not load")

    def __getattr__(self, name: str) -> Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not _loading[0]:
            raise self._refuse()
        return args[0] if len(args) == 1 and not kwargs and callable(args[0]) else Placeholder(f"{self._name}(...)")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __getitem__(self, key: Any) -> Placeholder:
        return self

    def __or__(self, other: Any) -> Placeholder:
        return self

    __ror__ = __or__

    def __bool__(self) -> bool:
        if not _loading[0]:
            raise self._refuse()
        return False


class ConstantList(Sequence[Any]):
    """``vllm.v1.utils.ConstantList``: a read-only view of a request's token list (v1/request.py:193-194)."""

    def __init__(self, x: list[Any]) -> None:
        self._x = x

    def __getitem__(self, item: Any) -> Any:
        return self._x[item]

    def __len__(self) -> int:
        return len(self._x)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._x)

    def copy(self) -> list[Any]:
        return self._x.copy()


class Strict:
    """A configuration object holding exactly the given fields; reading another raises, naming it."""

    def __init__(self, what: str, **fields: Any) -> None:
        self.__dict__["_what"] = what
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise Refused(f"the scheduler read {self._what}.{name}, which this reproduction does not set")


class NoGrammar:
    """``StructuredOutputManager`` with no grammar: tokens pass through (scheduler.py:2432, :2879, :2907)."""

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return True

    def validate_tokens(self, request_id: str, tokens: list[int]) -> list[int]:
        return tokens

    def grammar_bitmask(self, *args: Any, **kwargs: Any) -> None:
        return None


class _NullPublisher:
    def publish(self, batch: Any) -> None:
        return None

    def shutdown(self) -> None:
        return None


class _Platform:
    def is_xpu(self) -> bool:  # async_scheduler.py:21
        return False

    def register_custom_kv_cache_specs(self, vllm_config: Any) -> None:  # single_type_kv_cache_manager.py
        return None


def sha256(value: Any) -> bytes:
    """``vllm.utils.hashing.sha256``: SHA-256 of the pickled value (its module imports cbor2)."""
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _no_multimodal(features: list[Any], *args: Any, **kwargs: Any) -> list[Any]:
    if features:
        raise Refused("multimodal inputs are not reproduced")
    return features


STAND_INS: dict[str, dict[str, Any]] = {
    "vllm.logger": {"init_logger": logging.getLogger},
    "vllm.envs": {"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": True, "VLLM_XPU_PP_MICROBATCH": False,
                  "VLLM_COMPUTE_NANS_IN_LOGITS": False},  # vllm/envs.py's defaults
    "vllm.distributed.kv_events": {"MEDIUM_GPU": "GPU", "MEDIUM_CPU": "CPU",
                                   "EventPublisherFactory": types.SimpleNamespace(create=lambda *a, **k: _NullPublisher())},
    "vllm.utils": {"length_from_prompt_token_ids_or_embeds": lambda ids, embeds: len(ids if ids is not None else embeds)},
    "vllm.utils.hashing": {"sha256": sha256},
    "vllm.utils.torch_utils": {"PIN_MEMORY": False,
                               "get_dtype_size": lambda dtype: torch.tensor([], dtype=dtype).element_size()},
    "vllm.v1.utils": {"ConstantList": ConstantList, "record_function_or_nullcontext": lambda name: contextlib.nullcontext()},
    "vllm.v1.structured_output": {"StructuredOutputManager": NoGrammar},
    "vllm.v1.structured_output.request": {
        "StructuredOutputRequest": types.SimpleNamespace(from_sampling_params=lambda params: None)},
    "vllm.config": {"get_current_vllm_config_or_none": lambda: None},
    "vllm.multimodal.utils": {"strip_covered_mm_data": _no_multimodal},
    "vllm.platforms": {"current_platform": _Platform()},
}  # fmt: skip
"""Module -> the names it answers; any other name of it is a :class:`Placeholder`."""


def _real(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in REAL)


def _module_attr(module: str, attr: str) -> Any:
    child = f"{module}.{attr}"
    if child in STAND_INS or _real(child) or any(prefix.startswith(child + ".") for prefix in REAL):
        return importlib.import_module(child)  # a submodule, not a placeholder for it
    return Placeholder(child)


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__dict__.update(STAND_INS.get(spec.name, {}))
        module.__path__ = []  # a package: its submodules come from the finder too
        module.__file__ = f"<{spec.name}: a stand-in of _wheel_vllm.py>"
        module.__getattr__ = lambda attr: _module_attr(spec.name, attr)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "vllm" and not name.startswith("vllm."):
            return None
        if _real(name):
            where = VLLM.joinpath(*name.split(".")[1:])
            if (where / "__init__.py").is_file():
                return importlib.util.spec_from_file_location(name, where / "__init__.py", submodule_search_locations=[str(where)])
            if where.with_suffix(".py").is_file():
                return importlib.util.spec_from_file_location(name, where.with_suffix(".py"))
            raise ImportError(f"{name} is not a file of the installed vLLM ({where}.py)")
        return importlib.machinery.ModuleSpec(name, _StandInLoader(), is_package=True)


def load() -> dict[str, types.ModuleType]:
    """The wheel's scheduler modules by short name (``v1.core.sched.scheduler``, ...); placeholders refuse use after."""
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        raise RuntimeError("vllm is already imported in this process; run the reproduction on its own")
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    try:
        names = ("v1.core.sched.scheduler", "v1.core.sched.async_scheduler", "v1.core.kv_cache_utils",
                 "v1.kv_cache_interface", "v1.outputs", "v1.request")  # fmt: skip
        loaded = {name: importlib.import_module(f"vllm.{name}") for name in names}
    finally:
        sys.meta_path.remove(finder)
        _loading[0] = False
    return loaded

"""The one loader (harness/upstream/loading.py): one identity per upstream class, present only while upstream runs.

Every upstream target loads through one finder per distribution, so a class SGLang's SWA allocator
composes is the very class the ``token_kv`` target fuzzes and the engine schedules over; the old
hand-stub loaders executed the same files twice, forking the classes.  These tests load every
target in one process and compare identities, and check that upstream's call-time imports find the
loaded modules inside a window and leave nothing in ``sys.modules`` after it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from poolfuzz.harness.judge.families import load_factory
from poolfuzz.harness.upstream.loading import Distribution, LoadedCopy, StandInFactory
from poolfuzz.harness.upstream.placeholders import StandInReached
from poolfuzz.harness.upstream.sglang_files import sglang_copy
from poolfuzz.harness.upstream.sglang_modules import load_engine, load_sglang_cache, load_upstream, unavailable_reason
from poolfuzz.harness.upstream.sources import SourceFolder
from poolfuzz.harness.upstream.vllm_files import load_vllm, vllm_unavailable_reason

ENGINE_MISSING = unavailable_reason("Engine")
needs_sglang = pytest.mark.skipif(ENGINE_MISSING is not None, reason=f"upstream SGLang unavailable: {ENGINE_MISSING}")
VLLM_MISSING = vllm_unavailable_reason()
needs_vllm = pytest.mark.skipif(VLLM_MISSING is not None, reason=f"upstream vLLM unavailable: {VLLM_MISSING}")


def _leftovers() -> list[str]:
    return [name for name in sys.modules if name.split(".")[0] in ("sglang", "vllm")]


@needs_sglang
def test_every_sglang_target_shares_one_class_per_upstream_class() -> None:
    allocators = load_upstream()
    caches = load_sglang_cache()
    engine = load_engine()
    assert engine.token is allocators.token and engine.paged is allocators.paged
    assert caches.radix_cache is engine.radix_cache and caches.swa is engine.swa_allocator
    swa = load_factory("poolfuzz.harness.upstream:SWAKV")(size=16, size_swa=16, page_size=4)
    assert type(swa.inner.full_attn_allocator) is allocators.paged.PagedTokenToKVPoolAllocator
    token = load_factory("poolfuzz.harness.upstream:TokenKV")(size=8)
    assert type(token.inner) is engine.token.TokenToKVPoolAllocator
    radix = load_factory("poolfuzz.harness.upstream:RadixCache")(size=8, page_size=1)
    assert type(radix.inner) is engine.radix_cache.RadixCache
    assert _leftovers() == []


@needs_sglang
def test_a_call_time_import_inside_the_window_finds_the_loaded_module_and_leaves_nothing_behind() -> None:
    token = load_upstream().token
    with sglang_copy().active():
        assert importlib.import_module("sglang.srt.mem_cache.allocator.token") is token
        assert sys.modules["sglang"] is sglang_copy().namespace["sglang"]
        with sglang_copy().active():  # reentrant: an upstream call inside another
            from sglang.srt.mem_cache.common import release_kv_cache  # noqa: F401  (a call-time import, as upstream's)
    assert _leftovers() == []


@needs_sglang
def test_a_wrapper_call_runs_inside_the_window() -> None:
    seen: list[bool] = []
    token = load_factory("poolfuzz.harness.upstream:TokenKV")(size=8)
    original = type(token.inner).alloc

    def alloc(self: object, need_size: int) -> object:  # an upstream method that imports at call time
        seen.append(importlib.import_module("sglang.srt.mem_cache.allocator.token") is load_upstream().token)
        return original(self, need_size)

    token.inner.alloc = alloc.__get__(token.inner)
    assert token.alloc(2) is not None
    assert seen == [True] and _leftovers() == []


@needs_sglang
def test_a_module_nobody_declared_is_a_placeholder_that_refuses_use() -> None:
    copy = sglang_copy()
    with copy.active():
        module = importlib.import_module("sglang.srt.layers.some_kernel_poolfuzz_never_loads")
    assert "sglang.srt.layers.some_kernel_poolfuzz_never_loads" in copy.placeholders
    with pytest.raises(StandInReached, match="some_kernel_poolfuzz_never_loads.launch"):
        module.launch()


@needs_vllm
def test_vllm_block_pool_classes_are_the_ones_the_block_pool_target_drives() -> None:
    modules = load_vllm()
    pool = load_factory("poolfuzz.harness.upstream:VllmBlockPool")(num_gpu_blocks=4)
    assert type(pool.inner) is modules.block_pool.BlockPool
    assert _leftovers() == []


def _toy_copy(site: Path, name: str, top: str, files: dict[str, str], stand_ins: dict[str, StandInFactory]) -> LoadedCopy:
    """A plug-in's distribution ``name`` under ``site``: its package top ``top``, its ``core`` package's ``files``, and
    ``core`` declared real."""
    (site / name / "core").mkdir(parents=True)
    (site / name / "__init__.py").write_text(top)
    (site / name / "core" / "__init__.py").write_text("")
    for file, text in files.items():
        (site / name / "core" / file).write_text(text)
    toy = Distribution(
        name=name,
        title="Toy",
        supported="1.0",
        env=f"POOLFUZZ_{name.upper()}_SRC",
        probe="core",
        real=(f"{name}.core",),
        stand_ins=lambda: stand_ins,
    )
    return LoadedCopy(toy, SourceFolder(name, "1.0", site, "test"))


def test_a_distribution_a_plug_in_declares_loads_its_own_files_under_the_same_rules(tmp_path: Path) -> None:
    pool_file = (
        "from toyengine.metrics import counter\nfrom toyengine.helpers import double\n\nclass Pool:\n"
        "    def size(self):\n        return double(2)\n\n    def observe(self):\n        counter.inc()\n"
    )
    copy = _toy_copy(
        tmp_path / "site",
        "toyengine",
        "raise ImportError('a heavy package top that must not run')\n",
        {"pool.py": pool_file},
        {"toyengine.helpers": _helpers},
    )
    loaded, problems = copy.load(["toyengine.core.pool"])
    assert problems == {}
    pool = loaded["toyengine.core.pool"].Pool()
    assert pool.size() == 4  # the explicit stand-in runs
    with pytest.raises(StandInReached, match="toyengine.metrics.counter"):
        pool.observe()  # the placeholder refuses
    assert [name for name in sys.modules if name.startswith("toyengine")] == []


def _helpers(name: str) -> ModuleType:
    module = ModuleType(name)
    module.double = lambda x: 2 * x  # type: ignore[attr-defined]
    return module


def test_a_torch_compile_decorator_in_an_upstream_file_leaves_its_function_eager_and_torch_as_it_was(tmp_path: Path) -> None:
    import torch

    ops_file = "import torch\n\n@torch.compile(dynamic=True)\ndef twice(x):\n    return 2 * x\n\n@torch.compile\ndef thrice(x):\n    return 3 * x\n"
    copy = _toy_copy(tmp_path / "site", "toycompiled", "", {"ops.py": ops_file}, {})
    compile_before = torch.compile
    loaded, problems = copy.load(["toycompiled.core.ops"])
    assert problems == {}
    ops = loaded["toycompiled.core.ops"]
    assert ops.twice.__code__.co_filename.endswith("ops.py") and ops.twice(4) == 8  # the function as written, not a wrapper
    assert ops.thrice.__code__.co_filename.endswith("ops.py") and ops.thrice(4) == 12
    assert torch.compile is compile_before

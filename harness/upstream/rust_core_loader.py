"""Load the Rust TreeCore shipped in the SGLang wheel (``mem_cache/rust_tree_core/mem_cache*.so``).

The core of the default ``UnifiedRadixCache``, driven by the ``RustTreeCore`` prefix-cache target
for its full-attention component.  The extension is a self-contained PyO3 module linking only
libtorch's CPU libraries; it is loaded from its file under a private module name, so no ``sglang``
name is left behind, and its Python API is checked against every member the wrapper uses.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from poolfuzz.harness.upstream.sglang_files import SOURCE_ENV, locate_sglang
from poolfuzz.harness.upstream.sources import SourceFolder, UpstreamUnavailableError, refusal

_lock = threading.Lock()

_RUST_FOLDER = "rust_tree_core"
_RUST_LEAF = "mem_cache"  # the extension's PyInit_ symbol fixes the last name component
_RUST_MODULE = f"poolfuzz.harness.upstream._sglang_rust_tree_core.{_RUST_LEAF}"
_RUST_SURFACE: dict[str, tuple[str, ...]] = {
    "TreeCoreInitParamsBinding": ("eviction_policy", "page_size", "device"),
    "RustUnifiedTreeCoreBinding": (
        "insert",
        "match_prefix",
        "inc_lock_ref",
        "dec_lock_ref",
        "collect_full_device_indices",
        "is_full_device_evicted",
        "evict_device_start",
        "evict_device_next_node",
        "evict_device_leaf",
        "evict_device_end",
        "evictable_size",
        "protected_size",
        "total_size",
        "reset",
        "root_node_handle",
        "sanity_check",
    ),
    "InsertParamsBinding": ("key", "value", "prev_prefix_len", "inserted_len"),
    "MatchParamsBinding": ("key", "extra_key"),
    "DecLockRefParamsBinding": ("node_id", "skipped_lock_components", "component_lock_uuids", "component_host_lock_uuids"),
    "IncLockRefResultBinding": ("delta", "node_id", "skipped_lock_components", "component_lock_uuids", "component_host_lock_uuids"),
    "MatchResultBinding": ("last_device_node_id", "device_prefix_len"),
    "InsertResultBinding": ("prefix_len", "cache_actions", "last_device_node"),
    "EvictDeviceNextNodeResultBinding": ("node_id", "made_progress", "tracker", "new_device_frees", "cache_actions"),
    "EvictDeviceLeafResultBinding": ("tracker", "new_device_frees", "cache_actions"),
}
"""Every binding class, method and field :class:`RustTreeCoreBindings` and ``rust_core_adapter`` use (0.5.23's API).

PyO3 exposes fields and methods as class attributes, so a binding that renamed or dropped one is refused at
load, naming it, instead of failing mid-run (0.5.22's eviction results have no ``cache_actions``)."""

FULL = 0
"""``ComponentType.FULL``: the component id the Rust binding takes and reports."""


# ----------------------------------------------------------------- Rust TreeCore
@dataclass(frozen=True)
class RustTreeCoreBindings:
    """The loaded ``mem_cache`` extension and where it came from."""

    path: Path
    module: ModuleType
    torch_version: str

    def new_core(self, page_size: int, eviction_policy: str = "lru") -> Any:
        """``RustUnifiedTreeCoreBinding`` with the full-attention component only, on CPU, no HiCache, no events."""
        params = self.module.TreeCoreInitParamsBinding(eviction_policy=eviction_policy, page_size=page_size, device="cpu")
        return self.module.RustUnifiedTreeCoreBinding(params, [FULL])

    def key(self, tokens: Iterable[int]) -> array:
        """A binding key: an int64 ``array`` (a list is a ``TypeError``, ``array('i')`` a ``BufferError``)."""
        return array("q", tokens)

    def insert_params(self, tokens: Iterable[int], value: torch.Tensor, **optional: Any) -> Any:
        return self.module.InsertParamsBinding(key=self.key(tokens), value=value, **optional)

    def match_params(self, tokens: Iterable[int], extra_key: str | None = None) -> Any:
        return self.module.MatchParamsBinding(key=self.key(tokens), extra_key=extra_key)

    def dec_params(self, receipt: Any) -> Any:
        """The release receipt for an ``inc_lock_ref`` result (upstream's ``to_dec_params``)."""
        return self.module.DecLockRefParamsBinding(
            node_id=receipt.node_id,
            skipped_lock_components=list(receipt.skipped_lock_components),
            component_lock_uuids=dict(receipt.component_lock_uuids),
            component_host_lock_uuids=dict(receipt.component_host_lock_uuids),
        )


_rust_loaded: RustTreeCoreBindings | None = None
_rust_key: str | None = None
"""The ``POOLFUZZ_SGLANG_SRC`` value :data:`_rust_loaded` was loaded under (``None``: the installed copy)."""


def locate_rust_tree_core() -> Path:
    """The extension file of :func:`~poolfuzz.harness.upstream.sglang_files.locate_sglang`'s copy, or :class:`UpstreamUnavailableError`."""
    source = locate_sglang()
    folder = source.package / "srt/mem_cache" / _RUST_FOLDER
    candidates = [folder / f"{_RUST_LEAF}{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if not folder.is_dir():
        raise UpstreamUnavailableError(f"{source.label}: srt/mem_cache/ has no {_RUST_FOLDER}/ (no Rust TreeCore in that version)")
    raise UpstreamUnavailableError(
        f"{source.label} has no Rust TreeCore for this interpreter: none of "
        f"{', '.join(c.name for c in candidates)} in {folder} (the wheel ships it for CPython 3.11 on x86_64 Linux; "
        f"a source checkout builds it with cargo)"
    )


def pinned_torch(source: SourceFolder) -> str | None:
    """The ``torch==X`` the copy's wheel metadata pins (what its Rust extension was built against), or ``None``."""
    for metadata in sorted(source.site.glob(f"{source.distribution}-*.dist-info/METADATA")):
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            requirement = line.removeprefix("Requires-Dist:").strip()
            if line.startswith("Requires-Dist:") and requirement.startswith("torch=="):
                return requirement.removeprefix("torch==").split(";")[0].strip()
    return None


def rust_surface_missing(module: ModuleType) -> list[str]:
    """``Class`` or ``Class.member`` names of :data:`_RUST_SURFACE` that ``module`` (a loaded binding) lacks."""
    missing: list[str] = []
    for class_name, members in _RUST_SURFACE.items():
        cls = getattr(module, class_name, None)
        if cls is None:
            missing.append(class_name)
            continue
        missing.extend(f"{class_name}.{member}" for member in members if not hasattr(cls, member))
    return missing


def load_rust_tree_core() -> RustTreeCoreBindings:
    """Load (once per process and source) the Rust TreeCore extension of the ``sglang`` copy in use.

    torch is imported first, as upstream's ``rust_tree_core/extension.py`` does: the extension's
    RUNPATH (``$ORIGIN/../../../../torch/lib``) finds libtorch only in a site-packages layout,
    and an already loaded libtorch satisfies it anywhere else (an unzipped wheel, a checkout).
    """
    global _rust_loaded, _rust_key
    key = os.environ.get(SOURCE_ENV) or None
    with _lock:
        if _rust_loaded is not None and _rust_key == key:
            return _rust_loaded
        path = locate_rust_tree_core()
        spec = importlib.util.spec_from_file_location(_RUST_MODULE, path)
        if spec is None or spec.loader is None:
            raise UpstreamUnavailableError(f"cannot build an import spec for {path}")
        try:  # an extension is dlopen()ed by module_from_spec: unresolved torch symbols fail there
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except (ImportError, OSError) as exc:
            try:
                source: SourceFolder | None = locate_sglang()
            except UpstreamUnavailableError:
                source = None
            pin = pinned_torch(source) if source is not None else None
            built = (
                f"sglang {source.version} pins torch {pin}"
                if source is not None and pin
                else "sglang 0.5.23 pins torch 2.14.1 and supports 2.11-2.14"
            )
            raise UpstreamUnavailableError(
                f"the Rust TreeCore at {path} does not load against torch {torch.__version__} "
                f"({type(exc).__name__}: {' '.join(str(exc).split())}); {built}"
            ) from exc
        missing = rust_surface_missing(module)
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            raise UpstreamUnavailableError(
                f"{locate_sglang().label}: the Rust TreeCore binding has no {shown} (its Python API changed since 0.5.23)"
            )
        _rust_loaded = RustTreeCoreBindings(path=path, module=module, torch_version=torch.__version__)
        _rust_key = key
        return _rust_loaded


def rust_tree_core_unavailable_reason() -> str | None:
    """Why :func:`load_rust_tree_core` would fail, or ``None`` (for test skips)."""
    return refusal(load_rust_tree_core)


@dataclass
class RustEviction:
    """What one full-attention eviction walk did: tokens evicted, victim node ids in order, freed KV indices."""

    evicted: int = 0
    victims: list[int] = field(default_factory=list)
    freed: list[torch.Tensor] = field(default_factory=list)

    def absorb(self, step: Any) -> None:
        self.evicted += int(step.tracker.get(FULL, 0))
        self.freed.extend(step.new_device_frees.get(FULL, ()))
        self.freed.extend(freed_by_actions(step.cache_actions))


def freed_by_actions(actions: Sequence[tuple[Any, ...]]) -> list[torch.Tensor]:
    """KV indices a binding result's tagged ``cache_actions`` tell the caller to free.

    Upstream applies ``("free_device_kv", [tensors])`` with
    ``allocator.free_segment(t, start_pos=0)`` per tensor; FULL-only trees emit no other tag
    that frees device KV.
    """
    return [tensor for action in actions if action[0] == "free_device_kv" for tensor in action[1]]


def rust_evict_full(core: Any, num_tokens: int) -> RustEviction:
    """Run upstream's step-wise device eviction for FULL, as ``UnifiedRadixCache._evict_components`` does.

    ``evict_device_start`` -> (``evict_device_next_node`` -> ``evict_device_leaf``)* ->
    ``evict_device_end``; a ``None`` node with ``made_progress`` continues the walk.  The
    caller frees :attr:`RustEviction.freed` (upstream: ``free_segment(t, start_pos=0)``).
    """
    eviction = RustEviction()
    tracker = {FULL: 0}
    core.evict_device_start(FULL, num_tokens)
    try:
        while True:
            step = core.evict_device_next_node(FULL, tracker)
            eviction.absorb(step)
            tracker[FULL] = eviction.evicted
            if step.node_id is None:
                if not step.made_progress:
                    break
                continue
            eviction.victims.append(step.node_id)
            eviction.absorb(core.evict_device_leaf(step.node_id))
            tracker[FULL] = eviction.evicted
    finally:
        core.evict_device_end(FULL)
    return eviction

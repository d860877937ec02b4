"""Families and their implementations: which pool class each machine fuzzes.

Every family has a default implementation in :mod:`pools`.  ``FAMILY=module:attr``
swaps in any callable with the same constructor signature: that is how a user
fuzzes their own pool, and how canaries prove the harness has teeth.  The same
substitution is read from the ``--target`` CLI option, the pytest ``--target``
option and the ``POOLFUZZ_TARGETS`` environment variable (``;``-separated).

A target that does not validate its input (upstream SGLang, for one) sets the
attribute ``poolfuzz_check_misuse = False``; its machines then issue valid calls only.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.judge.limits import FamilyLimits, register_limits
from harness.judge.plugins import plugin_families


class UnknownTargetError(LookupError):
    """A family name or ``module:attr`` spec that does not resolve."""


@dataclass(frozen=True, kw_only=True)
class Family:
    """One pool family's kit: everything the harness needs to fuzz, replay, bench and check it.

    Every reference is a ``module:attr`` (or module) string, resolved only when used,
    so this registry imports nothing above the judge and a family whose optional
    dependency is missing still lists.  Adding a family is one entry here plus the
    modules it names (``docs/adding-a-family.md``); a package outside this repository
    adds one through the ``poolfuzz.families`` entry point (:mod:`harness.judge.plugins`).
    """

    name: str
    summary: str
    default: str
    """The pool factory fuzzed when no ``--target`` substitutes another."""
    driver: str
    """The :class:`~harness.judge.drivers.base.Driver` subclass that judges each step."""
    moves: str
    """The family's :class:`~strategies.table.MoveTable` (or a function returning it): its hypothesis machine,
    walk and bench workload are generated from it, so each input is declared once."""
    bench_config: tuple[tuple[str, Any], ...] = ()
    """The pool configuration the bench workload runs on, as ``(key, value)`` pairs."""
    canaries: tuple[str, ...] = ()
    """Modules whose ``CANARIES`` dicts plant this family's historical bugs (a module may serve several)."""
    upstream: tuple[str, ...] = ()
    """Target specs of upstream implementations of this family (``harness.upstream``)."""
    invariants: tuple[str, ...] = ()
    """The invariant ids this family's driver checks (``harness list`` shows them)."""
    protocol: str = ""
    """The ``typing.Protocol`` (``pools.protocols``) a pool class of this family satisfies: a
    substitute class lacking one of its methods is refused before anything is built."""
    device_path: bool = False
    """Whether the machine tests also run this family with the pools' device-path checks forced on the CPU."""
    optional_imports: tuple[str, ...] = ()
    """Optional dependencies of the family's pools (``triton``): the machine tests and ``harness mutate`` also
    run the family with each blocked from import (:mod:`harness.machines.without`), as a host without it would."""
    variants: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    """Pinned variants of the family's machine that its machine tests run on the CPU, as ``(label, pins)``, each pin
    a keyword of the ``moves`` function; ``harness mutate`` runs these (as ``name[label]``) in place of the machine."""
    rate_target: int = 0
    """Checked steps per second one fuzz worker must reach (``harness bench``); 0: no target."""
    audit_period: int = 8
    """Steps between the driver's full audits in the family's machine (the scheduler's conservation equation
    runs with the audit, so it audits every 4)."""
    drain_period: int = 128
    """Steps between drain audits (the move table's ``drain`` plan run on a copy of the pool; also at teardown);
    0: at teardown only.  Chosen from their measured cost (``docs/benchmarks.md``, "Drain audits")."""
    limits: FamilyLimits | None = None
    """The family's size limits (:mod:`harness.judge.limits`), for a plug-in family; ours are in ``LIMITS``."""
    realistic: tuple[tuple[str, int | Callable[[Mapping[str, Any]], int]], ...] = ()
    """The least value a server builds or sends, per config key or step argument (``op.arg``, ``op.arg[*][1]``;
    a list's floor is its length), as an int or a function of the config: the floors of the realistic shrink
    (:mod:`harness.traces.realistic`), so an upstream finding also reads as something a user could hit."""
    not_covered: tuple[str, ...] = ()
    """What the family's configurations do not reach, one line each with the reason (``harness list`` prints
    them): a user reads there which of their deployment's paths the fuzzer leaves alone."""

    @property
    def bench_kwargs(self) -> dict[str, Any]:
        return dict(self.bench_config)


_COMMON = ("valid-call-accepted", "misuse-rejected", "empty-pool-guard", "conservation")
_ROWS = (*_COMMON, "reserved-never-handed-out", "no-double-allocation", "in-bounds", "generation-monotonic",
         "clear-restores")
_KV = (*_COMMON, "reserved-never-handed-out", "no-double-allocation", "page-layout", "group-window",
       "clear-restores", "kernel-agreement")
_MAMBA = (*_COMMON, "reserved-never-handed-out", "no-double-allocation", "group-window", "clear-restores")
_COMBINATIONS = ("harness.canaries.combinations", "harness.canaries.combinations_caches")


def _config(**values: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(values.items())


def _pages(count: int) -> Callable[[Mapping[str, Any]], int]:
    """A realistic floor of ``count`` pages, in tokens of the config's ``page_size``."""
    return lambda config: count * int(config.get("page_size") or 1)


_ONE_TOKEN = (("alloc.need_size", 1), ("extend.batch[*][1]", 1))
"""A request a scheduler sends has at least one token."""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(name="req_to_token", summary="request rows, tail pop", default="pools:ReqToTokenPool",
               driver="harness.judge.drivers.rows:RowPoolDriver", moves="strategies.rows:row_table",
               bench_config=_config(size=32, max_context_len=16, device="cpu"), canaries=("harness.canaries.rows",),
               invariants=_ROWS, protocol="pools.protocols:RequestRowPool", rate_target=10_000),
        Family(name="decode_req_to_token", summary="decode request rows with pre-allocation, head pop",
               default="pools:DecodeReqToTokenPool", driver="harness.judge.drivers.rows:DecodeRowPoolDriver",
               moves="strategies.rows:decode_row_table",
               bench_config=_config(size=24, max_context_len=16, pre_alloc_size=8, device="cpu"),
               canaries=("harness.canaries.rows",), invariants=_ROWS, protocol="pools.protocols:RequestRowPool"),
        Family(name="mamba_slots", summary="Mamba state slots with group windows", default="pools:MambaSlotAllocator",
               driver="harness.judge.drivers.mamba:MambaSlotDriver", moves="strategies.mamba:mamba_slot_table",
               bench_config=_config(size=16, device="cpu"), canaries=("harness.canaries.mamba",),
               upstream=("harness.upstream:MambaSlots",), invariants=_MAMBA,
               realistic=(("size", 4), ("alloc.need_size", 1), ("group_begin.num_reqs", 1)),
               protocol="pools.protocols:MambaSlotPool",
               device_path=True),
        Family(name="hybrid_req_to_token", summary="request rows plus Mamba slots, all-or-nothing",
               default="pools:HybridReqToTokenPool", driver="harness.judge.drivers.hybrid:HybridDriver",
               moves="strategies.mamba:hybrid_table",
               bench_config=_config(size=12, max_context_len=16, mamba_size=8, device="cpu"),
               canaries=("harness.canaries.mamba",), invariants=(*_ROWS, "group-window"),
               protocol="pools.protocols:HybridRowPool", device_path=True),
        Family(name="token_kv", summary="KV token slots, page size 1", default="pools:TokenToKVPoolAllocator",
               driver="harness.judge.drivers.kv:TokenKVDriver", moves="strategies.kv:token_kv_table",
               bench_config=_config(size=64, device="cpu"), canaries=("harness.canaries.kv",),
               upstream=("harness.upstream:TokenKV",), invariants=_KV,
               realistic=(("size", 16), ("alloc.need_size", 1)),
               protocol="pools.protocols:TokenKVAllocator",
               device_path=True),
        Family(name="paged_kv", summary="paged KV allocator: alloc, free groups, extend, decode",
               default="pools:PagedTokenToKVPoolAllocator", driver="harness.judge.drivers.paged_kv:PagedKVDriver",
               moves="strategies.kv:paged_kv_table", bench_config=_config(size=256, page_size=4, device="cpu"),
               canaries=("harness.canaries.kv",), upstream=("harness.upstream:PagedKV",), invariants=_KV,
               realistic=(("size", _pages(4)), *_ONE_TOKEN),
               protocol="pools.protocols:PagedKVAllocator", device_path=True, optional_imports=("triton",),
               rate_target=4_000),
        Family(name="scheduler",
               summary="rows, Mamba slots and KV (paged, prefix-cached or SWA) driven as scheduler steps",
               default="harness.judge.drivers.scheduler:build_scheduler_pools",
               driver="harness.judge.drivers.scheduler:SchedulerDriver",
               moves="strategies.scheduler:scheduler_table", audit_period=4,
               variants=(("loop", _config(kernels=("loop",))), ("vectorized", _config(kernels=("vectorized",))),
                         ("page_size=1", _config(kernels=("vectorized",), page_size=1)),
                         ("hybrid", _config(kernels=("vectorized",), hybrid=True)),
                         ("prefix_cache", _config(kernels=("vectorized",), mode="prefix_cache")),
                         ("sliding_window", _config(kernels=("vectorized",), mode="sliding_window"))),
               bench_config=_config(size=6, max_context_len=48, page_size=4, kv_pages=48, hybrid=True, mamba_size=6,
                                    kernel="vectorized", device="cpu"),
               canaries=("harness.canaries.scheduler", *_COMBINATIONS),
               invariants=(*_COMMON, "reserved-never-handed-out", "no-double-allocation", "page-layout",
                           "group-window", "clear-restores", "kernel-agreement", "scheduler-conservation",
                           "kv-accounting", "lock-balance", "cache-accounting", "match-returns-inserted",
                           "evict-spares-locked", "swa-mapping")),
        Family(name="engine",
               summary="SGLang 0.5.23's scheduler memory path: upstream's own calls on its pools and prefix cache "
                       "(RadixCache, UnifiedRadixCache over the Rust or Python core; full attention, hybrid SWA or hybrid Mamba)",
               default="harness.upstream:Engine", driver="harness.judge.drivers.engine:EngineDriver",
               moves="strategies.engine:engine_table", audit_period=1,
               bench_config=_config(cache="radix", page_size=1, rows=4, tokens=32, context=64, chunk=None,
                                    new_token_ratio=0.1, pools="upstream", sliding_window=None, swa_tokens=0,
                                    swa_eviction_interval=128, mamba_slots=0, device="cpu"),
               canaries=("harness.canaries.engine",),
               upstream=("harness.upstream:Engine",),
               not_covered=(
                   "speculative decoding: alloc_for_spec_decode writes rows with Triton, or sgl_kernel on CPU "
                   "(allocation.py:745-763); neither runs without a GPU build",
                   "Mamba above page size 1 (MambaComponent asserts page 1, components/mamba.py:74-79) and the Mamba extra "
                   "buffer (track_mask_cpu.pin_memory(), schedule_batch.py:3830, raises on a CPU torch)",
                   "SWA or Mamba over pools/: pools.swa and pools.mamba predate the 0.5.23 interfaces",
                   "overlap scheduling, mixed chunks, HiCache, streaming sessions, PD disaggregation, LoRA, grammar: "
                   "0.5.23 paths this loop does not drive",
               ),
               invariants=("valid-call-accepted", "reserved-never-handed-out", "no-double-allocation",
                           "scheduler-conservation", "kv-accounting", "lock-balance", "swa-mapping", "scheduler-progress", "checker-agreement",
                           "implementations-agree")),
        Family(name="prefix_cache",
               summary="radix prefix cache over its KV allocator: match, insert, lock, evict, release",
               default="pools.prefix_cache:build_prefix_cache", driver="harness.judge.drivers.prefix_cache:PrefixCacheDriver",
               moves="strategies.prefix_cache:prefix_cache_table", audit_period=4,
               bench_config=_config(size=64, page_size=4, eviction_policy="lru", device="cpu"),
               canaries=("harness.canaries.prefix_cache",),
               upstream=("harness.upstream:RadixCache", "harness.upstream:RustTreeCore"),
               invariants=("valid-call-accepted", "misuse-rejected", "empty-pool-guard", "reserved-never-handed-out",
                           "no-double-allocation", "page-layout", "cache-accounting", "lock-balance",
                           "evict-spares-locked", "eviction-order", "match-returns-inserted", "kv-accounting"),
               realistic=(("size", _pages(4)), *((f"{op}.prompt", 1) for op in ("request", "insert", "match", "lock"))),
               protocol="pools.protocols:PrefixCache", device_path=True),
        Family(name="block_pool", summary="vLLM-v1-style ref-counted blocks: prefix hits, LRU free queue, eviction",
               default="harness.judge.drivers.block_pool:build_block_pool",
               driver="harness.judge.drivers.block_pool:BlockPoolDriver", moves="strategies.block_pool:block_pool_table",
               bench_config=_config(num_gpu_blocks=33, enable_caching=True, device="cpu"),
               canaries=("harness.canaries.block_pool",), upstream=("harness.upstream:VllmBlockPool",),
               invariants=(*_COMMON, "reserved-never-handed-out", "no-double-allocation", "ref-count",
                           "free-queue-order", "cache-map"),
               realistic=(("num_gpu_blocks", 4), ("allocate.num_blocks", 1), ("admit.tokens", 1)),
               protocol="pools.protocols:BlockPoolLike"),
        Family(name="swa_kv",
               summary="full and sliding-window KV in step: alloc, extend, SWA tail, decode, free_swa, groups",
               default="pools:SWATokenToKVPoolAllocator", driver="harness.judge.drivers.swa:SWAKVDriver",
               moves="strategies.swa:swa_kv_table",
               bench_config=_config(size=256, size_swa=96, page_size=4, device="cpu"),
               canaries=("harness.canaries.swa",), upstream=("harness.upstream:SWAKV",),
               invariants=(*_COMMON, "reserved-never-handed-out", "no-double-allocation", "in-bounds", "page-layout",
                           "group-window", "clear-restores", "swa-mapping"),
               realistic=(("size", _pages(2)), ("size_swa", _pages(1)), *_ONE_TOKEN, ("tail.extend_len", 1)),
               protocol="pools.protocols:SWAKVAllocator", device_path=True),
        Family(name="pure_swa_kv", summary="sliding-window KV only: one token pool, identity mapping, padding dropped",
               default="pools:PureSWATokenToKVPoolAllocator", driver="harness.judge.drivers.pure_swa:PureSWAKVDriver",
               moves="strategies.swa:pure_swa_kv_table",
               bench_config=_config(size_swa=64, device="cpu"), upstream=("harness.upstream:PureSWAKV",),
               invariants=(*_COMMON, "reserved-never-handed-out", "no-double-allocation", "page-layout",
                           "group-window", "clear-restores", "swa-mapping"),
               realistic=(("size_swa", _pages(2)), ("alloc.need_size", 1)),
               protocol="pools.protocols:SWAKVAllocator"),
    )
}

for _plugged in plugin_families(FAMILIES, Family):
    FAMILIES[_plugged.name] = _plugged
    if _plugged.limits is not None:
        register_limits(_plugged.name, _plugged.limits)

ENV_VAR = "POOLFUZZ_TARGETS"


def resolve(spec: str) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UnknownTargetError(f"target {spec!r} is not of the form module:attr")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownTargetError(f"target {spec!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownTargetError(f"target {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownTargetError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def parse_target(item: str) -> tuple[str, str]:
    """One ``--target`` value, ``FAMILY`` or ``FAMILY=module:attr``, to ``(family, spec)`` (``spec`` empty for
    ``FAMILY``); the family must be registered.  The one parser of target names, for every command."""
    name, sep, spec = (part.strip() for part in item.strip().partition("="))
    if not name:
        raise UnknownTargetError(f"target {item.strip()!r} names no family")
    if sep and not spec:
        raise UnknownTargetError(f"target {item.strip()!r} is not of the form FAMILY=module:attr")
    family(name)
    return name, spec


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["FAMILY=module:attr", ...]`` to a mapping (blank items skipped); each must name its implementation."""
    overrides: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        name, spec = parse_target(item)
        if not spec:
            raise UnknownTargetError(f"target override {item.strip()!r} is not of the form FAMILY=module:attr")
        overrides[name] = spec
    return overrides


def env_overrides() -> dict[str, str]:
    return parse_overrides(os.environ.get(ENV_VAR, "").split(";"))


def implementation_for(name: str, overrides: dict[str, str] | None = None) -> str:
    """The ``module:attr`` spec that fuzzes family ``name``."""
    chosen = {**env_overrides(), **(overrides or {})}
    return chosen.get(name, family(name).default)


def load_factory(spec: str) -> Callable[..., Any]:
    factory = resolve(spec)
    if not callable(factory):
        raise UnknownTargetError(f"target {spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


def upstream_default(name: str) -> bool:
    """Whether family ``name``'s default implementation is upstream code (``engine``), not one of our pools.

    Such a family's default may break an invariant by upstream's own defect (a known finding), so the
    suite's "the production pool finds no violation" tests leave it to its own tests.
    """
    fam = family(name)
    return fam.default in fam.upstream


def family_unavailable(name: str) -> str | None:
    """Why family ``name``'s default implementation cannot be built here, or ``None``.

    A family whose default is an upstream target (``engine``: SGLang's own scheduler path) loads
    upstream when it resolves, so a machine without the package says so here in one line, and
    ``fuzz`` with no ``--target``, ``selfcheck`` and the test suite skip it with that reason.
    """
    try:
        load_factory(family(name).default)
    except UnknownTargetError as exc:
        return str(exc)
    return None


#: Constructor arguments a target need not take: the driver records them and passes only what is accepted.
OPTIONAL_ARGUMENTS = frozenset({"device"})


def check_target(name: str, spec: str) -> Callable[..., Any]:
    """The factory ``spec`` names, once it is known to fit family ``name``; else :class:`UnknownTargetError`.

    A substitute takes the family's configuration (its constructor binds the family's
    ``bench_config``, ``device`` optional) and, when it is a class, has every method of the
    family's protocol.  Without this check ``--target paged_kv=pools:ReqToTokenPool`` builds
    nothing, raises ``TypeError`` inside the first example and is reported as a *finding*.
    """
    fam = family(name)
    factory = load_factory(spec)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C extension without a signature: nothing to check
        signature = None
    if signature is not None:
        accepted = _accepted_keywords(signature)
        config = {k: v for k, v in fam.bench_kwargs.items()
                  if k not in OPTIONAL_ARGUMENTS or accepted is None or k in accepted}
        try:
            signature.bind(**config)
        except TypeError as exc:
            raise UnknownTargetError(f"target {name}={spec} does not take {name}'s configuration "
                                     f"({', '.join(sorted(config))}): {exc}") from None
    if fam.protocol and isinstance(factory, type):
        missing = [m for m in protocol_methods(resolve(fam.protocol)) if not hasattr(factory, m)]
        if missing:
            raise UnknownTargetError(f"target {name}={spec} is not a {name} pool: it lacks "
                                     f"{', '.join(missing)} of {fam.protocol}")
    return factory


def _accepted_keywords(signature: inspect.Signature) -> set[str] | None:
    """Names a call may pass by keyword; ``None`` when ``**kwargs`` takes any."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return {p.name for p in signature.parameters.values() if p.kind in kinds}


def protocol_methods(protocol: type) -> list[str]:
    """The public methods a ``typing.Protocol`` declares, its bases' included (a property may be an
    instance attribute of the implementation, so only plain methods are required of the class)."""
    names: dict[str, None] = {}
    for klass in reversed(protocol.__mro__):
        if klass is object or not getattr(klass, "_is_protocol", False):
            continue
        for attr, value in vars(klass).items():
            if not attr.startswith("_") and inspect.isfunction(value):
                names[attr] = None
    return list(names)


def validates_input(factory: Any) -> bool:
    return bool(getattr(factory, "poolfuzz_check_misuse", True))

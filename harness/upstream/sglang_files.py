"""SGLang as poolfuzz loads it: which modules run from its files, and what each SGLang target drives.

One :class:`~poolfuzz.harness.upstream.loading.Distribution` (:data:`SGLANG`) serves every SGLang target:
the allocators (``TokenKV``, ``PagedKV``, ``MambaSlots``), the caches and SWA allocators
(``RadixCache``, ``RustTreeCore``, ``SWAKV``, ``PureSWAKV``) and the scheduler's memory path
(``Engine``).  So the ``TokenToKVPoolAllocator`` the ``token_kv`` target fuzzes is the very class
the SWA allocator composes and the engine schedules over: one identity per process.

``import sglang`` does not work on a CPU box with a ``--no-deps`` install (``sglang/__init__.py``
pulls orjson, the model configs, torchvision, the MoE layer stack; engine-path.md section 0), so
the loader executes the real files under :data:`REAL_PREFIXES` and answers the rest with the
explicit stand-ins of :mod:`poolfuzz.harness.upstream.sglang_stand_ins` or with placeholders that refuse
use.  Two modules are instrumented as they execute (:mod:`poolfuzz.harness.upstream.sglang_fakes`):
``utils/invariants.expect`` also records failing checks, and ``radix_cache`` reads a logical clock.

**Where the files come from**: the folder ``POOLFUZZ_SGLANG_SRC`` names (``poolfuzz --sglang-src
PATH``: a checkout's ``python/`` folder, an unzipped wheel), else the installed distribution.  Any
version is *tried*: a module that does not execute, or lacks a class a target drives, refuses only
the targets that need it (:func:`target_problem`), with a one-line reason; docs/compatibility.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from poolfuzz.harness.upstream.loading import Distribution, LoadedCopy, copy_of, deferred
from poolfuzz.harness.upstream.sources import SourceFolder, UpstreamUnavailableError, check_classes, distribution_version

SUPPORTED_VERSION = "0.5.23"
"""The version the stand-ins were written for and every finding was made on; others are tried, not promised."""
DISTRIBUTION = "sglang"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}=={SUPPORTED_VERSION}"
SOURCE_ENV = "POOLFUZZ_SGLANG_SRC"
"""Environment variable naming a folder of SGLang's files to load instead of the installed distribution."""

REAL_PREFIXES: tuple[str, ...] = (
    "sglang.srt.mem_cache",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.schedule_policy",
    "sglang.srt.managers.scheduler_components.new_token_ratio_tracker",  # retract_decode asks it
    "sglang.srt.managers.scheduler_components.invariant_checker",
    "sglang.srt.managers.scheduler_components.pool_stats_observer",
    "sglang.srt.environ",
    "sglang.srt.utils.invariants",
    "sglang.kernels.ops.memory",  # the allocators' Triton kernels (launched only on a CUDA device)
    "sglang.srt.dllm.mixin",  # Req's base class
    "sglang.srt.disaggregation.decode_schedule_batch_mixin",  # ScheduleBatch's base class
    "sglang.srt.model_executor.forward_batch_info",  # ForwardMode
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.sampling.watermarking",
    "sglang.srt.beam_search.batch_tail",  # filter_batch strips beam tails (none without beams)
    "sglang.srt.beam_search.fork",
    "sglang.srt.session.streaming_session",  # UnifiedRadixCache builds one (unified_radix_cache.py:294)
    "sglang.srt.rust_extensions",  # the Rust tree core's loader and its torch-version gate
    "sglang.srt.layers.attention.dsv4.unified_kv_gate",  # swa_reprefill_tail_tokens asks it (HIP only)
    # MambaPool's cache_params (memory_pool.py:58): the real BaseLinearStateParams / Mamba2CacheParams
    # (a hybrid-SSM shape builds them, poolfuzz.harness.upstream.engine_mamba); it imports only environ and
    # distributed.utils at module level.
    "sglang.srt.configs.mamba_utils",
    # Mamba2StateShape.create's divide (mamba_utils.py:23); at module level it imports only torch.distributed's
    # collectives and runtime_context.get_resources (a placeholder, called only by the TCPStore helpers).
    "sglang.srt.distributed.utils",
    # The scheduler itself (poolfuzz.harness.upstream.sglang_scheduler): its loops' bodies, batch formation, abort and idle
    # checks run from the file, on an object built without __init__ (scheduler.py:465 starts the whole server).
    "sglang.srt.managers.scheduler",
    # process_batch_result_prefill / _decode (batch_result_processor.py:258, :952): finishes, checkpoints, releases.
    "sglang.srt.managers.scheduler_components.batch_result_processor",
    # GenerationBatchResult (utils.py:56): the result type the processor reads, which the fake model returns.
    "sglang.srt.managers.utils",
    # HEALTH_CHECK_RID_PREFIX (constants.py:12), which _record_step_counters compares each rid with
    # (scheduler.py:5127 -> utils.py:429); a leaf module of constants.
    "sglang.srt.constants",
    # RecentPrefillBatchSizeTracker, which init_schedule_policy builds (scheduler.py:1446); at module level it imports only
    # environ, distributed.utils and runtime_context.
    "sglang.srt.managers.prefill_delayer",
    # Speculative decoding's decode preparation (poolfuzz.harness.upstream.engine_spec): SpeculativeAlgorithm (spec_info.py:32,
    # which scheduler.py:338 imports), spec_prepare_for_decode (spec_utils.py:1249, imported by prepare_for_decode at call
    # time, schedule_batch.py:3756) and eagle_prepare_for_decode (eagle_utils.py:857), which calls alloc_for_spec_decode.
    "sglang.srt.speculative.spec_info",
    "sglang.srt.speculative.eagle_utils",
    "sglang.srt.speculative.spec_utils",
    # init_running_status (scheduler.py:1315-1349, which build_scheduler runs from the file) builds the session controller
    # (:1346; open_session / close_session :6139-6157, requests naming a session :3068-3114) and the deferred-flush wrapper
    # (:1340; process_input_requests :2262); each imports only io_struct (stand-ins), schedule_batch and logging helpers.
    "sglang.srt.session.session_controller",
    "sglang.srt.managers.scheduler_components.flush_wrapper",
    # HiCache's device-host tier (EngineTargetConfig.hicache): the controller that submits and acknowledges the transfers
    # (managers/cache_controller.py, built by build_kv_only_stack, hybrid_cache/hybrid_pool_assembler.py:547), and the KV
    # pool's unquantized cache method (MHATokenToKVPool's default, memory_pool.py:2290); the one constant it imports from
    # kvfp4_tensor is a stand-in (sglang_stand_ins: that file's @torch.compile decorators import torch._dynamo, seconds
    # per process, for the FP4 KV path only).
    "sglang.srt.managers.cache_controller",
    "sglang.srt.layers.quantization.fp4_kv_cache_quant_method",
    "sglang.srt.disaggregation.prefill",
    "sglang.srt.disaggregation.decode",
    "sglang.srt.disaggregation.utils",
    "sglang.srt.disaggregation.base",
    "sglang.srt.disaggregation.fake",
    "sglang.srt.disaggregation.checksum",
    "sglang.srt.disaggregation.minimax",
    "sglang.srt.disaggregation.decode_hicache_mixin",
    "sglang.srt.managers.overlap_utils",
)
"""Modules executed from the copy's files, every submodule included (but :data:`NOT_LOADED`)."""

NOT_LOADED: tuple[str, ...] = (
    # host-memory sizing for HiCache (psutil): a stand-in answers it (sglang_stand_ins.available_host_memory_bytes)
    "sglang.srt.mem_cache.host_memory",
)
"""Modules under :data:`REAL_PREFIXES` answered by placeholders: third-party imports the path never uses."""

SGLANG = Distribution(
    name=DISTRIBUTION,
    title="SGLang",
    supported=SUPPORTED_VERSION,
    env=SOURCE_ENV,
    probe="srt",
    real=REAL_PREFIXES,
    not_loaded=NOT_LOADED,
    stand_ins=deferred("poolfuzz.harness.upstream.sglang_stand_ins", "stand_in_modules"),
    after_exec={
        "sglang.srt.utils.invariants": deferred("poolfuzz.harness.upstream.sglang_fakes", "SIGNALS.instrument"),
        "sglang.srt.mem_cache.radix_cache": deferred("poolfuzz.harness.upstream.sglang_fakes", "CLOCK.install"),
        # HiCache's direct copy op, which the file imports on CUDA/HIP/XPU only (pool_host/mha.py:60-89)
        "sglang.srt.mem_cache.pool_host.mha": deferred("poolfuzz.harness.upstream.engine_hicache", "install_transfer_ops"),
        # the fuzzer's peer: when the fake backend's transfers conclude (engine_disagg.PeerClock)
        "sglang.srt.disaggregation.fake.conn": deferred("poolfuzz.harness.upstream.engine_disagg", "install_peer_clock"),
    },
)

MEM_CACHE = "sglang.srt.mem_cache"
MODULES: dict[str, str] = {
    "base": f"{MEM_CACHE}.allocator.base",
    "token": f"{MEM_CACHE}.allocator.token",
    "paged": f"{MEM_CACHE}.allocator.paged",
    "mamba": f"{MEM_CACHE}.allocator.mamba",
    "swa_allocator": f"{MEM_CACHE}.allocator.swa",
    "component_type": f"{MEM_CACHE}.unified_cache.component_type",
    "evict_policy": f"{MEM_CACHE}.evict_policy",
    "cache_init_params": f"{MEM_CACHE}.cache_init_params",
    "base_prefix_cache": f"{MEM_CACHE}.base_prefix_cache",
    "radix_cache": f"{MEM_CACHE}.radix_cache",
    "unified_radix_cache": f"{MEM_CACHE}.unified_radix_cache",
    "base_swa_memory_pool": f"{MEM_CACHE}.base_swa_memory_pool",
    "allocation": f"{MEM_CACHE}.allocation",
    "common": f"{MEM_CACHE}.common",
    "memory_pool": f"{MEM_CACHE}.memory_pool",
    "schedule_batch": "sglang.srt.managers.schedule_batch",
    "schedule_policy": "sglang.srt.managers.schedule_policy",
    "invariant_checker": "sglang.srt.managers.scheduler_components.invariant_checker",
    "pool_stats_observer": "sglang.srt.managers.scheduler_components.pool_stats_observer",
    "environ": "sglang.srt.environ",
}
SCHEDULER_MODULES: dict[str, str] = {
    "scheduler": "sglang.srt.managers.scheduler",
    "batch_result_processor": "sglang.srt.managers.scheduler_components.batch_result_processor",
    "manager_utils": "sglang.srt.managers.utils",
    "disagg_utils": "sglang.srt.disaggregation.utils",
    "disagg_prefill": "sglang.srt.disaggregation.prefill",
    "disagg_decode": "sglang.srt.disaggregation.decode",
    "disagg_fake": "sglang.srt.disaggregation.fake.conn",
}
"""What the scheduler-backed engine loops load besides :data:`MODULES` (:mod:`poolfuzz.harness.upstream.sglang_scheduler`)."""
"""The SGLang modules poolfuzz drives, by short name (what targets and their tests call them)."""


@dataclass(frozen=True)
class Target:
    """What one SGLang target drives: the modules it needs, the classes (or ``Class.member``) it calls on them.

    ``runs_over`` names targets whose classes it composes (the radix cache over the allocators),
    whose refusals it inherits; ``above_page_size_1`` those it runs over only above page size 1.
    """

    modules: tuple[str, ...]
    needs: tuple[tuple[str, str], ...] = ()
    runs_over: tuple[str, ...] = ()
    above_page_size_1: tuple[str, ...] = ()


FREE_PAGES = ("base", "BaseTokenToKVPoolAllocator.get_all_free_pages")
"""What the KV and SWA drivers read a free list through (``TokenKV`` spells it out itself); 0.5.19's base has none."""
_CACHE_PARAMS = ("base_prefix_cache", "InsertParams", "MatchPrefixParams", "EvictParams", "DecLockRefParams")

TARGETS: dict[str, Target] = {
    "TokenKV": Target(("base", "token"), (("token", "TokenToKVPoolAllocator"),)),
    "PagedKV": Target(("base", "paged"), (("paged", "PagedTokenToKVPoolAllocator"), FREE_PAGES)),
    "MambaSlots": Target(("mamba",), (("mamba", "MambaSlotAllocator"),)),
    "RadixCache": Target(
        ("component_type", "evict_policy", "cache_init_params", "base_prefix_cache", "radix_cache"),
        (("radix_cache", "RadixCache"), ("radix_cache", "RadixKey"), ("radix_cache", "CacheInitParams"))
        + tuple((_CACHE_PARAMS[0], name) for name in _CACHE_PARAMS[1:]),
        runs_over=("TokenKV",),
        above_page_size_1=("PagedKV",),
    ),
    "RustTreeCore": Target((), runs_over=("TokenKV",), above_page_size_1=("PagedKV",)),
    "SWAKV": Target(
        ("base", "base_swa_memory_pool", "swa_allocator", "paged"),
        (("swa_allocator", "SWATokenToKVPoolAllocator"), ("base_swa_memory_pool", "BaseSWAKVPool"), FREE_PAGES),
        runs_over=("TokenKV",),
        above_page_size_1=("PagedKV",),
    ),
    "PureSWAKV": Target(
        ("base", "base_swa_memory_pool", "swa_allocator", "paged"),
        (("swa_allocator", "PureSWATokenToKVPoolAllocator"), ("base_swa_memory_pool", "BaseSWAKVPool"), FREE_PAGES),
        runs_over=("TokenKV",),
    ),
    "Engine": Target(tuple(MODULES)),
}
"""Every SGLang target and what it drives.  ``base_prefix_cache.TreeLock`` is left out of ``RadixCache``: only the
wrapper's ``checkpoint`` / ``release_request`` build one, and the driver calls neither (0.5.21 has no ``TreeLock``)."""


def installed_version() -> str | None:
    """The installed ``sglang`` version, or ``None`` when it is not installed."""
    return distribution_version(DISTRIBUTION)


def locate_sglang() -> SourceFolder:
    """The SGLang files to load: ``POOLFUZZ_SGLANG_SRC``'s folder when set, else the installed distribution.

    The installed copy is refused when it is missing, or when its metadata and its own
    ``_version.py`` disagree (a half-overwritten install: which surface would be loaded is unknown).
    """
    return SGLANG.locate()


def sglang_copy() -> LoadedCopy:
    """The loaded SGLang copy in use (:func:`~poolfuzz.harness.upstream.loading.copy_of`)."""
    return copy_of(SGLANG)


def load_files(names: tuple[str, ...]) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Load the :data:`MODULES` of ``names``: the modules that loaded and, for each that did not, why (by short name)."""
    copy = sglang_copy()
    loaded, problems = copy.load(MODULES[name] for name in names)
    by_dotted = {dotted: short for short, dotted in MODULES.items()}
    return {by_dotted[k]: v for k, v in loaded.items()}, {by_dotted[k]: v for k, v in problems.items()}


def target_problem(name: str) -> str | None:
    """Why SGLang target ``name`` cannot run on the copy in use, or ``None`` (raises when no copy is found)."""
    target = TARGETS[name]
    for over in target.runs_over + target.above_page_size_1:
        problem = target_problem(over)
        if problem is not None:
            return problem if over in target.runs_over else f"{problem}; {name} runs over it above page size 1"
    modules, problems = load_files(target.modules)
    for module in target.modules:
        if module in problems:
            return problems[module]
    copy = sglang_copy()
    files = {short: copy.source.site / (MODULES[short].replace(".", "/") + ".py") for short in MODULES}
    problem = check_classes(modules, target.needs, source=copy.source, files=files, checked_on=SUPPORTED_VERSION)  # type: ignore[arg-type]
    if problem is None and name == "PagedKV":
        problem = paged_cpu_problem()
    return problem


def paged_cpu_problem() -> str | None:
    """Why the paged allocator cannot run here, or ``None``: it needs its torch path unless a GPU is present.

    0.5.22 added ``alloc_decode_naive`` and the ``use_triton_kernels`` switch between the torch
    path and the kernels; before it (``alloc_extend_naive`` existed, unused), ``alloc_extend``
    and ``alloc_decode`` always launch the Triton kernels, which do not run on CPU tensors here (triton's interpreter only
    serves their ``tl.sum`` when ``TRITON_INTERPRET=1`` was set before triton was imported).
    """
    modules, _ = load_files(("paged",))
    paged = modules.get("paged")
    if paged is None or hasattr(paged, "alloc_decode_naive"):
        return None
    import torch

    if torch.cuda.is_available():
        return None  # runs with --device cuda (its Triton kernels compile there); not on CPU tensors
    return (
        f"{sglang_copy().source.label}: srt/mem_cache/allocator/paged.py has no alloc_decode_naive (no torch path: "
        f"PagedTokenToKVPoolAllocator always launches its Triton kernels, which need a CUDA device; none here)"
    )


def require(name: str) -> None:
    """Refuse SGLang target ``name`` with its one-line reason (:class:`UpstreamUnavailableError`) when it cannot run."""
    problem = target_problem(name)
    if problem is not None:
        raise UpstreamUnavailableError(problem)


def unavailable_reason(name: str) -> str | None:
    """Why SGLang target ``name`` cannot run (no copy, or :func:`target_problem`), else ``None`` (test skips)."""
    try:
        return target_problem(name)
    except UpstreamUnavailableError as exc:
        return str(exc)

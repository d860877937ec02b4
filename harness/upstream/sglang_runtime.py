"""The published runtime configuration of one SGLang server shape: the ``runtime_context`` stand-in.

Upstream reads its server arguments through ``sglang.srt.runtime_context`` (``get_spec()``,
``get_serving()``, ...).  Each namespace here is a :class:`ConfigBag` holding exactly the leaves the
memory path reads, each with the upstream line that reads it; reading any other leaf raises
:class:`~poolfuzz.harness.upstream.placeholders.StandInReached`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from poolfuzz.harness.upstream.placeholders import StandInReached


class Attributes:
    """A named stand-in holding the attributes it is given; another one (a dunder aside) is what :meth:`_missing` says."""

    def __init__(self, name: str, **attributes: Any) -> None:
        self._name = name
        self.__dict__.update(attributes)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._missing(name)

    def _missing(self, name: str) -> Any:
        """The answer for an attribute the stand-in was not given."""
        raise AttributeError(name)


class ConfigBag(Attributes):
    """One published ``runtime_context`` namespace: the leaves the memory path reads, no more."""

    def _missing(self, name: str) -> Any:
        raise StandInReached(
            f"upstream read runtime_context.get_{self._name}().{name}, which the engine target does not publish "
            "(add it to poolfuzz.harness.upstream.sglang_runtime.RuntimeConfig)"
        )


HICACHE_LEAVES: dict[str, Any] = {
    "hicache_host_memory_mode": "cache",  # init_hicache :457 (the default: host memory is a tier)
    "hicache_storage_backend": None,  # :479 (no L3)
    "hicache_storage_backend_extra_config": None,  # get_allocator_type, pool_host/common.py:127
    "hicache_storage_prefetch_policy": "timeout",  # cache_controller.py (the default; no storage, never used)
    "hicache_write_policy": "write_through",  # build_kv_only_stack :556; init_hicache :560 (per shape, engine_hicache.published)
    "hicache_io_backend": "direct",  # :557 (--hicache-io-backend direct: the torch-copy op)
    "hicache_mem_layout": "layer_first",  # build_kv_host_pool :228 (--hicache-mem-layout layer_first)
    "hicache_ratio": 2.0,  # :226 (the host pool twice the device pool, the resolved default)
    "hicache_size": 0,  # :227 (sized by the ratio)
}
"""The ``memory`` namespace leaves HiCache's build reads, at the values a server started as the module docstring says
publishes (arg_groups/fields/memory.py:98-200)."""


class RuntimeConfig:
    """The published configuration of one engine target run (``runtime_context`` stand-in).

    Leaves, with the upstream reader (``srt/``-relative, 0.5.23):

    * ``spec.speculative_algorithm``: no speculative decoding (``common.py:452``, ``schedule_batch.py:1505``); a
      speculative server publishes its own ``spec`` namespace per call (:mod:`poolfuzz.harness.upstream.engine_spec`);
    * ``serving.strip_thinking_cache``: off (``common.py:456``, ``schedule_batch.py:1555``);
    * ``disagg.disaggregation_mode``: ``"null"`` (``schedule_batch.py:2380``, ``:3493``);
    * ``schedule.schedule_policy``: ``"fcfs"`` (``schedule_batch.py:3555``);
    * ``parallel.dcp_enabled``: False, ``parallel.attn_dcp_size`` 1 (``invariant_checker.py:121``);
    * ``schedule.retraction_policy``: ``"length"``, the default (``arg_groups/fields/schedule.py:126``);
    * ``exec.mamba.*`` and ``exec.features.*``: every extra buffer and replay off (``schedule_policy.py:600``, ``:956``);
      for a hybrid-SSM shape also the int8 checkpoint pool off (``mamba_checkpoint_pool.py:325``), no per-path
      state cap (``mamba_max_states_per_path=-1``, ``components/mamba.py:86``; ``rust_tree_core/adapter.py:465``)
      and the default decode track interval 256 (``arg_groups/fields/exec_.py:497``, ``:530``, ``:534``).

    Read by the scheduler itself (:mod:`poolfuzz.harness.upstream.sglang_scheduler`): ``serving.weight_version`` (the default,
    ``_make_abort_req``, scheduler.py:6405); ``memory.enable_flexkv`` off
    (scheduler.py:3884), ``exec.features.return_hidden_states_mode`` / ``enable_return_hidden_states`` off
    (forward_batch_info.py:325-329, from batch_result_processor.py:708); ``parallel.pp_max_micro_batch_size`` (:4034; ``None`` until a scheduler's init overrides it with
    ``max_running_requests``, :1237-1243, which :class:`~poolfuzz.harness.upstream.engine_scheduler.SchedulerLoop` does per iteration).

    Each value is the server default (``arg_groups/fields/*.py``) for a one-rank full-attention server.
    """

    def __init__(self, *, speculative: bool = False) -> None:
        self.speculative = speculative
        self.bags: dict[str, ConfigBag] = {}
        self.publish()

    def publish(self, *, chunked_prefill_size: int | None = None, context_length: int = 128) -> None:
        """Publish the namespaces for one server shape (the engine loop calls it per configuration)."""
        bag = ConfigBag
        self.bags = {
            "spec": bag("spec", speculative_algorithm=None),
            # served_model_name: HiCache's storage key prefix (hybrid_pool_assembler.py:2549; no storage here)
            "serving": bag(
                "serving", strip_thinking_cache=False, weight_version="default", allow_auto_truncate=False, served_model_name="poolfuzz"
            ),
            "disagg": bag(
                "disagg",
                disaggregation_mode="null",
                disaggregation_decode_retraction_backup=None,
                disaggregation_decode_enable_offload_kvcache=False,
                disaggregation_bootstrap_port=None,
                enable_pd_role_switch=False,
            ),
            "schedule": bag(
                "schedule",
                schedule_policy="fcfs",
                retraction_policy="length",
                schedule_low_priority_values_first=False,
                chunked_prefill_size=chunked_prefill_size,
                prefill_max_requests=None,
            ),
            "parallel": bag(
                "parallel",
                dcp_enabled=False,
                attn_dcp_size=1,
                attn_dcp_rank=0,
                attn_cp_size=1,
                attn_cp_rank=0,
                attn_tp_rank=0,
                tp_rank=0,
                tp_size=1,
                pp_size=1,
                pp_rank=0,
                pp_max_micro_batch_size=None,
            ),
            "exec": bag(
                "exec",
                moe=bag("exec.moe", elastic_ep_backend=None),
                # init_deterministic_inference_config (scheduler.py:1747): off, the default
                deterministic=bag("exec.deterministic", enable_deterministic_inference=False),
                features=bag(
                    "exec.features",
                    enable_encoder_swa_bounded_replay=False,
                    return_hidden_states_mode=None,
                    enable_return_hidden_states=False,
                ),
                mamba=bag(
                    "exec.mamba",
                    enable_mamba_extra_buffer=False,
                    enable_mamba_extra_buffer_lazy=False,
                    enable_int8_mamba_checkpoint=False,
                    int8_mamba_ckpt_size=None,
                    mamba_max_states_per_path=-1,
                    mamba_track_interval=256,
                ),
            ),
            "model": bag("model", context_length=context_length),
            "device": bag("device", mlx_enable_sampling=False),
            "mm": bag("mm", mm_feature_transport="cpu"),
            # the HiCache leaves (HICACHE_LEAVES) are read only by a HiCache shape
            "memory": bag("memory", enable_hisparse=False, radix_eviction_policy="lru", enable_flexkv=False, **HICACHE_LEAVES),
            # kv_events_config: no KV events (init_kv_events_publisher, scheduler.py:2560)
            "observability": bag("observability", enable_metrics=False, extra_metric_labels=None, kv_events_config=None),
        }

    def override(self, source: str, **fields: Any) -> None:
        """``RuntimeContext.override`` (runtime_context.py:1103-1140): resolved leaves updated in place, each in the namespace
        that publishes it (the HiCache admin handlers record an attached or detached backend, scheduler.py:5465, :5506).
        A leaf no namespace publishes refuses, as upstream's ``unknown config field`` does."""
        for name, value in fields.items():
            bag = next((bag for bag in self.bags.values() if name in bag.__dict__), None)
            if bag is None:
                raise StandInReached(f"{source} overrode {name}, which the engine target does not publish")
            bag.__dict__[name] = value

    def is_config_namespace_published(self, namespace: str) -> bool:
        """``RuntimeContext.is_config_namespace_published`` (schedule_policy.py:596 asks it)."""
        return namespace in self.bags

    def getter(self, namespace: str) -> Callable[[], ConfigBag]:
        def get() -> ConfigBag:
            return self.bags[namespace]

        get.__name__ = f"get_{namespace}"
        return get


RUNTIME = RuntimeConfig()
"""The process's published configuration; the engine driver sets it per run."""


FLA_CHUNK_SIZE = 64
"""``sglang.kernels.ops.attention.fla.chunk_delta_h.CHUNK_SIZE``: the Mamba chunk of a model config without
``mamba_chunk_size`` (``arg_groups/overrides.py:1909-1917``)."""


def mamba_cache_chunk_size() -> int:
    """``runtime_context.mamba_cache_chunk_size`` (runtime_context.py:1958 -> arg_groups/overrides.py:1897-1925).

    ``max(hf_config.mamba_chunk_size, page_size)``: the engine target's model config has no
    ``mamba_chunk_size`` (the FLA default, 64) and every Mamba shape runs at page size 1 (``MambaComponent``
    requires it without the extra buffer, components/mamba.py:74-79), so 64.  Without the extra buffer
    this only places ``mamba_branching_seqlen`` (components/mamba.py:180-184), which the no-buffer path
    never reads (schedule_batch.py:3216 is the extra buffer's tracker).
    """
    return max(FLA_CHUNK_SIZE, 1)


def mamba_checkpoint_grid(tree_page: int) -> int:
    """``runtime_context.mamba_checkpoint_grid`` (runtime_context.py:1966-1971): ``lcm(chunk, tree page)``."""
    return math.lcm(mamba_cache_chunk_size(), tree_page)


def max_speculative_num_draft_tokens() -> int | None:
    """``runtime_context.max_speculative_num_draft_tokens`` (runtime_context.py:1982-1998): the larger of the published
    ``spec`` bounds, ``None`` without speculation (``get_req_to_token_extra_context_len``, allocation_sizing.py:106;
    ``get_alloc_len_per_decode``, :40).  A speculative server publishes both (:mod:`poolfuzz.harness.upstream.engine_spec`)."""
    spec = RUNTIME.bags["spec"].__dict__
    bounds = [b for b in (spec.get("speculative_num_draft_tokens"), spec.get("max_speculative_num_draft_tokens")) if b is not None]
    return max(bounds) if bounds else None


def runtime_context_attributes() -> dict[str, Any]:
    """The ``sglang.srt.runtime_context`` stand-in's names: a getter per namespace and the helpers the path calls."""
    runtime: dict[str, Any] = {f"get_{ns}": RUNTIME.getter(ns) for ns in RUNTIME.bags}
    runtime["get_context"] = lambda: RUNTIME
    # runtime_context.py:2010: the (prefill, decode) attention backends.  A CPU server runs
    # torch_native, so write_cache_indices and get_last_loc take their torch paths
    # (allocation.py:72, :113-137), the ones that run without Triton.
    runtime["attention_backends"] = lambda: ("torch_native", "torch_native")
    runtime["mamba_cache_chunk_size"] = mamba_cache_chunk_size
    runtime["mamba_checkpoint_grid"] = mamba_checkpoint_grid
    runtime["max_speculative_num_draft_tokens"] = max_speculative_num_draft_tokens
    return runtime

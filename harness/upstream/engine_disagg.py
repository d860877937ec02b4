"""PD disaggregation on a CPU box: a prefill-mode or a decode-mode server with SGLang's own ``fake`` transfer backend.

A server started with ``--disaggregation-mode prefill|decode --disaggregation-transfer-backend fake`` (the decode side also
with ``--disaggregation-decode-enable-radix-cache``, so its tree is the radix cache every other shape runs) builds its PD
queues in ``Scheduler.init_disaggregation`` (scheduler.py:1505-1662), which runs here from the wheel, as every
``disaggregation/`` module the loop reaches does: ``prefill.py`` (``PrefillBootstrapQueue``, the prefill mixin),
``decode.py`` (``DecodePreallocQueue``, ``DecodeTransferQueue``, the decode mixin), ``utils.py`` (``MetadataBuffers``,
``ReqToMetadataIdxAllocator``, the poll reductions), ``base/conn.py`` and ``fake/conn.py`` (``FakeKVManager``,
``FakeKVSender``, ``FakeKVReceiver``: the backend SGLang itself uses for warm-up requests, which moves no bytes).  The
scheduler's mixin methods are the real ones (``Scheduler``'s bases, scheduler.py:447-454).

What a one-rank CPU server needs that ``Scheduler.__init__`` would have set, each the smallest stand-in, cited:

* the published ``disagg`` leaves (:data:`DISAGG_LEAVES`, arg_groups/fields/disagg.py defaults but the backend, and
  ``num_reserved_decode_tokens``, a server argument the shape chooses since its default, 512, is past these pools);
* a one-rank CPU process group (:class:`OneRankGroup`): the poll reductions ask ``dist.get_world_size(group)``
  (utils.py:292) and return the polls unchanged on one rank; ``__init__`` sets ``attn_tp_cpu_group`` / ``attn_cp_cpu_group``
  from the parallel state (``torch.distributed`` is not initialised here);
* the model config's HF fields the queues read (:class:`DisaggModelConfig`: one layer, one KV head, a Llama-class
  architecture; ``_init_kv_manager`` prefill.py:257-395, ``get_total_num_kv_heads``, scheduler.py:3495);
* the model runner's two sizes (``effective_logical_max_total_num_tokens`` prefill.py:208, ``kv_cache_dtype_str`` :269);
* the forward's input relay (:class:`ForwardRelay`): a decode server's prebuilt batch stashes each request's last token
  for the first decode forward (``process_prebuilt``, decode_schedule_batch_mixin.py:154-158); the forward is the fake model.

The loop bodies (``event_loop_normal_disagg_prefill`` and ``event_loop_overlap_disagg_prefill``, prefill.py:684-873, the
latter without continuous input polling, off by default; ``event_loop_normal_disagg_decode`` and
``event_loop_overlap_disagg_decode``, decode.py:3123-3224) run one iteration at a time (:func:`prefill_iteration`,
:func:`decode_iteration`), each statement a call of upstream's method but ``ingest_requests`` and ``run_batch``, as in
:mod:`poolfuzz.harness.upstream.engine_scheduler`.

**The fuzzer orders the peer** (:class:`PeerClock`): the fake backend's sender and receiver conclude at their first poll
after ``send`` / ``send_metadata`` (fake/conn.py:60-74, :153-164).  A request whose transfer the clock holds polls
``Transferring`` for that many more iteration boundaries; a failure makes its sender or receiver report ``Failed``
through its own ``abort()`` (fake/conn.py:137-138, :195-196), which is what a peer lost mid-handshake or mid-transfer
looks like to the scheduler (``handle_bootstrap_failure``, prefill.py:1352; the decode transfer queue's failure path).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from poolfuzz.harness.upstream.overrides import overridden
from poolfuzz.harness.upstream.sglang_runtime import RUNTIME

RESERVED_DECODE_TOKENS = 4
"""``--num-reserved-decode-tokens`` (default 512, arg_groups/fields/disagg.py:109-112): the decode tokens a decode server
reserves per request before it preallocates another (``_required_admission_tokens``, decode.py:490-499).  512 is past
every pool the fuzzer draws (48 slots at most), where no request would ever be admitted."""

DISAGG_LEAVES: dict[str, Any] = {
    "disaggregation_transfer_backend": "fake",  # init_disaggregation :1513 (--disaggregation-transfer-backend fake)
    "disaggregation_enable_kv_checksum": False,  # :1581, prefill.py:245
    "disaggregation_bootstrap_port": 8998,  # :1603, :1631 (the default)
    "disaggregation_ib_device": None,  # prefill.py:355
    "num_reserved_decode_tokens": RESERVED_DECODE_TOKENS,  # :1605
    "optimistic_prefill_attempts": 0,  # can_prefill_before_bootstrap prefill.py:488 (the default: off)
    "language_only": False,  # :1653 (no EPD encoder)
    "encoder_transfer_backend": "auto",
    "disaggregation_decode_allocation_policy": "early",  # prefill.py:489 (the default)
    "disaggregation_decode_host_receive_threshold": 1.0,  # abort_request :5706 (the default: no host receive)
    "disaggregation_decode_extra_slots": None,
    "disaggregation_decode_polling_interval": 1,  # process_decode_queue (the default: every iteration)
    "disaggregation_decode_enable_radix_cache": True,  # --disaggregation-decode-enable-radix-cache: the tree stays on
}
"""The ``disagg`` namespace leaves a PD server publishes beyond the ones every shape has (``sglang_runtime``)."""


class OneRankGroup:
    """A one-rank CPU process group: ``all_reduce_flags`` returns the flags unchanged when ``dist.get_world_size(group)``,
    which asks ``group.size()``, is 1 (disaggregation/utils.py:287-297)."""

    def size(self) -> int:
        return 1


ONE_RANK = OneRankGroup()

PARALLEL_LEAVES: dict[str, Any] = {
    "dp_rank": 0,  # _init_kv_manager prefill.py:262
    "attn_tp_group": SimpleNamespace(cpu_group=ONE_RANK),  # DecodePreallocQueue decode.py:421, DecodeTransferQueue :2545
    "attn_tp_size": 1,
    "attn_dp_size": 1,
    "dp_size": 1,
}
"""The ``parallel`` leaves the PD queues read on one rank."""


@contextlib.contextmanager
def published_disaggregation(mode: str | None) -> Iterator[None]:
    """The server's PD configuration published for the block (nothing for a server without PD)."""
    if mode is None:
        yield
        return
    # resolve_decode_retraction_backup (mem_cache/kv_cache_builder.py:197-240) resolves an unset backend to cpu_tensor on a
    # decode server with its radix cache on (host_pool needs it off); a prefill server retracts nothing
    backup = {"disaggregation_decode_retraction_backup": "cpu_tensor" if mode == "decode" else None}
    with (
        overridden(RUNTIME.bags["disagg"].__dict__, {"disaggregation_mode": mode, **DISAGG_LEAVES, **backup}),
        overridden(RUNTIME.bags["device"].__dict__, {"gpu_id": 0}),  # :1602, :1630
        overridden(RUNTIME.bags["memory"].__dict__, {"disable_radix_cache": False}),  # _prealloc_required_tokens decode.py:601
        overridden(RUNTIME.bags["parallel"].__dict__, PARALLEL_LEAVES),
    ):
        yield


HF_CONFIG = SimpleNamespace(architectures=["LlamaForCausalLM"], num_hidden_layers=1, num_key_value_heads=1)
"""The HF config fields the PD build reads: no DSA seed (``get_dsa_seed_metadata_dim``, utils.py:131-139, reads
``index_share_for_mtp_iteration`` with a default), not MiniMax M3 (scheduler.py:1568), one layer (prefill.py:286-291)."""


class ForwardRelay:
    """``future_map`` as a decode server's prebuilt batch uses it: ``stash`` hands each request's last token to the first
    decode forward (decode_schedule_batch_mixin.py:154-158); the forward is the fake model, which reads no relay."""

    def stash(self, indices: Any, payload: Any) -> None:
        return None


def server_attributes(tokens: int, tp_worker: Any) -> dict[str, Any]:
    """What ``Scheduler.__init__`` and the model worker set that a PD server's queues read (each: the line reading it), for a
    pool of ``tokens`` KV slots; the TP worker's model runner is given its two sizes."""
    tp_worker.model_runner.effective_logical_max_total_num_tokens = tokens  # PrefillBootstrapQueue prefill.py:208
    tp_worker.model_runner.kv_cache_dtype_str = "auto"  # _init_kv_manager prefill.py:269 (--kv-cache-dtype auto)
    tp_worker.is_hybrid_swa = False  # DecodePreallocQueue decode.py:462
    return {
        "attn_tp_cpu_group": ONE_RANK,  # pop_bootstrapped prefill.py:522-525, the decode queues' polls
        "attn_cp_cpu_group": ONE_RANK,
        "random_seed": 0,  # DecodePreallocQueue decode.py:482 (--random-seed, its checksum-mismatch injector only)
        "enable_decode_hicache": False,  # process_decode_queue decode.py:3459 (__init__ :520: no decode HiCache)
        "future_map": ForwardRelay(),  # get_new_prebuilt_batch decode.py:3286
        # init_model_worker (scheduler.py:1158-1164): the device module's streams, torch.cpu's on a CPU; a decode server
        # under overlap waits on the forward stream before it seeds a row (decode.py:1085, :3444)
        "schedule_stream": torch.cpu.Stream(),
        "forward_stream": torch.cpu.Stream(),
    }


class DisaggModelConfig:
    """The model config fields a PD server reads past :class:`~poolfuzz.harness.upstream.sglang_scheduler.ServerModelConfig`'s:
    the HF config (:data:`HF_CONFIG`), one hidden layer and one KV head (the engine target's KV pool,
    ``engine_hicache.kv_pool``)."""

    hf_config = HF_CONFIG
    hf_text_config = HF_CONFIG  # _transfer_start_layer prefill.py:289
    num_hidden_layers = 1  # build_kv_layer_ids prefill.py:343, setup_state_kv_args :365
    num_key_value_heads = 1  # _add_request_to_queue scheduler.py:3499

    def get_total_num_kv_heads(self) -> int:
        """``_init_kv_manager`` prefill.py:349."""
        return 1


def prefill_iteration(loop: Any) -> Any:
    """One pass of ``event_loop_normal_disagg_prefill`` (prefill.py:684-723) or, under overlap,
    ``event_loop_overlap_disagg_prefill`` (:758-873), after its ingest: the bootstrapped requests join the waiting queue,
    the next batch runs (the fake model), a result is processed (``process_batch_result_disagg_prefill`` through
    ``process_batch_result``: the batch's own in the normal loop, the previous batch's under overlap), then the in-flight
    transfers are polled."""
    s = loop.s
    s.waiting_queue.extend(s.disagg_prefill_bootstrap_queue.pop_bootstrapped())  # :695-697, :792-793
    if not loop.overlap:
        plan = s.get_next_disagg_prefill_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)  # :700
        s.running_batch = plan.running_batch
        batch = s.ngram_embedding_manager.prepare_for_forward(plan.batch_to_run, chunked_req=s.chunked_req)
        s.cur_batch_for_debug = batch
        if batch:
            loop._process(batch, loop._run_batch(batch))  # :714-715
        else:
            s._sched_idled = True
            s.on_idle()
        s.process_disagg_prefill_inflight_queue()  # :720
        s.last_batch = batch
        return batch
    # Without SGLANG_ENABLE_DISAGG_PREFILL_CONTINUOUS_INPUT_POLLING (environ.py:715, off by default) the loop never waits
    # on a result mid-pass: waiting_for_batch_result stays False, so batch creation is never skipped (:795-796, :837-851).
    batch = None
    if len(s.result_queue) < 2 and not s._deferred_input_requests:  # :799-803
        plan = s.get_next_disagg_prefill_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)  # :806-811
        s.running_batch = plan.running_batch
        batch = s.ngram_embedding_manager.prepare_for_forward(plan.batch_to_run, chunked_req=s.chunked_req)
        s.cur_batch_for_debug = batch
        if batch:
            result = loop._run_batch(batch)  # :825 (the WAR barrier is off, :826-832)
            s.result_queue.append((batch.copy(), result))  # :833
    if s.last_batch:
        loop._pop_and_process()  # :853-854: the oldest result
    elif batch is None:
        s.on_idle()  # :855-857
    s.process_disagg_prefill_inflight_queue()  # :859
    s._sched_idled = batch is None  # :869
    s.last_batch = batch
    return batch


def decode_iteration(loop: Any) -> Any:
    """One pass of ``event_loop_normal_disagg_decode`` (decode.py:3123-3162) or, under overlap,
    ``event_loop_overlap_disagg_decode`` (:3165-3224), after its ingest: the prealloc and transfer queues advance
    (``process_decode_queue``), then the next batch (a prebuilt batch of transferred requests, or decode) runs."""
    s = loop.s
    s.disagg_decode_prealloc_queue.prefetch_prefill_dp_rank_queries()  # :3133
    s.process_decode_queue()  # :3139
    plan = s.get_next_disagg_decode_batch_to_run(running_batch=s.running_batch)  # :3142
    s.running_batch = plan.running_batch
    batch = s.ngram_embedding_manager.prepare_for_forward(plan.batch_to_run, chunked_req=s.chunked_req)
    s.cur_batch_for_debug = batch
    if not loop.overlap:
        if batch:
            loop._process(batch, loop._run_batch(batch))  # :3154-3155
        else:
            s._sched_idled = True
            s.on_idle()
        s.last_batch = batch
        return batch
    disable_overlap_for_batch = s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch)  # :3199
    if disable_overlap_for_batch and s.last_batch:
        loop._pop_and_process()
    if batch:
        result = loop._run_batch(batch)  # :3208
        s.result_queue.append((batch.copy(), result))  # :3210
    else:
        s._sched_idled = True
    if s.last_batch:
        if not disable_overlap_for_batch:
            loop._pop_and_process()
    elif batch is None:
        s.on_idle()  # :3219-3220
    s.last_batch = batch
    return batch


def queued(loop: Any) -> list[Any]:
    """Every request in a PD queue (prefill: bootstrap and in-flight; decode: prealloc, transfer, retracted)."""
    s = loop.s
    mode = loop.config.disaggregation
    if mode == "prefill":
        return list(s.disagg_prefill_bootstrap_queue.queue) + list(s.disagg_prefill_inflight_queue)
    if mode == "decode":
        prealloc = s.disagg_decode_prealloc_queue
        return [d.req for d in prealloc.queue] + [d.req for d in s.disagg_decode_transfer_queue.queue] + list(prealloc.retracted_queue)
    return []


def transfers(loop: Any) -> list[tuple[Any, Any]]:
    """Each PD-queued request with a transfer under way and its fake sender (prefill: bootstrap and in-flight queues, on the
    request) or receiver (decode: prealloc and transfer queues, on the ``DecodeRequest``)."""
    s = loop.s
    mode = loop.config.disaggregation
    if mode == "prefill":
        reqs = list(s.disagg_prefill_bootstrap_queue.queue) + list(s.disagg_prefill_inflight_queue)
        return [(r, r.disagg_kv_sender) for r in reqs if getattr(r, "disagg_kv_sender", None) is not None]
    if mode == "decode":
        entries = list(s.disagg_decode_prealloc_queue.queue) + list(s.disagg_decode_transfer_queue.queue)
        return [(d.req, d.kv_receiver) for d in entries if getattr(d, "kv_receiver", None) is not None]
    return []


class PeerClock:
    """When a PD server's transfers conclude, in scheduler iterations: the fuzzer's knob over the fake backend's peer.

    A sender or receiver created while :attr:`delay` is ``d`` polls ``Transferring`` (``KVPoll.Transferring``, base/conn.py:127)
    for ``d`` iteration boundaries after it would have concluded, then answers as the fake backend does."""

    def __init__(self) -> None:
        self.delay = 0
        self.held: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def tick(self) -> bool:
        """An iteration boundary; whether a transfer was held."""
        was = any(n > 0 for n in self.held.values())
        for peer in list(self.held):
            self.held[peer] -= 1
        return was

    def busy(self) -> bool:
        """Whether a transfer is held now (the scheduler is waiting on its peer, not hung)."""
        return any(n > 0 for n in self.held.values())

    def hold(self, peer: Any) -> None:
        if self.delay and peer not in self.held:
            self.held[peer] = self.delay

    def holding(self, peer: Any) -> bool:
        return self.held.get(peer, 0) > 0


CLOCK = PeerClock()
"""The process's peer clock (one PD server runs at a time; :meth:`SchedulerLoop.__init__` resets it)."""


def install_peer_clock(module: Any) -> None:
    """``fake/conn.py`` after it executes: each sender's and receiver's ``poll`` answers ``Transferring`` while
    :data:`CLOCK` holds it (registered at its first poll), and as the file's own ``poll`` otherwise."""
    for cls in (module.FakeKVSender, module.FakeKVReceiver):
        own = cls.poll

        def poll(self: Any, _own: Any = own) -> Any:
            state = _own(self)
            if state == module.KVPoll.Success:
                CLOCK.hold(self)
                if CLOCK.holding(self):
                    self.conclude_state = None
                    return module.KVPoll.Transferring
            return state

        cls.poll = poll


def fail_transfer(peer: Any) -> None:
    """The peer is lost: the request's sender or receiver reports ``Failed`` at its next poll (its own ``abort()``,
    fake/conn.py:137-138, :195-196)."""
    CLOCK.held.pop(peer, None)
    peer.abort()


__all__ = [
    "CLOCK",
    "DisaggModelConfig",
    "PeerClock",
    "decode_iteration",
    "fail_transfer",
    "install_peer_clock",
    "prefill_iteration",
    "published_disaggregation",
    "queued",
    "server_attributes",
    "transfers",
]

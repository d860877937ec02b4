"""The requests a server takes besides arrivals, each through upstream's own handler: aborts, the weight-update pause,
timeouts, sessions, HiCache's storage administration and PD's peers.

:class:`ServerRequests` is a mixin of :class:`~poolfuzz.harness.upstream.engine_scheduler.SchedulerLoop`, which holds
the scheduler (``s``) these methods call; after each, upstream's busy check is void until the next iteration
(``busy_check``), since memory changed outside an iteration.
"""

from __future__ import annotations

from typing import Any

from poolfuzz.harness.kits.engine.config import EngineTargetConfig
from poolfuzz.harness.upstream.engine_disagg import PeerClock, fail_transfer, queued, transfers
from poolfuzz.harness.upstream.engine_hicache import TransferClock
from poolfuzz.harness.upstream.engine_spec import speculating
from poolfuzz.harness.upstream.sglang_modules import engine_call
from poolfuzz.harness.upstream.sglang_scheduler_stand_ins import (
    AbortReq,
    ClearHiCacheReqInput,
    CloseSessionReqInput,
    ContinueGenerationReqInput,
    DetachHiCacheStorageReqInput,
    OpenSessionReqInput,
    PauseGenerationReqInput,
    SessionParams,
)
from poolfuzz.harness.upstream.sglang_stand_ins import EXPIRED


class ServerRequests:
    """Aborts, pauses, timeouts, sessions, HiCache admin and PD peers, as a client or an operator sends them."""

    s: Any
    """Upstream's ``Scheduler`` (:func:`~poolfuzz.harness.upstream.sglang_scheduler.build_scheduler`)."""
    config: EngineTargetConfig
    transfers: TransferClock | None
    peers: PeerClock
    busy_check: tuple[bool, str] | None

    def session_fields(self, session: str) -> dict[str, Any]:
        """A session request's fields as the tokenizer manager passes them on: ``native:ID`` a top-level ``session_id`` (a
        radix-native session request, scheduler.py:2973-2975, whose generation ``ensure_session_generation`` opens,
        :3035-3038); ``ID`` ``session_params`` naming the session and, where it has one that finished, its latest request to
        append to (``Session.create_req``, session_controller.py:255-264, which prepends that request's prompt and
        output)."""
        if session.startswith("native:"):
            return {"session_id": session.removeprefix("native:")}
        opened = self.s.session_controller.get(session)
        finished = [rid for rid, node in (opened.req_nodes.items() if opened is not None else ()) if node.req.finished()]
        return {"session_params": SessionParams(id=session, rid=finished[-1] if finished else None)}

    @engine_call
    def open_session(self, session: str) -> bool:
        """``open_session`` (scheduler.py:6139-6147) as the tokenizer manager sends ``OpenSessionReqInput``: the controller opens
        a non-streaming session (session_controller.py:387-404) and, on a session radix cache, the tree its generation
        (:6141-6142).  Whether it opened (a session already open is refused)."""
        return bool(self.s.open_session(OpenSessionReqInput(session_id=session)).success)

    @engine_call
    def close_session(self, session: str) -> None:
        """``close_session`` (scheduler.py:6149-6157): the tree releases the session's tagged leaves (``release_radix_session``)
        and the controller closes it (session_controller.py:407-461); an unknown id only logs."""
        self.s.close_session(CloseSessionReqInput(session_id=session))
        self.busy_check = None

    def set_transfer_delay(self, iterations: int) -> None:
        """HiCache shapes: the device-to-host copies submitted from now on complete ``iterations`` iteration boundaries
        later (:class:`~poolfuzz.harness.upstream.engine_hicache.TransferClock`); until then the scheduler's
        ``check_hicache_events`` finds their acks not ready and the tree keeps what they read."""
        if self.transfers is not None:
            self.transfers.delay = iterations
        if self.config.disaggregation is not None:  # a PD server's peer (engine_disagg.PeerClock)
            self.peers.delay = iterations

    @engine_call
    @speculating
    def fail_transfer(self, pick: int) -> str | None:
        """PD shapes: the peer of one request in a PD queue is lost (its fake sender or receiver reports ``Failed`` at the
        next poll, :func:`~poolfuzz.harness.upstream.engine_disagg.fail_transfer`).  The request's id, or ``None``."""
        under_way = [(req, peer) for req, peer in transfers(self) if not req.finished()]
        if not under_way:
            return None
        req, peer = under_way[pick % len(under_way)]
        fail_transfer(peer)
        return str(req.rid)

    def hicache_in_flight(self) -> list[tuple[int, ...]]:
        """The device KV slots each device-to-host copy not yet complete still reads."""
        return self.transfers.in_flight() if self.transfers is not None else []

    @engine_call
    def hicache_admin(self, request: str) -> bool:
        """An operator's HiCache storage request on a HiCache server: ``detach`` (``detach_hicache_storage_wrapped``,
        scheduler.py:5479-5518: refused unless the scheduler is fully idle, then the tree drains its storage control queues
        and releases what pending storage operations hold, storage_attachment.py:190-230, before recording the backend
        detached) or ``clear`` (``clear_hicache_storage_wrapped``, :5230-5238: the backend, none here, cleared).  Whether
        the scheduler answered success."""
        s = self.s
        if request == "detach":
            answer = s.detach_hicache_storage_wrapped(DetachHiCacheStorageReqInput())
        else:
            answer = s.clear_hicache_storage_wrapped(ClearHiCacheReqInput())
        self.busy_check = None
        return bool(answer.success)

    @engine_call
    @speculating
    def abort(self, rid: str) -> str:
        """``abort_request`` (scheduler.py:5675): where the request was, then upstream's own abort."""
        s = self.s
        where = "running"
        if s.chunked_req is not None and s.chunked_req.rid == rid:
            where = "chunked"
        elif any(r.rid == rid for r in s.waiting_queue):
            where = "queued"
        elif any(r.rid == rid for r in queued(self)):
            where = "PD-queued"
        s.abort_request(AbortReq(rid=rid))
        self.busy_check = None
        return where

    @engine_call
    @speculating
    def pause(self, *, flush: bool) -> bool:
        """The weight-update pause: ``pause_generation`` in ``retract`` mode (scheduler.py:5817-5932: the queued result
        processed, every running, last-extend and chunked request retracted by ``retract_all`` and re-queued), then
        ``flush_cache`` when ``flush`` (:5518-5547, allowed while paused with requests waiting; ``empty_cache=False``: the
        device allocator's cache is no pool), then ``continue_generation`` (:5934).  Whether the cache was flushed."""
        s = self.s
        s.pause_generation(PauseGenerationReqInput(mode="retract"))
        flushed = bool(s.flush_cache(empty_cache=False)) if flush else False
        s.continue_generation(ContinueGenerationReqInput())
        self.busy_check = None
        return flushed

    @engine_call
    @speculating
    def abort_all(self) -> int:
        """``AbortReq(abort_all=True)`` (scheduler.py:5675-5812: the tokenizer sends it when the server is asked to abort
        every request, or a client disconnects with ``abort_all``): queued requests leave at once, the chunked one at the
        next iteration's top, running ones at their next result.  How many requests it named."""
        s = self.s
        live = len(s.waiting_queue) + len(s.running_batch.reqs) + (s.chunked_req is not None)
        s.abort_request(AbortReq(abort_all=True))
        self.busy_check = None
        return live

    @engine_call
    def expire(self, pick: int) -> str | None:
        """Time passes for one request: a waiting one has waited past ``SGLANG_REQ_WAITING_TIMEOUT``
        (``EngineTargetConfig.waiting_timeout``), or a running one (of the running or the last batch, as
        ``_collect_inflight_batches`` lists them, scheduler.py:5665-5673) has run past ``SGLANG_REQ_RUNNING_TIMEOUT``
        (``running_timeout``).  The next ``ingest_requests`` polls it out (``_poll_timeout_aborts``, :3598-3651).  The
        request's id, or ``None`` where neither knob names a request."""
        s = self.s
        waiting = list(s.waiting_queue) if self.config.waiting_timeout else []
        running: list[Any] = []
        if self.config.running_timeout:
            for batch in (s.running_batch, s.last_batch):
                running += [r for r in (batch.reqs if batch is not None else ()) if not r.finished() and r not in running]
        if not waiting + running:
            return None
        req = (waiting + running)[pick % len(waiting + running)]
        if req in waiting:
            req.time_stats.wait_queue_entry_time = EXPIRED
        else:
            req.time_stats.forward_entry_time = EXPIRED
        return str(req.rid)

"""The collector: implements the probe, keeps per-request timelines, and ends the run.

A request's arrival is the moment the source released it (its trace time, or later for a
follow-up turn, a dependent agent step or a session waiting for a closed-loop slot).

Only requests in flight hold state here: a request's timeline is a small slotted object from
its arrival to its end; at its end it becomes a frozen
:class:`~simkit.core.records.RequestRecord` handed to the *sink* (a list by default, or a
:class:`~simkit.output.spool.RequestSpool` that writes records to disk as the run goes, so memory
follows the requests in flight, not the trace length). Token times are kept per request in
compact ``array('d')`` buffers when asked for. ``all_done`` succeeds when every request has
ended: all ``expected`` of them, or, for a streamed workload of unknown length, all that the
source released once it reports (:meth:`Collector.expect`) how many there were.
Part of :mod:`simkit.cluster`: owns one SimPy ``Event``.
"""

from __future__ import annotations

from array import array
from typing import Iterable, Optional

import simpy

from simkit.cluster.probe import COMPLETED, INCOMPLETE
from simkit.core.records import RequestRecord, RunRecords
from simkit.core.request import Request


class InvariantError(AssertionError):
    """The simulation's own bookkeeping broke a conservation rule (a simkit bug)."""


class _Live:
    """The timeline of one request in flight (times in simulation seconds)."""

    __slots__ = ("input_length", "output_length", "arrived_at", "dispatched_at", "first_admitted_at",
                 "first_token_at", "second_token_at", "last_token_at", "n_tokens", "prefilled_at",
                 "handed_off_at", "decode_admitted_at", "cached_tokens", "prefill_worker", "decode_worker",
                 "times", "priority", "verify_rounds", "accepted_drafts", "frontend_s", "delivery_s",
                 "host_cached_tokens", "restore_s")

    def __init__(self, request: Request, at: float, times: Optional[array], frontend_s: float,
                 delivery_s: float) -> None:
        self.input_length = request.input_length
        self.output_length = request.output_length
        self.arrived_at = at
        self.dispatched_at = self.first_admitted_at = None
        self.first_token_at = self.second_token_at = self.last_token_at = None
        self.prefilled_at = self.handed_off_at = self.decode_admitted_at = None
        self.prefill_worker = self.decode_worker = None
        self.n_tokens = 0
        self.cached_tokens = 0
        self.times = times
        self.priority = request.priority
        self.verify_rounds = self.accepted_drafts = 0
        self.frontend_s, self.delivery_s = frontend_s, delivery_s
        self.host_cached_tokens = 0
        self.restore_s = 0.0

    def record(self, rid: int, status: str, finished_at: Optional[float]) -> RequestRecord:
        return RequestRecord(
            rid=rid, arrived_at=self.arrived_at, dispatched_at=self.dispatched_at,
            input_length=self.input_length, requested_output_length=self.output_length,
            output_length=self.n_tokens, status=status, first_admitted_at=self.first_admitted_at,
            first_token_at=self.first_token_at, second_token_at=self.second_token_at,
            last_token_at=self.last_token_at, finished_at=finished_at, prefilled_at=self.prefilled_at,
            handed_off_at=self.handed_off_at, decode_admitted_at=self.decode_admitted_at,
            cached_tokens=self.cached_tokens, prefill_worker=self.prefill_worker,
            decode_worker=self.decode_worker, priority=self.priority, verify_rounds=self.verify_rounds,
            accepted_drafts=self.accepted_drafts, frontend_s=self.frontend_s,
            first_token_overhead_s=self.delivery_s, host_cached_tokens=self.host_cached_tokens,
            restore_s=self.restore_s)


def not_arrived_record(request: Request) -> RequestRecord:
    """The record of a request the run stopped before releasing (a time cap)."""
    return RequestRecord(
        rid=request.rid, arrived_at=None, dispatched_at=None, input_length=request.input_length,
        requested_output_length=request.output_length, output_length=0, status=INCOMPLETE,
        first_admitted_at=None, first_token_at=None, second_token_at=None, last_token_at=None,
        finished_at=None, prefilled_at=None, handed_off_at=None, decode_admitted_at=None, cached_tokens=0,
        prefill_worker=None, decode_worker=None, priority=request.priority)


class Collector:
    """Records what the probe reports.

    ``requests`` maps a request id to its :class:`Request` while the request is released (a
    list indexed by id, or the streaming source's dict of requests read and not yet ended);
    ``expected`` is the number of requests when known up front (None: streamed, see
    :meth:`expect`). ``sink`` receives each request's record when it ends (``append``).
    """

    def __init__(self, env: simpy.Environment, requests, record_token_times: bool = True,
                 expected: Optional[int] = None, sink=None) -> None:
        self.env = env
        #: the frontend's time before the router (recorded per request; the source waits it);
        #: set by the simulation from its latency model
        self.frontend_s = 0.0
        #: the frontend's time from the engine's tokens to the client: token and end times are
        #: recorded that much later, and what waits for a request's end (a session's next turn, a
        #: closed-loop slot) hears of it then
        self.delivery_s = 0.0
        self.requests = requests
        self.record_token_times = record_token_times
        self.live: dict[int, _Live] = {}
        self.sink = [] if sink is None else sink
        self.token_times: Optional[dict[int, array]] = {} if record_token_times else None
        self.prompt_lookup_tokens = 0
        self.prompt_hit_tokens = 0
        self.prompt_host_hit_tokens = 0  #: of those, restored from a host KV tier
        self.ended_count = 0
        self.arrived_count = 0
        self.expected = expected
        #: called as listener(rid, at, status) when a request ends (the source's dependents)
        self.listeners: list = []
        #: called as listener(rid) when a request's prompt is done: its first token, or its
        #: prefill on a prefill worker (a KV-aware router's queued prefill tokens)
        self.prefill_listeners: list = []
        #: called as listener(rid) when a prefill worker frees a request's KV, the decode side
        #: having taken it over
        self.release_listeners: list = []
        #: with :meth:`track_recent`: since the last :meth:`take_recent`, the requests that
        #: arrived, the TTFTs of first tokens (s), and per completion its ITL (s; None below 2
        #: tokens)
        self.recent: Optional[tuple[list, list, list]] = None
        #: speculative decoding's counts over the requests that ended (None: none speculated)
        self.speculation: Optional[dict] = None
        #: (rid, whether its record is in the sink) while :meth:`finished` moves a record
        self._ending: Optional[tuple[int, bool]] = None
        self.all_done = env.event()
        if expected == 0:
            self.all_done.succeed()

    @property
    def remaining(self) -> Optional[int]:
        """Requests not ended yet (None while a streamed workload's length is unknown)."""
        return None if self.expected is None else self.expected - self.ended_count

    def expect(self, total: int) -> None:
        """The streaming source read its last request: ``total`` requests in all."""
        self.expected = total
        if self.ended_count == total and not self.all_done.triggered:
            self.all_done.succeed()

    def track_recent(self) -> None:
        """Start keeping recent arrivals, TTFTs and ITLs (the planner's window; off by default,
        it costs an append per event)."""
        self.recent = ([], [], [])

    def take_recent(self) -> tuple[list, list, list]:
        """(requests that arrived, TTFTs in s of first tokens, ITLs in s (or None) of
        completions) since the previous call."""
        out = self.recent
        self.recent = ([], [], [])
        return out

    # ------------------------------------------------------------------ probe

    def arrived(self, rid: int, at: float) -> None:
        times = array("d") if self.token_times is not None else None
        request = self.requests[rid]
        self.live[rid] = _Live(request, at, times, self.frontend_s, self.delivery_s)
        if times is not None:
            self.token_times[rid] = times
        self.arrived_count += 1
        if self.recent is not None:
            self.recent[0].append(request)

    def frontend(self, rid: int, seconds: float) -> None:
        self.live[rid].frontend_s = seconds

    def dispatched(self, rid: int, at: float) -> None:
        self.live[rid].dispatched_at = at

    def admitted(self, rid: int, at: float, pool: str, worker: int, cached_tokens: int,
                 lookup_tokens: int) -> None:
        st = self.live[rid]
        if pool == "decode":
            st.decode_worker = worker
            if st.decode_admitted_at is None:
                st.decode_admitted_at = at
            return
        if st.first_admitted_at is None:
            st.first_admitted_at = at
            st.cached_tokens = cached_tokens
        if pool == "prefill":
            st.prefill_worker = worker
        else:
            st.decode_worker = worker
        self.prompt_lookup_tokens += lookup_tokens
        self.prompt_hit_tokens += cached_tokens

    def restored(self, rid: int, host_tokens: int, seconds: float) -> None:
        st = self.live[rid]
        if not st.host_cached_tokens and not st.restore_s:  # its first admission's
            st.host_cached_tokens = host_tokens
            st.restore_s = seconds
        self.prompt_host_hit_tokens += host_tokens

    def tokens(self, rids, at: float) -> None:
        live = self.live
        if self.delivery_s:
            at = at + self.delivery_s
        for rid in rids:
            st = live[rid]
            count = st.n_tokens
            if count >= st.output_length:
                raise InvariantError(f"request {rid} produced more than its {st.output_length} "
                                     f"output tokens (at t={at:.6f} s)")
            if count == 0:
                st.first_token_at = at
                if self.recent is not None:
                    self.recent[1].append(at - st.arrived_at)
                for listener in self.prefill_listeners:
                    listener(rid)
            elif count == 1:
                st.second_token_at = at
            st.n_tokens = count + 1
            st.last_token_at = at
            if st.times is not None:
                st.times.append(at)

    def token_run(self, rids, times) -> None:
        live = self.live
        if self.delivery_s:
            delivery = self.delivery_s
            times = [t + delivery for t in times]
        n = len(times)
        for rid in rids:
            st = live[rid]
            count = st.n_tokens
            if count + n > st.output_length:
                raise InvariantError(f"request {rid} produced more than its {st.output_length} "
                                     f"output tokens (at t={times[-1]:.6f} s)")
            if count == 0:
                st.first_token_at = times[0]
                if self.recent is not None:
                    self.recent[1].append(times[0] - st.arrived_at)
                for listener in self.prefill_listeners:
                    listener(rid)
                if n > 1:
                    st.second_token_at = times[1]
            elif count == 1:
                st.second_token_at = times[0]
            st.n_tokens = count + n
            st.last_token_at = times[-1]
            if st.times is not None:
                st.times.extend(times)

    def prefilled(self, rid: int, at: float) -> None:
        self.live[rid].prefilled_at = at
        for listener in self.prefill_listeners:
            listener(rid)

    def handed_off(self, rid: int, at: float) -> None:
        self.live[rid].handed_off_at = at

    def speculated(self, rid: int, rounds: int, accepted: int, tokens: int, by_position, tried) -> None:
        st = self.live[rid]
        st.verify_rounds = rounds
        st.accepted_drafts = accepted
        agg = self.speculation
        if agg is None:
            agg = self.speculation = {"rounds": 0, "accepted": 0, "tokens": 0,
                                      "by_position": [0] * len(by_position), "tried": [0] * len(tried)}
        agg["rounds"] += rounds
        agg["accepted"] += accepted
        agg["tokens"] += tokens
        for i, (a, t) in enumerate(zip(by_position, tried)):
            agg["by_position"][i] += a
            agg["tried"][i] += t

    def released(self, rid: int, at: float) -> None:
        for listener in self.release_listeners:
            listener(rid)

    def finished(self, rid: int, at: float, status: str) -> None:
        st = self.live.get(rid)
        if st is None:
            raise InvariantError(f"request {rid} ended ({status}) but is not in flight: it ended before, "
                                 f"or never arrived (at t={at:.6f} s)")
        delivery = self.delivery_s
        record = st.record(rid, status, at + delivery if status == COMPLETED else None)
        # a run stopped in the middle of this (a KeyboardInterrupt) keeps the request once:
        # in flight until its record is in the sink (finalize tells which by the flag)
        self._ending = (rid, False)
        self.sink.append(record)
        self._ending = (rid, True)
        del self.live[rid]
        self._ending = None
        self.ended_count += 1
        if self.recent is not None and status == COMPLETED:
            n = st.n_tokens
            self.recent[2].append((st.last_token_at - st.first_token_at) / (n - 1) if n > 1 else None)
        if delivery:  # the client hears of the end that much later
            self.env.timeout(delivery).callbacks.append(lambda _ev: self._tell(rid, at + delivery, status))
        else:
            self._tell(rid, at, status)
        if self.ended_count == self.expected:
            self.all_done.succeed()

    def _tell(self, rid: int, at: float, status: str) -> None:
        for listener in self.listeners:
            listener(rid, at, status)

    # ------------------------------------------------------------------ results

    def finalize(self, end_at: float, worker_seconds: dict, passes: dict, stop_reason: str = "completed",
                 stop_detail: Optional[str] = None, not_arrived: Iterable[Request] = (), **extra) -> RunRecords:
        """Freeze everything into :class:`RunRecords`: the records of ended requests, then those
        still in flight (incomplete, with their partial timelines), then ``not_arrived``;
        ``extra`` are further RunRecords fields (the planner's series).

        With a list sink the records come ordered by ``rid``; a spool keeps the order of
        writing and is closed here.
        """
        sink = self.sink
        if self._ending is not None and self._ending[1]:  # stopped after its record went in
            self.live.pop(self._ending[0], None)
        self._ending = None
        for rid in sorted(self.live):
            sink.append(self.live[rid].record(rid, INCOMPLETE, None))
        for request in not_arrived:
            if request.rid not in self.live:  # stopped between its arrival and the source's note of it
                sink.append(not_arrived_record(request))
        token_times = None
        if isinstance(sink, list):
            sink.sort(key=lambda r: r.rid)
            requests = tuple(sink)
            if self.token_times is not None:
                empty = array("d")
                token_times = tuple(self.token_times.get(r.rid, empty) for r in requests)
        else:
            sink.close()
            requests = sink
        return RunRecords(
            requests=requests,
            end_at=end_at,
            worker_seconds=worker_seconds,
            prompt_lookup_tokens=self.prompt_lookup_tokens,
            prompt_hit_tokens=self.prompt_hit_tokens,
            passes=passes,
            token_times=token_times,
            stop_reason=stop_reason,
            stop_detail=stop_detail,
            speculation=self.speculation,
            **extra,
        )

"""The collector: implements the probe, keeps per-request timelines, and ends the run.

A request's arrival is the moment the source released it (its trace time, or later for a
follow-up turn, a dependent agent step or a session waiting for a closed-loop slot).

Per-request state lives in flat lists indexed by request id (ids are 0..N-1), so a token
costs a few list writes, not an object. Token times are kept per request in compact
``array('d')`` buffers when asked for. ``all_done`` succeeds when every request has ended.
Layer L3: owns one SimPy ``Event``.
"""

from __future__ import annotations

from array import array
from typing import Optional, Sequence

import simpy

from simkit.probe import COMPLETED, INCOMPLETE
from simkit.records import RequestRecord, RunRecords
from simkit.request import Request


class InvariantError(AssertionError):
    """The simulation's own bookkeeping broke a conservation rule (a simkit bug)."""


class Collector:
    """Records what the probe reports about ``requests`` (ids must be 0..N-1)."""

    def __init__(self, env: simpy.Environment, requests: Sequence[Request],
                 record_token_times: bool = True) -> None:
        n = len(requests)
        self.env = env
        self.requests = requests
        self.arrived_at: list[Optional[float]] = [None] * n
        self.dispatched_at: list[Optional[float]] = [None] * n
        self.first_admitted_at: list[Optional[float]] = [None] * n
        self.first_token_at: list[Optional[float]] = [None] * n
        self.second_token_at: list[Optional[float]] = [None] * n
        self.last_token_at: list[Optional[float]] = [None] * n
        self.n_tokens = [0] * n
        self.finished_at: list[Optional[float]] = [None] * n
        self.status: list[Optional[str]] = [None] * n
        self.handed_off_at: list[Optional[float]] = [None] * n
        self.prefilled_at: list[Optional[float]] = [None] * n
        self.decode_admitted_at: list[Optional[float]] = [None] * n
        self.cached_tokens = [0] * n
        self.prefill_worker: list[Optional[int]] = [None] * n
        self.decode_worker: list[Optional[int]] = [None] * n
        self.token_times = [array("d") for _ in range(n)] if record_token_times else None
        self.prompt_lookup_tokens = 0
        self.prompt_hit_tokens = 0
        self.remaining = n
        self.arrived_count = 0
        #: called as listener(rid, at, status) when a request ends (the source's dependents)
        self.listeners: list = []
        #: with :meth:`track_recent`: ids that arrived, got their first token, completed since
        #: the last :meth:`take_recent`
        self.recent: Optional[tuple[list, list, list]] = None
        self.all_done = env.event()
        if n == 0:
            self.all_done.succeed()

    # ------------------------------------------------------------------ probe

    def track_recent(self) -> None:
        """Start keeping the ids of recent arrivals, first tokens and completions (the planner's
        window; off by default, it costs an append per event)."""
        self.recent = ([], [], [])

    def take_recent(self) -> tuple[list, list, list]:
        """The ids that arrived, got their first token and completed since the previous call."""
        out = self.recent
        self.recent = ([], [], [])
        return out

    def arrived(self, rid: int, at: float) -> None:
        self.arrived_at[rid] = at
        self.arrived_count += 1
        if self.recent is not None:
            self.recent[0].append(rid)

    def dispatched(self, rid: int, at: float) -> None:
        self.dispatched_at[rid] = at

    def admitted(self, rid: int, at: float, pool: str, worker: int, cached_tokens: int,
                 lookup_tokens: int) -> None:
        if pool == "decode":
            self.decode_worker[rid] = worker
            if self.decode_admitted_at[rid] is None:
                self.decode_admitted_at[rid] = at
            return
        if self.first_admitted_at[rid] is None:
            self.first_admitted_at[rid] = at
            self.cached_tokens[rid] = cached_tokens
        if pool == "prefill":
            self.prefill_worker[rid] = worker
        else:
            self.decode_worker[rid] = worker
        self.prompt_lookup_tokens += lookup_tokens
        self.prompt_hit_tokens += cached_tokens

    def tokens(self, rids: Sequence[int], at: float) -> None:
        n_tokens, last = self.n_tokens, self.last_token_at
        times = self.token_times
        requests = self.requests
        for rid in rids:
            count = n_tokens[rid]
            if count >= requests[rid].output_length:
                raise InvariantError(f"request {rid} produced more than its {requests[rid].output_length} "
                                     f"output tokens (at t={at:.6f} s)")
            if count == 0:
                self.first_token_at[rid] = at
                if self.recent is not None:
                    self.recent[1].append(rid)
            elif count == 1:
                self.second_token_at[rid] = at
            n_tokens[rid] = count + 1
            last[rid] = at
            if times is not None:
                times[rid].append(at)

    def token_run(self, rids: Sequence[int], times: Sequence[float]) -> None:
        n_tokens, last = self.n_tokens, self.last_token_at
        token_times = self.token_times
        n = len(times)
        requests = self.requests
        for rid in rids:
            count = n_tokens[rid]
            if count + n > requests[rid].output_length:
                raise InvariantError(f"request {rid} produced more than its {requests[rid].output_length} "
                                     f"output tokens (at t={times[-1]:.6f} s)")
            if count == 0:
                self.first_token_at[rid] = times[0]
                if self.recent is not None:
                    self.recent[1].append(rid)
                if n > 1:
                    self.second_token_at[rid] = times[1]
            elif count == 1:
                self.second_token_at[rid] = times[0]
            n_tokens[rid] = count + n
            last[rid] = times[-1]
            if token_times is not None:
                token_times[rid].extend(times)

    def prefilled(self, rid: int, at: float) -> None:
        self.prefilled_at[rid] = at

    def handed_off(self, rid: int, at: float) -> None:
        self.handed_off_at[rid] = at

    def finished(self, rid: int, at: float, status: str) -> None:
        if self.status[rid] is not None:
            raise InvariantError(f"request {rid} ended twice ({self.status[rid]}, then {status}) "
                                 f"(at t={at:.6f} s)")
        self.status[rid] = status
        self.finished_at[rid] = at
        self.remaining -= 1
        if self.recent is not None and status == COMPLETED:
            self.recent[2].append(rid)
        for listener in self.listeners:
            listener(rid, at, status)
        if self.remaining == 0:
            self.all_done.succeed()

    # ------------------------------------------------------------------ results

    @property
    def ended_count(self) -> int:
        return len(self.requests) - self.remaining

    def finalize(self, end_at: float, worker_seconds: dict, passes: dict, stop_reason: str = "completed",
                 stop_detail: Optional[str] = None, **extra) -> RunRecords:
        """Freeze everything into :class:`RunRecords`; unfinished requests are incomplete."""
        rows = []
        for req in self.requests:
            rid = req.rid
            status = self.status[rid] or INCOMPLETE
            rows.append(RequestRecord(
                rid=rid,
                arrived_at=self.arrived_at[rid],
                dispatched_at=self.dispatched_at[rid],
                input_length=req.input_length,
                requested_output_length=req.output_length,
                output_length=self.n_tokens[rid],
                status=status,
                first_admitted_at=self.first_admitted_at[rid],
                first_token_at=self.first_token_at[rid],
                second_token_at=self.second_token_at[rid],
                last_token_at=self.last_token_at[rid],
                finished_at=self.finished_at[rid] if status == COMPLETED else None,
                prefilled_at=self.prefilled_at[rid],
                handed_off_at=self.handed_off_at[rid],
                decode_admitted_at=self.decode_admitted_at[rid],
                cached_tokens=self.cached_tokens[rid],
                prefill_worker=self.prefill_worker[rid],
                decode_worker=self.decode_worker[rid],
                priority=req.priority,
            ))
        token_times = None
        if self.token_times is not None:
            token_times = tuple(self.token_times)
        return RunRecords(
            requests=tuple(rows),
            end_at=end_at,
            worker_seconds=worker_seconds,
            prompt_lookup_tokens=self.prompt_lookup_tokens,
            prompt_hit_tokens=self.prompt_hit_tokens,
            passes=passes,
            token_times=token_times,
            stop_reason=stop_reason,
            stop_detail=stop_detail,
            **extra,
        )

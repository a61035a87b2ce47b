"""Flat, frozen output rows: the contract between a simulation and its analysis.

Times are simulation seconds (``*_at``) and durations seconds (``*_s``); reports convert to
milliseconds. Part of :mod:`simkit.core`.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen


def _between(start: Optional[float], end: Optional[float]) -> Optional[float]:
    """``end - start``, or None when either is unknown."""
    return None if start is None or end is None else end - start


#: stop reasons of a run that went wrong: its results are partial and the CLI exits 1 (130
#: when interrupted)
ABNORMAL_STOPS = frozenset({"stuck", "check_failed", "policy_error", "time_limit", "interrupted"})


@frozen(slots=True)
class RequestRecord:
    """What happened to one request.

    ``status`` is ``completed``, ``rejected`` (it can never fit a worker) or ``incomplete``
    (the run stopped first). ``output_length`` counts the tokens actually produced.
    Aggregated runs name the serving worker in ``decode_worker`` and leave ``prefill_worker``
    None. Worker numbers are 0-based within their pool.
    """

    rid: int
    arrived_at: Optional[float]  #: release time; None if never released (cut by the time cap)
    dispatched_at: Optional[float]  #: when the router sent it to a worker (after the router queue)
    input_length: int
    requested_output_length: int
    output_length: int
    status: str
    first_admitted_at: Optional[float]
    first_token_at: Optional[float]
    second_token_at: Optional[float]
    last_token_at: Optional[float]
    finished_at: Optional[float]
    prefilled_at: Optional[float]  #: disaggregated: its prompt's last prefill pass ended
    handed_off_at: Optional[float]  #: disaggregated: its KV reached the decode side
    decode_admitted_at: Optional[float]  #: disaggregated: first admitted by a decode worker
    cached_tokens: int
    prefill_worker: Optional[int]
    decode_worker: Optional[int]
    priority: float = 1.0
    #: speculative decoding: its verify rounds and the draft tokens they accepted (0 without)
    verify_rounds: int = 0
    accepted_drafts: int = 0
    #: the frontend's time before the router saw it (``dispatch_overhead_ms``: API server,
    #: tokenization, routing), within its router-queue span
    frontend_s: float = 0.0
    #: the frontend's time between the engine's tokens and the client (``first_token_overhead_ms``:
    #: detokenization, the streamed chunk); the token times above are as the client received them
    first_token_overhead_s: float = 0.0
    #: host KV offload: prompt tokens its first admission reused from the host tier (restored;
    #: the rest of ``cached_tokens`` was in the GPU cache), and how long that restore took
    #: (asked for to ended; within its engine queue)
    host_cached_tokens: int = 0
    restore_s: float = 0.0

    @property
    def accept_length(self) -> Optional[float]:
        """Mean tokens per verify round before cutting to the output left: 1 + accepted
        drafts / rounds (None without rounds; prefill passes are not rounds)."""
        return 1.0 + self.accepted_drafts / self.verify_rounds if self.verify_rounds else None

    @property
    def ttft_s(self) -> Optional[float]:
        """Time to first token: first token - arrival."""
        return _between(self.arrived_at, self.first_token_at)

    @property
    def itl_s(self) -> Optional[float]:
        """Per-request inter-token latency: (last - first token) / (tokens - 1); None below 2."""
        if self.output_length < 2 or self.first_token_at is None:
            return None
        return (self.last_token_at - self.first_token_at) / (self.output_length - 1)

    @property
    def e2e_s(self) -> Optional[float]:
        """End-to-end latency: last token - arrival (REFERENCE.md s7); None for a request that
        produced no token (output length 0), as the reference reports it."""
        return _between(self.arrived_at, self.last_token_at)

    @property
    def transfer_s(self) -> Optional[float]:
        """Disaggregated: time on the handoff link, channel wait included (handed off -
        prefilled)."""
        return _between(self.prefilled_at, self.handed_off_at)

    @property
    def decode_queue_s(self) -> Optional[float]:
        """Disaggregated: wait for a decode worker to admit it (decode admission - handed off)."""
        return _between(self.handed_off_at, self.decode_admitted_at)

    @property
    def router_queue_s(self) -> Optional[float]:
        """Time waiting in the router queue: dispatch - arrival - the frontend's time before it."""
        wait = _between(self.arrived_at, self.dispatched_at)
        return None if wait is None else wait - self.frontend_s

    @property
    def ttft_components(self) -> Optional[dict[str, Optional[float]]]:
        """Where its TTFT went (s), in order; they sum to :attr:`ttft_s`. ``frontend`` (before
        the router), ``router_queue``, ``engine_queue`` (dispatch to first admission, less a
        restore), ``restore`` (host KV offload: its restore from the host tier; None without),
        ``prefill`` (first admission to the prompt's end: its prefill on a prefill worker,
        else its engine first token), disaggregated ``transfer``, ``decode_queue`` and
        ``first_decode`` (admission by the decode worker to its first token; None aggregated),
        and ``first_token_overhead`` (engine to client). None without a first token."""
        if self.first_token_at is None or self.first_admitted_at is None:
            return None
        engine_first = self.first_token_at - self.first_token_overhead_s
        disagg = self.prefilled_at is not None and self.decode_admitted_at is not None
        return {"frontend": self.frontend_s, "router_queue": self.router_queue_s,
                "engine_queue": self.first_admitted_at - self.dispatched_at - self.restore_s,
                "restore": self.restore_s if self.restore_s else None,
                "prefill": (self.prefilled_at if disagg else engine_first) - self.first_admitted_at,
                "transfer": self.transfer_s if disagg else None,
                "decode_queue": self.decode_queue_s if disagg else None,
                "first_decode": engine_first - self.decode_admitted_at if disagg else None,
                "first_token_overhead": self.first_token_overhead_s}

    @property
    def queue_s(self) -> Optional[float]:
        """Queue time: first admission - arrival."""
        return _between(self.arrived_at, self.first_admitted_at)


@frozen(slots=True)
class PassRecord:
    """One forward pass of one worker: when it ran and what it held.

    ``kv_blocks`` is the worker's KV blocks in use during the pass (after its allocations);
    ``preempted`` and ``admitted`` count requests preempted and newly admitted at its start;
    ``host_blocks`` the blocks its host KV tier holds or is storing then (None without one);
    ``storage_blocks`` those its storage tier holds or is writing (None without one, or with
    a tier the pool shares).
    """

    pool: str
    worker: int
    start_at: float
    end_at: float
    prefill_tokens: int
    decode_requests: int
    decode_context_tokens: int
    kv_blocks: int
    preempted: int
    admitted: int
    host_blocks: Optional[int] = None
    storage_blocks: Optional[int] = None


@frozen(slots=True)
class WorkerCount:
    """The workers of pool ``pool`` by state from time ``at`` until the pool's next row:
    ``starting`` (provisioned, not yet routable), ``active`` (routable) and ``draining``
    (finishing their requests); all three count in worker-seconds."""

    pool: str
    at: float
    starting: int
    active: int
    draining: int


@frozen(slots=True)
class PoolSample:
    """What the planner saw of pool ``pool`` at its tick at time ``at``, and the target it set.

    ``kv_usage`` is the mean fraction of KV blocks in use over the pool's active and draining
    workers (0 without any); ``queued_prefill_tokens`` the prompt tokens still to compute on
    them; ``worker_queue`` the requests waiting on them; ``router_queue`` the requests waiting in the router for this pool (new requests for
    a prompt pool, handoffs for the decode pool); ``ttft_ms`` / ``itl_ms`` the mean TTFT of
    requests whose first token came, and mean ITL of requests that completed, since the
    previous tick (None without any; the same for every pool of a tick).
    """

    pool: str
    at: float
    starting: int
    active: int
    draining: int
    target: int
    kv_usage: float
    queued_prefill_tokens: int
    worker_queue: int  #: requests queued on those workers, not yet running
    router_queue: int
    ttft_ms: Optional[float]
    itl_ms: Optional[float]


@frozen
class RunRecords:
    """Everything a run produced.

    Attributes:
        requests: one record per request, ordered by ``rid``.
        end_at: simulated time at which the run stopped (seconds).
        worker_seconds: provisioned worker time per pool name (seconds).
        prompt_lookup_tokens: prompt tokens looked up in prefix caches at admissions.
        prompt_hit_tokens: of those, tokens found cached.
        token_times: per request (by rid), the time of every output token, or None when
            the scenario does not record them.
        passes: forward passes run, per pool name.
        stop_reason: why the run ended: ``completed`` (every request ended), ``time_cap``
            (``max_sim_time_s``), ``stuck`` (the liveness guard fired or nothing could move),
            ``policy_error`` (a user router or planner policy raised or broke its protocol),
            ``interrupted`` (Ctrl-C), ``check_failed`` (an invariant broke under ``--check``) or
            ``time_limit`` (what was left to happen lay beyond the clock's limit,
            :data:`simkit.core.units.MAX_SIM_TIME_S`). :data:`ABNORMAL_STOPS` are the reasons
            whose results are partial.
        stop_detail: the diagnostic of an abnormal stop.
        pass_log: every forward pass (:class:`PassRecord`, by worker then time), when asked for.
        gpu_seconds: provisioned GPU time per pool name (worker-seconds x GPUs per worker).
        worker_counts: with a planner, every change of each pool's workers by state
            (:class:`WorkerCount`, by pool then time); None without one.
        pool_samples: with a planner, what it observed at each tick (:class:`PoolSample`).
    """

    requests: tuple[RequestRecord, ...]
    end_at: float
    worker_seconds: dict
    prompt_lookup_tokens: int
    prompt_hit_tokens: int
    passes: dict
    token_times: Optional[tuple] = None
    stop_reason: str = "completed"
    stop_detail: Optional[str] = None
    pass_log: Optional[tuple] = None
    gpu_seconds: Optional[dict] = None
    worker_counts: Optional[tuple] = None
    pool_samples: Optional[tuple] = None
    #: speculative decoding over the run's completed requests (None without): ``rounds``,
    #: ``accepted`` drafts, ``tokens`` the rounds emitted (cut to the output left), and per
    #: draft position ``by_position`` (accepted) and ``tried``
    speculation: Optional[dict] = None
    #: host KV offload over the run (None without): prompt tokens restored from host tiers
    #: (``host_hit_tokens``, part of ``prompt_hit_tokens``), blocks stored and restored, bytes
    #: copied each way
    kv_offload: Optional[dict] = None

"""Cluster specs around the pools: the KV handoff link, router policies and the router queue,
the SLA, and the autoscaling planners. The processes are in :mod:`simkit.cluster`.

Imports :mod:`simkit.spec.base` only.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from attrs import field, frozen

from simkit.spec.base import _at_least, _at_most, _count, _non_negative, _nonneg, _pos, _positive, _tokens


@frozen
class LinkSpec:
    """The KV-cache handoff link between the prefill and the decode pool.

    Transfer time = tokens * ``kv_bytes_per_token`` / bandwidth + latency, one transfer per
    channel at a time. ``bandwidth_gb_per_s: null`` makes serialisation instantaneous (the
    reference's default). ``kv_bytes_per_token`` defaults to the roofline latency model's KV
    bytes per token when the scenario names a model, else to Llama-3.1-8B in bf16:
    2 (K and V) * 32 layers * 8 KV heads * 128 head dim * 2 bytes = 131072 (REFERENCE.md s5).
    """

    bandwidth_gb_per_s: Optional[float] = field(default=None, validator=_pos)
    latency_ms: float = field(default=0.0, validator=_nonneg)
    channels: int = field(default=1, validator=_count)
    #: null: the roofline model's KV bytes per token, else 131072 (Llama-3.1-8B bf16)
    kv_bytes_per_token: Optional[int] = field(default=None, validator=[_positive, _at_most(1 << 40)])
    #: ``full_prompt``: every prompt token's KV crosses the link, and the decode worker is
    #: chosen when it arrives. ``destination_missing``: the decode worker is chosen when the
    #: prefill ends and only the prompt tokens it does not already cache (whole blocks, as its
    #: cache holds them then) cross (REFERENCE.md s5)
    timing_mode: Literal["full_prompt", "destination_missing"] = "full_prompt"


@frozen
class RoundRobinRouter:
    """Request i goes to worker i mod N of the pool; in disaggregated mode the decode pool is
    assigned round robin in the order handoffs arrive (REFERENCE.md section 6)."""

    kind: Literal["round_robin"] = "round_robin"


@frozen
class LeastLoadedRouter:
    """The worker with the fewest active KV blocks (decode load), then the fewest queued
    prefill tokens, then the lowest index."""

    kind: Literal["least_loaded"] = "least_loaded"


@frozen
class KvAwareRouter:
    """KV-aware routing (REFERENCE.md s6): cost(w) = ``overlap_weight`` * (prompt blocks not
    cached on w) + (KV blocks in use on w); the lowest cost wins, ties broken by the seeded
    ``router`` random stream. With ``temperature`` > 0 a worker is drawn with probability
    proportional to exp(-cost / (temperature * mean cost)) instead (softmax)."""

    kind: Literal["kv_aware"] = "kv_aware"
    overlap_weight: float = field(default=1.0, validator=_nonneg)
    temperature: float = field(default=0.0, validator=_nonneg)
    #: also count the prompt tokens already waiting on w (in blocks) in the prefill term, as
    #: Dynamo's router counts each worker's pending prefill tokens: cost(w) = overlap_weight *
    #: (uncached prompt blocks + queued prefill tokens / block_size) + KV blocks in use
    count_queued_prefill: bool = False
    #: > 0: the router knows each worker's cache only from the KV events it publishes (blocks
    #: stored when scheduled, blocks evicted), which reach the router this late. 0: the router
    #: reads the caches directly (events arriving at once)
    kv_event_lag_ms: float = field(default=0.0, validator=_nonneg)


@frozen
class SessionAffinityRouter:
    """Requests of a session go to the worker that served its previous request; a session's
    first request (and a request without a session) goes to the least loaded worker."""

    kind: Literal["session_affinity"] = "session_affinity"


def _check_class_path(path: str) -> None:
    module, sep, name = path.partition(":")
    if not sep or not name.isidentifier() or not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"'path' must be package.module:ClassName, got {path!r}")


@frozen
class PythonRouter:
    """Your own routing policy: ``path`` names ``package.module:ClassName``, imported from
    ``search_path`` (default: the scenario file's folder) and built as ``ClassName(params)``;
    its ``pick(request, workers)`` returns one of ``workers`` (protocol in
    :mod:`simkit.cluster.router`)."""

    kind: Literal["python"] = "python"
    path: str = ""
    params: dict = field(factory=dict)
    search_path: Optional[str] = None

    def __attrs_post_init__(self) -> None:
        _check_class_path(self.path)


RouterSpec = Union[RoundRobinRouter, LeastLoadedRouter, KvAwareRouter, SessionAffinityRouter, PythonRouter]


@frozen
class RouterQueueSpec:
    """When every prompt worker (prefill or aggregated) is busy, new requests wait in the router
    queue instead of piling onto a worker. A worker is busy when its KV blocks in use exceed
    ``max_kv_usage`` of its cache, or its queued prefill tokens exceed
    ``max_queued_prefill_tokens``; null thresholds never make it busy (the default: no
    waiting). Waiting requests leave in ``policy`` order: fcfs (oldest first), lcfs (newest
    first) or wspt (weighted shortest processing time, Smith's rule: least expected work per
    unit of priority first, work = prompt + output tokens; then the oldest)."""

    policy: Literal["fcfs", "lcfs", "wspt"] = "fcfs"
    max_kv_usage: Optional[float] = field(default=None, validator=_pos + [_at_most(1)])  #: fraction
    max_queued_prefill_tokens: Optional[int] = field(default=None, validator=_tokens)

    @property
    def enabled(self) -> bool:
        return self.max_kv_usage is not None or self.max_queued_prefill_tokens is not None


@frozen
class SlaSpec:
    """Latency bounds for goodput; a request meets the SLA when it meets every given bound."""

    ttft_ms: Optional[float] = field(default=None, validator=_pos)
    itl_ms: Optional[float] = field(default=None, validator=_pos)
    e2e_ms: Optional[float] = field(default=None, validator=_pos)

    @property
    def is_set(self) -> bool:
        return any(b is not None for b in (self.ttft_ms, self.itl_ms, self.e2e_ms))


def _interval():
    return field(default=10.0, validator=_pos + [_at_least(1e-3, zero_ok=False)])


def _gpu_budget():
    """GPUs the planner may hold at once over all pools (null: no limit)."""
    return field(default=None, validator=[_positive, _at_most(10_000_000)])


def _scale_down_delay():
    """Hysteresis: a pool's target goes down only once the policy has asked for fewer workers
    at every tick for this long (s); 0: at once."""
    return field(default=0.0, validator=_nonneg)


@frozen
class StaticPlanner:
    """Keeps every pool at its ``workers``: a baseline that still observes the pools every
    ``interval_s`` (and so records the same time series as the other planners)."""

    kind: Literal["static"] = "static"
    interval_s: float = _interval()  #: seconds between planner ticks
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()


@frozen
class ThresholdPlanner:
    """Load thresholds, per pool at every tick: scale up by ``step`` workers when the active
    workers' mean KV usage exceeds ``scale_up_kv_usage`` or the prompt tokens waiting per
    active worker (router queue included, prompt pools only) exceed
    ``scale_up_queued_prefill_tokens``; scale down by ``step`` when both are below their
    ``scale_down_`` bounds; otherwise hold."""

    kind: Literal["threshold"] = "threshold"
    interval_s: float = _interval()
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()
    scale_up_kv_usage: float = field(default=0.7, validator=_pos + [_at_most(1)])  #: fraction
    scale_down_kv_usage: float = field(default=0.2, validator=_nonneg + [_at_most(1)])  #: fraction
    scale_up_queued_prefill_tokens: int = field(default=16384, validator=_tokens)
    scale_down_queued_prefill_tokens: int = field(default=1024, validator=[_non_negative, _at_most(1 << 31)])
    step: int = field(default=1, validator=_count)  #: workers added or removed per tick

    def __attrs_post_init__(self) -> None:
        if self.scale_down_kv_usage >= self.scale_up_kv_usage:
            raise ValueError("'scale_down_kv_usage' must be below 'scale_up_kv_usage'")
        if self.scale_down_queued_prefill_tokens >= self.scale_up_queued_prefill_tokens:
            raise ValueError("'scale_down_queued_prefill_tokens' must be below 'scale_up_queued_prefill_tokens'")


@frozen
class SlaPlanner:
    """SLA-based: every tick, forecast the next interval's load (arrival rate, prompt and
    output lengths, prefix hit ratio) from the last ones, predict the ``quantile``-th
    percentile TTFT and the mean ITL per worker count with the scenario's latency model, and
    pick the fewest workers whose predictions meet ``sla.ttft_ms`` / ``sla.itl_ms`` scaled by
    ``target_fraction``. Formulas: :class:`simkit.cluster.planner.SlaPolicy`."""

    kind: Literal["sla"] = "sla"
    interval_s: float = _interval()
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()
    #: predictions must stay under this fraction of the SLA bounds (headroom)
    target_fraction: float = field(default=0.8, validator=_pos + [_at_most(1)])
    #: the TTFT percentile predicted (the wait's tail; see simkit.cluster.planner.SlaPolicy)
    quantile: float = field(default=0.9, validator=_pos + [_at_most(0.9999)])
    #: a worker is never planned busier than this (prompt or decode utilisation)
    max_utilization: float = field(default=0.85, validator=_pos + [_at_most(1)])
    #: load forecast: ``constant`` (the next interval is like the last) or ``linear`` (the
    #: last two intervals' trend, extrapolated to when new workers would have served an interval)
    predictor: Literal["constant", "linear"] = "linear"


@frozen
class PythonPlanner:
    """Your own planner: ``path`` names ``package.module:ClassName``, imported from
    ``search_path`` (default: the scenario file's folder) and built as ``ClassName(params)``;
    its ``plan(snapshot)`` sets targets (protocol in :mod:`simkit.cluster.planner`)."""

    kind: Literal["python"] = "python"
    path: str = ""
    params: dict = field(factory=dict)
    search_path: Optional[str] = None
    interval_s: float = _interval()
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()

    def __attrs_post_init__(self) -> None:
        _check_class_path(self.path)


PlannerSpec = Union[StaticPlanner, ThresholdPlanner, SlaPlanner, PythonPlanner]



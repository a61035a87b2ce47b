"""Cluster specs around the pools: the KV handoff link, router policies and the router queue,
the SLA, and the autoscaling planners. The processes are in :mod:`simkit.cluster`.

Imports :mod:`simkit.spec.base` only.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from attrs import field, frozen

from simkit.spec.base import (FieldValueError, _at_least, _at_most, _count, _non_negative, _nonneg, _pos, _positive,
                              _tokens)


@frozen
class LinkSpec:
    """The KV-cache handoff link between the prefill and the decode pool.

    Transfer time = tokens * ``kv_bytes_per_token`` / bandwidth + latency; with ``sharing:
    channels`` one transfer per channel at a time, with ``uncontended`` all at once, with
    ``fair`` all at once sharing the bandwidth equally. ``bandwidth_gb_per_s: null`` makes serialisation instantaneous (the
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
    #: how concurrent transfers share the link: ``channels`` (at most ``channels`` transfers at
    #: once, each at the full bandwidth, the others wait in order), ``uncontended`` (every
    #: transfer at the full bandwidth at once, no waiting: the reference's handoff, measured on
    #: ai-dynamo-runtime 1.6.1) or ``fair`` (every transfer at once, the bandwidth split equally
    #: among those under way: processor sharing, :class:`simkit.cluster.transfer.FairShare`)
    sharing: Literal["channels", "uncontended", "fair"] = "channels"

    def __attrs_post_init__(self) -> None:
        if self.sharing != "channels" and self.channels != 1:
            raise FieldValueError("channels", f"'channels' has no effect with 'sharing: {self.sharing}' "
                                  "(every transfer runs at once): remove it or use 'sharing: channels'")


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


def _refuse_true(reason: str):
    def check(_inst, attribute, value) -> None:
        if value:
            raise FieldValueError(attribute.name, f"'{attribute.name}: true' is not modelled: {reason}")

    return check


@frozen
class KvAwareRouter:
    """KV-aware routing as Dynamo's KV router does it (ai-dynamo-runtime 1.6.1's
    ``KvRouterConfig``: its names and defaults). The router keeps its own state per worker (what
    it routed there), as Dynamo's does, not the worker's cache usage. For a request of ``ISL``
    prompt tokens and worker w of a pool with ``block_size`` ``bs`` (REFERENCE.md s6; each term
    measured on the reference from its logged costs, README "KV-aware routing"):

    * prompt pools (aggregated, prefill): ``cost(w) = prefill_load_scale * max(0,
      (queued_prefill_tokens(w) + ISL) / bs - overlap_score_credit * decay(w) * overlap(w))
      + active_blocks(w) + decode_active_request_weight * active_requests(w)`` (blocks);
      the decode-blocks term is 0 on a prefill pool;
    * decode pools: ``cost(w) = active_blocks(w) + decode_active_request_weight * active_requests(w)``.

    ``overlap(w)``: the request's leading full prompt blocks that w's KV events announced
    (stored at the end of the pass that computed them, removed when evicted).
    ``queued_prefill_tokens(w)``: over requests routed to w whose prompt is not done, their
    ``ISL - overlap * bs`` at routing. ``active_blocks(w)``: the full prompt blocks of the
    requests routed to w and not finished, the new request's included, a block they share
    counted once (decode pools: every request's blocks counted apart, as measured).
    ``decay(w) = 1 / (1 + overlap_score_credit_decay * excess(w) / ceil(ISL / bs))``, excess
    being w's queued prefill blocks beyond the least of the pool's workers. The lowest cost
    wins; ties are broken uniformly at random from the seeded ``router`` stream (the reference
    draws them unseeded), so a seed replays exactly. ``router_temperature`` > 0 draws a worker
    with probability proportional to ``exp(-(cost - min) / ((max - min) * T))`` (Dynamo's
    range-normalised softmax).

    Aliases: ``overlap_weight`` (simkit's old name) and ``overlap_score_weight`` (Dynamo's
    deprecated one) set ``prefill_load_scale``, and 0 also sets ``overlap_score_credit`` to 0,
    as Dynamo does; ``temperature`` is ``router_temperature``. They are read as the field
    (:data:`KV_ROUTER_ALIASES`); an alias with its field, two aliases of one field, or a 0
    weight with a credit is refused.
    """

    kind: Literal["kv_aware"] = "kv_aware"
    #: multiplies the prefill term (blocks)
    prefill_load_scale: float = field(default=1.0, validator=_nonneg)
    #: credit per cached prompt block in the prefill term
    overlap_score_credit: float = field(default=1.0, validator=_nonneg)
    #: > 0: a worker's cache credit shrinks with the prefill work queued on it beyond the least
    overlap_score_credit_decay: float = field(default=0.0, validator=_nonneg)
    #: blocks of cost per request routed to a worker and not done
    decode_active_request_weight: float = field(default=0.0, validator=_nonneg)
    router_temperature: float = field(default=0.0, validator=_nonneg)
    #: count the active prompt blocks of each worker (the decode-blocks term)
    router_track_active_blocks: bool = True
    #: count each worker's queued prefill tokens; false drops the whole prefill term (as Dynamo)
    router_track_prefill_tokens: bool = True
    #: a prompt block shared by requests on one worker counts once (false: each counts apart)
    router_assume_kv_reuse: bool = True
    #: Dynamo's output-block tracking; its offline replay ignores it (measured), so true is refused
    router_track_output_blocks: bool = field(
        default=False, validator=_refuse_true("Dynamo's offline replay ignores it (measured on 1.6.1)"))
    #: > 0: the router hears of stored and evicted blocks this late. 0: at once (stored blocks
    #: at the end of the pass that computed them, as the reference)
    kv_event_lag_ms: float = field(default=0.0, validator=_nonneg + [_at_most(1e12)])
    #: with host KV tiers (``kv_offload``): a prompt block a worker holds on its host tier,
    #: continuing its GPU prefix, counts this much of a cached block in the prefill term
    #: (Dynamo's default; measured on 1.6.1: 4 host blocks lower a cost by 3)
    host_cache_hit_weight: float = field(default=0.75, validator=_nonneg + [_at_most(1.0)])
    #: with storage KV tiers that announce their blocks (``kv_offload.storage.kv_events``): a
    #: prompt block in a worker's storage tier, continuing its GPU and host prefix, counts this
    #: much of a cached block (Dynamo's default; the reference's replay announces no storage
    #: block, measured on 1.6.1: disk_blocks 0 in every decision)
    disk_cache_hit_weight: float = field(default=0.25, validator=_nonneg + [_at_most(1.0)])

#: old or Dynamo-deprecated names of KvAwareRouter fields -> their field (read as that field;
#: a scenario never holds them once loaded)
KV_ROUTER_ALIASES = {"overlap_weight": "prefill_load_scale", "overlap_score_weight": "prefill_load_scale",
                     "temperature": "router_temperature"}
#: aliases whose 0 also sets ``overlap_score_credit`` to 0 (Dynamo's rule for overlap_score_weight)
ZERO_CLEARS_CREDIT = ("overlap_weight", "overlap_score_weight")


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



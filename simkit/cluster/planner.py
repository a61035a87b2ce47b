"""The autoscaling planner: pure policies that set target worker counts, and the periodic
SimPy process that observes the pools and applies them.

Every ``interval_s`` (the first tick at ``interval_s``) :class:`Planner` builds a read-only
:class:`Snapshot` (each pool's workers by state and their load, the router's queues, the
traffic and latencies since the previous tick), asks its policy for a :class:`Decision`,
clamps the targets to each pool's ``[min_workers, max_workers]`` and to the GPU budget, and
calls :meth:`simkit.cluster.pool.WorkerPool.scale_to`. It also records one
:class:`~simkit.core.records.PoolSample` per pool per tick (the time series of the output).

Policies (``planner.kind``), as Dynamo's planner does (load-based and SLA-based scaling,
REFERENCE.md s6; its predictors forecast the next interval, here the last interval is the
forecast, Dynamo's "constant" predictor):

* ``static``: every pool keeps its ``workers``.
* ``threshold``: per pool, +``step`` when busy, -``step`` when idle (:class:`ThresholdPolicy`).
* ``sla``: the fewest workers whose predicted TTFT and ITL meet the SLA (:class:`SlaPolicy`).
* ``python``: your own class (``plan(snapshot) -> Decision`` or a ``{pool: count}`` dict).

Writing your own policy (``kind: python``, ``path: package.module:ClassName``, ``params``;
or ``simkit.run(..., planner=obj)``): the class is built as ``ClassName(params)`` (a dict;
``{}`` when none) and must have ``plan(snapshot)``. It is shown a :class:`Snapshot` (frozen;
``snapshot.pools["decode"].active``, ``.kv_usage``, ``.workers[i].queued_prefill_tokens``,
``.pass_time_s(prefill_tokens, decode_requests, decode_context_tokens)``;
``snapshot.traffic.arrival_rate_per_s``, ``.ttft_ms`` ...) and returns the target count of
every pool it wants to change (pools left out keep their target) and, optionally, the delay
to its next tick (``Decision(targets, next_tick_s)``; default ``interval_s``).

Part of :mod:`simkit.cluster`: simpy for the tick loop only; the policies are plain classes.
It is one module, over 600 lines, because the built-in policies, the process and the
snapshot types they share are the documented planner protocol (``simkit.planner``).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Optional

import simpy
from attrs import field, frozen

from simkit.spec import (
    LinkSpec,
    PlannerSpec,
    PoolSpec,
    SlaPlanner,
    SlaSpec,
    StaticPlanner,
    ThresholdPlanner,
)
from simkit.core.records import PoolSample
from simkit.core.units import BYTES_PER_GB, MS_PER_S, S_PER_MS
from simkit.cluster.worker import PassBoundary, Stuck

__all__ = ["Decision", "Planner", "PoolView", "Snapshot", "Traffic", "WorkerView", "make_planner_policy"]

#: the planner acts after every worker's pass boundary of its instant (worker ranks are below)
PLANNER_RANK = 1 << 62

#: planner ticks in a row with nothing else scheduled and requests left before the run is
#: declared stuck (a policy that keeps a needed pool at zero workers)
IDLE_TICKS = 100
#: the shortest next tick a policy may ask for (s): interval_s's own minimum
MIN_TICK_S = 1e-3
#: the most workers a pool takes (PoolSpec's limit on workers and max_workers)
MAX_POOL_WORKERS = 10_000
#: the most ticks a run's planner makes (about 30 s of wall time and 200 MB of samples): past
#: it the run stops (a workload spanning too many intervals, a policy asking for tiny ticks)
MAX_TICKS = 1_000_000


@frozen
class WorkerView:
    """One routable or draining worker, as the planner sees it."""

    wid: int
    state: str  #: active | draining
    kv_blocks_in_use: int
    kv_capacity_blocks: int
    queued_prefill_tokens: int  #: prompt tokens still to compute here
    running: int  #: requests in its running batch
    waiting: int  #: requests admitted to its queue, not yet running

    @property
    def kv_usage(self) -> float:
        """KV blocks in use / ``num_gpu_blocks``."""
        return self.kv_blocks_in_use / self.kv_capacity_blocks


@frozen
class PoolView:
    """One pool: counts by state, bounds, its workers and the router's queue in front of it."""

    name: str  #: aggregated | prefill | decode
    starting: int  #: provisioned, not yet routable (waiting for GPUs included)
    active: int
    draining: int
    target: int  #: starting + active: what the previous decisions asked for
    min_workers: int
    max_workers: Optional[int]
    gpus_per_worker: int
    spec: PoolSpec
    workers: tuple  #: :class:`WorkerView` of active then draining workers, by wid
    router_queue: int  #: requests (prompt pools) or handoffs (decode) waiting in the router
    router_queue_prompt_tokens: int  #: their prompt tokens
    #: ``pass_time_s(prefill_tokens, decode_requests, decode_context_tokens)``: the scenario's
    #: engine-step latency model on one of this pool's workers (seconds)
    pass_time_s: Callable[[int, int, int], float] = field(eq=False, repr=False)

    @property
    def kv_usage(self) -> float:
        """Mean KV usage fraction over the pool's active and draining workers (0 if none)."""
        ws = self.workers
        return sum(w.kv_usage for w in ws) / len(ws) if ws else 0.0

    @property
    def queued_prefill_tokens(self) -> int:
        """Prompt tokens waiting in the router for this pool plus those on its workers."""
        return self.router_queue_prompt_tokens + sum(w.queued_prefill_tokens for w in self.workers)


@frozen
class Traffic:
    """What happened since the previous tick (``interval_s`` ago; the run's start at first)."""

    interval_s: float
    arrivals: int  #: requests that arrived
    arrival_rate_per_s: float
    mean_input_tokens: Optional[float]  #: of those arrivals (None without any)
    mean_output_tokens: Optional[float]  #: requested output tokens of those arrivals
    input_tokens_cv2: Optional[float]  #: squared coefficient of variation of their prompt lengths
    prefix_hit_ratio: Optional[float]  #: prompt tokens found cached / looked up, in the interval
    first_tokens: int  #: requests whose first token came
    ttft_ms: Optional[float]  #: their mean TTFT
    ttft_p90_ms: Optional[float]
    completed: int  #: requests completed
    itl_ms: Optional[float]  #: mean per-request ITL of those (2 tokens or more)
    itl_p90_ms: Optional[float]


@frozen
class Snapshot:
    """Everything a planner policy is shown at a tick (read-only)."""

    now: float  #: simulated time (s)
    interval_s: float  #: the configured tick interval
    mode: str  #: aggregated | disaggregated
    pools: Mapping  #: name -> :class:`PoolView`, in start order
    traffic: Traffic
    sla: SlaSpec
    link: Optional[LinkSpec]
    gpu_budget: Optional[int]  #: None: unlimited
    gpus_in_use: int  #: GPUs of provisioned workers (starting, active, draining)
    requests_left: int  #: requests not yet ended (arrived or not)


@frozen
class Decision:
    """Targets per pool name (pools left out keep their target) and the delay to the next tick
    (None: the spec's ``interval_s``)."""

    targets: Mapping = field(factory=dict)
    next_tick_s: Optional[float] = None


# ----------------------------------------------------------------------------- policies


class StaticPolicy:
    """Every pool keeps its scenario ``workers``."""

    def __init__(self, spec: StaticPlanner) -> None:
        pass

    def plan(self, snap: Snapshot) -> Decision:
        return Decision({name: pool.spec.workers for name, pool in snap.pools.items()})


def _needs_a_worker(pool: PoolView) -> bool:
    return pool.router_queue > 0


class ThresholdPolicy:
    """Per pool: busy if the mean KV usage of its active workers exceeds ``scale_up_kv_usage``
    or (prompt pools: aggregated, prefill) the prompt tokens waiting per active worker (router
    queue + workers) exceed ``scale_up_queued_prefill_tokens``, or it has no active worker while
    requests wait for it; then target + ``step``, unless a worker of the pool is still starting:
    that scale-up already answers the signal, which persists until the worker is up (without
    this, a pool whose startups take several ticks started ``step`` workers at every one of
    them: 20 workers for 4 requests). Idle if usage is below ``scale_down_kv_usage`` and
    (prompt pools) the waiting prompt tokens per active worker are below
    ``scale_down_queued_prefill_tokens``; then target - ``step``. Otherwise hold."""

    def __init__(self, spec: ThresholdPlanner) -> None:
        self.spec = spec

    def plan(self, snap: Snapshot) -> Decision:
        s = self.spec
        targets = {}
        for name, pool in snap.pools.items():
            per_worker = pool.queued_prefill_tokens / max(pool.active, 1)
            prompt_pool = name != "decode"
            kv = pool.kv_usage
            if (pool.active == 0 and _needs_a_worker(pool)) or kv > s.scale_up_kv_usage or (
                    prompt_pool and per_worker > s.scale_up_queued_prefill_tokens):
                if not pool.starting:  # a scale-up in flight counts: wait for it
                    targets[name] = pool.target + s.step
            elif kv < s.scale_down_kv_usage and (not prompt_pool or per_worker < s.scale_down_queued_prefill_tokens):
                targets[name] = max(pool.target - s.step, 1 if _needs_a_worker(pool) else 0)
        return Decision(targets)


#: worker counts the SLA policy searches when a pool has no max_workers and no budget bounds it
SEARCH_LIMIT = 1024
#: fraction of the KV cache the SLA policy plans to fill at most (vLLM's default gpu memory
#: utilisation is 0.9; preemptions start when the cache is full)
KV_HEADROOM = 0.9


class SlaPolicy:
    """The fewest workers per pool whose predicted latency meets the SLA.

    Load forecast: mean prompt ISL and output OSL tokens and prefix hit ratio h are the last
    interval's. The arrival rate lam is the last interval's (``predictor: constant``, Dynamo's
    constant predictor) or, with ``predictor: linear``, the larger of that and its linear
    trend over the last two intervals extrapolated to the end of the first interval a worker
    started now would serve (now + ``startup_time_s`` + ``interval_s``): a rising load is met
    ahead of time, and a falling one is never planned below what the current load needs. Work
    already waiting is added as if it arrived again over one interval: prompt-token rate
    R = lam * ISL * (1 - h) + Q / interval_s, with Q the prompt tokens waiting for the pool.

    Prompt side (prefill or aggregated pool, n workers), from the engine-step model P:
      * mu = B / P(B) prompt tokens/s per worker at full passes (B = max_num_batched_tokens);
      * rho = R / (n mu), the busy fraction; must be <= ``max_utilization``;
      * the mean wait is the Pollaczek-Khinchine M/G/1 one, W = rho S (1 + cv^2) / (2 (1 -
        rho)), with S = ISL (1 - h) / mu the worker time of one prompt and cv^2 the squared
        coefficient of variation of the interval's prompt lengths; its tail is taken
        exponential as in M/M/1 (P(wait > x) = rho exp(-x rho / W)), so the ``quantile``-th
        percentile wait is W / rho * ln(rho / (1 - quantile)) (0 when rho <= 1 - quantile);
      * TTFT = P(ISL (1 - h)) [its own pass, chunked by B] + that wait + one decode pass (+
        disaggregated: the KV transfer ISL * kv_bytes_per_token / bandwidth + link latency).

    Decode side (decode or aggregated pool, n workers): per worker, b requests decode at once
    (Little's law: b = lam / n * OSL * ITL) with mean context c = ISL + OSL / 2, so a decode
    pass takes D(b, b c) and ITL = D(b, b c) / E, solved by fixed-point iteration from b = 1;
    E is the pool's expected tokens per verify round with speculative decoding (1 + a1 +
    a1 a2 + ...), else 1.
    Aggregated workers also run the prompts: ITL = D / (1 - rho). Feasible only if b <=
    ``max_num_seqs`` and b (ISL + OSL) tokens fit in 90% of the KV cache.

    A pool meets the SLA at n when TTFT <= ``target_fraction`` * ``sla.ttft_ms`` (prompt side)
    and ITL <= ``target_fraction`` * ``sla.itl_ms`` (decode side); an unset bound is not
    checked (the utilisation and capacity limits still are). With no traffic and nothing
    waiting the pool goes to ``min_workers``; if no count meets the SLA, the largest allowed.
    ITL is a mean-value prediction (decode passes vary little); ``target_fraction`` is the
    headroom for what the model leaves out (bursts within an interval, forecast error).
    """

    def __init__(self, spec: SlaPlanner) -> None:
        self.spec = spec
        self.previous_rate: Optional[float] = None

    def forecast_rate(self, snap: Snapshot, pool: PoolView) -> float:
        """The arrival rate (req/s) to plan ``pool`` for (see the class docstring)."""
        rate = snap.traffic.arrival_rate_per_s
        if self.spec.predictor == "constant" or self.previous_rate is None:
            return rate
        slope = (rate - self.previous_rate) / snap.traffic.interval_s
        return max(rate, rate + slope * (pool.spec.startup_time_s + snap.interval_s))

    def plan(self, snap: Snapshot) -> Decision:
        t = snap.traffic
        targets = {}
        rates = {name: self.forecast_rate(snap, pool) for name, pool in snap.pools.items()}
        self.previous_rate = t.arrival_rate_per_s
        for name, pool in snap.pools.items():
            queued = pool.queued_prefill_tokens if name != "decode" else 0
            waiting = pool.router_queue + (sum(w.running + w.waiting for w in pool.workers) if name == "decode" else 0)
            if t.arrivals == 0 and queued == 0 and waiting == 0:
                targets[name] = pool.min_workers
                continue
            lo = max(pool.min_workers, 1)
            hi = pool.max_workers or SEARCH_LIMIT
            if snap.gpu_budget is not None:
                hi = min(hi, max(snap.gpu_budget // pool.gpus_per_worker, lo))
            choice = hi
            for n in range(lo, hi + 1):
                if self.meets(snap, pool, n, queued, rates[name]):
                    choice = n
                    break
            targets[name] = choice
        return Decision(targets)

    def predict(self, snap: Snapshot, pool: PoolView, n: int, queued: int = 0,
                rate: Optional[float] = None) -> dict:
        """Predicted ``ttft_s`` (prompt pools), ``itl_s`` (decode pools), ``rho`` (prompt busy
        fraction) and ``batch`` (decode requests per worker) with ``n`` workers at arrival
        ``rate`` (default: the last interval's), and ``feasible`` False when a capacity limit
        is broken."""
        t = snap.traffic
        lam = t.arrival_rate_per_s if rate is None else rate
        isl = t.mean_input_tokens or 0.0
        osl = t.mean_output_tokens or 0.0
        hit = t.prefix_hit_ratio or 0.0
        spec = pool.spec
        pt = pool.pass_time_s
        out: dict = {"feasible": True}
        prompt = max(int(round(isl * (1.0 - hit))), 1)
        rho = 0.0
        if pool.name != "decode":
            budget = spec.max_num_batched_tokens
            mu = budget / pt(budget, 0, 0)
            rate = lam * isl * (1.0 - hit) + queued / snap.interval_s
            rho = rate / (n * mu)
            if rho > self.spec.max_utilization:
                out["feasible"] = False
                rho = min(rho, 0.999)
            own = pt(min(prompt, budget), 0, 0) * math.ceil(prompt / budget)
            cv2 = t.input_tokens_cv2 or 0.0
            mean_wait = rho * (prompt / mu) * (1.0 + cv2) / (2.0 * (1.0 - rho))
            q = self.spec.quantile
            wait = mean_wait / rho * math.log(rho / (1.0 - q)) if rho > 1.0 - q else 0.0
            ttft = own + wait + pt(0, 1, prompt)
            if pool.name == "prefill" and snap.link is not None:
                link = snap.link
                if link.bandwidth_gb_per_s is not None:
                    ttft += isl * link.kv_bytes_per_token / (link.bandwidth_gb_per_s * BYTES_PER_GB)
                ttft += link.latency_ms * S_PER_MS
            out["ttft_s"] = ttft
            out["rho"] = rho
        if pool.name != "prefill":
            per_worker = lam / n
            ctx = isl + osl / 2.0
            b = 1.0
            # speculative decoding: a pass emits the expected tokens of a verify round
            per_pass = spec.speculative.expected_tokens if spec.speculative is not None else 1.0
            itl = pt(0, 1, int(ctx)) / per_pass
            for _ in range(50):  # D is increasing and bounded: the iteration settles fast
                b = max(per_worker * osl * itl, 1.0)
                new = pt(0, max(int(round(b)), 1), int(b * ctx)) / per_pass
                if pool.name == "aggregated":
                    new /= max(1.0 - rho, 1e-3)
                if abs(new - itl) < 1e-9:
                    itl = new
                    break
                itl = new
            out["itl_s"] = itl
            out["batch"] = b
            if b > spec.max_num_seqs or b * (isl + osl) > KV_HEADROOM * spec.num_gpu_blocks * spec.block_size:
                out["feasible"] = False
        return out

    def meets(self, snap: Snapshot, pool: PoolView, n: int, queued: int = 0, rate: Optional[float] = None) -> bool:
        """Whether ``n`` workers meet the SLA (with headroom) by :meth:`predict`."""
        p = self.predict(snap, pool, n, queued, rate)
        if not p["feasible"]:
            return False
        f = self.spec.target_fraction
        sla = snap.sla
        if "ttft_s" in p and sla.ttft_ms is not None and p["ttft_s"] * MS_PER_S > f * sla.ttft_ms:
            return False
        if "itl_s" in p and sla.itl_ms is not None and p["itl_s"] * MS_PER_S > f * sla.itl_ms:
            return False
        return True


PLANNER_POLICIES = {StaticPlanner: StaticPolicy, ThresholdPlanner: ThresholdPolicy, SlaPlanner: SlaPolicy}


class PlannerPolicyError(Stuck):
    """A user planner policy raised or broke its protocol during the run (the run stops with
    ``stop_reason`` ``policy_error``)."""

    reason = "policy_error"


def make_planner_policy(spec: PlannerSpec, factory=None):
    """The policy object for ``spec``; ``factory()`` builds a user policy (``kind: python``)."""
    if factory is not None:
        return factory()
    return PLANNER_POLICIES[type(spec)](spec)


# ----------------------------------------------------------------------------- the process


def _mean(values: list) -> Optional[float]:
    """The mean, summed exactly (``math.fsum``): independent of the order the values came in."""
    return math.fsum(values) / len(values) if values else None


def _cv2(values: list) -> Optional[float]:
    """Squared coefficient of variation (variance / mean^2), None for fewer than 2 values."""
    if len(values) < 2:
        return None
    m = math.fsum(values) / len(values)
    return math.fsum((v - m) ** 2 for v in values) / len(values) / (m * m) if m else None


def _p90(values: list) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(max(math.ceil(0.9 * len(ordered)), 1), len(ordered)) - 1]


class Planner:
    """Runs ``policy`` every ``spec.interval_s`` on ``pools`` (name -> WorkerPool).

    ``router`` and ``collector`` are read for the queues and the recent traffic; ``gpus`` is
    the cluster budget (a ``Container``, None without a budget); ``latency`` maps a pool name
    to its latency model."""

    def __init__(self, env: simpy.Environment, spec: PlannerSpec, policy, pools: dict, router, collector,
                 gpus: Optional[simpy.Container], latency: dict, sla: SlaSpec, link: Optional[LinkSpec],
                 mode: str) -> None:
        self.env = env
        self._lower_since: dict[str, float] = {}  #: pool -> first tick of an unbroken run of lower targets
        self.spec = spec
        self.policy = policy
        self.pools = pools
        self.router = router
        self.collector = collector
        self.gpus = gpus
        self.latency = latency
        self.sla = sla
        self.link = link
        self.mode = mode
        self.samples: list[PoolSample] = []
        self.next_at = spec.interval_s  #: time of the next tick (read by fast-forwarding workers)
        self._last_at = 0.0
        self._lookup = (0, 0)
        self._idle = 0
        self.ticks = 0

    def start(self) -> simpy.Process:
        return self.env.process(self.run())

    def run(self):
        """Yields: per tick, a timeout to it (``interval_s``, or the policy's ``next_tick_s``),
        then a :class:`~simkit.cluster.worker.PassBoundary` ranked after every worker's, so that the
        planner observes the instant settled: passes ending then are applied and those starting
        then have taken their KV, with or without fast-forwarding (workers' fast-forwarded runs
        stop at :attr:`next_at`)."""
        env = self.env
        delay = self.spec.interval_s
        self.next_at = env.now + delay
        while True:
            yield env.timeout(delay)
            yield PassBoundary(env, PLANNER_RANK)
            self.ticks += 1
            if self.ticks > MAX_TICKS:
                left = self.collector.remaining
                raise Stuck(f"the planner ticked {MAX_TICKS:,} times (t={env.now:.6f} s, interval_s "
                            f"{self.spec.interval_s:g} s) with {'some' if left is None else left} request(s) not "
                            "ended: more than a run allows; raise planner.interval_s")
            snap = self.observe()
            try:
                decision = self.policy.plan(snap)
            except (Exception, SystemExit) as exc:  # the user's code: stop the run with its error
                raise PlannerPolicyError(f"planner policy {type(self.policy).__name__}.plan raised "
                                         f"{type(exc).__name__}: {exc} (t={env.now:.6f} s)") from exc
            if isinstance(decision, Mapping):
                decision = Decision(dict(decision))
            if not isinstance(decision, Decision):
                raise PlannerPolicyError(f"planner policy {type(self.policy).__name__}.plan returned "
                                         f"{decision!r}; expected a Decision or a {{pool: workers}} dict")
            self.apply(self.clamp(snap, self.hold_scale_down(snap, decision.targets)))
            self.record(snap)
            delay = self.spec.interval_s if decision.next_tick_s is None else decision.next_tick_s
            # at least interval_s's own minimum: a tick too close to now never lets time pass
            if not (isinstance(delay, (int, float)) and not isinstance(delay, bool) and math.isfinite(delay)
                    and delay >= MIN_TICK_S):
                raise PlannerPolicyError(f"planner policy {type(self.policy).__name__} asked for its next tick "
                                         f"in {delay!r} s; expected a number of seconds >= {MIN_TICK_S:g}")
            self.next_at = env.now + delay
            self._check_progress()

    # ------------------------------------------------------------------ observation

    def observe(self) -> Snapshot:
        """The :class:`Snapshot` of now (takes the collector's recent window)."""
        now = self.env.now
        router = self.router
        views = {}
        for name, pool in self.pools.items():
            if name == "decode":
                queued = list(router.handoff_queue.items) + list(router.held_handoffs)
                queued_reqs = [h.request for h in queued]
            else:
                queued_reqs = list(router.router_queue.items) + list(router.held) + list(router.incoming)
            workers = [w for w in pool.workers if pool.state[w.wid] in ("active", "draining")]
            for w in workers:  # a fast-forwarded run shows its state as of now, after this instant's boundaries
                w.settle(boundary=True)
            c = pool.counts
            views[name] = PoolView(
                name=name, starting=len(pool.pending), active=c["active"], draining=c["draining"],
                target=pool.target, min_workers=pool.spec.min_workers, max_workers=pool.spec.max_workers,
                gpus_per_worker=pool.gpus_per_worker, spec=pool.spec,
                workers=tuple(WorkerView(w.wid, pool.state[w.wid], w.kv_blocks_in_use, w.kv_capacity_blocks,
                                         w.queued_prefill_tokens, len(w.sched.running), len(w.sched.waiting))
                              for w in workers),
                router_queue=len(queued_reqs),
                router_queue_prompt_tokens=sum(r.input_length for r in queued_reqs) if name != "decode" else 0,
                pass_time_s=self.latency[name].pass_time_s,
            )
        col = self.collector
        arrivals, ttfts_s, itls_s = col.take_recent()
        interval = max(now - self._last_at, 1e-12)
        self._last_at = now
        lookup = (col.prompt_lookup_tokens, col.prompt_hit_tokens)
        looked = lookup[0] - self._lookup[0]
        hit = (lookup[1] - self._lookup[1]) / looked if looked else None
        self._lookup = lookup
        ttfts = [t * MS_PER_S for t in ttfts_s]
        itls = [t * MS_PER_S for t in itls_s if t is not None]
        traffic = Traffic(
            interval_s=interval, arrivals=len(arrivals), arrival_rate_per_s=len(arrivals) / interval,
            mean_input_tokens=_mean([r.input_length for r in arrivals]),
            mean_output_tokens=_mean([r.output_length for r in arrivals]),
            input_tokens_cv2=_cv2([r.input_length for r in arrivals]),
            prefix_hit_ratio=hit, first_tokens=len(ttfts), ttft_ms=_mean(ttfts), ttft_p90_ms=_p90(ttfts),
            completed=len(itls_s), itl_ms=_mean(itls), itl_p90_ms=_p90(itls))
        budget = self.spec.gpu_budget
        in_use = sum(p.provisioned * p.gpus_per_worker for p in self.pools.values())
        return Snapshot(now=now, interval_s=self.spec.interval_s, mode=self.mode, pools=views, traffic=traffic,
                        sla=self.sla, link=self.link, gpu_budget=budget, gpus_in_use=in_use,
                        requests_left=col.remaining)

    # ------------------------------------------------------------------ decisions

    def hold_scale_down(self, snap: Snapshot, targets: Mapping) -> Mapping:
        """``targets`` with each lower one held at the pool's current target until the policy has
        asked for less at every tick for ``scale_down_delay_s`` (hysteresis: a worker started at
        one tick is not cancelled at the next on noise). Before :meth:`clamp`, so the GPU budget
        still holds."""
        delay = self.spec.scale_down_delay_s
        if not delay:
            return targets
        now, out = self.env.now, dict(targets)
        for name, pool in snap.pools.items():
            n = targets.get(name, pool.target)
            if isinstance(n, int) and not isinstance(n, bool) and n < pool.target:
                since = self._lower_since.setdefault(name, now)
                if now - since < delay:
                    out[name] = pool.target
                    continue
            self._lower_since.pop(name, None)
        return out

    def clamp(self, snap: Snapshot, targets: Mapping) -> dict:
        """Targets within each pool's ``[min_workers, max_workers]`` and, with a GPU budget, with
        sum(target x GPUs per worker) <= budget: while over it, the pool asking for the most
        new workers gives one up (ties: the later pool). Unknown pool names and non-integer
        counts stop the run (:class:`PlannerPolicyError`)."""
        out = {}
        for name, pool in snap.pools.items():
            n = targets.get(name, pool.target)
            if isinstance(n, bool) or not isinstance(n, int):
                raise PlannerPolicyError(f"planner target for pool {name!r} must be an integer, got {n!r}")
            lo, hi = pool.min_workers, pool.max_workers
            # a pool never takes more than its max_workers, nor than workers' own limit
            out[name] = min(max(n, lo), MAX_POOL_WORKERS if hi is None else hi)
        unknown = sorted(set(targets) - set(snap.pools))
        if unknown:
            raise PlannerPolicyError(f"planner targets name unknown pool(s) {', '.join(map(str, unknown))}; "
                                     f"pools are {', '.join(snap.pools)}")
        budget = snap.gpu_budget
        if budget is not None:
            names = list(snap.pools)
            for n in names:  # no pool alone above the budget (so the loop below stays short)
                pool = snap.pools[n]
                out[n] = max(min(out[n], int(budget // pool.gpus_per_worker)), pool.min_workers)
            while sum(out[n] * snap.pools[n].gpus_per_worker for n in names) > budget:
                growth = [(out[n] - snap.pools[n].target, i) for i, n in enumerate(names)
                          if out[n] > snap.pools[n].min_workers]
                if not growth:
                    break
                _, i = max(growth)
                out[names[i]] -= 1
        return out

    def apply(self, targets: dict) -> None:
        for name, n in targets.items():
            self.pools[name].scale_to(n)

    def record(self, snap: Snapshot) -> None:
        t = snap.traffic
        for name, view in snap.pools.items():
            pool = self.pools[name]
            c = pool.counts
            self.samples.append(PoolSample(
                name, snap.now, len(pool.pending), c["active"], c["draining"], pool.target, view.kv_usage,
                sum(w.queued_prefill_tokens for w in view.workers), sum(w.waiting for w in view.workers),
                view.router_queue, t.ttft_ms, t.itl_ms))

    def _check_progress(self) -> None:
        """Raise :class:`Stuck` after :data:`IDLE_TICKS` ticks in a row at which nothing but the
        planner was scheduled while requests were left and no worker was on its way."""
        env = self.env
        waiting_for_workers = any(p.pending for p in self.pools.values())
        if self.collector.remaining and env.peek() == math.inf and not waiting_for_workers:
            self._idle += 1
            if self._idle >= IDLE_TICKS:
                counts = ", ".join(f"{n} {p.counts['active']} active" for n, p in self.pools.items())
                raise Stuck(f"nothing but the planner has run for {IDLE_TICKS} ticks (t={env.now:.6f} s) "
                            f"while {self.collector.remaining} request(s) remain: {counts}")
        else:
            self._idle = 0


"""The whole scenario: workload, latency model, pools, link, router, SLA and planner, and the
rules that tie them together (a link only for disaggregated pools, planner-only pool fields,
the GPU budget).

Imports the other spec modules only. Defaults derived from the hardware are filled in later,
by the resolve step (:mod:`simkit.engine.resolve`).
"""

from __future__ import annotations

import re
from typing import Optional

import attrs
from attrs import field, frozen

from simkit.spec.base import FieldValueError, _pos, exact, time_field_problem
from simkit.spec.cluster import (LinkSpec, PlannerSpec, RoundRobinRouter, RouterQueueSpec, RouterSpec,
                                 SlaPlanner, SlaSpec)
from simkit.spec.latency import DeploymentLatency, LatencySpec, PolynomialLatency
from simkit.spec.pools import PoolsSpec
from simkit.spec.workload import SyntheticWorkload, WorkloadSpec


_SHA256 = re.compile(r"[0-9a-f]{64}")

#: the most planner ticks a worker may take to start (``startup_time_s`` / ``interval_s``): a
#: bound a run reaches (a million ticks take about 30 s of wall time)
MAX_STARTUP_TICKS = 100_000


@frozen(kw_only=True)
class Scenario:
    """A whole simulated experiment: workload, latency model, pools, link, router and SLA."""

    name: str = "scenario"
    seed: int = 0  #: root of every named random stream
    workload: WorkloadSpec = field(factory=SyntheticWorkload)
    pools: PoolsSpec
    latency: LatencySpec = field(factory=PolynomialLatency)
    #: the handoff link; only for disaggregated pools (filled in with defaults there)
    link: Optional[LinkSpec] = None
    router: RouterSpec = field(factory=RoundRobinRouter)
    #: busy thresholds and waiting order of the router queue (default: never wait)
    router_queue: RouterQueueSpec = field(factory=RouterQueueSpec)
    #: latency bounds for goodput (optional; null or {} for none)
    sla: Optional[SlaSpec] = field(factory=SlaSpec, converter=lambda v: SlaSpec() if v is None else v)
    #: stop the run at this simulated time; requests not finished are reported incomplete
    max_sim_time_s: Optional[float] = field(default=None, validator=_pos)
    #: the autoscaling planner (null: every pool keeps its ``workers`` for the whole run)
    planner: Optional[PlannerSpec] = None
    #: the SHA-256 of every file a run read (trace, lengths, pass table, model config, policy
    #: module), by absolute path: a run writes it into its ``scenario.resolved.yaml``, and a
    #: rerun refuses a file it still names that is missing or changed (null: nothing recorded)
    inputs: Optional[dict] = None

    def __attrs_post_init__(self) -> None:
        problem = time_field_problem(self)  # every time-like field, by its unit, within the clock's limit
        if problem is not None:
            raise FieldValueError(*problem)
        for path, digest in (self.inputs or {}).items():
            if not (isinstance(path, str) and isinstance(digest, str) and _SHA256.fullmatch(digest)):
                raise FieldValueError("inputs", f"'inputs' maps file paths to SHA-256 digests (64 hex digits); "
                                                f"got {path!r}: {digest!r}"[:200])
        if self.pools.mode == "aggregated" and self.link is not None:
            raise ValueError("'link' applies only to disaggregated pools (prefill + decode)")
        if self.pools.mode == "disaggregated" and self.link is None:
            object.__setattr__(self, "link", LinkSpec())
        self._resolve_tensor_parallel()
        decode = self.pools.decode
        if decode is not None and decode.backend == "sglang":  # pairs prefill and decode at dispatch
            if self.planner is not None:
                raise ValueError("a planner cannot yet scale a disaggregated sglang cluster (its decode "
                                 "workers are paired at dispatch); use backend vllm or trtllm")
            if self.link.timing_mode != "full_prompt":
                raise ValueError("link.timing_mode destination_missing does not apply to a disaggregated "
                                 "sglang cluster (its decode worker is chosen at dispatch)")
        wl = self.workload
        if isinstance(wl, SyntheticWorkload):
            for name, pool in self.pools.named():
                if pool.block_size % wl.trace_block_size:
                    raise ValueError(
                        f"workload.trace_block_size ({wl.trace_block_size}) must divide "
                        f"pools.{name}.block_size ({pool.block_size})"
                    )
        if self.planner is None:
            for name, pool in self.pools.named():
                if pool.startup_time_s or pool.min_workers != 1 or pool.max_workers is not None:
                    raise ValueError(f"pools.{name}: startup_time_s, min_workers and max_workers "
                                     f"apply only with a 'planner'")
        else:
            for name, pool in self.pools.named():
                ticks = pool.startup_time_s / self.planner.interval_s
                if ticks > MAX_STARTUP_TICKS:
                    shown = f"{ticks:,.0f}" if ticks == int(ticks) else f"{ticks:,}"  # never rounded to the limit
                    raise FieldValueError(
                        f"pools.{name}.startup_time_s",
                        f"'startup_time_s' ({exact(pool.startup_time_s)} s) is {shown} planner ticks of interval_s "
                        f"({self.planner.interval_s:g} s), more than {MAX_STARTUP_TICKS:,} for a worker to start; "
                        "raise planner.interval_s or lower startup_time_s")
            budget = self.planner.gpu_budget
            need = sum(p.workers * p.gpus_per_worker for _, p in self.pools.named())
            if budget is not None and need > budget:
                raise ValueError(f"the initial workers need {need} GPUs, more than planner.gpu_budget ({budget})")
            if isinstance(self.planner, SlaPlanner) and (self.sla.ttft_ms is None and self.sla.itl_ms is None):
                raise ValueError("the sla planner needs sla.ttft_ms or sla.itl_ms")

    def _resolve_tensor_parallel(self) -> None:
        """A pool's ``tensor_parallel_size`` (GPU accounting) follows its latency model's when
        that names a model on a GPU. The defaults derived from the hardware (KV capacity, the
        model's longest sequence, the link's KV bytes per token) are the resolve step's
        (:func:`simkit.engine.resolve.resolve_scenario`)."""
        resolved = {}
        for name, pool in self.pools.named():
            lat = pool.latency or self.latency
            if not isinstance(lat, DeploymentLatency):
                continue
            tp = lat.tensor_parallel_size
            if tp != pool.tensor_parallel_size:  # GPU-hours count the model's TP
                if pool.tensor_parallel_size != 1:
                    raise ValueError(f"pools.{name}.tensor_parallel_size ({pool.tensor_parallel_size}) differs "
                                     f"from its latency model's tensor_parallel_size ({tp})")
                resolved[name] = attrs.evolve(pool, tensor_parallel_size=tp)
        if resolved:
            object.__setattr__(self, "pools", attrs.evolve(self.pools, **resolved))

    @property
    def mode(self) -> str:
        return self.pools.mode

"""Composition root: the one place that builds and wires the simulation.

``build(scenario, requests)`` creates the environment, the collector, the pools of workers,
the handoff link (disaggregated), the router and the source, and starts their processes in a
fixed order (collector, workers by pool then id, router, source), which fixes same-instant
tie-breaks. ``Simulation.run()`` runs until every request has ended (or
``max_sim_time_s``) and returns :class:`~simkit.records.RunRecords`.

Layer L4: the only module that imports all of L3.
"""

from __future__ import annotations

from typing import Optional, Sequence

import simpy

from simkit.collector import Collector
from simkit.config import Scenario
from simkit.engine import make_latency_model
from simkit.link import KvLink
from simkit.messages import Environment
from simkit.records import RunRecords
from simkit.request import Request
from simkit.router import Router
from simkit.source import Source
from simkit.trace import load_workload
from simkit.worker import Worker

__all__ = ["Simulation", "build", "simulate"]


class Simulation:
    """A wired, not yet run, simulation (see :func:`build`)."""

    def __init__(self, scenario: Scenario, requests: Sequence[Request],
                 record_token_times: bool = True, fast_forward: bool = True) -> None:
        rids = [r.rid for r in requests]
        if sorted(rids) != list(range(len(rids))):
            raise ValueError("request ids must be 0..N-1, each once")
        self.scenario = scenario
        self.requests = requests
        env = self.env = Environment()
        self.collector = Collector(env, sorted(requests, key=lambda r: r.rid), record_token_times)
        probe = self.collector
        self.router_queue = simpy.Store(env)
        self.pools: dict[str, list[Worker]] = {}
        self.link: Optional[KvLink] = None
        handoff_queue = None
        if scenario.mode == "disaggregated":
            handoff_queue = simpy.Store(env)
            self.link = KvLink(env, scenario.link, handoff_queue, probe)
        rank = 0
        for name, spec in scenario.pools.named():
            latency = make_latency_model(scenario.latency, spec.num_gpu_blocks * spec.block_size)
            sink = self.link.send if name == "prefill" else None
            self.pools[name] = [
                Worker(env, name, wid, name, spec, latency, probe, handoff=sink, rank=rank + wid,
                       fast_forward=fast_forward, horizon=scenario.max_sim_time_s)
                for wid in range(spec.workers)
            ]
            rank += spec.workers
        entry = self.pools["aggregated" if scenario.mode == "aggregated" else "prefill"]
        self.router = Router(env, scenario.router, self.router_queue, entry, probe,
                             handoff_queue=handoff_queue, decode_workers=self.pools.get("decode"))
        self.source = Source(env, requests, self.router_queue, probe)
        self._started = False

    def start(self) -> None:
        """Start every process in the documented order (idempotent)."""
        if self._started:
            return
        self._started = True
        for workers in self.pools.values():
            for worker in workers:
                worker.start()
        self.router.start()
        self.source.start()

    def run(self) -> RunRecords:
        """Run to completion (or ``max_sim_time_s``) and return the records."""
        self.start()
        env = self.env
        stop = self.collector.all_done
        cap = self.scenario.max_sim_time_s
        if cap is not None:
            stop = env.any_of([stop, env.timeout(cap)])
        try:
            env.run(until=stop)
        except RuntimeError as exc:  # nothing left to happen while requests remain: stuck
            if "No scheduled events left" not in str(exc):
                raise
        end_at = env.now
        worker_seconds = {name: len(ws) * end_at for name, ws in self.pools.items()}
        passes = {name: sum(w.passes for w in ws) for name, ws in self.pools.items()}
        return self.collector.finalize(end_at, worker_seconds, passes)


def build(scenario: Scenario, requests: Optional[Sequence[Request]] = None,
          record_token_times: bool = True, fast_forward: bool = True) -> Simulation:
    """Wire a simulation of ``scenario``; ``requests`` default to its workload.

    ``fast_forward`` runs stretches of identical pure-decode passes as one SimPy timeout; the
    records are exactly those of pass-by-pass stepping (``fast_forward=False``), only faster.

    Raises:
        simkit.trace.TraceError: the scenario's trace file is missing or malformed.
        ValueError: request ids are not 0..N-1.
    """
    if requests is None:
        requests = load_workload(scenario.workload, scenario.seed)
    return Simulation(scenario, requests, record_token_times, fast_forward)


def simulate(scenario: Scenario, requests: Optional[Sequence[Request]] = None,
             record_token_times: bool = True, fast_forward: bool = True) -> RunRecords:
    """Build and run ``scenario`` (on ``requests`` if given); return its records."""
    return build(scenario, requests, record_token_times, fast_forward).run()

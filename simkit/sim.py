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

import attrs
from simpy.core import EmptySchedule

from simkit.collector import Collector, InvariantError
from simkit.config import Scenario
from simkit.engine import make_latency_model
from simkit.link import KvLink
from simkit.messages import Environment, Released
from simkit.records import RunRecords
from simkit.request import Request
from simkit.rng import RngStreams
from simkit.router import Router
from simkit.source import Source
from simkit.trace import load_workload
from simkit.worker import Stuck, Worker

__all__ = ["Simulation", "build", "simulate"]


class Simulation:
    """A wired, not yet run, simulation (see :func:`build`)."""

    def __init__(self, scenario: Scenario, requests: Sequence[Request],
                 record_token_times: bool = True, fast_forward: bool = True,
                 record_passes: bool = False) -> None:
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
                       fast_forward=fast_forward, horizon=scenario.max_sim_time_s,
                       record_passes=record_passes)
                for wid in range(spec.workers)
            ]
            rank += spec.workers
        entry = self.pools["aggregated" if scenario.mode == "aggregated" else "prefill"]
        streams = RngStreams(scenario.seed)
        self.router = Router(env, scenario.router, self.router_queue, entry, probe,
                             handoff_queue=handoff_queue, decode_workers=self.pools.get("decode"),
                             rngs=(streams.get("router"), streams.get("router_decode")),
                             queue_spec=scenario.router_queue,
                             pair_at_dispatch=(scenario.pools.decode is not None
                                               and scenario.pools.decode.backend == "sglang"))
        if self.router.pair_at_dispatch:
            for worker in self.pools["decode"]:
                worker.on_reserved = self.router.send_reserved
        if scenario.router_queue.enabled:
            for worker in entry:
                worker.on_pass_end = self.router.poke
        max_in_flight = getattr(scenario.workload, "max_in_flight", None)
        self.source = Source(env, requests, self.router_queue, probe, max_in_flight)
        self.collector.listeners.append(self.source.ended)
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

    def run(self, check: bool = False) -> RunRecords:
        """Run until every request has ended, or ``max_sim_time_s``, and return the records.

        The run also stops, with ``stop_reason`` and a diagnostic in the records, when it is
        stuck (a worker stalls, or nothing is left to happen while requests remain), on Ctrl-C
        (``interrupted``), or, with ``check``, at the first instant whose state breaks a
        conservation rule (:meth:`check_invariants`).
        """
        self.start()
        env = self.env
        done = self.collector.all_done
        cap = self.scenario.max_sim_time_s
        reason, detail = "completed", None
        try:
            if check:
                self._run_checked(done, cap)
            else:
                env.run(until=done if cap is None else env.any_of([done, env.timeout(cap)]))
            if not done.triggered:
                reason = "time_cap"
        except Stuck as exc:
            reason, detail = "stuck", str(exc)
        except InvariantError as exc:
            reason, detail = "check_failed", str(exc)
        except KeyboardInterrupt:
            reason, detail = "interrupted", f"interrupted by the user at t={env.now:.6f} s"
        except (RuntimeError, EmptySchedule) as exc:  # nothing left to happen while work remains
            if not isinstance(exc, EmptySchedule) and "No scheduled events left" not in str(exc):
                raise
            reason, detail = "stuck", self._stuck_diagnostic()
        end_at = env.now
        worker_seconds = {name: len(ws) * end_at for name, ws in self.pools.items()}
        passes = {name: sum(w.passes for w in ws) for name, ws in self.pools.items()}
        records = self.collector.finalize(end_at, worker_seconds, passes, reason, detail)
        workers = [w for ws in self.pools.values() for w in ws]
        if workers and workers[0].pass_log is not None:
            records = attrs.evolve(records, pass_log=tuple(p for w in workers for p in w.pass_log))
        return records

    def _run_checked(self, done, cap: Optional[float]) -> None:
        env = self.env
        while not done.triggered:
            if cap is not None and env.peek() > cap:
                env.run(until=cap)  # the cap ends the run between events
                return
            env.step()
            if env.peek() > env.now:  # the instant is settled: every cascade at `now` is done
                self.check_invariants()

    def _stuck_diagnostic(self) -> str:
        busy = [f"{w.name}: {w.sched.describe()}" for ws in self.pools.values() for w in ws
                if w.sched.has_work() or w.sched.held]
        left = self.collector.remaining
        return (f"no event left at t={self.env.now:.6f} s with {left} request(s) not ended; "
                + ("; ".join(busy) if busy else "no worker holds them"))

    def check_invariants(self) -> None:
        """Assert conservation now.

        Requests: arrived = in the router queue + in worker inboxes (or taken from one during a
        fast-forwarded run, not yet accepted) + waiting + running + on the handoff link + in the
        handoff queue + ended. KV, per worker: free anonymous +
        free cached + in use = ``num_gpu_blocks``, and no block both free and in use.

        Raises:
            InvariantError: naming the rule, the numbers and the time.
        """
        now = self.env.now
        where = {"router queue": len(self.router_queue.items) + len(self.router.held), "inboxes": 0, "waiting": 0,
                 "running": 0, "on the link": self.link.in_flight if self.link else 0,
                 "handoff queue": len(self.link.handoff_queue.items) if self.link else 0,
                 "ended": self.collector.ended_count}
        for workers in self.pools.values():
            for w in workers:
                where["inboxes"] += sum(1 for m in w.inbox.items if type(m) is not Released)
                where["inboxes"] += w.in_hand is not None and type(w.in_hand) is not Released
                where["inboxes"] += len(w.pending_reserve)
                where["waiting"] += len(w.sched.waiting)
                where["running"] += len(w.sched.running)
                kv = w.sched.kv
                try:
                    kv.check()
                except AssertionError as exc:
                    raise InvariantError(f"at t={now:.6f} s, worker {w.name}: {exc}") from None
                if kv.used_blocks > kv.capacity:
                    raise InvariantError(f"at t={now:.6f} s, worker {w.name}: {kv.used_blocks} KV blocks "
                                         f"in use, more than num_gpu_blocks {kv.capacity}")
        arrived = self.collector.arrived_count
        if arrived != sum(where.values()):
            parts = " + ".join(f"{k} {v}" for k, v in where.items())
            raise InvariantError(f"at t={now:.6f} s, requests not conserved: arrived {arrived} != {parts}")


def build(scenario: Scenario, requests: Optional[Sequence[Request]] = None,
          record_token_times: bool = True, fast_forward: bool = True,
          record_passes: bool = False) -> Simulation:
    """Wire a simulation of ``scenario``; ``requests`` default to its workload.

    ``fast_forward`` runs stretches of identical pure-decode passes as one SimPy timeout; the
    records are exactly those of pass-by-pass stepping (``fast_forward=False``), only faster.
    ``record_passes`` keeps a :class:`~simkit.records.PassRecord` per forward pass (memory grows
    with the passes: for small runs, timelines and teaching).

    Raises:
        simkit.trace.TraceError: the scenario's trace file is missing or malformed.
        ValueError: request ids are not 0..N-1.
    """
    if requests is None:
        requests = load_workload(scenario.workload, scenario.seed)
    return Simulation(scenario, requests, record_token_times, fast_forward, record_passes)


def simulate(scenario: Scenario, requests: Optional[Sequence[Request]] = None,
             record_token_times: bool = True, fast_forward: bool = True,
             check: bool = False, record_passes: bool = False) -> RunRecords:
    """Build and run ``scenario`` (on ``requests`` if given); return its records.

    ``check`` asserts conservation of requests and KV blocks at every settled instant (slower).
    """
    return build(scenario, requests, record_token_times, fast_forward, record_passes).run(check=check)

"""Composition root: the one place that builds and wires the simulation.

``build(scenario, requests)`` creates the environment, the collector, the pools of workers,
the handoff link (disaggregated), the router, the source and, with a ``planner``, the GPU
budget and the planner, and starts their processes in a fixed order (workers by pool then id,
router, source, planner), which fixes same-instant tie-breaks; workers the planner adds later
start when they become active and rank after the pool's earlier workers. ``Simulation.run()``
runs until every request has ended (or ``max_sim_time_s``) and returns
:class:`~simkit.core.records.RunRecords`.

The public loaders ``load_scenario``, ``scenario_from_dict`` and ``override`` live here too:
they bind the spec loaders (:mod:`simkit.spec`) to the resolve step
(:mod:`simkit.engine.resolve`), the one place where specs meet the hardware.

The only module that imports the cluster's processes, the workload readers and the engine
together (docs/architecture.md); never output or the CLI.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, Optional, Sequence

import simpy

import attrs
from simpy.core import EmptySchedule

from simkit.cluster.collector import Collector, InvariantError
from simkit.cluster.offload import publish_tier_events
from simkit import spec
from simkit.engine.resolve import resolve_scenario
from simkit.spec import ConfigError, KvAwareRouter, PythonPlanner, PythonRouter, ResolveError, Scenario
from simkit.engine.latency import make_latency_model
from simkit.cluster.link import KvLink
from simkit.cluster.messages import Environment, carries_request
from simkit.cluster.planner import MAX_TICKS, Planner, make_planner_policy
from simkit.cluster.plugins import load_policy, module_files
from simkit.core.files import sha256_file
from simkit.cluster.pool import WorkerPool
from simkit.core.records import RunRecords
from simkit.core.request import Request, check_requests
from simkit.core.rng import RngStreams
from simkit.core.signals import SignalsBetweenEvents
from simkit.cluster.kv_router import KvAware
from simkit.cluster.router import Router
from simkit.engine.scheduler import private_suffixes
from simkit.cluster.source import Source
from simkit.workload import iter_workload, load_workload
from simkit.core.units import MAX_SIM_TIME_S, MAX_SIM_TIME_TEXT, S_PER_MS
from simkit.cluster.worker import Stuck, Worker

__all__ = ["Simulation", "build", "check_inputs", "input_files", "load_scenario", "override", "record_inputs",
           "scenario_from_dict", "simulate"]

#: rank distance between pools: pass boundaries of one instant run pool by pool, then by index
RANK_STRIDE = 1 << 40


def input_files(scenario: Scenario) -> list[tuple[str, str]]:
    """Every file a run of ``scenario`` reads, as ``(field path, absolute path)``, in field
    order without repeats: the trace, empirical lengths, pass tables, model and draft-model
    configs (paths, not shipped names) and Python policies' modules (:func:`simkit.spec.paths.path_fields`)."""
    out: dict[str, str] = {}
    for where, kind, node in spec.path_fields(scenario):
        files = module_files(node) if kind == "module" else [os.path.abspath(node)]
        for path in files:
            out.setdefault(path, where)
    return [(where, path) for path, where in out.items()]


def record_inputs(scenario: Scenario) -> Scenario:
    """``scenario`` with ``inputs`` set to the SHA-256 of each file a run of it reads (those
    it can read: a missing or unreadable one fails the run with its own message)."""
    digests = {}
    for _, path in input_files(scenario):
        try:
            digests[path] = sha256_file(path)
        except OSError:
            pass
    return attrs.evolve(scenario, inputs=digests or None)


def changed_inputs(inputs: Optional[dict]) -> list[tuple[str, str, Optional[str]]]:
    """``(path, recorded SHA-256, now)`` for each file of ``inputs`` (a scenario's recorded
    ``inputs``) whose SHA-256 is not the recorded one now: ``now`` is its digest, None when
    the file is gone, or ``unreadable (reason)``."""
    out = []
    for path, digest in (inputs or {}).items():
        try:
            now: Optional[str] = sha256_file(path)
        except FileNotFoundError:
            now = None
        except OSError as exc:
            now = f"unreadable ({exc.strerror or exc})"
        if now != digest:
            out.append((path, digest, now))
    return out


def check_inputs(scenario: Scenario) -> Scenario:
    """``scenario`` unchanged when every file recorded in its ``inputs`` that it still reads
    is there with the recorded SHA-256 (files an override replaced are not checked).

    Raises:
        ResolveError: at ``$.inputs``, one problem per missing or changed file.
    """
    if not scenario.inputs:
        return scenario
    current = {path for _, path in input_files(scenario)}
    problems = []
    for path, digest, now in changed_inputs({p: d for p, d in scenario.inputs.items() if p in current}):
        if now is None:
            problems.append(("$.inputs", f"input {path}, which the run that wrote this scenario read, is missing; "
                                         "restore it, or delete its line under 'inputs' to run without it"))
        else:
            problems.append(("$.inputs", f"input {path} changed since the run that wrote this scenario read it "
                                         f"(SHA-256 {digest[:12]}..., now {now[:40]}); restore it, or delete its "
                                         "line under 'inputs' to run on the new file"))
    if problems:
        raise ResolveError(problems)
    return scenario


def _resolve(scenario: Scenario) -> Scenario:
    """The loaders' resolve step: recorded inputs checked, then the hardware's defaults."""
    return resolve_scenario(check_inputs(scenario))


def load_scenario(path: str, overrides: Optional[list[tuple[str, Any]]] = None) -> Scenario:
    """Read a scenario YAML file, apply ``(dotted.key, value)`` overrides, validate it, check
    the files its ``inputs`` recorded (:func:`check_inputs`) and fill in what its hardware
    implies (:func:`simkit.spec.load_scenario` with the resolve step,
    :func:`simkit.engine.resolve.resolve_scenario`).

    A relative path field in the file is resolved against the file's folder; one given as an
    override against the current folder.

    Raises:
        ConfigError: unreadable file, YAML syntax error, invalid fields, a recorded input
            missing or changed (one line each).
    """
    return spec.load_scenario(path, overrides, resolve=_resolve)


def scenario_from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Structure a plain dict (as read from YAML) into a validated, resolved :class:`Scenario`
    (relative paths against the current folder; recorded inputs checked).

    Raises:
        ConfigError: one ``SOURCE: message @ $.path`` line per problem.
    """
    return spec.scenario_from_dict(data, source, resolve=_resolve)


def override(scenario: Scenario, changes: dict[str, Any]) -> Scenario:
    """A copy of ``scenario`` with dotted-path ``changes`` applied, re-validated and resolved.

    Example: ``override(s, {"pools.decode.workers": 8})``.

    Raises:
        ConfigError: a change makes the scenario invalid.
    """
    return spec.override(scenario, changes, resolve=_resolve)


def _resolved(scenario: Scenario) -> Scenario:
    """``scenario`` resolved (idempotent: a loaded scenario comes back equal), for scenarios
    built in Python without a loader."""
    try:
        return resolve_scenario(scenario)
    except ResolveError as exc:
        raise ConfigError(exc.lines("<scenario>")) from None


class Simulation:
    """A wired, not yet run, simulation (see :func:`build`)."""

    def __init__(self, scenario: Scenario, requests: Iterable[Request],
                 record_token_times: bool = True, fast_forward: bool = True,
                 record_passes: bool = False, router_policy=None, planner_policy=None,
                 stream: bool = False, sink=None) -> None:
        self.scenario = scenario
        self.stream = stream
        #: fast-forwarded runs stop here: ``max_sim_time_s``, else the clock's limit, beyond which
        #: the environment schedules nothing (``stop_reason`` ``time_limit``)
        self.time_limit = scenario.max_sim_time_s if scenario.max_sim_time_s is not None else MAX_SIM_TIME_S
        env = self.env = Environment(limit=MAX_SIM_TIME_S)
        max_in_flight = getattr(scenario.workload, "max_in_flight", None)
        self.router_queue = simpy.Store(env)
        private = None
        if stream:
            self.requests = None
            self.source = Source(env, requests, self.router_queue, None, max_in_flight, stream=True)
            self.collector = Collector(env, self.source.live, record_token_times, None, sink)
            self.source.on_exhausted = self.collector.expect
        else:
            rids = [r.rid for r in requests]
            if sorted(rids) != list(range(len(rids))):
                raise ValueError("request ids must be 0..N-1, each once")
            self.requests = requests
            by_rid = sorted(requests, key=lambda r: r.rid)
            self.collector = Collector(env, by_rid, record_token_times, len(by_rid), sink)
            self.source = Source(env, requests, self.router_queue, None, max_in_flight)
            # which prompt blocks no other request has: their keys need no tracking (kvcache)
            private = private_suffixes(by_rid, [spec.block_size for _, spec in scenario.pools.named()])
        self.source.probe = probe = self.collector
        planner_spec = scenario.planner
        dynamic = planner_spec is not None
        #: the cluster GPU budget the planner scales within (None: unlimited)
        self.gpus = None
        if dynamic and planner_spec.gpu_budget is not None:
            self.gpus = simpy.Container(env, capacity=planner_spec.gpu_budget, init=planner_spec.gpu_budget)
        self.worker_pools: dict[str, WorkerPool] = {}
        self.pools: dict[str, list[Worker]] = {}  #: every worker ever provisioned, per pool
        self.link: Optional[KvLink] = None
        handoff_queue = None
        if scenario.mode == "disaggregated":
            handoff_queue = simpy.Store(env)
            self.link = KvLink(env, scenario.link, handoff_queue, probe)
        entry_name = "aggregated" if scenario.mode == "aggregated" else "prefill"
        self._pass_end_hook = None  # set once the router exists (router queue thresholds)
        self._kv_watched = False  # likewise: the router queue's max_kv_usage watches the entry pool's KV
        self._kv_listener = None  # set once the router exists (a KV-aware router's KV events)
        self._host_listener = None  # likewise, its host-tier events
        self._disk_listener = None  # and its storage tiers' (kv_offload.storage.kv_events)
        self._clock = None  # the planner, once it exists (fast-forward horizon)
        self.router: Optional[Router] = None
        latencies = {}
        event_lag_s = scenario.router.kv_event_lag_ms * S_PER_MS if isinstance(scenario.router, KvAwareRouter) else 0.0
        #: same-instant pass boundaries: the decode pool's first, then the prompt pool's (measured
        #: on the reference: a decode worker that takes a prompt's KV in at the instant its
        #: prefill ends frees the prefill side before that worker forms its next pass)
        order = {"decode": 0, "aggregated": 1, "prefill": 1}
        #: what a pool's workers share, set by its first worker: pool -> its storage tier
        #: (kv_offload.storage.scope: pool); (pool, "stores" | "loads") -> the bandwidth of its
        #: host copies that way under a pool-wide cap (kv_offload.shared_d2h_gb_per_s, ...)
        pool_shared: dict = {}
        for name, pool_spec in scenario.pools.named():
            index = order[name]
            latency = latencies[name] = make_latency_model(pool_spec.latency or scenario.latency,
                                                           pool_spec.num_gpu_blocks * pool_spec.block_size,
                                                           pool_spec.speculative, pool_spec.async_scheduling)
            sink = self.link.send if name == "prefill" else None

            def make_worker(wid, name=name, pool_spec=pool_spec, latency=latency, sink=sink, entry=name == entry_name):
                # ranks order same-instant pass boundaries: pools as above, then by index
                worker = Worker(env, name, wid, name, pool_spec, latency, probe, handoff=sink,
                                rank=index * RANK_STRIDE + wid, fast_forward=fast_forward,
                                horizon=self.time_limit, record_passes=record_passes, seed=scenario.seed)
                storage = pool_spec.kv_offload.storage if pool_spec.kv_offload is not None else None
                if pool_spec.kv_offload is not None:  # pool-wide caps on host copies: one share each way
                    for copies in (worker.offload.stores, worker.offload.loads):
                        if copies.share.total_bytes_per_s is not None:
                            way = "stores" if copies is worker.offload.stores else "loads"
                            copies.share = pool_shared.setdefault((name, way), copies.share)
                if storage is not None and storage.scope == "pool":  # one storage tier, all its workers
                    own = worker.offload.host.storage
                    shared = worker.offload.host.storage = pool_shared.setdefault(name, own)
                    if shared is not own:
                        shared.inboxes.extend(own.inboxes)
                if entry:
                    worker.on_pass_end = self._pass_end_hook
                    worker.kv_watched = self._kv_watched
                    if self._kv_listener is not None:
                        worker.publish_kv_events(self._kv_listener, event_lag_s)
                        publish_tier_events(worker, self._host_listener, self._disk_listener)
                # (with a host tier every prompt block keeps its identity: it is stored and found there)
                worker.sched.private_ids = private if worker.offload is None else None
                worker.clock = self._clock
                if self.router is not None:  # a worker the planner adds
                    self._wire_pairing(worker)
                return worker

            pool = self.worker_pools[name] = WorkerPool(env, name, pool_spec, make_worker, self.gpus, pool_spec.workers)
            self.pools[name] = pool.workers
        streams = RngStreams(scenario.seed)
        if router_policy is None and isinstance(scenario.router, PythonRouter):
            router_policy = load_policy(scenario.router, "router")
        decode = self.worker_pools.get("decode")
        self.router = Router(env, scenario.router, self.router_queue, self.worker_pools[entry_name].routable, probe,
                             handoff_queue=handoff_queue, decode_workers=decode.routable if decode else None,
                             rngs=(streams.get("router"), streams.get("router_decode")),
                             queue_spec=scenario.router_queue, dynamic=dynamic, policy_factory=router_policy,
                             pair_at_dispatch=(scenario.pools.decode is not None
                                               and scenario.pools.decode.backend == "sglang"),
                             entry_role=entry_name)
        for policy, workers in ((self.router.entry_policy, self.pools[entry_name]),
                                (self.router.decode_policy, self.pools.get("decode"))):
            if isinstance(policy, KvAware) and workers is not None:  # it keeps its own state
                policy.pool_workers = workers
                policy.private_ids = private
                self.collector.prefill_listeners.append(policy.prefill_done)
                self.collector.release_listeners.append(policy.released)
                self.collector.listeners.append(policy.ended)
        if isinstance(self.router.entry_policy, KvAware):  # it hears the prompt pool's KV events
            self._kv_listener = self.router.entry_policy.kv_event
            self._host_listener = self.router.entry_policy.host_event
            self._disk_listener = self.router.entry_policy.disk_event
            for worker in self.pools[entry_name]:
                worker.publish_kv_events(self._kv_listener, event_lag_s)
                publish_tier_events(worker, self._host_listener, self._disk_listener)
        if self.link is not None and scenario.link.timing_mode == "destination_missing":
            self.link.place = self.router.place_decode
        for name in ("decode", entry_name):
            for worker in self.pools.get(name, ()):
                self._wire_pairing(worker)
        if scenario.router_queue.enabled:
            self._pass_end_hook = self.router.poke
            self._kv_watched = scenario.router_queue.max_kv_usage is not None
            for worker in self.pools[entry_name]:
                worker.on_pass_end = self.router.poke
                worker.kv_watched = self._kv_watched
        self.collector.listeners.append(self.source.ended)
        # the frontend (a deployment latency model's fitted or given overheads): before the
        # router, from the entry pool's model; from the engine's tokens to the client, from the
        # model of the pool that emits them
        token_pool = "aggregated" if scenario.mode == "aggregated" else "decode"
        self.source.frontend_s = self.collector.frontend_s = getattr(latencies[entry_name], "dispatch_overhead_s", 0.0)
        self.collector.delivery_s = getattr(latencies[token_pool], "first_token_overhead_s", 0.0)
        self.source.jitter_s = getattr(latencies[entry_name], "dispatch_jitter_s", 0.0)
        self.source.seed = scenario.seed
        self.planner: Optional[Planner] = None
        if dynamic:
            self.worker_pools[entry_name].on_routable = self.router.poke
            if decode is not None:
                decode.on_routable = self.router.poke_decode
            if planner_policy is None and isinstance(planner_spec, PythonPlanner):
                planner_policy = load_policy(planner_spec, "planner")
            self.collector.track_recent()
            self.planner = Planner(env, planner_spec, make_planner_policy(planner_spec, planner_policy),
                                   self.worker_pools, self.router, self.collector, self.gpus, latencies,
                                   scenario.sla, scenario.link, scenario.mode)
            self._clock = self.planner
            for workers in self.pools.values():
                for worker in workers:
                    worker.clock = self.planner
        self._started = False

    def _wire_pairing(self, worker: Worker) -> None:
        """With decode workers paired at dispatch (SGLang): a decode worker sends a request on
        once it reserved room, and a prompt worker rejecting a request frees that room."""
        if self.router.pair_at_dispatch:
            if worker.role == "decode":
                worker.on_reserved = self.router.send_reserved
            else:
                worker.on_rejected = self.router.unreserve

    def start(self) -> None:
        """Start every process in the documented order (idempotent): workers by pool then
        index, the router, the source, then the planner (its first tick is at ``interval_s``)."""
        if self._started:
            return
        self._started = True
        for workers in self.pools.values():
            for worker in workers:
                worker.start()
        self.router.start()
        self.source.start()
        if self.planner is not None:
            self.planner.start()

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
            with SignalsBetweenEvents() as signals:
                until = done if cap is None else env.any_of([done, env.timeout(cap)])
                self._run_until(until, signals, check)
                # let the last instant settle: the last request ended (a prefill worker frees its
                # KV then), or the cap's instant runs to its end, everything that happens at it
                # included (pass ends at the cap, and what they set off at that instant)
                while env._queue and env.peek() <= env.now:
                    env.step()
                    if signals.pending:
                        signals.deliver()
                if not done.triggered:
                    reason = "time_cap"
        except Stuck as exc:  # or a user policy's error (its own reason)
            reason, detail = exc.reason, str(exc) + self._stop_runs()
        except InvariantError as exc:
            reason, detail = "check_failed", str(exc)
        except KeyboardInterrupt:
            reason, detail = "interrupted", f"interrupted by the user at t={env.now:.6f} s" + self._stop_runs()
        except (RuntimeError, EmptySchedule) as exc:  # nothing left to happen while work remains
            if not isinstance(exc, EmptySchedule) and "No scheduled events left" not in str(exc):
                raise
            if env.overrun is not None:  # what was left to happen lies beyond the clock's limit
                left = self.collector.remaining
                reason, detail = "time_limit", (
                    f"an event was due at t={env.overrun:.6g} s, beyond the simulated clock's limit of "
                    f"{MAX_SIM_TIME_TEXT}, with {'some' if left is None else left} request(s) not ended "
                    f"(times that add up beyond it: delays, think times, pass or transfer times); the run "
                    f"stopped at t={env.now:.6f} s")
            else:
                reason, detail = "stuck", self._stuck_diagnostic()
        end_at = env.now
        for pool in self.worker_pools.values():
            pool.accrue(end_at)
        worker_seconds = {name: pool.worker_seconds for name, pool in self.worker_pools.items()}
        gpu_seconds = {name: pool.worker_seconds * pool.gpus_per_worker for name, pool in self.worker_pools.items()}
        passes = {name: sum(w.passes for w in ws) for name, ws in self.pools.items()}
        extra: dict = {"gpu_seconds": gpu_seconds}
        if self.planner is not None:
            extra["worker_counts"] = tuple(c for pool in self.worker_pools.values() for c in pool.changes)
            extra["pool_samples"] = tuple(self.planner.samples)
        offloading = [w.offload for ws in self.pools.values() for w in ws if w.offload is not None]
        if offloading:
            extra["kv_offload"] = {
                "host_hit_tokens": self.collector.prompt_host_hit_tokens,
                "stored_blocks": sum(o.host.stored_blocks for o in offloading),
                "restored_blocks": sum(o.host.restored_blocks for o in offloading),
                "d2h_bytes": sum(o.bytes_d2h for o in offloading),
                "h2d_bytes": sum(o.bytes_h2d for o in offloading)}
            if any(o.host.storage is not None for o in offloading):
                extra["kv_offload"].update(
                    staged_blocks=sum(o.host.staged_blocks for o in offloading),
                    written_blocks=sum(o.host.written_blocks for o in offloading),
                    storage_read_bytes=sum(o.bytes_read for o in offloading),
                    storage_write_bytes=sum(o.bytes_written for o in offloading),
                    bypassed_restores=sum(o.host.bypassed_restores for o in offloading),
                    storage_hit_tokens=sum(o.host.storage_hit_tokens for o in offloading))
        records = self.collector.finalize(end_at, worker_seconds, passes, reason, detail,
                                          not_arrived=self.source.unreleased(), **extra)
        workers = [w for ws in self.pools.values() for w in ws]
        if workers and workers[0].pass_log is not None:
            records = attrs.evolve(records, pass_log=tuple(p for w in workers for p in w.pass_log))
        return records

    def _stop_runs(self) -> str:
        """A run stopped between events (Ctrl-C, a policy's error): the fast-forwarded decode
        runs under way count the passes that ended by now, their tokens and completions
        included, as pass-by-pass stepping would have recorded them (a run that ends normally,
        or at its time cap, never leaves one under way past its end). Returns a note for the
        diagnostic when one could not be (the stop interrupted a cascade half way)."""
        failed = []
        for workers in self.pools.values():
            for worker in workers:
                try:
                    worker.stop_run()
                except Exception:  # noqa: BLE001 - the records keep what was recorded before
                    failed.append(worker.name)
        if failed:
            return f" (the decode runs under way on {', '.join(failed)} could not be brought up to the stop)"
        return ""

    def _run_until(self, until, signals: "SignalsBetweenEvents", check: bool) -> None:
        """``env.run(until=until)`` one event at a time: a signal is delivered between two events
        (:class:`SignalsBetweenEvents`), and with ``check`` the state is checked at every
        settled instant. The same events run as under ``env.run``, so neither changes a result
        (the caller settles the last instant).

        Raises:
            EmptySchedule: nothing is left to happen before ``until``.
        """
        env = self.env
        step, pending = env.step, signals.pending
        while not until.processed:
            step()
            if pending:
                signals.deliver()
            if check and env.peek() > env.now:  # the instant is settled: every cascade at `now` is done
                self.check_invariants()

    def _stuck_diagnostic(self) -> str:
        busy = [f"{w.name}: {w.sched.describe()}" for ws in self.pools.values() for w in ws
                if w.sched.has_work() or w.sched.held]
        left = self.collector.arrived_count - self.collector.ended_count
        held = len(self.router.held) + len(self.router.incoming) + len(self.router.held_handoffs)
        if held:  # waiting in the router queue (busy thresholds) or for a decode worker
            busy.append(f"{held} held by the router")
        unreleased = self.source.describe_unreleased()
        if unreleased:  # waiting for a closed-loop slot or for requests that never end
            busy.append(unreleased)
        return (f"no event left at t={self.env.now:.6f} s with {left} released request(s) not ended; "
                + ("; ".join(busy) if busy else "no worker holds them"))

    def check_invariants(self) -> None:
        """Assert conservation now.

        Requests: arrived = in the frontend's delay + in the router queue + in worker inboxes (or taken from one during a
        fast-forwarded run, not yet accepted) + waiting + running + on the handoff link + in the
        handoff queue + ended. KV, per worker: free anonymous +
        free cached + in use = ``num_gpu_blocks``, and no block both free and in use; a host KV
        tier holds (resident + being stored) at most its ``host_blocks``, a storage tier
        (resident + being written) at most its ``blocks``, each block one or the other, and
        only resident blocks are being staged from it.

        Raises:
            InvariantError: naming the rule, the numbers and the time.
        """
        now = self.env.now
        where = {"frontend": self.source.in_frontend,
                 "router queue": len(self.router_queue.items) + len(self.router.held) + len(self.router.incoming),
                 "inboxes": 0, "waiting": 0,
                 "running": 0, "on the link": self.link.in_flight if self.link else 0,
                 "handoff queue": (len(self.link.handoff_queue.items) + len(self.router.held_handoffs)
                                   if self.link else 0),
                 "ended": self.collector.ended_count}
        for workers in self.pools.values():
            for w in workers:
                where["inboxes"] += sum(1 for m in w.inbox.items if carries_request(m))
                where["inboxes"] += w.in_hand is not None and carries_request(w.in_hand)
                where["inboxes"] += len(w.pending_reserve)
                where["inboxes"] += len(w.deferred)  # requests and handoffs only
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
                problem = w.offload.problem() if w.offload is not None else None
                if problem is not None:
                    raise InvariantError(f"at t={now:.6f} s, worker {w.name}: {problem}")
        arrived = self.collector.arrived_count
        if arrived != sum(where.values()):
            parts = " + ".join(f"{k} {v}" for k, v in where.items())
            raise InvariantError(f"at t={now:.6f} s, requests not conserved: arrived {arrived} != {parts}")


def build(scenario: Scenario, requests: Optional[Iterable[Request]] = None,
          record_token_times: bool = True, fast_forward: bool = True,
          record_passes: bool = False, router_policy=None, planner_policy=None,
          stream: bool = False, sink=None) -> Simulation:
    """Wire a simulation of ``scenario``; ``requests`` default to its workload.

    ``fast_forward`` runs stretches of identical pure-decode passes as one SimPy timeout; the
    records are exactly those of pass-by-pass stepping (``fast_forward=False``), only faster.
    ``record_passes`` keeps a :class:`~simkit.core.records.PassRecord` per forward pass (memory grows
    with the passes: for small runs, timelines and teaching). ``router_policy`` /
    ``planner_policy`` are factories of user policies (:func:`simkit.cluster.plugins.policy_factory`)
    that replace the scenario's router / planner policy.

    ``stream`` replays the workload as an iterator (``requests``, or the scenario's workload
    read lazily, see :func:`simkit.workload.iter_workload`) keeping only requests in flight;
    ``sink`` receives each request's record when it ends (a
    :class:`~simkit.output.spool.RequestSpool` keeps memory bounded; default: a list). A streamed run's
    records are those of the same run unstreamed, in the sink's order. Closed loop
    (``max_in_flight``) does not stream.

    Raises:
        simkit.workload.TraceError: the scenario's trace file is missing or malformed.
        simkit.ConfigError: a ``kind: python`` policy does not import or lacks its protocol; a
            latency model that cannot be built (a scenario made in Python without a loader).
        ValueError: request ids are not 0..N-1; ``stream`` with a closed loop.
    """
    scenario = _resolved(scenario)
    if requests is not None and not stream:
        requests = tuple(requests)
        check_requests(requests)
    if stream:
        stream_of = iter(requests if requests is not None else iter_workload(scenario.workload, scenario.seed))
        first = next(stream_of, None)  # a missing or malformed trace fails here, not mid-run
        requests = stream_of if first is None else itertools.chain((first,), stream_of)
    elif requests is None:
        requests = load_workload(scenario.workload, scenario.seed)
    if scenario.planner is not None and not stream:
        _check_planner_ticks(scenario, requests)
    return Simulation(scenario, requests, record_token_times, fast_forward, record_passes,
                      router_policy, planner_policy, stream, sink)


def _check_planner_ticks(scenario: Scenario, requests: Sequence[Request]) -> None:
    """Refuse, before the run, a workload whose arrivals span more planner ticks than a run
    makes (:data:`simkit.cluster.planner.MAX_TICKS`): the run would stop there.

    Raises:
        ConfigError: at ``$.planner.interval_s``.
    """
    span = max((r.arrived_at for r in requests if not r.deps), default=0.0)
    interval = scenario.planner.interval_s
    if span / interval > MAX_TICKS:
        raise ConfigError([f"the workload's arrivals span {span:.6g} s, {span / interval:,.0f} planner ticks of "
                           f"interval_s ({interval:g} s), more than the {MAX_TICKS:,} a run makes; raise "
                           "planner.interval_s (or compress a trace with arrival_speedup_ratio) @ $.planner.interval_s"])


def simulate(scenario: Scenario, requests: Optional[Sequence[Request]] = None,
             record_token_times: bool = True, fast_forward: bool = True,
             check: bool = False, record_passes: bool = False) -> RunRecords:
    """Build and run ``scenario`` (on ``requests`` if given); return its records.

    ``check`` asserts conservation of requests and KV blocks at every settled instant (slower).
    """
    return build(scenario, requests, record_token_times, fast_forward, record_passes).run(check=check)

"""The router: routing policies and the two dispatch processes.

``dispatch_new`` takes requests from the router queue (a ``Store``) and puts each on the
inbox of the prefill (or aggregated) worker its policy picks; ``dispatch_handoff`` does the
same, with its own policy object, for requests whose KV reached the decode side. Policies read
read-only views of the workers (:class:`Routable`), exact at the instant of the decision: KV
blocks in use, queued prefill tokens and prompt blocks cached; ties are broken by a seeded
random stream, so runs replay. The KV-aware policy keeps its own state instead
(:mod:`simkit.cluster.kv_router`). Part of :mod:`simkit.cluster`.
"""

from __future__ import annotations

import random
from typing import Optional, Protocol, Sequence

import simpy

from simkit.spec import (
    KvAwareRouter,
    RouterQueueSpec,
    LeastLoadedRouter,
    RoundRobinRouter,
    RouterSpec,
    SessionAffinityRouter,
)
from simkit.cluster.kv_router import KvAware
from simkit.cluster.messages import Decide, Unreserve
from simkit.cluster.probe import Probe
from simkit.cluster.worker import Stuck


class Routable(Protocol):
    """What a routing policy may read of a worker (never change)."""

    wid: int

    @property
    def kv_blocks_in_use(self) -> int: ...

    @property
    def queued_prefill_tokens(self) -> int: ...

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        ...

    def cached_prompt_blocks(self, request) -> tuple[int, int]:
        """(prompt blocks of ``request`` cached here now, its full prompt blocks)."""
        ...


class RoundRobin:
    """Request i goes to worker i mod N (deterministic, REFERENCE.md section 6)."""

    def __init__(self, spec: RoundRobinRouter, rng: random.Random) -> None:
        self.count = 0

    def pick(self, request, workers: Sequence[Routable]):
        worker = workers[self.count % len(workers)]
        self.count += 1
        return worker


def _load(w: Routable) -> tuple[int, int, int]:
    return (w.kv_blocks_in_use, w.queued_prefill_tokens, w.wid)


class LeastLoaded:
    """Fewest KV blocks in use, then fewest queued prefill tokens, then lowest index."""

    def __init__(self, spec: LeastLoadedRouter, rng: random.Random) -> None:
        pass

    def pick(self, request, workers: Sequence[Routable]):
        return min(workers, key=_load)


class SessionAffinity:
    """A session sticks to the worker that served its previous request; others: least loaded."""

    def __init__(self, spec: SessionAffinityRouter, rng: random.Random) -> None:
        self.home: dict = {}

    def pick(self, request, workers: Sequence[Routable]):
        session = getattr(request, "session", None)
        if session is not None and session in self.home:
            wid = self.home[session]
            for w in workers:
                if w.wid == wid:
                    return w
        worker = min(workers, key=_load)
        if session is not None:
            self.home[session] = worker.wid
        return worker


ROUTING_POLICIES = {RoundRobinRouter: RoundRobin, LeastLoadedRouter: LeastLoaded,
                    SessionAffinityRouter: SessionAffinity}


class PolicyError(Stuck):
    """A user policy raised or broke its protocol during the run (e.g. picked a worker not
    offered): the run stops with ``stop_reason`` ``policy_error`` and this diagnostic."""

    reason = "policy_error"


class CheckedPolicy:
    """Wraps a user routing policy (``kind: python`` or the Python API): the worker it returns
    must be one of those offered."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def pick(self, request, workers: Sequence[Routable]):
        try:
            worker = self.policy.pick(request, workers)
        except (Exception, SystemExit) as exc:  # the user's code: stop the run with its error
            raise PolicyError(f"router policy {type(self.policy).__name__}.pick raised "
                              f"{type(exc).__name__}: {exc} (request {request.rid})") from exc
        if not any(worker is w for w in workers):
            raise PolicyError(f"router policy {type(self.policy).__name__}.pick returned {worker!r}, "
                              f"not one of the {len(workers)} workers offered (request {request.rid})")
        return worker


def make_policy(spec: RouterSpec, rng: Optional[random.Random] = None, factory=None, role: str = "aggregated"):
    """A fresh policy object for ``spec`` (one per routing decision point: the prompt pool's,
    whose ``role`` is aggregated or prefill, and the decode pool's); ``factory()`` builds a user
    policy (``kind: python``)."""
    if factory is not None:
        return CheckedPolicy(factory())
    if isinstance(spec, KvAwareRouter):
        return KvAware(spec, rng or random.Random(0), role)
    return ROUTING_POLICIES[type(spec)](spec, rng or random.Random(0))


class Router:
    """Dispatches from ``router_queue`` to ``entry_workers`` and, in disaggregated mode, from
    ``handoff_queue`` to ``decode_workers``. ``rngs`` are the seeded streams of the entry and
    decode policies; ``policy_factory`` builds a user policy (one per decision point).

    Every decision is taken at a :class:`~simkit.cluster.messages.Decide` event: after all of
    the instant's normal events (so a pass ending now is complete, as the reference applies
    completions before routing) and before its pass boundaries, one decision per event (so the
    next one sees what the last changed: a worker that took the request in). Requests released
    at one instant are decided in id order, whatever order their releases took; held ones keep
    their release order. Workers in a fast-forwarded run show their state as of now
    (:meth:`simkit.cluster.worker.Worker.settle`).

    With ``dynamic`` pools (a planner), the worker lists are the pools' live ``routable``
    lists, which may be empty: requests (and handoffs) then wait in the router, and the pool
    calls :meth:`poke` / :meth:`poke_decode` when a worker becomes routable, so they leave at
    that instant. Nothing is ever sent to a worker that is not routable (starting, draining)."""

    def __init__(self, env: simpy.Environment, spec: RouterSpec, router_queue: simpy.Store,
                 entry_workers: Sequence, probe: Probe,
                 handoff_queue: Optional[simpy.Store] = None,
                 decode_workers: Optional[Sequence] = None,
                 rngs: tuple[random.Random, random.Random] = (random.Random(0), random.Random(1)),
                 queue_spec: Optional[RouterQueueSpec] = None, dynamic: bool = False,
                 policy_factory=None, pair_at_dispatch: bool = False,
                 entry_role: str = "aggregated") -> None:
        self.env = env
        #: pick the decode worker when the request is dispatched, not when its KV arrives: SGLang's
        #: PD disaggregation pairs prefill and decode workers up front (the reference's sglang
        #: core does too: request i goes to decode worker i mod N under round robin). The
        #: decode worker reserves room for the KV (at once if idle, else in order at its pass
        #: boundaries: see ``Worker.request_reservation``) and only then is the request sent to
        #: a prefill worker, as the reference does (measured: a burst of requests paired with a
        #: busy decode worker is reserved one per decode pass, and round robin over the
        #: prefill pool follows the reservation order)
        self.pair_at_dispatch = pair_at_dispatch
        self.paired: dict = {}  #: rid -> decode worker chosen at dispatch
        self.probe = probe
        self.queue_spec = queue_spec or RouterQueueSpec()
        self.dynamic = dynamic
        #: requests released and not sent: in release order (instant, then id)
        self.held: list = []
        #: requests taken from the router queue and not yet ordered into ``held``
        self.incoming: list = []
        self.wake = env.event()  #: succeeded by a worker's pass end while requests are held
        self.held_handoffs: list = []  #: handoffs waiting for a decision or a decode worker
        self.decode_wake = env.event()
        self.router_queue = router_queue
        self.entry_workers = entry_workers
        self.handoff_queue = handoff_queue
        self.decode_workers = decode_workers
        self.entry_policy = make_policy(spec, rngs[0], policy_factory, entry_role)
        self.decode_policy = make_policy(spec, rngs[1], policy_factory, "decode")

    def start(self) -> list:
        procs = [self.env.process(self.dispatch_new())]
        if self.handoff_queue is not None:
            procs.append(self.env.process(self.dispatch_handoff()))
        return procs

    def dispatch_new(self):
        """Yields: while nothing can be decided, ``router_queue.get()`` or a worker's wake-up;
        a :class:`Decide` per decision."""
        env, queue, held, incoming = self.env, self.router_queue, self.held, self.incoming
        gated = self.queue_spec.enabled
        sendable = False
        while True:
            if not queue.items and not sendable:
                with queue.get() as get:
                    yield get | self.wake
                    if get.triggered:
                        incoming.append(get.value)
                if self.wake.triggered:
                    self.wake = env.event()
            yield Decide(env)
            if queue.items or incoming:  # released this instant: in id order
                incoming.extend(queue.items)
                queue.items.clear()
                incoming.sort(key=_rid)
                held.extend(incoming)
                incoming.clear()
            sendable = False
            if held:
                workers = self.entry_workers
                ready = [w for w in workers if not self._busy(w)] if gated else workers
                if ready:
                    self._send(self._next_held(), ready)
                    sendable = bool(held)

    def _send(self, request, workers) -> None:
        self.probe.dispatched(request.rid, self.env.now)
        if self.pair_at_dispatch:
            decode = self.paired[request.rid] = self.decode_policy.pick(request, self.decode_workers)
            decode.request_reservation(request)  # it calls send_reserved once it has room
            return
        self.entry_policy.pick(request, workers).inbox.put(request)

    def unreserve(self, rid: int) -> None:
        """A prefill worker rejected ``rid``: its paired decode worker frees the room it
        reserved (otherwise held for good: the decode worker would wait for KV that never comes)."""
        decode = self.paired.pop(rid, None)
        if decode is not None:
            decode.inbox.put(Unreserve(rid))

    def send_reserved(self, request) -> None:
        """A decode worker reserved room for ``request``: send it to a prefill worker."""
        self.entry_policy.pick(request, self.entry_workers).inbox.put(request)

    def _busy(self, worker) -> bool:
        q = self.queue_spec
        if q.max_kv_usage is not None and worker.kv_blocks_in_use > q.max_kv_usage * worker.kv_capacity_blocks:
            return True
        return q.max_queued_prefill_tokens is not None and worker.queued_prefill_tokens > q.max_queued_prefill_tokens

    def _next_held(self):
        held, policy = self.held, self.queue_spec.policy
        if policy == "fcfs":
            index = 0
        elif policy == "lcfs":
            index = len(held) - 1
        else:  # wspt (Smith's rule): least expected work per unit of priority, then the oldest
            index = min(range(len(held)), key=lambda i: (
                (held[i].input_length + held[i].output_length) / held[i].priority, i))
        return held.pop(index)

    def poke(self) -> None:
        """A worker finished a pass: held requests may now find a worker that is not busy."""
        if self.held and not self.wake.triggered:
            self.wake.succeed()

    def place_decode(self, request):
        """Choose the decode worker for ``request`` now, before its KV moves (destination_missing),
        and count it as expected there; None when no decode worker is routable. Called at a
        :class:`Decide` (the link waits for one)."""
        workers = self.decode_workers
        if not workers:
            return None
        worker = self.decode_policy.pick(request, workers)
        worker.expected_handoffs += 1
        return worker

    def poke_decode(self) -> None:
        """A decode worker became routable: held handoffs may leave."""
        if self.held_handoffs and not self.decode_wake.triggered:
            self.decode_wake.succeed()

    def dispatch_handoff(self):
        """Yields: while nothing can be decided, ``handoff_queue.get()`` (a ``Handoff``) or a
        decode worker's activation; a :class:`Decide` per decision. Handoffs leave in the
        order their KV arrived. Paired at dispatch (sglang), a handoff goes to its decode worker
        as it arrives: nothing is decided."""
        env, queue, held = self.env, self.handoff_queue, self.held_handoffs
        workers = self.decode_workers
        if self.pair_at_dispatch:  # sglang: its decode worker, chosen at dispatch, holds its room
            while True:
                handoff = yield queue.get()
                self.paired.pop(handoff.request.rid).inbox.put(handoff)
        sendable = False
        while True:
            if not queue.items and not sendable:
                with queue.get() as get:
                    yield get | self.decode_wake
                    if get.triggered:
                        held.append(get.value)
                if self.decode_wake.triggered:
                    self.decode_wake = env.event()
            yield Decide(env)
            if queue.items:
                held.extend(queue.items)
                queue.items.clear()
            sendable = False
            if held and workers:
                handoff = held.pop(0)
                self.decode_policy.pick(handoff.request, workers).inbox.put(handoff)
                sendable = bool(held)


def _rid(request) -> int:
    return request.rid

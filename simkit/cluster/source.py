"""The arrival source: releases requests into the router queue when they become due.

Open loop (the default): a request without dependencies is released at its ``arrived_at``;
a request with dependencies (``Request.deps``: the previous turn of its session, or the
requests an agent step waits for) is released ``delay_s`` after the last of them ends
(completed or rejected), whatever its timestamp said.

Closed loop (``max_in_flight`` = N): at most N sessions run at once (a request without a
session is a session of its own). A session holds its slot from the dispatch of its first
request to the end of its last one, think time included; when a slot frees, the next session
in order of first timestamp starts at once, and its requests without dependencies are released
at their offsets from the session's first timestamp. Continuations of running sessions never
wait for a slot.

A request's arrival, from which TTFT is measured, is the moment it is released, so waiting for
a slot and think time are excluded (REFERENCE.md s2, bug class 7: sessions, not requests, are
capped).

Streaming (``stream=True``): ``requests`` is an iterator in release order (roots by arrival,
each dependent after the requests it waits for), read only as fast as the simulation reaches
its roots' arrival times; only requests read and not yet ended are kept (:attr:`live`), so
memory follows the requests in flight, not the workload's length. A dependent must be read
before what it waits for ends (the synthetic generator yields a session's turns right after
its first one); closed loop needs the whole workload and does not stream.

Part of :mod:`simkit.cluster`: a timeout loop plus timeout callbacks for dependent releases.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Callable, Iterable, Iterator, Optional

import simpy

from simkit.cluster.probe import Probe
from simkit.core.request import Request


class Source:
    """Releases ``requests`` (ids 0..N-1) onto ``router_queue``; call :meth:`ended` for each
    request that ends so that what waits for it can follow."""

    def __init__(self, env: simpy.Environment, requests: Iterable[Request], router_queue: simpy.Store,
                 probe: Probe, max_in_flight: Optional[int] = None, stream: bool = False) -> None:
        self.env = env
        self.router_queue = router_queue
        #: the frontend's time between a request's release (the client's send) and the router
        #: (set by the simulation from its latency model, as are the two below)
        self.frontend_s = 0.0
        #: requests released (arrived) but still in the frontend's delay, not yet at the router
        self.in_frontend = 0
        #: plus, per request, a client delay drawn uniformly from [0, ``jitter_s``) by request id
        #: (its own stream ``{seed}/frontend/{rid}``: the same whatever the release order)
        self.jitter_s = 0.0
        self.seed = 0
        self.probe = probe
        self.max_in_flight = max_in_flight
        self.released = 0
        self.stream: Optional[Iterator[Request]] = None
        if stream:
            if max_in_flight is not None:
                raise ValueError("closed-loop replay (max_in_flight) needs the whole workload; it cannot stream")
            self.stream = iter(requests)
            self.live: dict[int, Request] = {}  #: read and not ended, by id
            self.waiting_on: dict[int, int] = {}
            self.dependents: dict[int, list[int]] = {}
            self.read = 0  #: requests read from the stream so far
            self.pending: set[int] = set()  #: read and not yet released
            #: called with the number of requests once the stream is exhausted
            self.on_exhausted: Optional[Callable[[int], None]] = None
            return
        by_rid: list = [None] * len(requests)
        for r in requests:
            by_rid[r.rid] = r
        self.by_rid: list[Request] = by_rid
        self.was_released = bytearray(len(by_rid))
        self.waiting_on = [len(r.deps) for r in by_rid]  #: unfinished dependencies per request
        self.dependents: dict[int, list[int]] = {}
        for r in by_rid:
            for d in r.deps:
                self.dependents.setdefault(d, []).append(r.rid)
        #: roots (no dependencies) in release order: by arrival, then id
        self.roots = sorted((r for r in by_rid if not r.deps), key=lambda r: (r.arrived_at, r.rid))
        if max_in_flight is not None:
            self._prepare_sessions()

    def _prepare_sessions(self) -> None:
        sessions: dict = {}
        for r in self.by_rid:
            key = ("s", r.session) if r.session is not None else ("r", r.rid)
            sessions.setdefault(key, []).append(r)
        self.session_of = {}
        self.left_in_session: list[int] = []
        self.session_roots: list[list[Request]] = []
        order = []
        for index, members in enumerate(sessions.values()):
            for r in members:
                self.session_of[r.rid] = index
            self.left_in_session.append(len(members))
            roots = sorted((r for r in members if not r.deps), key=lambda r: (r.arrived_at, r.rid))
            self.session_roots.append(roots)
            first = min(r.arrived_at for r in members)
            order.append((first, min(r.rid for r in members), index))
        self.pending_sessions = deque(index for _, _, index in sorted(order))
        self.free_slots = self.max_in_flight

    def start(self) -> simpy.Process:
        return self.env.process(self.run())

    def _release(self, request: Request) -> None:
        # arrived first: a run stopped in between (a KeyboardInterrupt) finds the request in
        # flight and still unreleased, and its records keep the one in flight, never neither
        self.probe.arrived(request.rid, self.env.now)
        if self.stream is not None:
            self.pending.discard(request.rid)
        else:
            self.was_released[request.rid] = 1
        self.released += 1
        delay = self.frontend_s
        if self.jitter_s:
            delay += random.Random(f"{self.seed}/frontend/{request.rid}").random() * self.jitter_s
            self.probe.frontend(request.rid, delay)
        if delay:
            self.in_frontend += 1
            self.env.timeout(delay).callbacks.append(lambda _ev: self._to_router(request))
        else:
            self.router_queue.put(request)

    def _to_router(self, request: Request) -> None:
        """The frontend's delay of ``request`` is over: it reaches the router's queue."""
        self.in_frontend -= 1
        self.router_queue.put(request)

    def run(self):
        """Yields: one timeout per distinct release time of requests without dependencies
        (open loop); nothing in closed loop, where sessions start as slots free."""
        env = self.env
        if self.max_in_flight is not None:
            self._start_sessions()
            return
        if self.stream is not None:
            yield from self._run_stream()
            return
        for request in self.roots:
            if request.arrived_at > env.now:
                yield env.timeout_at(request.arrived_at)  # exactly the trace's time
            self._release(request)

    def _run_stream(self):
        env, live = self.env, self.live
        for request in self.stream:
            rid = request.rid
            live[rid] = request
            self.pending.add(rid)
            self.read += 1
            if request.deps:
                for d in request.deps:
                    if d not in live:
                        raise ValueError(f"streamed request {rid} waits for request {d}, which ended (or was "
                                         "never read) before it was read; a streamed workload must list each "
                                         "request soon after the requests it waits for")
                    self.dependents.setdefault(d, []).append(rid)
                self.waiting_on[rid] = len(request.deps)
                continue
            if request.arrived_at > env.now:
                yield env.timeout_at(request.arrived_at)
            self._release(request)
        if self.on_exhausted is not None:
            self.on_exhausted(self.read)

    def unreleased(self) -> Iterator[Request]:
        """The requests never released, by id (those left when a time cap stops the run);
        a stream is read to its end."""
        if self.stream is None:
            yield from (r for r in self.by_rid if not self.was_released[r.rid])
            return
        yield from sorted((self.live[rid] for rid in self.pending), key=lambda r: r.rid)
        yield from self.stream

    def describe_unreleased(self) -> Optional[str]:
        """Why the requests not released yet wait, for a stuck run's diagnostic (None: every
        request was released): for a closed-loop slot, or for requests that have not ended,
        naming a dependency across sessions that no slot can free (a deadlock)."""
        if self.stream is not None:
            n = len(self.pending)
            return f"{n} request(s) read but not released: they wait for requests that have not ended" if n else None
        waiting = [r for r in self.by_rid if not self.was_released[r.rid]]
        if not waiting:
            return None
        parts = []
        queued: set = set(self.pending_sessions) if self.max_in_flight is not None else set()
        for_slot = [r for r in waiting if queued and self.session_of[r.rid] in queued]
        on_deps = [r for r in waiting if r not in for_slot and self.waiting_on[r.rid]]
        if for_slot:
            across = any(self.session_of[d] in queued for r in on_deps for d in r.deps)
            parts.append(f"{len(for_slot)} wait for a closed-loop slot (max_in_flight {self.max_in_flight}, every "
                         "slot held by a session not ended" + (": those sessions wait for requests of sessions "
                                                                "still waiting for a slot, a dependency across "
                                                                "sessions that no slot frees" if across else "") + ")")
        if on_deps:
            parts.append(f"{len(on_deps)} wait for requests that have not ended")
        return f"{len(waiting)} request(s) not released: " + "; ".join(parts) if parts else None

    def _start_sessions(self) -> None:
        while self.free_slots and self.pending_sessions:
            index = self.pending_sessions.popleft()
            self.free_slots -= 1
            roots = self.session_roots[index]
            base = roots[0].arrived_at if roots else 0.0
            for r in roots:
                self._release_later(r, r.arrived_at - base)

    def _release_later(self, request: Request, delay: float) -> None:
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _ev, r=request: self._release(r))
        else:
            self._release(request)

    def ended(self, rid: int, at: float, status: str) -> None:
        """``rid`` ended (completed or rejected): release what waited only for it, and in
        closed loop free its session's slot when it was the session's last request."""
        if self.stream is not None:
            for d in self.dependents.pop(rid, ()):
                self.waiting_on[d] -= 1
                if self.waiting_on[d] == 0:
                    del self.waiting_on[d]
                    dep = self.live[d]
                    self._release_later(dep, dep.delay_s)
            del self.live[rid]
            return
        for d in self.dependents.get(rid, ()):
            self.waiting_on[d] -= 1
            if self.waiting_on[d] == 0:
                dep = self.by_rid[d]
                self._release_later(dep, dep.delay_s)
        if self.max_in_flight is not None:
            index = self.session_of[rid]
            self.left_in_session[index] -= 1
            if self.left_in_session[index] == 0:
                self.free_slots += 1
                self._start_sessions()

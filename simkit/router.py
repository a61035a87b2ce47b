"""The router: routing policies and the two dispatch processes.

``dispatch_new`` takes requests from the router queue (a ``Store``) and puts each on the
inbox of the prefill (or aggregated) worker its policy picks; ``dispatch_handoff`` does the
same for requests whose KV reached the decode side. Layer L3.
"""

from __future__ import annotations

from typing import Optional, Sequence

import simpy

from simkit.config import RoundRobinRouter, RouterSpec
from simkit.probe import Probe


class RoundRobin:
    """Request i goes to worker i mod N (deterministic, REFERENCE.md section 6)."""

    def __init__(self) -> None:
        self.count = 0

    def pick(self, workers: Sequence):
        worker = workers[self.count % len(workers)]
        self.count += 1
        return worker


ROUTING_POLICIES = {RoundRobinRouter: RoundRobin}


def make_policy(spec: RouterSpec):
    """A fresh policy object for ``spec`` (one per routing decision point)."""
    return ROUTING_POLICIES[type(spec)]()


class Router:
    """Dispatches from ``router_queue`` to ``entry_workers`` and, in disaggregated mode, from
    ``handoff_queue`` to ``decode_workers``."""

    def __init__(self, env: simpy.Environment, spec: RouterSpec, router_queue: simpy.Store,
                 entry_workers: Sequence, probe: Probe,
                 handoff_queue: Optional[simpy.Store] = None,
                 decode_workers: Optional[Sequence] = None) -> None:
        self.env = env
        self.router_queue = router_queue
        self.entry_workers = entry_workers
        self.handoff_queue = handoff_queue
        self.decode_workers = decode_workers
        self.entry_policy = make_policy(spec)
        self.decode_policy = make_policy(spec)

    def start(self) -> list:
        procs = [self.env.process(self.dispatch_new())]
        if self.handoff_queue is not None:
            procs.append(self.env.process(self.dispatch_handoff()))
        return procs

    def dispatch_new(self):
        """Yields: ``router_queue.get()`` for each request."""
        while True:
            request = yield self.router_queue.get()
            self.entry_policy.pick(self.entry_workers).inbox.put(request)

    def dispatch_handoff(self):
        """Yields: ``handoff_queue.get()`` for each transferred request (a ``Handoff``)."""
        while True:
            handoff = yield self.handoff_queue.get()
            self.decode_policy.pick(self.decode_workers).inbox.put(handoff)

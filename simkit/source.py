"""The arrival source: replays requests into the router queue at their arrival times.

Layer L3: owns a timeout loop.
"""

from __future__ import annotations

from typing import Iterable

import simpy

from simkit.probe import Probe
from simkit.request import Request


class Source:
    """Puts each request on ``router_queue`` at ``request.arrived_at`` (sorted input)."""

    def __init__(self, env: simpy.Environment, requests: Iterable[Request],
                 router_queue: simpy.Store, probe: Probe) -> None:
        self.env = env
        self.requests = requests
        self.router_queue = router_queue
        self.probe = probe

    def start(self) -> simpy.Process:
        return self.env.process(self.run())

    def run(self):
        """Yields: one timeout per distinct arrival time."""
        env, queue, probe = self.env, self.router_queue, self.probe
        for request in self.requests:
            delay = request.arrived_at - env.now
            if delay > 0:
                yield env.timeout(delay)
            probe.arrived(request.rid, env.now)
            queue.put(request)

"""The KV-cache handoff link between the prefill and the decode pool.

Owns a ``Resource`` of ``channels`` (concurrent transfers) and puts arrived requests on the
handoff ``Store`` that the router's decode dispatcher reads. Transfer time =
serialisation (prompt tokens * ``kv_bytes_per_token`` / bandwidth, holding one channel) +
propagation latency, the split ns.py makes between a port and a wire. After the transfer the
source worker gets a ``Released`` message and frees the KV it kept reserved (REFERENCE.md s5).
Layer L3.
"""

from __future__ import annotations

import simpy

from simkit.config import LinkSpec
from simkit.probe import Probe
from simkit.request import Request
from simkit.units import BYTES_PER_GB, S_PER_MS
from simkit.messages import Handoff, Released


class KvLink:
    """Moves each prefilled request's prompt KV to the decode side."""

    def __init__(self, env: simpy.Environment, spec: LinkSpec, handoff_queue: simpy.Store,
                 probe: Probe) -> None:
        self.env = env
        self.spec = spec
        self.handoff_queue = handoff_queue
        self.probe = probe
        self.channels = simpy.Resource(env, capacity=spec.channels)
        self.bytes_per_s = None if spec.bandwidth_gb_per_s is None else spec.bandwidth_gb_per_s * BYTES_PER_GB
        self.latency_s = spec.latency_ms * S_PER_MS
        self.in_flight = 0  #: requests whose KV is on the link

    def transfer_s(self, request: Request) -> float:
        """Serialisation time of one request's prompt KV in seconds (0 without a bandwidth)."""
        if self.bytes_per_s is None:
            return 0.0
        return request.input_length * self.spec.kv_bytes_per_token / self.bytes_per_s

    def send(self, handoff: Handoff, source) -> None:
        """Start moving ``handoff.request``'s KV from ``source`` (a prefill worker)."""
        self.in_flight += 1
        self.env.process(self.transfer(handoff, source))

    def transfer(self, handoff: Handoff, source):
        """One transfer.

        Yields: a channel of the link; the serialisation timeout; the latency timeout.
        """
        request = handoff.request
        if self.bytes_per_s is not None:
            with self.channels.request() as channel:
                yield channel
                yield self.env.timeout(self.transfer_s(request))
        if self.latency_s:
            yield self.env.timeout(self.latency_s)
        self.probe.handed_off(request.rid, self.env.now)
        self.in_flight -= 1
        self.handoff_queue.put(handoff)
        source.inbox.put(Released(request.rid))

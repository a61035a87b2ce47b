"""The KV-cache handoff link between the prefill and the decode pool.

Owns a ``Resource`` of ``channels`` (concurrent transfers) and puts arrived requests on the
handoff ``Store`` that the router's decode dispatcher reads. Transfer time =
serialisation (prompt tokens * ``kv_bytes_per_token`` / bandwidth, holding one channel) +
propagation latency, the split ns.py makes between a port and a wire. After the transfer the
source worker gets a ``Released`` message and frees the KV it kept reserved (REFERENCE.md s5).
With ``timing_mode: destination_missing`` the decode worker is chosen before the transfer and
only the prompt KV it lacks is serialised.
Part of :mod:`simkit.cluster`.
"""

from __future__ import annotations

from typing import Callable, Optional

import simpy

from simkit.spec import LinkSpec
from simkit.cluster.probe import Probe
from simkit.core.request import Request
from simkit.core.units import BYTES_PER_GB, S_PER_MS
from simkit.cluster.messages import Handoff, Released


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
        #: destination_missing: picks (and reserves) a decode worker for a request whose prefill
        #: ended, or returns None when none is routable (the handoff then goes the usual way)
        self.place: Optional[Callable] = None
        #: the decode worker releases the source's KV when it takes the request in (sglang,
        #: paired at dispatch: the reference frees the prefill side when the decode side
        #: activates the transfer, at its pass end if it is busy), not the link at arrival
        self.release_at_destination = False

    def transfer_s(self, request: Request, tokens: Optional[int] = None) -> float:
        """Serialisation time in seconds of ``tokens`` (default: the whole prompt) of KV of
        ``request`` (0 without a bandwidth)."""
        if self.bytes_per_s is None:
            return 0.0
        n = request.input_length if tokens is None else tokens
        return n * self.spec.kv_bytes_per_token / self.bytes_per_s

    def send(self, handoff: Handoff, source) -> None:
        """Start moving ``handoff.request``'s KV from ``source`` (a prefill worker). With
        ``timing_mode: destination_missing`` and a decode worker to place it on now (``place``),
        only the prompt tokens that worker does not cache are moved, straight to its inbox."""
        self.in_flight += 1
        if self.release_at_destination:
            handoff.source = source
        dest = self.place(handoff.request) if self.place is not None else None
        tokens = None
        if dest is not None:
            tokens = handoff.request.input_length - dest.cached_prompt_tokens(handoff.request)
        self.env.process(self.transfer(handoff, source, dest, tokens))

    def transfer(self, handoff: Handoff, source, dest=None, tokens: Optional[int] = None):
        """One transfer of ``tokens`` (default: the whole prompt) to ``dest`` (default: the
        handoff queue, where the router places it).

        Yields: a channel of the link; the serialisation timeout; the latency timeout.
        """
        request = handoff.request
        if self.bytes_per_s is not None:
            with self.channels.request() as channel:
                yield channel
                yield self.env.timeout(self.transfer_s(request, tokens))
        if self.latency_s:
            yield self.env.timeout(self.latency_s)
        self.probe.handed_off(request.rid, self.env.now)
        self.in_flight -= 1
        if dest is None:
            self.handoff_queue.put(handoff)
        else:
            dest.expected_handoffs -= 1
            dest.inbox.put(handoff)
        if not self.release_at_destination:
            source.inbox.put(Released(request.rid))

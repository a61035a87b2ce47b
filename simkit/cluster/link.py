"""The KV-cache handoff link between the prefill and the decode pool.

Owns a ``Resource`` of ``channels`` (concurrent transfers; with ``sharing: uncontended`` none:
every transfer moves at the full bandwidth at once, as the reference's handoff; with ``sharing:
fair`` a :class:`~simkit.cluster.transfer.FairShare`: every transfer at once, the bandwidth split
equally among those under way) and puts arrived
requests on the handoff ``Store`` that the router's decode dispatcher reads. Transfer time =
serialisation (prompt tokens * ``kv_bytes_per_token`` / bandwidth, holding one channel) +
propagation latency, the split ns.py makes between a port and a wire. The source worker keeps
the KV reserved until the decode worker takes the request in (admits it, or activates its
reservation) and sends it a ``Released`` message (REFERENCE.md s5; measured on the reference:
the prefill side is released at the decode admission, and frees the KV at its own next pass
boundary when busy).
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
from simkit.cluster.messages import Decide, Handoff
from simkit.cluster.transfer import FairShare


class KvLink:
    """Moves each prefilled request's prompt KV to the decode side."""

    def __init__(self, env: simpy.Environment, spec: LinkSpec, handoff_queue: simpy.Store,
                 probe: Probe) -> None:
        self.env = env
        self.spec = spec
        self.handoff_queue = handoff_queue
        self.probe = probe
        #: ``sharing: channels``: at most ``channels`` transfers at once (a Resource); with
        #: ``uncontended`` every transfer moves at the full bandwidth at once (None)
        self.channels = simpy.Resource(env, capacity=spec.channels) if spec.sharing == "channels" else None
        self.bytes_per_s = None if spec.bandwidth_gb_per_s is None else spec.bandwidth_gb_per_s * BYTES_PER_GB
        #: ``sharing: fair`` with a bandwidth: the processor-sharing link
        self.fair = (FairShare(env, self.bytes_per_s)
                     if spec.sharing == "fair" and self.bytes_per_s is not None else None)
        self.latency_s = spec.latency_ms * S_PER_MS
        self.in_flight = 0  #: requests whose KV is on the link
        #: destination_missing: picks (and reserves) a decode worker for a request whose prefill
        #: ended, or returns None when none is routable (the handoff then goes the usual way)
        self.place: Optional[Callable] = None

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
        handoff.source = source  # the decode worker releases its KV once it takes the request in
        self.env.process(self.transfer(handoff, source))

    def transfer(self, handoff: Handoff, source):
        """One transfer of the prompt's KV to the handoff queue, where the router places it; with
        ``place`` (destination_missing), of the prompt tokens the decode worker it picks does not
        cache, straight to that worker (the pick is a routing decision: made at a ``Decide``,
        when every pass ending now is complete).

        Yields: with ``place``, a :class:`Decide`; a channel of the link (``sharing:
        channels``); the serialisation timeout (with ``sharing: fair``, the end of the shared
        transfer); the latency timeout.
        """
        request = handoff.request
        dest: Optional[object] = None
        tokens = None
        if self.place is not None:
            yield Decide(self.env)
            dest = self.place(request)
            if dest is not None:
                tokens = request.input_length - dest.cached_prompt_tokens(request)
        if self.bytes_per_s is not None:
            if self.fair is not None:
                n = request.input_length if tokens is None else tokens
                yield self.fair.transfer(n * self.spec.kv_bytes_per_token)
            elif self.channels is None:
                yield self.env.timeout(self.transfer_s(request, tokens))
            else:
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

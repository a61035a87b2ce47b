"""A worker: one engine instance running forward passes as a SimPy process.

Owns an :class:`Inbox` (a ``Store`` of new requests and ``Released`` messages from the
handoff link) and its scheduler and KV cache (single writer). Process :meth:`Worker.serve`:
block on the inbox while idle; at every pass boundary take everything that has arrived at
that instant, form a batch, ``yield`` a timeout of the pass's latency, then emit tokens,
completions and handoffs to the probe.

Pass boundaries are decided *after* every other event of the same instant (a
:class:`PassBoundary` is scheduled behind all normal-priority events), so requests that
arrive at the instant a pass ends, or at the same instant as each other, join the next pass
together, as in the reference (which releases arrivals before driving idle workers). Workers
whose boundaries fall on the same instant form their batches in worker order (``rank``: the
prefill pool first, then decode, each by index), as the reference drives idle workers in index
order; so passes that end together are applied in that order too.

Layer L3: imports simpy, scheduler, engine, probe.
"""

from __future__ import annotations

from typing import Callable, Optional

import simpy
from simpy.events import Event

from simkit.config import PoolSpec
from simkit.engine import LatencyModel
from simkit.messages import Inbox, Released
from simkit.probe import COMPLETED, REJECTED, Probe
from simkit.request import Request
from simkit.scheduler import Seq, VllmScheduler

#: heap priority behind SimPy's URGENT (0) and NORMAL (1): runs after every same-time event
LATE = 2


class PassBoundary(Event):
    """An event that fires at the current instant after all urgent and normal events; among
    boundaries of the same instant, lower ``rank`` first."""

    def __init__(self, env: simpy.Environment, rank: int = 0) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, LATE + rank)


#: called by a prefill worker for each request whose prompt it finished: (request, worker)
HandoffSink = Callable[[Request, "Worker"], None]


class Worker:
    """Worker ``wid`` of pool ``pool`` with ``role`` aggregated, prefill or decode."""

    def __init__(self, env: simpy.Environment, pool: str, wid: int, role: str, spec: PoolSpec,
                 latency: LatencyModel, probe: Probe, handoff: Optional[HandoffSink] = None,
                 rank: int = 0) -> None:
        if role == "prefill" and handoff is None:
            raise ValueError("a prefill worker needs a handoff sink")
        self.env = env
        self.pool = pool
        self.wid = wid
        self.role = role
        self.latency = latency
        self.probe = probe
        self.handoff = handoff
        self.sched = VllmScheduler(spec, role)
        self.inbox = Inbox(env)
        self.rank = rank  #: tie-break order of same-instant pass boundaries
        self.passes = 0
        self.busy_s = 0.0

    def start(self) -> simpy.Process:
        return self.env.process(self.serve())

    def _accept(self, msg) -> None:
        if type(msg) is Released:
            self.sched.release(msg.rid)
            return
        seq = Seq(msg, transferred=self.role == "decode")
        if self.sched.fits_ever(seq):
            self.sched.add(seq)
        else:
            self.probe.finished(seq.rid, self.env.now, REJECTED)

    def serve(self):
        """Run forward passes forever.

        Yields: ``inbox.get()`` while idle; a :class:`PassBoundary` before forming each batch;
        one ``timeout`` per forward pass.
        """
        env, sched, inbox, probe = self.env, self.sched, self.inbox, self.probe
        pass_time_s = self.latency.pass_time_s
        pool, wid = self.pool, self.wid
        prompt_pool = self.role != "decode"
        rank = self.rank
        while True:
            if not sched.has_work():
                self._accept((yield inbox.get()))
            yield PassBoundary(env, rank)
            for msg in inbox.drain():
                self._accept(msg)
            batch = sched.schedule()
            if batch is None:
                if sched.has_work():  # blocked on KV held for handoffs: wait for a message
                    self._accept((yield inbox.get()))
                continue
            now = env.now
            for seq, cached in batch.admitted:
                lookup = seq.prefill_target if prompt_pool else 0
                probe.admitted(seq.rid, now, pool, wid, cached, lookup)
            dt = pass_time_s(batch.prefill_tokens, batch.decode_requests, batch.decode_context_tokens)
            yield env.timeout(dt)
            self.passes += 1
            self.busy_s += dt
            emitted, finished, prefilled = sched.complete(batch)
            now = env.now
            if emitted:
                probe.tokens([s.rid for s in emitted], now)
            for seq in finished:
                probe.finished(seq.rid, now, COMPLETED)
            for seq in prefilled:
                self.handoff(seq.req, self)

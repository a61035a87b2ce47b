"""Messages and mailboxes shared by the SimPy components.

The base of :mod:`simkit.cluster`: the worker, the link and the router exchange these instead of importing each
other's classes.
"""

from __future__ import annotations

import math
from heapq import heappush
from typing import Optional

import simpy
from simpy.core import NORMAL
from simpy.events import Event


class Environment(simpy.Environment):
    """SimPy's environment plus :meth:`timeout_at` and a clock ``limit`` (s): an event due
    beyond it (or at NaN) is never scheduled, and the first such time is kept in
    :attr:`overrun`, so a run whose times add up past the limit ends, and says so, instead of
    running on where float64 no longer resolves a microsecond.

    ``env.timeout(delay)`` fires at ``now + delay`` rounded, and some float times cannot be
    reached that way from a given ``now``. Fast-forwarded decode runs must end on the very
    float the per-pass path reaches by adding pass times one by one, so they schedule at an
    absolute time. Uses the event queue as SimPy 4 lays it out: (time, priority, id, event).
    """

    def __init__(self, initial_time: float = 0, limit: float = math.inf) -> None:
        super().__init__(initial_time)
        self.limit = limit
        self.overrun: Optional[float] = None  #: the first time an event was due beyond ``limit``

    def _beyond(self, at: float) -> None:
        """``at`` is beyond the limit (or NaN): keep the first such time; nothing is scheduled."""
        if self.overrun is None:
            self.overrun = at

    def schedule(self, event: Event, priority: int = NORMAL, delay: float = 0) -> None:
        """Schedule ``event`` at ``now + delay`` (SimPy's rule), unless that is beyond the limit."""
        at = self._now + delay
        if at <= self.limit:
            heappush(self._queue, (at, priority, next(self._eid), event))
        else:
            self._beyond(at)

    def timeout_at(self, at: float) -> Event:
        """An event that succeeds at exactly time ``at`` (>= now), NORMAL priority."""
        if at < self._now:
            raise ValueError(f"timeout_at({at}) is in the past (now {self._now})")
        event = Event(self)
        event._ok = True
        event._value = None
        if at <= self.limit:
            heappush(self._queue, (at, NORMAL, next(self._eid), event))
        else:
            self._beyond(at)
        return event


#: heap priority of routing decisions: after every normal event of the instant (pass ends,
#: arrivals, their cascades) and before its pass boundaries (``simkit.cluster.worker.LATE``)
DECIDE = 1.5


class Decide(Event):
    """An event that fires at the current instant after every normal-priority event (so every
    pass that ends now is complete, as the reference applies completions before routing) and
    before the pass boundaries: the moment a routing decision reads the cluster's state."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, DECIDE)


class Reserve:
    """Router -> decode worker (SGLang-style pairing): reserve room for a request's KV; the
    decode worker queues it and answers at a pass boundary, and only then is the request sent
    to a prefill worker (the reference's sglang core dispatches this way). ``between_passes``:
    it was sent while the worker ran no pass, so it is answered at once, not at the pass end."""

    __slots__ = ("seq", "between_passes")

    def __init__(self, seq, between_passes: bool = False) -> None:
        self.seq = seq  #: the request's state on that worker (a ``simkit.engine.scheduler.Seq``)
        self.between_passes = between_passes


class Handoff:
    """Prefill worker -> link -> decode worker: a request whose prompt KV was computed, with
    the prompt's block identity keys for ``block_size`` (so the decode side need not redo them).
    ``source``: the prefill worker, when the decode worker (not the link) releases its KV."""

    __slots__ = ("request", "block_keys", "block_size", "source")

    def __init__(self, request, block_keys, block_size: int) -> None:
        self.request = request
        self.block_keys = block_keys
        self.block_size = block_size
        self.source = None

    def __repr__(self) -> str:
        return f"Handoff({self.request.rid})"


class Released:
    """Handoff link -> prefill worker: the KV of ``rid`` has been moved; free it."""

    __slots__ = ("rid",)

    def __init__(self, rid: int) -> None:
        self.rid = rid

    def __repr__(self) -> str:
        return f"Released({self.rid})"


class Unreserve:
    """Router -> decode worker (SGLang-style pairing): the request ``rid`` whose KV room it
    reserved was rejected by its prefill worker and will never arrive; free the room."""

    __slots__ = ("rid",)

    def __init__(self, rid: int) -> None:
        self.rid = rid

    def __repr__(self) -> str:
        return f"Unreserve({self.rid})"


class Stored:
    """Host offload -> its worker: store ``store_id`` (a copy of prompt blocks to the host tier)
    ended; a request waiting for those blocks may restore them now."""

    __slots__ = ("store_id",)

    def __init__(self, store_id: int) -> None:
        self.store_id = store_id

    def __repr__(self) -> str:
        return f"Stored({self.store_id})"


class Restored:
    """Host offload -> its worker: the restore of ``keys`` (host -> GPU) for waiting request
    ``rid`` ended; it may be admitted."""

    __slots__ = ("rid", "keys")

    def __init__(self, rid: int, keys: list) -> None:
        self.rid = rid
        self.keys = keys

    def __repr__(self) -> str:
        return f"Restored({self.rid}, {len(self.keys)} blocks)"


class Drain:
    """Pool -> worker: stop taking work; finish what you hold, then stop (scale-down)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Drain()"


def carries_request(msg) -> bool:
    """Whether an inbox message is a request (or its handoff), not a control message."""
    return type(msg) not in _CONTROL


#: inbox messages that carry no request
_CONTROL = frozenset({Released, Drain, Unreserve, Stored, Restored})


class Inbox(simpy.Store):
    """A worker's message queue (unbounded, FIFO); only its owner takes from it."""

    def drain(self) -> list:
        """Take every queued message at once (the owner is busy, not waiting on ``get``)."""
        items = self.items
        if items:
            self.items = []
        return items

    def put_back(self, msg) -> None:
        """Return ``msg``, taken by a ``get`` the owner then abandoned, to the head of the queue,
        as if it had never been taken (no getter is waiting: the owner is busy)."""
        self.items.insert(0, msg)

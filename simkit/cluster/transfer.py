"""Bandwidth shared fairly among concurrent transfers (processor sharing), event-driven.

:class:`FairShare` moves byte counts over one direction of a link. While ``n`` transfers are
active each moves at ``rate(n) = min(per_transfer, total / n)`` bytes per second (either bound
may be absent): ``n`` transfers of 32 GB/s each under an 80 GB/s cap get 80 / n each once
``n >= 3`` (20 each for 4), and each runs faster as others end. This is the egalitarian
processor-sharing queue (Kleinrock, *Queueing Systems* vol. 2, 1976, section 4.4), the model
AISimulate documents for its offload directions (after vLLM's OffloadingConnector).

It is exact and event-driven: SimPy events only at transfer starts and ends, never per byte.
Every active transfer receives the same service, so the model keeps one number, the service
``attained`` by each transfer since time 0 (bytes), and each transfer's *finish tag* (the
attained service at which it ends: the attained service when it started plus its size). Tags
never reorder, so the next transfer to end is the smallest tag (a heap), and at its end the
attained service is set to that tag exactly: rounding never accumulates across events and
transfers of equal tags end at the same instant.

:class:`CappedShare` is its two-level form, for transfers of several workers: each worker's
active transfers share that worker's bandwidth equally, and each is also capped by an equal
share of a bandwidth all of them share (a pool's storage backend): a transfer of a worker with
``k`` of the ``n`` active ones moves at ``min(worker / k, total / n)``, and shares left unused
are not handed to others (AISimulate's G3 storage tier: "each moving job gets an equal share of
its worker's bandwidth; in cluster_shared scope this is also capped by its equal share of shared
backend bandwidth. Unused shares are not redistributed").

Part of :mod:`simkit.cluster`: imports simpy only.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Optional

import simpy

__all__ = ["FairShare", "CappedShare"]


class FairShare:
    """One direction of a link whose bandwidth concurrent transfers share equally.

    Args:
        env: the simulation environment.
        total_bytes_per_s: the bandwidth all active transfers share (bytes/s), or None (no
            shared cap).
        per_transfer_bytes_per_s: the most one transfer may move (bytes/s), or None.

    Raises:
        ValueError: both bounds None, or one not positive.
    """

    def __init__(self, env: simpy.Environment, total_bytes_per_s: Optional[float],
                 per_transfer_bytes_per_s: Optional[float] = None) -> None:
        if total_bytes_per_s is None and per_transfer_bytes_per_s is None:
            raise ValueError("FairShare needs a total or a per-transfer bandwidth")
        for value in (total_bytes_per_s, per_transfer_bytes_per_s):
            if value is not None and not value > 0:
                raise ValueError(f"FairShare bandwidths must be > 0 bytes/s, got {value!r}")
        self.env = env
        self.total_bytes_per_s = total_bytes_per_s
        self.per_transfer_bytes_per_s = per_transfer_bytes_per_s
        self.attained = 0.0  #: bytes each active transfer has received since time 0
        self.updated_at = env.now  #: when ``attained`` was last brought up to date
        self.bytes_moved = 0.0  #: bytes of transfers ended so far
        self._tags: list = []  #: (finish tag, order, size in bytes, event) of active transfers
        self._order = itertools.count()
        self._version = 0  #: the pending timer is the current one only if it carries this

    @property
    def active(self) -> int:
        """Transfers under way now."""
        return len(self._tags)

    def rate(self, n: int) -> float:
        """Bytes per second each of ``n`` (>= 1) active transfers moves."""
        total, per = self.total_bytes_per_s, self.per_transfer_bytes_per_s
        if total is None:
            return per
        share = total / n
        return share if per is None or share < per else per

    def transfer(self, nbytes: float) -> simpy.Event:
        """Start moving ``nbytes`` (>= 0) now; the returned event succeeds when the last byte
        has moved (at once for 0 bytes)."""
        done = self.env.event()
        if nbytes <= 0:
            done.succeed()
            return done
        self._catch_up()
        heapq.heappush(self._tags, (self.attained + nbytes, next(self._order), nbytes, done))
        self._arm()
        return done

    def _catch_up(self) -> None:
        now = self.env.now
        if self._tags and now > self.updated_at:
            self.attained += self.rate(len(self._tags)) * (now - self.updated_at)
        self.updated_at = now

    def _arm(self) -> None:
        """Schedule the end of the transfer with the smallest finish tag (superseding any
        timer armed before)."""
        self._version += 1
        if not self._tags:
            return
        dt = (self._tags[0][0] - self.attained) / self.rate(len(self._tags))
        timer = self.env.timeout(dt if dt > 0 else 0.0)
        version = self._version
        timer.callbacks.append(lambda _event: self._end(version))

    def _end(self, version: int) -> None:
        if version != self._version:
            return  # a start or an end since re-armed the timer
        tags = self._tags
        self.attained = tags[0][0]  # exactly: the attained service at its end is its tag
        self.updated_at = self.env.now
        while tags and tags[0][0] <= self.attained:
            _, _, nbytes, done = heapq.heappop(tags)
            self.bytes_moved += nbytes
            done.succeed()
        self._arm()


class CappedShare:
    """Transfers grouped by worker: each moves at ``min(group_bytes_per_s / k, total / n)``
    bytes/s while ``k`` transfers of its group and ``n`` in all are active (module docstring).

    Exact and event-driven: at each start or end every active transfer's remaining bytes are
    brought up to date and the next end is scheduled (``O(n)`` per event, ``n`` small: the
    copies under way in one pool).

    Args:
        env: the simulation environment.
        total_bytes_per_s: the bandwidth all groups share (bytes/s), or None (no shared cap:
            each group alone).

    Raises:
        ValueError: ``total_bytes_per_s`` not positive.
    """

    def __init__(self, env: simpy.Environment, total_bytes_per_s: Optional[float] = None) -> None:
        if total_bytes_per_s is not None and not total_bytes_per_s > 0:
            raise ValueError(f"CappedShare bandwidth must be > 0 bytes/s, got {total_bytes_per_s!r}")
        self.env = env
        self.total_bytes_per_s = total_bytes_per_s
        self.updated_at = env.now
        self.bytes_moved = 0.0
        #: active transfers: [remaining bytes, group, group bytes/s, size, event, order]
        self._jobs: list = []
        self._count: dict = {}  #: group -> its active transfers
        self._order = itertools.count()
        self._version = 0

    @property
    def active(self) -> int:
        """Transfers under way now."""
        return len(self._jobs)

    def _rate(self, job) -> float:
        rate = job[2] / self._count[job[1]]
        total = self.total_bytes_per_s
        if total is not None:
            share = total / len(self._jobs)
            if share < rate:
                return share
        return rate

    def transfer(self, group, group_bytes_per_s: float, nbytes: float) -> simpy.Event:
        """Start moving ``nbytes`` (>= 0) for ``group`` (a worker, whose bandwidth is
        ``group_bytes_per_s`` > 0) now; the event succeeds when the last byte has moved."""
        done = self.env.event()
        if nbytes <= 0:
            done.succeed()
            return done
        self._catch_up()
        self._jobs.append([float(nbytes), group, group_bytes_per_s, nbytes, done, next(self._order)])
        self._count[group] = self._count.get(group, 0) + 1
        self._arm()
        return done

    def _catch_up(self) -> None:
        now = self.env.now
        dt = now - self.updated_at
        if dt > 0:
            for job in self._jobs:
                job[0] -= self._rate(job) * dt
        self.updated_at = now

    def _arm(self) -> None:
        self._version += 1
        jobs = self._jobs
        if not jobs:
            return
        dt = min(job[0] / self._rate(job) for job in jobs)
        version = self._version
        self.env.timeout(dt if dt > 0 else 0.0).callbacks.append(lambda _event: self._end(version))

    def _end(self, version: int) -> None:
        if version != self._version:
            return  # a start or an end since re-armed the timer
        self._catch_up()
        jobs = self._jobs
        # the first to end (its remaining bytes exactly 0 but for rounding) and any that end with it
        first = min(jobs, key=lambda job: (job[0] / self._rate(job), job[5]))
        first[0] = 0.0
        ended = [job for job in jobs if job[0] <= 1e-9 * job[3]]
        ended.sort(key=lambda job: job[5])
        for job in ended:
            jobs.remove(job)
            c = self._count[job[1]] - 1
            if c:
                self._count[job[1]] = c
            else:
                del self._count[job[1]]
        for job in ended:
            self.bytes_moved += job[3]
            job[4].succeed()
        self._arm()

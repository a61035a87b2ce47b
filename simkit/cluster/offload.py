"""The copies between a worker's GPU cache and its host KV tier, as SimPy processes.

One :class:`OffloadCopies` per worker with ``kv_offload``: first-in-first-out queues of
copies, GPU -> host (stores) and host -> GPU (restores), each moving one copy at a time at its
rate (``d2h_gb_per_s``, ``h2d_gb_per_s``; measured on the reference: two stores submitted
together end one after the other), under an optional pool-wide cap; and with a storage tier,
storage -> host (stages) and host -> storage (writes), each after the storage's
``first_byte_latency_ms``, then under way together, sharing the worker's ``read_gb_per_s`` or
``write_gb_per_s`` equally (and with ``scope: pool`` capped by an equal share of the pool's
``shared_read_gb_per_s`` or ``shared_write_gb_per_s``). Every copy moves through a
:class:`~simkit.cluster.transfer.CappedShare`. A restore starts after the stores still reading
the GPU blocks it was given. When a copy ends the host tier learns it at once, and the worker
hears of it through its inbox (:class:`~simkit.cluster.messages.Restored`,
:class:`~simkit.cluster.messages.Stored`), so a waiting request can go at the worker's next
pass boundary, or at once when the worker is idle. A pass that uses GPU blocks a store still
reads waits for that store (:meth:`OffloadCopies.stores_done`).

Part of :mod:`simkit.cluster`.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

import simpy

from simkit.core.units import BYTES_PER_GB, S_PER_MS
from simkit.cluster.messages import Restored, Stored
from simkit.cluster.transfer import CappedShare
from simkit.engine.offload import HostOffload, StorageTier

__all__ = ["OffloadCopies", "publish_tier_events"]


class Copies:
    """A first-in-first-out queue of one worker's copies one way (jobs: id, keys, bytes, events
    to wait for first, when accepted), one at a time over a
    :class:`~simkit.cluster.transfer.CappedShare` at ``bytes_per_s`` (the pool's share, with a
    pool-wide cap, or the worker's own); each copy's first byte moves ``latency_s`` after it
    was accepted, or when the copy before it ends if later (measured on the reference: two
    stores accepted together with a 50 ms first-byte latency end 50 ms later than without, not
    100). ``moved`` counts the bytes of those ended."""

    __slots__ = ("queue", "share", "wake", "latency_s", "moved", "bytes_per_s")

    def __init__(self, env: simpy.Environment, share: CappedShare, bytes_per_s: float,
                 latency_s: float = 0.0) -> None:
        self.queue: deque = deque()
        self.share = share
        self.bytes_per_s = bytes_per_s
        self.wake = env.event()
        self.latency_s = latency_s
        self.moved = 0.0

    def submit(self, job) -> None:
        self.queue.append(job)
        if not self.wake.triggered:
            self.wake.succeed()


class OffloadCopies:
    """The host tier of one worker (``host``, the scheduler's :class:`HostOffload`) and the
    processes copying its blocks. ``inbox``: the worker's, told of every copy's end."""

    def __init__(self, env: simpy.Environment, spec, block_size: int, inbox) -> None:
        self.env = env
        self.inbox = inbox
        storage = self.storage_spec = spec.storage
        self.host = HostOffload(spec.host_blocks, block_size * spec.kv_bytes_per_token,
                                None if storage is None else StorageTier(storage.blocks))
        self.host.submit_store = self._submit_store
        self.host.submit_load = self._submit_load
        self.store_done: dict = {}  #: store (or stage) id -> event succeeded when it ends
        #: request id -> (when its restore was asked for, when it ended or None)
        self.restore_times: dict = {}
        latency_s = spec.first_byte_latency_ms * S_PER_MS
        # (with a pool-wide cap, sim.py gives the pool's workers the first one's share)
        self.stores = self._copies(spec.d2h_gb_per_s, spec.shared_d2h_gb_per_s, latency_s, self._stored)
        self.loads = self._copies(spec.h2d_gb_per_s, spec.shared_h2d_gb_per_s, latency_s, self._restored)
        #: bytes read from and written to the storage tier by this worker
        self.bytes_read = self.bytes_written = 0.0
        if storage is not None:  # the storage tier's reads and writes: concurrent, sharing
            self.host.submit_write = self._submit_write
            self.host.submit_stage = self._submit_stage
            self.storage_latency_s = storage.first_byte_latency_ms * S_PER_MS
            self.read_bytes_per_s = storage.read_gb_per_s * BYTES_PER_GB
            self.write_bytes_per_s = storage.write_gb_per_s * BYTES_PER_GB
            tier = self.host.storage
            # (with scope: pool the first worker's tier becomes the pool's: sim.py)
            tier.read_share = CappedShare(env, storage.shared_bytes_per_s(False))
            tier.write_share = CappedShare(env, storage.shared_bytes_per_s(True))
            tier.inboxes.append(inbox)

    def _copies(self, gb_per_s: float, shared_gb_per_s, latency_s: float, done) -> "Copies":
        share = CappedShare(self.env, None if shared_gb_per_s is None else shared_gb_per_s * BYTES_PER_GB)
        copies = Copies(self.env, share, gb_per_s * BYTES_PER_GB, latency_s)
        self.env.process(self._run(copies, done))
        return copies

    @property
    def bytes_d2h(self) -> float:
        return self.stores.moved

    @property
    def bytes_h2d(self) -> float:
        return self.loads.moved

    # ------------------------------------------------------------------ submissions

    def _submit_store(self, store_id: int, keys: list, nbytes: float) -> None:
        self.store_done[store_id] = self.env.event()
        self.stores.submit((store_id, keys, nbytes, (), self.env.now))

    def _submit_load(self, rid: int, keys: list, nbytes: float, after) -> None:
        self.restore_times[rid] = (self.env.now, None)
        waits = [self.store_done[s] for s in after if s in self.store_done]
        self.loads.submit((rid, keys, nbytes, waits, self.env.now))

    def _submit_stage(self, stage_id: int, keys: list, nbytes: float) -> None:
        self.store_done[stage_id] = self.env.event()
        self.env.process(self._storage_copy(False, (stage_id, keys, nbytes)))

    def _submit_write(self, keys: list, nbytes: float) -> None:
        self.env.process(self._storage_copy(True, (None, keys, nbytes)))

    def _storage_copy(self, write: bool, job):
        """One read (a stage) or write of the storage tier: the first-byte latency (no bandwidth
        used meanwhile), then its bytes, sharing this worker's rate equally with its other copies
        that way under way, and with ``scope: pool`` also capped by an equal share of the
        pool's (:class:`~simkit.cluster.transfer.CappedShare`; measured on the reference: two
        writes of one worker under way together end as equal sharing has them, not one after
        the other). Yields: the latency; the copy."""
        if self.storage_latency_s:
            yield self.env.timeout(self.storage_latency_s)
        tier = self.host.storage
        nbytes = job[2]
        if write:
            yield tier.write_share.transfer(self, self.write_bytes_per_s, nbytes)
            self.bytes_written += nbytes
            self._written(job)
        else:
            yield tier.read_share.transfer(self, self.read_bytes_per_s, nbytes)
            self.bytes_read += nbytes
            self._staged(job)

    def storage_used(self) -> Optional[int]:
        """Blocks its own storage tier holds or is writing; None without one or with a tier the
        pool shares (the other workers change it between this one's pass ends, which a
        fast-forwarded run does not see)."""
        storage = self.host.storage
        if storage is None or self.storage_spec.scope == "pool":
            return None
        return len(storage.resident) + len(storage.pending)

    def problem(self) -> Optional[str]:
        """What breaks conservation in its tiers now, or None: the host tier holds (resident +
        being stored) at most its capacity, the storage tier (resident + being written) at most
        its, each block one or the other, and only resident storage blocks are being staged."""
        tier = self.host.tier
        if tier.used > tier.capacity or tier.resident.keys() & tier.pending.keys():
            return (f"host KV tier holds {len(tier.resident)} + {len(tier.pending)} being stored of "
                    f"{tier.capacity} blocks (or a block both)")
        storage = self.host.storage
        if storage is not None and (len(storage.resident) + len(storage.pending) > storage.capacity
                                    or storage.pending & storage.resident.keys()
                                    or not storage.staging.keys() <= storage.resident.keys()):
            return (f"storage KV tier holds {len(storage.resident)} + {len(storage.pending)} being written of "
                    f"{storage.capacity} blocks (or a block both, or a block staged that it does not hold)")
        return None

    def stores_done(self, store_ids) -> simpy.Event:
        """An event that succeeds when every store of ``store_ids`` still under way has ended."""
        waits = [self.store_done[s] for s in store_ids if s in self.store_done]
        return self.env.all_of(waits)

    # ------------------------------------------------------------------ copy ends

    def _stored(self, job) -> None:  # a store (GPU -> host) or a stage (storage -> host)
        store_id, keys = job[0], job[1]
        self.host.store_done(store_id, keys)
        self.store_done.pop(store_id).succeed()
        self.inbox.put(Stored(store_id))

    _staged = _stored

    def _restored(self, job) -> None:
        rid, keys = job[0], job[1]
        asked, _ = self.restore_times[rid]
        self.restore_times[rid] = (asked, self.env.now)
        self.inbox.put(Restored(rid, keys))

    def _written(self, job) -> None:
        self.host.write_done(job[1])
        for inbox in self.host.storage.inboxes:  # a request there may be waiting for it
            inbox.put(Stored(-1))

    def _run(self, copies: "Copies", done):
        """The copies of one queue one after another: each after the stores it waits for and
        its first-byte latency (from when it was accepted), then its bytes; ``done(job)`` at
        its end. Yields: a wake-up while none is queued; those stores; the latency; each copy."""
        env = self.env
        while True:
            if not copies.queue:
                copies.wake = env.event()
                yield copies.wake
                continue
            job = copies.queue.popleft()
            if job[3]:
                yield env.all_of(job[3])
            first_byte = job[4] + copies.latency_s
            if first_byte > env.now:
                yield env.timeout(first_byte - env.now)
            yield copies.share.transfer(self, copies.bytes_per_s, job[2])
            copies.moved += job[2]
            done(job)


def publish_tier_events(worker, listener, disk_listener=None) -> None:
    """A worker's host KV tier, if it has one, tells ``listener(wid, stored, keys)`` of the
    blocks it takes in and evicts (a KV-aware router weighs host hits); its storage tier, if it
    announces its blocks (``kv_events``), tells ``disk_listener`` likewise (wid None for a
    pool's shared tier, told once however many workers share it)."""
    if worker.offload is None:
        return
    wid = worker.wid
    worker.offload.host.tier.on_change = lambda stored, keys: listener(wid, stored, keys)
    spec = worker.offload.storage_spec
    tier = worker.offload.host.storage
    if disk_listener is None or spec is None or not spec.kv_events:
        return
    if spec.scope == "pool":
        if not tier.listeners:
            tier.listeners.append(lambda stored, keys: disk_listener(None, stored, keys))
    else:
        tier.listeners.append(lambda stored, keys: disk_listener(wid, stored, keys))

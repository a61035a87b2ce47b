"""The copies between a worker's GPU cache and its host KV tier, as SimPy processes.

One :class:`OffloadCopies` per worker with ``kv_offload``: two first-in-first-out queues of
copies, GPU -> host (stores) and host -> GPU (restores), each moving one copy at a time at its
direction's rate (``d2h_gb_per_s``, ``h2d_gb_per_s``; measured on the reference: two stores
submitted together end one after the other), through a
:class:`~simkit.cluster.transfer.FairShare`. A restore starts after the stores still reading
the GPU blocks it was given. When a copy ends the host tier learns it at once, and the worker
hears of it through its inbox (:class:`~simkit.cluster.messages.Restored`,
:class:`~simkit.cluster.messages.Stored`), so a waiting request can go at the worker's next
pass boundary, or at once when the worker is idle. A pass that uses GPU blocks a store still
reads waits for that store (:meth:`OffloadCopies.stores_done`).

Part of :mod:`simkit.cluster`.
"""

from __future__ import annotations

from collections import deque

import simpy

from simkit.core.units import BYTES_PER_GB
from simkit.cluster.messages import Restored, Stored
from simkit.cluster.transfer import FairShare
from simkit.engine.offload import HostOffload

__all__ = ["OffloadCopies"]


class OffloadCopies:
    """The host tier of one worker (``host``, the scheduler's :class:`HostOffload`) and the
    processes copying its blocks. ``inbox``: the worker's, told of every copy's end."""

    def __init__(self, env: simpy.Environment, spec, block_size: int, inbox) -> None:
        self.env = env
        self.inbox = inbox
        self.host = HostOffload(spec.host_blocks, block_size * spec.kv_bytes_per_token)
        self.host.submit_store = self._submit_store
        self.host.submit_load = self._submit_load
        self.d2h = FairShare(env, None, spec.d2h_gb_per_s * BYTES_PER_GB)
        self.h2d = FairShare(env, None, spec.h2d_gb_per_s * BYTES_PER_GB)
        self.stores: deque = deque()
        self.loads: deque = deque()
        self._store_wake = env.event()
        self._load_wake = env.event()
        self.store_done: dict = {}  #: store id -> event succeeded when it ends
        #: request id -> (when its restore was asked for, when it ended or None)
        self.restore_times: dict = {}
        self.bytes_d2h = 0.0
        self.bytes_h2d = 0.0
        env.process(self._run_stores())
        env.process(self._run_loads())

    # ------------------------------------------------------------------ submissions

    def _submit_store(self, store_id: int, keys: list, nbytes: float) -> None:
        self.store_done[store_id] = self.env.event()
        self.stores.append((store_id, keys, nbytes))
        if not self._store_wake.triggered:
            self._store_wake.succeed()

    def _submit_load(self, rid: int, keys: list, nbytes: float, after) -> None:
        self.restore_times[rid] = (self.env.now, None)
        waits = [self.store_done[s] for s in after if s in self.store_done]
        self.loads.append((rid, keys, nbytes, waits))
        if not self._load_wake.triggered:
            self._load_wake.succeed()

    def stores_done(self, store_ids) -> simpy.Event:
        """An event that succeeds when every store of ``store_ids`` still under way has ended."""
        waits = [self.store_done[s] for s in store_ids if s in self.store_done]
        return self.env.all_of(waits)

    # ------------------------------------------------------------------ the copy processes

    def _run_stores(self):
        """Copy stores one after another. Yields: a wake-up while none is queued; each copy."""
        env = self.env
        while True:
            if not self.stores:
                self._store_wake = env.event()
                yield self._store_wake
                continue
            store_id, keys, nbytes = self.stores.popleft()
            yield self.d2h.transfer(nbytes)
            self.bytes_d2h += nbytes
            self.host.store_done(store_id, keys)
            self.store_done.pop(store_id).succeed()
            self.inbox.put(Stored(store_id))

    def _run_loads(self):
        """Copy restores one after another, each after the stores it waits for. Yields: a
        wake-up while none is queued; those stores; each copy."""
        env = self.env
        while True:
            if not self.loads:
                self._load_wake = env.event()
                yield self._load_wake
                continue
            rid, keys, nbytes, waits = self.loads.popleft()
            if waits:
                yield env.all_of(waits)
            yield self.h2d.transfer(nbytes)
            self.bytes_h2d += nbytes
            asked, _ = self.restore_times[rid]
            self.restore_times[rid] = (asked, env.now)
            self.inbox.put(Restored(rid, keys))

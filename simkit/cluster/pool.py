"""A pool of workers of one role that the planner scales: startup, drain, GPU budget, accounting.

Owns the pool's membership (single writer): ``workers`` (every worker ever provisioned, by
index), ``routable`` (the active ones, by index: the live list the router reads) and the
states. A worker's life is::

    (waiting for GPUs) -> starting -> active -> draining -> stopped
                     \\-> stopped (scale-up cancelled: it never becomes active)

* **Scale-up** (:meth:`WorkerPool.scale_to` above the current target) starts a
  ``provision`` process per new worker: it takes ``tensor_parallel_size`` x
  ``data_parallel_size`` GPUs from the cluster budget (a shared ``simpy.Container``; gets are
  served first come, first served, so a large request blocks smaller ones behind it, SimPy's
  Container order, which is what FIFO provisioning means here), is then *starting* (provisioned
  and counted) for ``startup_time_s``, then *active*: routable, its serve process started.
* **Scale-down** first cancels workers not yet active, newest first (their cancel event
  succeeds: GPUs taken go back at once and they never become active), then drains active
  workers, newest first: they leave ``routable`` at once (the router sends them nothing more)
  and get a :class:`~simkit.cluster.messages.Drain` message; each finishes every request it holds
  (and, on a prefill worker, waits until the link has moved the KV it holds), then stops and
  returns its GPUs.
* **Accounting**: worker-seconds integrate the provisioned workers (starting + active +
  draining) over time, as the reference does (REFERENCE.md s6): 1 worker for 1 s, then 2 (one
  starting) for 2 s = 5.0 worker-seconds. GPU-seconds are worker-seconds x GPUs per worker.
  Every change of the three counts is logged (``changes``) for the time series.

Part of :mod:`simkit.cluster`: simpy (``Container``, processes, events); workers come from a factory.
"""

from __future__ import annotations

from typing import Callable, Optional

import simpy

from simkit.spec import PoolSpec
from simkit.cluster.messages import Drain
from simkit.core.records import WorkerCount

__all__ = ["WorkerPool"]


class WorkerPool:
    """Pool ``name`` of workers built by ``make_worker(wid)``; ``initial`` workers are active
    from time 0 (their GPUs taken from ``gpus`` at once). ``on_routable`` is called when a
    worker becomes active (the router re-checks what it holds)."""

    def __init__(self, env: simpy.Environment, name: str, spec: PoolSpec, make_worker: Callable,
                 gpus: Optional[simpy.Container], initial: int) -> None:
        self.env = env
        self.name = name
        self.spec = spec
        self.make_worker = make_worker
        self.gpus = gpus
        self.gpus_per_worker = spec.gpus_per_worker
        self.workers: list = []  #: every worker ever provisioned, index = wid
        self.routable: list = []  #: active workers by wid (the router's live view)
        self.state: dict[int, str] = {}  #: wid -> starting | active | draining | stopped (or waiting)
        #: wid -> (cancel event, GPU get or None) of workers not yet active
        self.pending: dict[int, tuple] = {}
        self.on_routable: Optional[Callable[[], None]] = None
        self.worker_seconds = 0.0
        self._since = 0.0
        self.changes: list[WorkerCount] = []
        self.counts = {"starting": 0, "active": 0, "draining": 0}
        for _ in range(initial):
            worker = self._new_worker()
            if gpus is not None:
                gpus.get(self.gpus_per_worker)  # the scenario guarantees the initial workers fit
            self.state[worker.wid] = "active"
            self.routable.append(worker)
        self.counts["active"] = initial
        self.changes.append(WorkerCount(name, 0.0, 0, initial, 0))

    # ------------------------------------------------------------------ observation

    @property
    def provisioned(self) -> int:
        """Workers counted in worker-seconds now: starting + active + draining."""
        c = self.counts
        return c["starting"] + c["active"] + c["draining"]

    @property
    def target(self) -> int:
        """Workers that are or will be active: waiting for GPUs, starting or active."""
        return len(self.pending) + self.counts["active"]

    def accrue(self, now: float) -> None:
        """Add the provisioned worker time up to ``now`` to ``worker_seconds``."""
        self.worker_seconds += self.provisioned * (now - self._since)
        self._since = now

    def _set(self, wid: int, state: str) -> None:
        self.accrue(self.env.now)
        old = self.state.get(wid)
        if old in self.counts:
            self.counts[old] -= 1
        if state in self.counts:
            self.counts[state] += 1
        self.state[wid] = state
        c = self.counts
        change = WorkerCount(self.name, self.env.now, c["starting"], c["active"], c["draining"])
        if self.changes[-1].at == change.at:
            self.changes[-1] = change  # several changes at one instant: keep the settled one
        else:
            self.changes.append(change)

    # ------------------------------------------------------------------ scaling

    def _new_worker(self):
        worker = self.make_worker(len(self.workers))
        worker.on_stop = self._stopped
        self.workers.append(worker)
        return worker

    def scale_to(self, n: int) -> None:
        """Make ``n`` workers active or on their way (``n`` >= 0; bounds are the caller's)."""
        env = self.env
        while self.target < n:
            worker = self._new_worker()
            self.state[worker.wid] = "waiting"
            cancel = env.event()
            get = self.gpus.get(self.gpus_per_worker) if self.gpus is not None else None
            self.pending[worker.wid] = (cancel, get)
            env.process(self.provision(worker, get, cancel))
        while self.target > n:
            if self.pending:
                self._cancel(max(self.pending))  # the newest scale-up is cancelled first
                continue
            worker = self.routable.pop()  # the newest active worker drains
            self._set(worker.wid, "draining")
            worker.inbox.put(Drain())

    def _cancel(self, wid: int) -> None:
        """Cancel a worker not yet active: its GPUs (if taken) go back now; it never serves."""
        cancel, get = self.pending.pop(wid)
        cancel.succeed()
        if get is not None:
            if get.triggered:
                self.gpus.put(self.gpus_per_worker)
            else:
                get.cancel()
        self._set(wid, "stopped")

    def provision(self, worker, get, cancel):
        """Bring one new worker up, unless ``cancel`` succeeds first (see :meth:`_cancel`).

        Yields: the GPU budget's ``get`` (when there is a budget) or the cancellation; the
        startup timeout (when ``startup_time_s`` > 0) or the cancellation.
        """
        env, wid = self.env, worker.wid
        if get is not None:
            yield get | cancel
            if cancel.triggered:
                return
        self._set(wid, "starting")
        if self.spec.startup_time_s > 0:
            yield env.timeout(self.spec.startup_time_s) | cancel
            if cancel.triggered:
                return
        del self.pending[wid]
        self._set(wid, "active")
        self.routable.append(worker)  # wids grow and startups are equal, so routable stays sorted
        worker.start()
        if self.on_routable is not None:
            self.on_routable()

    def _stopped(self, worker) -> None:
        """A draining worker finished everything it held: free its GPUs."""
        self._set(worker.wid, "stopped")
        if self.gpus is not None:
            self.gpus.put(self.gpus_per_worker)

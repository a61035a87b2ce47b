"""A host-memory KV tier behind one worker's GPU cache (``pools.<pool>.kv_offload``): which
blocks it holds, which copies are under way, and the scheduler's side of offload and restore.

Pure bookkeeping, no SimPy: the worker (``simkit.cluster.offload``) moves the bytes and tells
this module when a copy ends. The rules are vLLM's ``OffloadingConnector`` (``vllm/v1/kv_offload``,
CPU offloading) as the reference (ai-dynamo-runtime 1.6.1 ``native_host_offload``) models it,
measured on tiny traces (README, "KV offload"):

* **Store (GPU -> host).** At the end of the pass that computes them, a request's new *full
  prompt* blocks that the host tier lacks are copied to it as one transfer (its "cohort"); the
  tier reserves their room at once, evicting its least recently used resident blocks, and if the
  cohort does not fit it is not stored (retried at the request's next pass end). Copies of one
  worker run one after another (first in, first out), each at ``d2h_gb_per_s``.
* **A GPU block being copied** may be allocated to another request, but a pass that uses it
  cannot start before the copy ends (measured: the request is admitted at once, its first
  token comes a copy later).
* **Restore (host -> GPU).** A waiting request whose prompt continues, past its GPU prefix hit
  (vLLM's, at most prompt - 1 tokens in whole blocks), with blocks the host tier holds loads
  those blocks first: GPU room is reserved for them (the request waits if there is none), the
  copy runs at ``h2d_gb_per_s`` (one after another per worker, after any store still reading the
  reserved GPU blocks), and the request is admitted once it ends, with its GPU hit as if the
  loaded blocks were cached (the GPU limit still applies: a 256-token prompt of 4 loaded
  64-token blocks reuses 192 tokens). Requests behind a loading one are scheduled meanwhile
  (vLLM skips requests waiting for remote KV). A request whose host blocks are still being
  stored waits for the store (vLLM's lookup says "not yet").
* **LRU.** A look-up and a store touch the request's prompt blocks last to first, so its first
  block is the most recently used; the least recently used resident block is evicted first.
* **Storage tier** (``kv_offload.storage``, the reference's ``g3_offload``). Blocks a store
  brings to the host are written on to it (those it lacks, one write per store, evicting its
  least recently used blocks but none of the store's own; if not all fit, the leading ones that
  do), starting when the worker takes the store's end: at its next pass boundary, or at once
  when idle. A request whose prompt continues, past its GPU and host hits, with storage blocks
  stages them to the host first (host room reserved; the first-byte latency, then the bytes at
  the read rate), then restores them with the host's to the GPU; if the next of them is still
  being written it stages those before it at once and waits for the write. A worker's reads
  (writes) under way together share its rate equally. ``scope: pool`` shares one tier among a
  pool's workers, each copy also capped by an equal share of the pool's shared rate.

Part of :mod:`simkit.engine`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional, Sequence

__all__ = ["HostTier", "HostOffload", "StorageTier", "DEFERRED", "RESTORE_ROUNDS_BEFORE_BYPASS"]

#: consecutive restore rounds (look-ups that stage new storage blocks while the worker runs
#: nothing) after which a request stops restoring from storage and computes those blocks
#: instead (AISimulate's G3 restore bypass, the reference's: 1,024; vLLM has no such rule)
RESTORE_ROUNDS_BEFORE_BYPASS = 1024

#: :meth:`HostOffload.lookup`'s outcome besides a block count
DEFERRED = "deferred"  #: some of its host blocks are still being stored or loaded: not yet


class HostTier:
    """The host blocks of one worker: resident ones in LRU order and those being stored.

    ``capacity`` blocks. A key is *resident* (copied, hittable), *pending* (its store under way:
    its room reserved) or absent.
    """

    __slots__ = ("capacity", "resident", "pending", "loading", "on_change", "_touched", "_touched_at", "_order")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.resident: OrderedDict = OrderedDict()  #: key -> None, least recently used first
        self.pending: dict = {}  #: key -> id of the store copying it
        self.loading: dict = {}  #: key -> rid of the request restoring it (not evictable)
        #: when set: on_change(stored, keys) as keys become resident (a store ended) or are
        #: evicted (a KV-aware router's view of the tier)
        self.on_change: Optional[Callable[[bool, list], None]] = None
        #: the key list touched last and the LRU order's version then: touching it again before
        #: anything else moved is a no-op, skipped (a request looked up at every pass)
        self._touched = None
        self._touched_at = -1
        self._order = 0

    @property
    def used(self) -> int:
        """Blocks held or reserved."""
        return len(self.resident) + len(self.pending)

    def match(self, keys: Sequence[int]) -> tuple[int, bool]:
        """Leading ``keys`` the tier holds or is storing; and whether any of those is still
        being stored or loaded (then a restore must wait)."""
        n, busy = 0, False
        resident, pending, loading = self.resident, self.pending, self.loading
        for key in keys:
            if key in resident:
                busy = busy or key in loading
            elif key in pending:
                busy = True
            else:
                break
            n += 1
        return n, busy

    def touch(self, keys: Sequence[int]) -> None:
        """Mark ``keys`` used, last to first (the first ends most recently used)."""
        if self._touched is keys and self._order == self._touched_at:
            return  # the same keys, nothing moved since: they are already in this order at the end
        resident = self.resident
        for key in reversed(keys):
            if key in resident:
                resident.move_to_end(key)
        self._order += 1
        self._touched, self._touched_at = keys, self._order

    def reserve(self, keys: Sequence[int], store_id: int) -> bool:
        """Reserve room for ``keys`` (absent ones) under store ``store_id``, evicting least
        recently used resident blocks not being loaded; False (nothing changed) if they do
        not fit."""
        free = self.capacity - self.used
        need = len(keys) - free
        if need > 0:
            evictable = []
            loading = self.loading
            for key in self.resident:
                if key not in loading:
                    evictable.append(key)
                    if len(evictable) == need:
                        break
            if len(evictable) < need:
                return False
            for key in evictable:
                del self.resident[key]
            self._order += 1
            if self.on_change is not None:
                self.on_change(False, evictable)
        for key in keys:
            self.pending[key] = store_id
        return True

    def stored(self, keys: Sequence[int]) -> None:
        """Store of ``keys`` ended: they are resident, most recently used, in their order."""
        pending, resident = self.pending, self.resident
        for key in keys:
            if pending.pop(key, None) is not None:
                resident[key] = None
                resident.move_to_end(key)
        self._order += 1
        if self.on_change is not None:
            self.on_change(True, list(keys))


class StorageTier:
    """The blocks of a storage KV tier (``kv_offload.storage``): resident ones in LRU order and
    those being written; one per worker, or one a pool's workers share."""

    __slots__ = ("capacity", "resident", "pending", "staging", "inboxes", "read_share", "write_share",
                 "listeners")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.resident: OrderedDict = OrderedDict()  #: key -> None, least recently used first
        self.pending: set = set()  #: keys being written
        self.staging: dict = {}  #: key -> readers staging it to a host tier (not evictable)
        #: the inboxes of the workers that use it, told when a write ends (a request of any of
        #: them may be waiting for it)
        self.inboxes: list = []
        #: the bandwidth its reads and its writes share (set by the copies' owner)
        self.read_share = self.write_share = None
        #: told listener(stored, keys) as blocks become resident (a write ended) or are
        #: evicted (a KV-aware router's view of the tier, ``kv_events``)
        self.listeners: list = []

    def reserve(self, keys: Sequence[int]) -> list:
        """Reserve room for the ``keys`` it lacks, evicting least recently used resident blocks
        that are neither being staged nor of ``keys``; returns those it will write: the leading
        ones that fit (none if none fits). Measured on the reference: a 12-block cohort written
        to an empty 8-block tier leaves its first 8 blocks there."""
        new = [k for k in keys if k not in self.resident and k not in self.pending]
        if not new:
            return new
        need = len(self.resident) + len(self.pending) + len(new) - self.capacity
        if need > 0:
            cohort = set(keys)
            victims = []
            for key in self.resident:
                if key not in self.staging and key not in cohort:
                    victims.append(key)
                    if len(victims) == need:
                        break
            if len(victims) < need:
                del new[len(new) - (need - len(victims)):]  # the leading ones that fit
            for key in victims:
                del self.resident[key]
            for listener in self.listeners:
                listener(False, victims)
        self.pending.update(new)
        return new

    def written(self, keys: Sequence[int]) -> None:
        """A write of ``keys`` ended: resident, most recently used, in their order (measured
        on the reference: a full tier evicts the first block of an earlier write first)."""
        for key in keys:
            if key in self.pending:
                self.pending.discard(key)
                self.resident[key] = None
        for listener in self.listeners:
            listener(True, list(keys))

    def match(self, keys: Sequence[int]) -> tuple[list, bool]:
        """In the leading run of ``keys`` resident or being written: the resident ones, and
        whether any is being written (a stage of those must wait for the write). Measured on the
        reference: a prompt stages the blocks already written at once, those past a block still
        being written included, and the rest once written. Touches the resident ones, last to
        first."""
        found, writing = [], False
        resident, pending = self.resident, self.pending
        for key in keys:
            if key in resident:
                found.append(key)
            elif key in pending:
                writing = True
            else:
                break
        for key in reversed(found):
            resident.move_to_end(key)
        return found, writing


class HostOffload:
    """The scheduler's view of its worker's host tier (``kv_offload``): what a waiting request
    can restore, what a finished pass stores, which stores a pass must wait for.

    ``block_bytes``: bytes of one KV block (``block_size`` x ``kv_bytes_per_token``).
    ``submit_store(store_id, keys, nbytes)`` and ``submit_load(rid, keys, nbytes, after)`` are
    set by the worker: they start the copies (``after``: ids of stores the load must wait for).
    """

    def __init__(self, host_blocks: int, block_bytes: int, storage: Optional[StorageTier] = None) -> None:
        self.tier = HostTier(host_blocks)
        self.block_bytes = block_bytes
        self.storage = storage  #: the storage tier behind the host one, or None
        self.next_store = 0
        self.submit_store: Optional[Callable] = None
        self.submit_load: Optional[Callable] = None
        #: with a storage tier, set by the worker: submit_write(keys, nbytes) and
        #: submit_stage(stage_id, keys, nbytes) start a write to it and a read from it
        self.submit_write: Optional[Callable] = None
        self.submit_stage: Optional[Callable] = None
        #: stage id -> its keys, for the stages under way (their host room is reserved)
        self.stages: dict = {}
        #: store id -> the keys of an ended store not yet written on to the storage tier
        self.unwritten: dict = {}
        self.staged_blocks = 0
        self.written_blocks = 0
        #: ids of stores whose GPU blocks this pass's allocations took (the pass waits for them)
        self.fence: set = set()
        self._fenced_now = False
        #: requests whose blocks this pass's allocations fenced: no store at this pass end
        self.fenced: set = set()
        #: requests whose store is owed from their next pass end on (fenced, or no room)
        self.retry: set = set()
        #: per request id: (GPU hit blocks, loaded blocks) of its restore; ``loaded`` is set
        #: once the copy ended
        self.restores: dict = {}
        self.loaded: set = set()
        #: requests whose restored blocks were given back to the GPU cache (a stall; see
        #: VllmScheduler._unhold_restored): admitted by a plain GPU look-up
        self.given_back: set = set()
        #: per request id, the next prompt block index a store may start at
        self.store_from: dict = {}
        #: per request id, the store whose room its latest cohort reserved
        self.latest_store: dict = {}
        self.live_stores: set = set()
        #: counters for the summary: blocks stored and restored, restores begun
        self.stored_blocks = 0
        self.restored_blocks = 0
        #: per request id, its restore rounds since the worker last ran a pass (or it was
        #: admitted or preempted); those that reached RESTORE_ROUNDS_BEFORE_BYPASS, and how
        #: many times a request stopped restoring from storage so (``bypassed_restores``)
        self.rounds: dict = {}
        self.bypassing: set = set()
        self.bypassed_restores = 0
        #: per request id: the keys it staged from storage, and of its restore's blocks those
        #: that came from there; prompt tokens its admissions reused from storage, in all
        self.staged_for: dict = {}
        self.restored_from_storage: dict = {}
        self.storage_hit_tokens = 0

    # ------------------------------------------------------------------ GPU evictions

    def evicted(self, keys: Sequence[int]) -> None:
        """GPU blocks ``keys`` were taken by an allocation: a store still reading one fences
        the pass (KvCache ``on_event`` with stored False)."""
        pending = self.tier.pending
        for key in keys:
            store = pending.get(key)
            if store is not None:
                self.fence.add(store)
                self._fenced_now = True

    def allocated(self, rid: Optional[int]) -> None:
        """The scheduler just allocated blocks for ``rid``: if that took blocks a store still
        reads, its own new blocks can be stored only from its next pass on (the reference
        prepares a pass's stores when it schedules the pass, and cannot while the blocks wait
        for another copy: measured, such a prompt's store starts a pass late)."""
        if self._fenced_now:
            self._fenced_now = False
            if rid is not None:
                self.fenced.add(rid)

    def take_fence(self) -> set:
        """Stores the pass just scheduled must wait for (and forget them)."""
        fence, self.fence = self.fence, set()
        return {s for s in fence if s in self.live_stores}

    # ------------------------------------------------------------------ restore

    def lookup(self, rid: int, keys: Sequence[int], gpu_hits: int):
        """A waiting request of prompt block ``keys`` whose GPU hit is ``gpu_hits`` blocks:
        the number of host blocks it may restore after them (0: none), :data:`DEFERRED`
        (wait: some are being stored or loaded, or its own last store is under way). Not
        called while its restore is under way (the scheduler skips it). Touches its blocks (LRU)."""
        store = self.latest_store.get(rid)
        if store is not None and store in self.live_stores:
            return DEFERRED
        tier = self.tier
        if gpu_hits >= len(keys):
            tier.touch(keys)
            return 0
        n, busy = tier.match(keys[gpu_hits:])
        tier.touch(keys)
        storage = self.storage
        if storage is not None and gpu_hits + n < len(keys) and rid not in self.bypassing:
            # (also while some host blocks before them are still coming: measured, a prompt
            # whose first blocks another request is staging stages the next ones meanwhile)
            found, writing = storage.match(keys[gpu_hits + n:])
            staged = self._stage(found) if found else None
            if staged:
                self.staged_for.setdefault(rid, set()).update(staged)
                rounds = self.rounds[rid] = self.rounds.get(rid, 0) + 1
                if rounds >= RESTORE_ROUNDS_BEFORE_BYPASS:  # thrashing: compute them instead
                    self.bypassing.add(rid)
                    self.bypassed_restores += 1
                    del self.rounds[rid]
                return DEFERRED  # staged to the host first, then restored with the rest
            if writing:
                return DEFERRED  # the next is still being written: wait for the write
        return DEFERRED if busy else n

    def _stage(self, keys: Sequence[int]) -> Optional[list]:
        """Read ``keys`` from the storage tier into host room reserved for them (evicting its
        least recently used blocks); the keys it reads (those the host lacks), or None if they
        do not fit."""
        tier = self.tier
        # (a key further along may already be on the host: only the others are read)
        keys = [k for k in keys if k not in tier.resident and k not in tier.pending]
        stage_id = self.next_store
        if not keys or not tier.reserve(keys, stage_id):
            return None
        self.next_store += 1
        self.live_stores.add(stage_id)
        self.stages[stage_id] = list(keys)
        staging = self.storage.staging
        for key in keys:
            staging[key] = staging.get(key, 0) + 1
        self.submit_stage(stage_id, list(keys), len(keys) * self.block_bytes)
        return keys

    def start_restore(self, rid: int, keys: Sequence[int], gpu_hits: int, n: int, fence: set) -> None:
        """Begin restoring ``keys[gpu_hits:gpu_hits + n]`` for request ``rid``: the caller
        reserved their GPU room, and ``fence`` holds the stores still reading the GPU blocks
        that reservation took (:meth:`evicted`), which the copy waits for."""
        moved = list(keys[gpu_hits:gpu_hits + n])
        for key in moved:
            self.tier.loading[key] = rid
        self.restores[rid] = (gpu_hits, n)
        staged = self.staged_for.get(rid)
        self.restored_from_storage[rid] = sum(1 for key in moved if key in staged) if staged else 0
        self.submit_load(rid, moved, n * self.block_bytes, {s for s in fence if s in self.live_stores})

    def restore_done(self, rid: int, keys: Sequence[int]) -> None:
        """The copy of ``keys`` for ``rid`` ended."""
        loading = self.tier.loading
        for key in keys:
            if loading.get(key) == rid:
                del loading[key]
        self.loaded.add(rid)
        self.restored_blocks += len(keys)

    def progressed(self) -> None:
        """The worker runs a pass: every request's restore rounds start over."""
        if self.rounds:
            self.rounds.clear()

    def preempted(self, rid: int) -> None:
        """Request ``rid`` was preempted: its restore rounds and any bypass end."""
        self.rounds.pop(rid, None)
        self.bypassing.discard(rid)
        self.staged_for.pop(rid, None)

    def admitted(self, rid: int, reused_blocks: int) -> None:
        """Request ``rid`` was admitted with ``reused_blocks`` prompt blocks reused: a restore
        is over, and stores of its blocks start after them."""
        self.rounds.pop(rid, None)
        self.bypassing.discard(rid)
        self.staged_for.pop(rid, None)
        if self.restores.pop(rid, None) is not None:
            self.loaded.discard(rid)
            self.given_back.discard(rid)
            self.store_from[rid] = reused_blocks

    def forget(self, rid: int) -> None:
        """Request ``rid`` left this worker (finished, rejected, handed over)."""
        self.rounds.pop(rid, None)
        self.bypassing.discard(rid)
        self.staged_for.pop(rid, None)
        self.restored_from_storage.pop(rid, None)
        self.store_from.pop(rid, None)
        self.latest_store.pop(rid, None)
        self.retry.discard(rid)

    # ------------------------------------------------------------------ store

    def computed(self, rid: int, keys: Sequence[int], prompt_blocks_done: int) -> None:
        """A pass that ``rid`` took part in ended with the first ``prompt_blocks_done`` full
        prompt blocks of ``rid`` (keys ``keys``) computed: store the new ones the tier lacks, as
        one copy (not if the pass fenced its blocks: then at its next pass end)."""
        self.retry.discard(rid)
        if rid in self.fenced:
            self.fenced.discard(rid)
            self.retry.add(rid)
            return
        start = self.store_from.get(rid, 0)
        end = min(prompt_blocks_done, len(keys))
        if end <= start:
            return
        tier = self.tier
        missing = [k for k in keys[start:end] if k not in tier.resident and k not in tier.pending]
        if not missing:
            self.store_from[rid] = end
            return
        store_id = self.next_store
        if not tier.reserve(missing, store_id):
            self.retry.add(rid)  # no room: retried at its next pass end
            return
        self.next_store += 1
        self.store_from[rid] = end
        self.latest_store[rid] = store_id
        self.live_stores.add(store_id)
        tier.touch(keys)
        self.submit_store(store_id, missing, len(missing) * self.block_bytes)

    def store_done(self, store_id: int, keys: Sequence[int]) -> None:
        """The copy of store ``store_id`` (GPU -> host, or a stage storage -> host) ended; a
        store's blocks are then written to the storage tier, in the background."""
        self.live_stores.discard(store_id)
        self.tier.stored(keys)
        stage = self.stages.pop(store_id, None)
        if stage is not None:
            self.staged_blocks += len(keys)
            staging = self.storage.staging
            for key in stage:
                c = staging.get(key, 0) - 1
                if c > 0:
                    staging[key] = c
                else:
                    staging.pop(key, None)
            return
        self.stored_blocks += len(keys)
        if self.storage is not None:  # written on when the worker takes the store's end
            self.unwritten[store_id] = list(keys)

    def write_through(self, store_id: int) -> None:
        """The worker took the end of store ``store_id`` (at its next pass boundary, or at once
        when idle): the blocks it brought to the host are written on to the storage tier, those
        the tier lacks (measured on the reference: a write starts at the owner's next step, not
        when its host copy ends)."""
        keys = self.unwritten.pop(store_id, None)
        if keys is None:
            return
        new = self.storage.reserve(keys)
        if new:
            self.submit_write(new, len(new) * self.block_bytes)

    def write_done(self, keys: Sequence[int]) -> None:
        """A write of ``keys`` to the storage tier ended."""
        self.storage.written(keys)
        self.written_blocks += len(keys)

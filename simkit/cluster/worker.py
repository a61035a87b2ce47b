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

Kept as one module: the serve loop, its fast-forwarded decode runs (laid out, cut by a message,
settled when read mid-run) and the KV events of its passes share the worker's pass state, and
a change to one must be checked against the others (tests/test_fast_forward.py).

Part of :mod:`simkit.cluster`: imports simpy, the engine's scheduler and latency model, probe.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque

from typing import Callable, Optional

import simpy
from simpy.events import Event

from simkit.spec import PoolSpec
from simkit.engine.latency import LatencyModel
from simkit.engine.latency.base import _accumulate
from simkit.cluster.messages import Drain, Handoff, Inbox, Released, Reserve, Restored, Stored, Unreserve
from simkit.cluster.offload import OffloadCopies
from simkit.cluster.probe import COMPLETED, REJECTED, Probe
from simkit.core.records import PassRecord
from simkit.core.request import Request
from simkit.engine.scheduler import make_scheduler

#: passes in the first chunk of a fast-forwarded decode run (then doubling)
FIRST_CHUNK = 128
#: passes of one fast-forwarded run at most (its pass times are kept while it runs): a longer
#: stretch is several runs, each ending at a pass boundary as stepping would reach it
MAX_RUN_PASSES = 1 << 17

#: heap priority behind SimPy's URGENT (0) and NORMAL (1): runs after every same-time event
LATE = 2


class PassBoundary(Event):
    """An event that fires at the current instant after all urgent and normal events; among
    boundaries of the same instant, lower ``rank`` first. When it fires it marks the
    environment (``env.last_boundary``: its time and rank), so a fast-forwarded run can tell
    whether its own boundary of this instant would already have been decided
    (:func:`boundary_passed`)."""

    def __init__(self, env: simpy.Environment, rank: int = 0) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        self.rank = rank
        self.callbacks.append(_mark_boundary)
        env.schedule(self, LATE + rank)


def _mark_boundary(event: PassBoundary) -> None:
    env = event.env
    env.last_boundary = (env.now, event.rank)


def boundary_passed(env: simpy.Environment, rank: int) -> bool:
    """Whether a boundary of a later ``rank`` than ``rank`` has fired at this instant: then the
    boundary ``rank`` of this instant is already past (boundaries fire in rank order), and a
    message that arrives now is taken at that worker's next pass boundary, not this one."""
    mark = getattr(env, "last_boundary", None)
    return mark is not None and mark[0] == env.now and mark[1] > rank


class DecodeRun:
    """A fast-forwarded run of identical pure-decode passes under way on a worker: its first
    pass's ``batch`` (whose ``run_started``/``run_done`` say how much of it the scheduler has
    applied), its ``start``, the pass times and ends laid out so far, the passes it may run at
    most (``passes``), and whether its allocations may evict announced cache blocks
    (``may_evict``: a KV-aware router then brings it up to date before deciding)."""

    __slots__ = ("batch", "start", "dts", "ends", "passes", "may_evict", "used0", "computed0")

    def __init__(self, batch, start: float, passes: int, may_evict: bool) -> None:
        self.batch = batch
        self.start = start
        self.dts: list = []
        self.ends: list = []
        self.passes = passes
        self.may_evict = may_evict
        self.used0 = 0  #: KV blocks in use after the first pass's allocation (pass records)
        self.computed0: list = []  #: each request's computed tokens at the start (pass records)


class Stuck(Exception):
    """A worker ran many passes without producing anything while work remained."""

    reason = "stuck"  #: the run's stop_reason


#: a worker that runs this many passes in a row without emitting a token or finishing a
#: prompt, and more than twice the passes its remaining prompts need, is declared stuck
STALL_PASSES = 10_000


#: called by a prefill worker for each request whose prompt it finished: (handoff, worker)
HandoffSink = Callable[[Handoff, "Worker"], None]


def prefill_attention_pairs(batch) -> int:
    """(query, key) pairs the pass's prefill chunks attend to: a chunk of n tokens after p
    computed ones contributes n p + n (n + 1) / 2 (causal). For latency models that ask for it
    (``needs_prefill_attention``)."""
    pairs = 0
    for seq, n, is_prefill in batch.entries:
        if is_prefill:
            pairs += n * seq.computed + n * (n + 1) // 2
    return pairs


class Worker:
    """Worker ``wid`` of pool ``pool`` with ``role`` aggregated, prefill or decode."""

    def __init__(self, env: simpy.Environment, pool: str, wid: int, role: str, spec: PoolSpec,
                 latency: LatencyModel, probe: Probe, handoff: Optional[HandoffSink] = None,
                 rank: int = 0, fast_forward: bool = True, horizon: Optional[float] = None,
                 record_passes: bool = False, seed: int = 0) -> None:
        if role == "prefill" and handoff is None:
            raise ValueError("a prefill worker needs a handoff sink")
        self.env = env
        self.pool = pool
        self.wid = wid
        self.role = role
        self.latency = latency
        self.probe = probe
        self.handoff = handoff
        self.sched = make_scheduler(spec, role, seed, pool)
        self.inbox = Inbox(env)
        self.rank = rank  #: tie-break order of same-instant pass boundaries
        #: host KV tier (``kv_offload``) and its copies, or None
        self.offload: Optional[OffloadCopies] = None
        if spec.kv_offload is not None:
            self.offload = OffloadCopies(env, spec.kv_offload, spec.block_size, self.inbox)
            self.sched.offload = self.offload.host
            self.sched.kv.on_event = self._kv_event  # its evictions fence passes (stores under way)
        #: run repeated pure-decode passes as one timeout (exactly equal results; see serve).
        #: With host offload only while no copy to the host is under way or owed (a pass may
        #: allocate over blocks a store still reads, and wait for it; an owed store is retried
        #: at each pass end): :meth:`_offload_quiet`
        self.fast_forward = fast_forward and role != "prefill"
        self.horizon = horizon  #: the run's time cap: fast-forwarded runs never cross it
        #: with a planner: an object whose ``next_at`` is the planner's next tick, which
        #: fast-forwarded runs never cross either (so the planner sees what per-pass stepping shows)
        self.clock = None
        self.passes = 0
        self.busy_s = 0.0
        self.stalled = 0  #: passes in a row without a token or a finished prompt
        #: PassRecord rows of this worker's passes, when recording
        self.pass_log: Optional[list] = [] if record_passes else None
        #: a message taken from the inbox during a fast-forwarded run, put back at its pass end
        self.in_hand = None
        #: async scheduling: requests and handoffs that arrived during the last pass, taken
        #: after the next pass is formed
        self.async_scheduling = spec.async_scheduling
        self.deferred: list = []
        #: called when this worker's load may have dropped: after each pass, a rejection, a
        #: release of prompt KV (the router re-checks its busy thresholds)
        self.on_pass_end: Optional[Callable[[], None]] = None
        #: a router queue holds requests while this worker's KV use is above a threshold: every
        #: pass end that frees blocks must reach it. A verify round frees its rejected drafts'
        #: blocks, so runs of verify rounds are stepped pass by pass here (plain decode runs
        #: only grow KV use, so none of their pass ends can release a held request)
        self.kv_watched = False
        #: set by a :class:`Drain` message: finish the work held, then stop
        self.draining = False
        #: called once, at the instant a draining worker holds nothing more (its pool frees it)
        self.on_stop: Optional[Callable[["Worker"], None]] = None
        #: handoffs placed on this worker still on the link (destination_missing): it may not
        #: stop draining before they arrive
        self.expected_handoffs = 0
        #: with a KV-aware router: called as kv_listener(wid, stored, keys) when this worker's
        #: KV events reach the router (blocks stored: at the end of the pass that computed them;
        #: evicted: when allocated over), ``event_lag_s`` after they happen
        self.kv_listener: Optional[Callable[[int, bool, list], None]] = None
        self.event_lag_s = 0.0
        #: keys stored during the pass under way, announced at its end (insertion-ordered)
        self.stored_in_pass: dict = {}

        #: decode pool with pairing at dispatch: called with a request whose KV room this
        #: worker reserved (at its pass boundary), to send it on to a prefill worker
        self.on_reserved: Optional[Callable[[Request], None]] = None
        #: prefill pool with pairing at dispatch: called with the id of a request this worker
        #: rejects, whose paired decode worker holds room for it
        self.on_rejected: Optional[Callable[[int], None]] = None
        #: requests waiting for this (busy) decode worker to reserve room for their KV
        self.pending_reserve: deque = deque()
        #: decode role: rid -> the prefill worker holding its KV, released at its admission
        self.sources: dict = {}
        #: attempts owed to the head of ``pending_reserve`` at the next pass boundary (see
        #: :meth:`_answer_reservations`)
        self.reserve_credit = 0
        self.in_pass = False  #: a forward pass (or a fast-forwarded run of them) is under way
        #: the fast-forwarded decode run under way (else None)
        self.run: Optional[DecodeRun] = None

    def publish_kv_events(self, listener: Callable[[int, bool, list], None], lag_s: float = 0.0) -> None:
        """From now on, announce the blocks this worker's cache stores and evicts to
        ``listener(wid, stored, keys)``, ``lag_s`` after they happen: a block stored by a pass
        at that pass's end (the reference publishes it then: measured, a prompt's blocks are not
        hittable for the router while its pass runs), one stored between passes (a prompt's last
        pages inserted at its handoff) at once, an evicted one when the allocation takes it."""
        self.kv_listener = listener
        self.event_lag_s = lag_s
        self.sched.kv.on_event = self._kv_event

    def _kv_event(self, stored: bool, keys: list) -> None:
        if not stored and self.offload is not None:
            self.offload.host.evicted(keys)
        if self.kv_listener is None:
            return
        pending = self.stored_in_pass
        if stored:
            pending.update(dict.fromkeys(keys))
            return
        if pending:  # stored and evicted before the router heard of it: it hears of neither
            gone = [k for k in keys if k in pending]
            for key in gone:
                del pending[key]
            if gone:
                keys = [k for k in keys if k not in gone]
        if keys:
            self._announce(False, keys)

    def _flush_stored(self) -> None:
        """Announce the blocks stored since the last announcement."""
        keys = list(self.stored_in_pass)
        self.stored_in_pass = {}
        self._announce(True, keys)

    def _announce(self, stored: bool, keys: list) -> None:
        if self.event_lag_s:
            self.env.timeout(self.event_lag_s).callbacks.append(
                lambda _event: self.kv_listener(self.wid, stored, keys))
        else:
            self.kv_listener(self.wid, stored, keys)

    def start(self) -> simpy.Process:
        return self.env.process(self.serve())

    def _offload_quiet(self) -> bool:
        """Host offload: no store or stage is under way and none is owed, so the passes of a
        decode run touch no block a copy reads, and its tiers stay as they are (a write ending
        meanwhile messages the worker, which cuts the run)."""
        host = self.offload.host
        return not host.live_stores and not host.retry

    def _log_run(self, run: DecodeRun, n: int) -> None:
        """Pass records of the first ``n`` passes of fast-forwarded ``run``, equal to those
        pass-by-pass stepping makes: pass i's KV is what its own allocation would hold (blocks for
        computed + i + 1 tokens, plus the newest token's slot where the engine gives one)."""
        batch = run.batch
        n_req, ctx = batch.decode_requests, batch.decode_context_tokens
        prev = run.start
        offload = self.offload  # (its tiers hold still during a run: _offload_quiet)
        tiers = () if offload is None else (offload.host.tier.used, offload.storage_used())
        plan = batch.verify_run
        if plan is not None:  # verify rounds: the plan's contexts and blocks
            for i, end in enumerate(run.ends[:n]):
                self.pass_log.append(PassRecord(self.pool, self.wid, prev, end, 0, n_req, plan.ctxs[i],
                                                plan.used[i], 0, 0, *tiers))
                prev = end
            return
        bs = self.sched.block_size
        slot = self.sched.decode_slot  # the newest token's KV slot, where the engine gives one
        first = [-(-(c + 1 + slot) // bs) for c in run.computed0]
        for i, end in enumerate(run.ends[:n]):
            used = run.used0 + sum(max(0, -(-(c + i + 1 + slot) // bs) - b) for c, b in zip(run.computed0, first))
            self.pass_log.append(PassRecord(self.pool, self.wid, prev, end, 0, n_req, ctx + i * n_req, used,
                                            0, 0, *tiers))
            prev = end

    def settle(self, boundary: bool = False) -> None:
        """Bring the state of a fast-forwarded run under way up to now, as pass-by-pass stepping
        would show it: passes ended by now are complete (their tokens emitted), the pass under way
        has its KV allocated. ``boundary``: the caller runs after this instant's pass boundaries
        (the planner), so a pass starting now has started; otherwise (the router, which decides
        after the instant's pass ends and before its boundaries) it has not. A no-op without a
        run; exact because the scheduler applies a run in pieces as it would at once
        (:meth:`~simkit.engine.scheduler.base.Scheduler.advance_decode_run`)."""
        run = self.run
        if run is None:
            return
        now = self.env.now
        ends = run.ends
        done = bisect_right(ends, now)
        started = done + 1 if (boundary or not done or ends[done - 1] < now) else done
        started = min(started, run.passes)
        batch = run.batch
        old = batch.run_done
        if started <= batch.run_started and done <= old:
            return
        rids, finished = self.sched.advance_decode_run(batch, max(started, batch.run_started), max(done, old))
        if done > old:
            self._run_tokens(batch, rids, ends[old:done])
        for seq in finished:  # (none: a run's last pass end is an event, handled before any read)
            self._completed(seq, ends[done - 1])

    def stop_run(self) -> None:
        """The simulation stopped now, between events: bring a fast-forwarded run under way up
        to now (:meth:`settle`) and count its passes that ended, as stepping would have."""
        run = self.run
        if run is None:
            return
        self.settle()
        n = run.batch.run_done
        self.run = None
        self.passes += n
        self.busy_s += sum(run.dts[:n])
        if self.pass_log is not None:
            self._log_run(run, n)

    def _run_tokens(self, batch, rids: list, times: list) -> None:
        """Tokens of passes of a fast-forwarded run ending at ``times``: ``rids`` one token each
        per pass, or (verify rounds) ``rids[i]`` the ids pass i emitted, once per token."""
        if batch.verify_run is None:
            self.probe.token_run(rids, times)
        else:
            tokens = self.probe.tokens
            for emitted, at in zip(rids, times):
                tokens(emitted, at)

    def _completed(self, seq, at: float) -> None:
        st = seq.spec
        if st is not None and st.rounds:
            self.probe.speculated(seq.rid, st.rounds, st.accepted, st.tokens, st.by_position, st.tried)
        self.probe.finished(seq.rid, at, COMPLETED)
        if self.offload is not None:  # (also at the end of a fast-forwarded run)
            self.offload.host.forget(seq.rid)

    # ------------------------------------------------------------------ read-only snapshot
    # (what routing policies may read; see simkit.cluster.router.Routable)

    @property
    def idle(self) -> bool:
        """Whether this worker has nothing to run (no pass in progress or due) and no
        reservation pending."""
        return not self.sched.has_work() and not self.pending_reserve and not self.deferred

    @property
    def kv_capacity_blocks(self) -> int:
        """``num_gpu_blocks`` of this worker."""
        return self.sched.kv.capacity

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self.sched.block_size

    @property
    def kv_blocks_in_use(self) -> int:
        """KV blocks held by requests on this worker now."""
        self.settle()
        return self.sched.kv.used_blocks

    @property
    def queued_prefill_tokens(self) -> int:
        """Prompt tokens still to compute here: in the inbox, waiting, and running prefills."""
        sched = self.sched
        queued = sum(m.input_length for m in self.inbox.items if type(m) is Request)
        queued += sum(m.input_length for m in self.deferred if type(m) is Request)
        if type(self.in_hand) is Request:  # taken from the inbox by a run it cut, not yet accepted
            queued += self.in_hand.input_length
        queued += sum(s.prefill_target - s.computed for s in sched.waiting)
        queued += sum(s.prefill_target - s.computed for s in sched.running if s.computed < s.prefill_target)
        return queued

    def cached_prompt_blocks(self, request: Request) -> tuple[int, int]:
        """(leading prompt blocks of ``request`` cached here now, its full prompt blocks)."""
        sched = self.sched
        total = request.input_length // sched.block_size
        if not sched.caching:
            return 0, total
        self.settle()
        keys = request.block_keys(sched.block_size)
        return sched.kv.match(keys, len(keys))[0], total

    def cached_prompt_tokens(self, request: Request) -> int:
        """Prompt tokens of ``request`` whose KV this worker's cache holds now (whole leading
        blocks; the actual cache, whatever the router has heard)."""
        sched = self.sched
        if not sched.caching:
            return 0
        self.settle()
        keys = request.block_keys(sched.block_size)
        return sched.kv.match(keys, len(keys))[0] * sched.block_size

    @property
    def name(self) -> str:
        return f"{self.pool}/{self.wid}"

    def _check_liveness(self) -> None:
        """Raise :class:`Stuck` if the stall is longer than the remaining prompts explain."""
        sched = self.sched
        need = sum(-(-(s.prefill_target - s.computed) // sched.budget)
                   for s in list(sched.running) + list(sched.waiting))
        if self.stalled > 2 * need + STALL_PASSES:
            raise Stuck(f"worker {self.name} ran {self.stalled} passes without producing a token "
                        f"or finishing a prompt (at t={self.env.now:.6f} s): {sched.describe()}")

    def request_reservation(self, request: Request) -> None:
        """Router -> this decode worker (paired at dispatch): reserve room for ``request``'s
        prompt KV, then send it on (``on_reserved``). A request that can never fit here is
        rejected at once. With no pass under way and nothing queued the attempt is made now;
        otherwise the request queues and is answered at a pass boundary (see
        :meth:`_answer_reservations`)."""
        seq = self.sched.make_seq(request, transferred=True)
        if not self.sched.fits_ever(seq):
            self.probe.finished(seq.rid, self.env.now, REJECTED)
        elif self.idle and not self.inbox.items:
            if self.sched.reserve(seq):
                self.on_reserved(request)
            else:
                self.pending_reserve.append(seq)  # retried when an event reaches the worker
        else:
            self.inbox.put(Reserve(seq, between_passes=not self.in_pass or self._at_run_pass_end()))

    def _at_run_pass_end(self) -> bool:
        """Whether now is the end of a pass of the fast-forwarded run under way: there, as
        after a stepped pass's end (which SimPy runs before a dispatch of the same instant),
        the worker is between passes."""
        if self.run is None:
            return False
        ends = self.run.ends
        i = bisect_left(ends, self.env.now)
        return i < len(ends) and ends[i] == self.env.now

    def _answer_reservations(self) -> None:
        """Reserve room for the oldest pending requests, one attempt per credit, stopping at
        the first that does not fit (it stays first in line).

        The reference's sglang core (measured on ai-dynamo-runtime 1.6.1, and
        ``SglangCore::retry_pending_destinations`` in the Dynamo sources) retries only the
        head of its pending destinations, and does so once per pass end, once per prompt KV
        arrival (one that arrives during a pass is applied at its end, and still retries) and
        once per reservation request that reaches it between passes; one that reaches it
        during a pass waits for the pass end. A reservation takes the prompt's pages beyond
        what the worker's prefix cache holds (:meth:`SglangScheduler.reserve`)."""
        pending = self.pending_reserve
        reserve = self.sched.reserve
        credit = self.reserve_credit
        while credit and pending and reserve(pending[0]):
            seq = pending.popleft()
            # a request with no output never reaches this worker, so no KV arrival of its own
            # will retry the next: it takes no attempt
            credit -= seq.output_len > 0
            self.on_reserved(seq.req)

    def _accept(self, msg) -> None:
        if type(msg) is Released:
            self.sched.release(msg.rid)
            self.probe.released(msg.rid, self.env.now)
            if self.stored_in_pass:  # its last pages joined the cache between passes
                self._flush_stored()
            if self.on_pass_end is not None:  # its KV freed: a request held for KV room may go
                self.on_pass_end()
            return
        if type(msg) is Drain:
            self.draining = True
            return
        if type(msg) is Stored:  # a request waiting for those host blocks may restore them now
            if self.offload.host.storage is not None and msg.store_id >= 0:
                self.offload.host.write_through(msg.store_id)
            return
        if type(msg) is Restored:
            self.sched.restored(msg.rid, msg.keys)
            return
        if type(msg) is Reserve:
            self.pending_reserve.append(msg.seq)
            self.reserve_credit += msg.between_passes
            return
        if type(msg) is Unreserve:
            self.sched.unreserve(msg.rid)
            self.reserve_credit += 1  # room came back: a pending reservation is retried
            if self.on_pass_end is not None:  # its KV freed: a request held for KV room may go
                self.on_pass_end()
            return
        sched = self.sched
        if type(msg) is Handoff:
            rid = msg.request.rid
            if sched.reserved and rid in sched.reserved:  # its room was reserved at dispatch: a retry is owed
                sched.activate(rid)
                self.reserve_credit += 1
                if msg.source is not None:  # the prefill side frees the KV now
                    msg.source.inbox.put(Released(rid))
                return
            seq = self.sched.make_seq(msg.request, transferred=True)
            if msg.block_size == sched.block_size and sched.caching:
                seq.keys = msg.block_keys
            if msg.source is not None:  # released when this worker admits it
                self.sources[rid] = msg.source
        else:
            seq = self.sched.make_seq(msg)
        if sched.fits_ever(seq):
            sched.add(seq)
        else:
            source = self.sources.pop(seq.rid, None)
            if source is not None:  # never admitted here: the prefill side frees it now
                source.inbox.put(Released(seq.rid))
            self.probe.finished(seq.rid, self.env.now, REJECTED)
            if self.on_rejected is not None:  # its paired decode worker frees the room it holds
                self.on_rejected(seq.rid)
            if self.on_pass_end is not None:  # its queued prompt left: a held request may go
                self.on_pass_end()

    def serve(self):
        """Run forward passes forever.

        A draining worker (after a :class:`Drain` message) returns, calling ``on_stop``, at the
        first moment it has no request queued or running, none in its inbox and no prompt KV
        held for the handoff link.

        Yields: ``inbox.get()`` while idle; a :class:`PassBoundary` before forming each batch;
        one ``timeout`` per forward pass.
        """
        env, sched, inbox, probe = self.env, self.sched, self.inbox, self.probe
        pass_time_s = self.latency.pass_time_s
        pairs_wanted = getattr(self.latency, "needs_prefill_attention", False)
        #: models that price a multi-request prefill differently (the reference polynomial)
        priced = getattr(self.latency, "priced_prefill_tokens", None)
        pool, wid = self.pool, self.wid
        prompt_pool = self.role != "decode"
        rank = self.rank
        pending_reserve = self.pending_reserve
        deferring = False  #: async scheduling and a pass just ran: arrivals since its start wait
        while True:
            if not sched.has_work() and not pending_reserve and not self.deferred:
                if self.draining and not sched.held and not inbox.items and not self.expected_handoffs:
                    self.on_stop(self)
                    return
                if not inbox.items:
                    self.reserve_credit = 0  # nothing pending at the pass end: its retry is spent
                self._accept((yield inbox.get()))
                deferring = False
            yield PassBoundary(env, rank)
            # async scheduling: the pass about to be formed was scheduled when the last one
            # started, so requests and handoffs that arrived since wait for the next one
            # (control messages act at once)
            if self.deferred:
                late, self.deferred = self.deferred, []
                for msg in late:
                    self._accept(msg)
            if deferring:
                for msg in inbox.drain():
                    if type(msg) is Request or type(msg) is Handoff:
                        self.deferred.append(msg)
                    else:
                        self._accept(msg)
            else:
                for msg in inbox.drain():
                    self._accept(msg)
            if self.reserve_credit:
                if pending_reserve:
                    self._answer_reservations()
                self.reserve_credit = 0
            kv_before = sched.kv.used_blocks
            batch = sched.schedule()
            if self.on_pass_end is not None and (sched.kv.used_blocks < kv_before or (
                    batch is not None and any(cached for _, cached in batch.admitted))):
                # a preemption freed KV, or an admission's prefix hit took its cached tokens off
                # the queued prefill: a request held for KV room or prefill load may go now
                self.on_pass_end()
            if batch is None:
                deferring = False
                if self.deferred:
                    continue  # nothing runs: the deferred arrivals are taken at once
                if sched.has_work() or pending_reserve:  # blocked: wait for a message
                    self._accept((yield inbox.get()))
                continue
            now = env.now
            sources = self.sources
            offload = self.offload
            for seq, cached in batch.admitted:
                lookup = seq.prefill_target if prompt_pool else 0
                probe.admitted(seq.rid, now, pool, wid, cached, lookup)
                if offload is not None:
                    self._restore_admitted(seq.rid, cached)
                if sources and seq.rid in sources:  # its KV taken over: the prefill side frees it
                    sources.pop(seq.rid).inbox.put(Released(seq.rid))
            prefill_tokens = batch.prefill_tokens
            if batch.prefill_requests > 1 and priced is not None:
                prefill_tokens = priced(prefill_tokens, batch.prefill_requests, batch.prefill_start_tokens)
            if pairs_wanted and prefill_tokens:
                dt = pass_time_s(prefill_tokens, batch.decode_requests, batch.decode_context_tokens,
                                 prefill_attention_pairs(batch))
            else:
                dt = pass_time_s(prefill_tokens, batch.decode_requests, batch.decode_context_tokens)
            self.in_pass = True
            deferring = self.async_scheduling
            if self.fast_forward and not pending_reserve and not self.deferred and (
                    offload is None or self._offload_quiet()):
                k = sched.decode_run_length(batch)
                plan = (sched.verify_run(batch, self.pass_log is not None)
                        if k == 1 and sched.speculative is not None and not self.kv_watched else None)
                if k > 1 or plan is not None:
                    yield from self._decode_run(batch, k, plan)
                    self.in_pass = False
                    self.reserve_credit = 1  # the pass end retries a pending reservation
                    continue
            kv_blocks = sched.kv.used_blocks
            if offload is not None:
                fence = offload.host.take_fence()
                if fence:  # it took GPU blocks stores still read: it starts when they end
                    yield offload.stores_done(fence)
                    now = env.now
            yield env.timeout(dt)
            self.passes += 1
            self.busy_s += dt
            if self.pass_log is not None:  # logged once complete, like the pass count
                self.pass_log.append(PassRecord(
                    pool, wid, now, env.now, batch.prefill_tokens, batch.decode_requests,
                    batch.decode_context_tokens, kv_blocks, len(batch.preempted), len(batch.admitted),
                    None if offload is None else offload.host.tier.used,
                    None if offload is None else offload.storage_used()))
            emitted, finished, prefilled = sched.complete(batch)
            if self.stored_in_pass:  # the blocks this pass computed (stored at schedule or at its end)
                self._flush_stored()
            if offload is not None:
                self._store_computed(batch, finished, prefilled)
            self.in_pass = False
            self.reserve_credit = 1  # the pass end retries a pending reservation
            if self.on_pass_end is not None:
                self.on_pass_end()
            if emitted or finished or prefilled:
                self.stalled = 0
            else:
                self.stalled += 1
                if self.stalled > STALL_PASSES:
                    self._check_liveness()
            now = env.now
            if emitted:
                probe.tokens([s.rid for s in emitted], now)
            for seq in finished:
                self._completed(seq, now)
            block_size = sched.block_size
            for seq in prefilled:
                probe.prefilled(seq.rid, now)
                self.handoff(Handoff(seq.req, seq.keys, block_size), self)

    def _restore_admitted(self, rid: int, cached: int) -> None:
        """Host offload: ``rid`` was admitted with ``cached`` prompt tokens reused; report the
        part its restore brought (the rest was the GPU's) and the restore's time."""
        host = self.offload.host
        restore = host.restores.get(rid)
        if restore is None:
            return
        bs = self.sched.block_size
        gpu_tokens = restore[0] * bs
        asked, ended = self.offload.restore_times.pop(rid)
        host_tokens = cached - min(gpu_tokens, cached)
        host.storage_hit_tokens += min(host.restored_from_storage.pop(rid, 0) * bs, host_tokens)
        self.probe.restored(rid, host_tokens, ended - asked)
        host.admitted(rid, cached // bs)

    def _store_computed(self, batch, finished, prefilled) -> None:
        """Host offload, at a pass end: store the full prompt blocks the pass computed."""
        host = self.offload.host
        bs = self.sched.block_size
        retry = host.retry
        for seq, _n, is_prefill in batch.entries:
            if (is_prefill or seq.rid in retry) and seq.keys:
                host.computed(seq.rid, seq.keys, min(seq.computed, seq.prompt_len) // bs)
        host.fenced.clear()
        for seq in prefilled:  # (a finished one is forgotten as it completes: _completed)
            host.forget(seq.rid)

    def _decode_run(self, batch, k: int, plan=None):
        """Fast-forward: run up to k identical pure-decode passes without a SimPy event each.

        Pass i's context is the first pass's plus (i - 1) tokens per request, so its time is
        known in advance; pass ends are accumulated exactly as the per-pass path accumulates
        SimPy time. They are laid out in doubling chunks (128, 256, ... passes) so that a run
        cut short wastes little; a run stops after ``MAX_RUN_PASSES`` (the next goes on). A
        message arriving in the inbox cuts the run at the first pass end at or after its
        arrival, the boundary where the per-pass path would take it (the next one when it
        arrives at a pass end after that instant's boundary of this worker's rank would have
        fired: sent from a later-ranked worker's or the planner's boundary).
        Tokens and completions are applied at the end, with their per-pass times, or earlier
        in pieces when something reads the worker's state mid-run (:meth:`settle`).

        ``k`` is :meth:`~simkit.engine.scheduler.VllmScheduler.decode_run_length` of ``batch`` (> 1).
        Verify rounds (speculative decoding) grow each context by a drawn number of tokens:
        ``plan`` (:meth:`~simkit.engine.scheduler.base.Scheduler.verify_run`) lays their passes
        out, one pass beyond those timed, and says where the run ends.

        Yields: the inbox get OR the end of the current chunk, per chunk; after an arrival,
        a timeout to the pass end that follows it.
        """
        env, sched = self.env, self.sched
        n_req, ctx = batch.decode_requests, batch.decode_context_tokens
        horizon = self.horizon
        if self.clock is not None:
            horizon = self.clock.next_at if horizon is None else min(horizon, self.clock.next_at)
        if plan is not None:  # each pass emits a token at least: the fewest tokens left bound it
            k = len(plan.ctxs) if plan.closed else min(s.output_len - s.generated for s in plan.seqs)
        k = min(k, MAX_RUN_PASSES)
        if plan is not None:
            may_evict = False  # a plan stops before a pass that would evict
        else:
            may_evict = self.kv_listener is not None and sched.decode_run_blocks(batch, k) > sched.kv.free_anon
        run = self.run = DecodeRun(batch, env.now, k if plan is None else min(k, len(plan.ctxs)), may_evict)
        pass_time_s = self.latency.pass_time_s
        if self.pass_log is not None:
            run.used0 = sched.kv.used_blocks
            run.computed0 = [seq.computed for seq, _, _ in batch.entries]
        dts, ends = run.dts, run.ends
        msg = None
        chunk = FIRST_CHUNK
        with self.inbox.get() as get:
            while len(ends) < k:
                done = len(ends)
                if plan is None:
                    more_dts, more_ends = self.latency.decode_run(
                        n_req, ctx + done * n_req, min(chunk, k - done), ends[-1] if ends else env.now)
                else:
                    plan.extend(done + chunk + 1)  # one pass beyond: a settle may start it
                    if plan.closed:
                        k = min(k, len(plan.ctxs))
                    run.passes = min(k, len(plan.ctxs))
                    more_dts = [pass_time_s(0, n_req, c) for c in plan.ctxs[done:done + min(chunk, k - done)]]
                    more_ends = _accumulate(ends[-1] if ends else env.now, more_dts)
                capped = horizon is not None and more_ends[-1] > horizon
                if capped:  # passes past the cap never end: leave them to the per-pass path
                    keep = bisect_right(more_ends, horizon)
                    if done + keep == 0:
                        keep = 1
                    more_dts, more_ends = more_dts[:keep], more_ends[:keep]
                dts += more_dts
                ends += more_ends
                if not more_ends:
                    break
                if capped:
                    run.passes = len(ends)
                yield get | env.timeout_at(ends[-1])
                if get.triggered:
                    msg = self.in_hand = get.value
                    break
                if capped:
                    break
                chunk *= 2
        n = len(ends)
        if msg is not None and env.now < ends[-1]:
            n = bisect_left(ends, env.now) + 1  # the first pass end >= the arrival
            if ends[n - 1] == env.now and boundary_passed(env, self.rank):
                n += 1  # it arrived after that pass end's boundary (sent by a later-ranked one)
            run.passes = n
            if ends[n - 1] > env.now:
                yield env.timeout_at(ends[n - 1])
        self.run = None
        self.passes += n
        self.busy_s += sum(dts[:n])
        if self.pass_log is not None:
            self._log_run(run, n)
        old = batch.run_done
        rids, finished = sched.advance_decode_run(batch, n, n)
        if self.on_pass_end is not None:
            self.on_pass_end()
        if n > old:  # (a settle may have applied them all: a message at a pass end it read)
            self._run_tokens(batch, rids, ends[old:n])
        now = env.now
        for seq in finished:
            self._completed(seq, now)
        if msg is not None:  # back to the inbox: the loop takes it as pass-by-pass stepping would
            self.in_hand = None
            self.inbox.put_back(msg)

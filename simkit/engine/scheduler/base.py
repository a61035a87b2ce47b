"""What every scheduler shares: a request's state on a worker (:class:`Seq`), one pass
(:class:`Batch`), the private-suffix analysis of a workload (:func:`private_suffixes`), and
:class:`Scheduler`, the common core of a worker's scheduler: its queues and KV cache, the
KV bookkeeping of a request (prefix-cache registration, freeing, recompute preemption), the
completion of a pass, the fast-forward of pure-decode runs and the prefill role's handoff.
An engine's own rules (which requests a pass takes, whether a request can ever fit) are its
subclass's: :mod:`.vllm`, :mod:`.sglang`, :mod:`.trtllm`.

A request's progress is ``computed`` tokens with KV. While ``computed < prefill_target`` it
is prefilling (``prefill_target`` is the prompt, or prompt + generated tokens after a
preemption); a pass that brings it to ``prefill_target`` emits a token, and so does every
decode step. A decode step's context is its KV length after the pass (prompt + tokens
generated so far), the ``a`` of the reference's D(a, C).

Prefix caching: the prompt's full blocks have identity keys
(:meth:`simkit.core.request.Request.block_keys`); at admission the longest cached prefix is reused,
except that a full-prompt hit still recomputes the last block; newly scheduled full blocks are
registered at once, so later requests (even in the same pass) can hit them.

Roles: ``aggregated`` serves a request from prompt to last token; ``prefill`` stops at the end
of the prompt and holds the KV until the handoff link releases it; ``decode`` receives
requests whose prompt KV was transferred, and its first pass emits the first token (the
reference's disaggregated semantics, REFERENCE.md section 5).

Part of :mod:`simkit.engine`: pure, no SimPy; the worker process calls :meth:`Scheduler.schedule` and
:meth:`Scheduler.complete`.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Optional, Sequence

from simkit.spec import PoolSpec
from simkit.engine.kvcache import KvCache
from simkit.engine.scheduler.speculative import Acceptance, SpecStats, VerifyRun
from simkit.core.request import Request

__all__ = ["Seq", "Batch", "Scheduler", "private_suffixes"]


def private_suffixes(requests: Sequence[Request], block_sizes: Sequence[int]) -> Optional[list[int]]:
    """For each request (by id), the index into its ``hash_ids`` from which every id occurs
    nowhere else in ``requests`` (nor twice in it): the blocks no other request can hit (see
    :mod:`simkit.engine.kvcache`). None when that cannot be told exactly from whole trace blocks:
    requests with different ``hash_block_size``, or one that an engine ``block_size`` does not
    divide. ``requests`` must be the whole workload, ids 0..N-1."""
    sizes = {r.hash_block_size for r in requests if r.hash_ids}
    if len(sizes) != 1 or any(next(iter(sizes)) % bs for bs in block_sizes):
        return None
    counts = Counter(h for r in requests if r.hash_ids for h in r.hash_ids)
    out = [0] * len(requests)
    for r in requests:
        ids = r.hash_ids
        if ids:
            j = len(ids)
            while j and counts[ids[j - 1]] == 1:
                j -= 1
            out[r.rid] = j
    return out


class Seq:
    """Mutable runtime state of one request on one worker (owned by that worker)."""

    __slots__ = (
        "req", "rid", "prompt_len", "output_len", "keys", "held", "anon", "computed",
        "prefill_target", "generated", "transferred", "preemptions", "private_from", "private", "stamp",
        "acc", "spec",
    )

    def __init__(self, req: Request, transferred: bool = False) -> None:
        self.req = req
        self.rid = req.rid
        self.prompt_len = req.input_length
        self.output_len = req.output_length
        self.keys: Optional[list[int]] = None  #: full prompt block keys, computed on admission
        self.held: list[int] = []  #: identity keys this request holds a reference on
        self.anon = 0  #: anonymous blocks it holds (private prompt blocks included)
        #: keys[private_from:] are private (no other request has them, see kvcache); -1 until
        #: its first registration
        self.private_from = -1
        self.private = 0  #: private prompt blocks it holds, counted in ``anon``
        #: a decode-pool request arrives with its prompt KV: its first step is a decode step
        self.transferred = transferred
        self.computed = req.input_length - 1 if transferred else 0
        self.prefill_target = self.computed if transferred else req.input_length
        self.generated = 0
        self.preemptions = 0
        self.stamp = 0  #: when its blocks were last used (sglang: the radix cache's LRU clock)
        #: speculative decoding: its verify rounds' outcomes and their counts (None: no drafts)
        self.acc: Optional[Acceptance] = None
        self.spec: Optional[SpecStats] = None


class Batch:
    """One pass: ``entries`` of (seq, tokens, is_prefill) plus its latency-model shape."""

    __slots__ = ("entries", "prefill_tokens", "prefill_requests", "prefill_start_tokens",
                 "decode_requests", "decode_context_tokens", "admitted", "preempted", "run_started", "run_done",
                 "decode_budget", "verify_run")

    def __init__(self) -> None:
        self.entries: list[tuple[Seq, int, bool]] = []
        self.prefill_tokens = 0
        self.prefill_requests = 0  #: requests computing prompt tokens in the pass
        #: sum over them of the prompt tokens they had (computed or cached) before the pass
        self.prefill_start_tokens = 0
        self.decode_requests = 0
        self.decode_context_tokens = 0
        self.admitted: list[tuple[Seq, int]] = []  #: (seq, cached prompt tokens) admitted now
        self.preempted: list[Seq] = []
        #: a fast-forwarded run of this pure-decode pass: passes scheduled and completed so far
        #: (its first pass was scheduled by ``schedule``)
        self.run_started = 1
        self.run_done = 0
        #: tokens of ``max_num_batched_tokens`` the decode requests take (one each; k + 1 for a
        #: speculative verify round that counts its drafts)
        self.decode_budget = 0
        #: a fast-forwarded run of verify rounds: its plan (:meth:`Scheduler.verify_run`)
        self.verify_run: Optional[VerifyRun] = None


class Scheduler:
    """Waiting and running queues and the KV cache of one worker, in role ``role``: the state
    and bookkeeping every engine's scheduler shares. A subclass forms the passes
    (:meth:`schedule`) and says which requests can ever be served (:meth:`fits_ever`)."""

    #: free blocks leave in the order of their release (vLLM's free queue), not of their last use
    EVICT_BY_TOUCH = False
    #: runs of verify rounds may be fast-forwarded (:meth:`verify_run`); an engine whose decode
    #: passes change more state than tokens and KV blocks says no
    FAST_VERIFY_RUNS = True

    def __init__(self, spec: PoolSpec, role: str) -> None:
        if role not in ("aggregated", "prefill", "decode"):
            raise ValueError(f"unknown role {role!r}")
        #: speculative decoding (not on a prefill worker, which decodes nothing)
        self.speculative = spec.speculative if role != "prefill" else None
        self.name_streams(0, "pool")
        self.spec_k = self.speculative.num_speculative_tokens if self.speculative else 0
        #: a verify round charges its k + 1 tokens to the token budget (vLLM), or one (the reference)
        self.spec_budget_drafts = self.speculative is not None and self.speculative.budget_counts_drafts
        #: the pass that ends a prompt is a verify round (the reference's vLLM and TRT-LLM cores)
        self.verify_in_prefill = self.speculative is not None and self.speculative.verify_in_prefill
        self.role = role
        self.block_size = spec.block_size
        self.budget = spec.max_num_batched_tokens
        self.max_num_seqs = spec.max_num_seqs
        self.max_model_len = spec.max_model_len
        self.cut_to_max_model_len = spec.max_model_len_action == "cut"
        self.chunked = spec.enable_chunked_prefill
        self.caching = spec.enable_prefix_caching
        self.kv = KvCache(spec.num_gpu_blocks, spec.enable_prefix_caching, by_touch=self.EVICT_BY_TOUCH)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.held: dict[int, Seq] = {}  #: prefill role: prompts done, KV awaiting transfer
        #: decode role (sglang): requests whose prompt KV room is reserved here (pages taken,
        #: cached prefix held) while their prompt is computed elsewhere, by request id
        self.reserved: dict[int, Seq] = {}
        self.ready = 0  #: requests whose prompt KV arrived, waiting first in ``waiting`` (see add)
        #: by request id, the index into its ``hash_ids`` from which every id is private (held by
        #: no other request, nor twice by it); None: unknown, track every key (see kvcache)
        self.private_ids: Optional[Sequence[int]] = None
        #: a just-computed prompt block whose identity is already cached is swapped for the
        #: cached one and freed (SGLang's radix tree); vLLM keeps the duplicate
        self.adopt_duplicates = False
        #: KV slots a decoding request holds beyond ``computed``: 1 where the engine gives the
        #: newest generated token its slot when it is emitted (SGLang), else 0 (vLLM)
        self.decode_slot = 0
        #: host offload (``kv_offload``): a :class:`~simkit.engine.offload.HostOffload`, set by
        #: the worker (None: the GPU cache alone)
        self.offload = None

    # ------------------------------------------------------------------ what an engine defines

    def fits_ever(self, seq: Seq) -> bool:
        """Whether the request can ever be served here (the worker rejects it otherwise)."""
        raise NotImplementedError

    def schedule(self) -> Optional[Batch]:
        """Form the next pass, allocating its KV blocks; ``None`` if nothing can run."""
        raise NotImplementedError

    # ------------------------------------------------------------------ queue state

    def has_work(self) -> bool:
        """Whether a pass could be scheduled now or later without new input."""
        return bool(self.running) or bool(self.waiting)

    def make_seq(self, request: Request, transferred: bool = False) -> Seq:
        """The state of ``request`` on this worker; with ``max_model_len_action: cut`` its
        output is cut to ``max_model_len`` - prompt (when the prompt is shorter), as vLLM's engine
        stops a request at the length limit (the reference does too: measured)."""
        seq = Seq(request, transferred)
        if self.speculative is not None:
            seq.acc = Acceptance(self.speculative, f"{self.stream}/{request.rid}")
            seq.spec = SpecStats(self.spec_k)
        limit = self.max_model_len
        if (limit is not None and self.cut_to_max_model_len and seq.prompt_len < limit
                and seq.prompt_len + seq.output_len > limit):
            seq.output_len = limit - seq.prompt_len
        return seq

    def _within_max_model_len(self, seq: Seq) -> bool:
        """Whether prompt + output is within ``max_model_len`` (when one is set): after
        :meth:`make_seq` cut the output, only a prompt of ``max_model_len`` tokens or more is
        not (cut), or any longer request (reject). A prefill worker computes the prompt and
        its first token only: there the prompt alone counts, either way."""
        limit = self.max_model_len
        if limit is None:
            return True
        if self.cut_to_max_model_len or self.role == "prefill":
            return seq.prompt_len < limit
        return seq.prompt_len + seq.output_len <= limit

    def name_streams(self, seed: int, pool: str) -> None:
        """Name the random streams of this worker's requests' verify rounds after the scenario's
        ``seed`` (or the speculative spec's own) and the ``pool``: request r draws from
        ``SEED/POOL/speculative/r``, the same on every worker of the pool."""
        if self.speculative is not None and self.speculative.seed is not None:
            seed = self.speculative.seed
        self.stream = f"{seed}/{pool}/speculative"

    def decode_width(self, seq: Seq) -> int:
        """Tokens of KV beyond ``seq.computed`` a decode step needs room for: 1 (the last
        token), or for a speculative verify round 1 + min(k + 1, output left): measured on the
        reference, a round at context L (prompt + generated, = computed + 1) reserves
        L + min(k + 1, output left), and a request of prompt + output tokens equal to the cache
        still completes."""
        if seq.acc is None:
            return 1
        return 1 + max(1, min(self.spec_k + 1, seq.output_len - seq.generated))

    def decode_budget_tokens(self, width: int) -> int:
        """Tokens of the pass's budget a decode step of KV ``width`` (:meth:`decode_width`)
        takes: 1, or k + 1 for a verify round that counts its drafts (vLLM schedules the last
        token and the k drafts)."""
        return min(width, self.spec_k + 1) if self.spec_budget_drafts else 1

    def _verify(self, seq: Seq) -> int:
        """Tokens the verify round of ``seq`` ending now emits (its draws; cut to the output
        left), recorded in its stats."""
        j = seq.acc.accepted()
        emitted = max(1, min(1 + j, seq.output_len - seq.generated))
        seq.spec.record(j, emitted)
        return emitted

    def _trim(self, seq: Seq) -> None:
        """Free the blocks of ``seq``'s rejected drafts: it keeps KV for ``computed`` tokens
        (and the newest token's slot where the engine gives one)."""
        keep = -(-(seq.computed + self.decode_slot) // self.block_size)
        extra = len(seq.held) + seq.anon - keep
        if extra > 0 and seq.anon >= extra:
            self.kv.release((), extra)
            seq.anon -= extra

    def describe(self) -> str:
        """One line of queue and KV state, for diagnostics."""
        waiting = [s.rid for s in self.waiting]
        running = [s.rid for s in self.running]

        def ids(rids: list) -> str:
            return ", ".join(map(str, rids[:8])) + (", ..." if len(rids) > 8 else "")

        reserved = f", {len(self.reserved)} reserved" if self.reserved else ""
        return (f"{len(waiting)} waiting [{ids(waiting)}], {len(running)} running [{ids(running)}], "
                f"{len(self.held)} held for handoff{reserved}; KV {self.kv.used_blocks} of {self.kv.capacity} "
                f"blocks in use, {self.kv.free_blocks} free")

    def add(self, seq: Seq) -> None:
        """Queue a request (callers first check :meth:`fits_ever`)."""
        self.waiting.append(seq)

    # ------------------------------------------------------------------ KV bookkeeping

    def _register(self, seq: Seq, first_block: int, end_tokens: int) -> None:
        keys = seq.keys
        if not keys:
            return
        last = min(end_tokens // self.block_size, len(keys))
        if last <= first_block:
            return
        private_from = seq.private_from
        if private_from < 0:
            private_from = seq.private_from = self._private_from(seq)
        if last > private_from:  # private blocks stay anonymous while in use
            seq.private += last - max(first_block, private_from)
            last = private_from
            if last <= first_block:
                return
        if self.adopt_duplicates:
            taken = self.kv.adopt_many(keys[first_block:last])
        else:
            taken = self.kv.register_many(keys[first_block:last])
        seq.held.extend(taken)
        seq.anon -= len(taken)

    def _private_from(self, seq: Seq) -> int:
        """Index of the first private key of ``seq.keys`` (its length when none or unknown)."""
        keys, private = seq.keys, self.private_ids
        if private is None or not keys:
            return len(keys)
        req = seq.req
        return min(len(keys), private[req.rid] * (req.hash_block_size // self.block_size))

    def _free(self, seq: Seq, preempted: bool = False) -> None:
        """Release all of ``seq``'s blocks (its KV holds ``seq.computed`` tokens): the full
        anonymous ones as if its private blocks were keyed (then they follow them, as keys on
        a preemption, since the request may hit them again)."""
        held, anon, private = seq.held, seq.anon, seq.private
        tokens = seq.computed
        if self.decode_slot and (tokens > seq.prefill_target or (
                tokens == seq.prefill_target and 0 < seq.generated < seq.output_len)):
            tokens += self.decode_slot  # the newest token's slot (none if it ended at its prefill)
        full = min(anon - private, max(0, tokens // self.block_size - len(held) - private))
        if preempted and private:
            start = seq.private_from
            self.kv.release(held, anon, full + private, seq.keys[start:start + private], seq.stamp)
        else:
            self.kv.release(held, anon, full + private, stamp=seq.stamp)
        seq.held, seq.anon, seq.private = [], 0, 0

    def _preempt(self, seq: Seq) -> None:
        self._free(seq, preempted=True)
        if seq.keys is not None:  # from now on its keys are tracked one by one
            seq.private_from = len(seq.keys)
        seq.computed = 0
        seq.prefill_target = seq.prompt_len + seq.generated
        seq.transferred = False
        seq.preemptions += 1
        self.waiting.appendleft(seq)

    # ------------------------------------------------------------------ a finished pass

    def complete(self, batch: Batch) -> tuple[list[Seq], list[Seq], list[Seq]]:
        """Apply a finished pass.

        Returns ``(emitted, finished, prefilled)``: requests that produced a token in this
        pass, requests that are done (KV freed), and (prefill role) requests whose prompt is
        complete and whose KV is now held for the handoff.
        """
        emitted: list[Seq] = []
        finished: list[Seq] = []
        prefilled: list[Seq] = []
        prefill_role = self.role == "prefill"
        for seq, n, is_prefill in batch.entries:
            seq.computed += n
            if seq.computed < seq.prefill_target:
                continue
            if seq.output_len == 0:
                finished.append(seq)  # nothing to generate: done when the prompt is
            elif prefill_role:
                prefilled.append(seq)
            elif seq.acc is not None and (not is_prefill or self.verify_in_prefill):
                tokens = self._verify(seq)  # a verify round: 1 + accepted drafts
                seq.generated += tokens
                seq.computed += tokens - 1
                emitted.extend([seq] * tokens)
                if seq.generated >= seq.output_len:
                    finished.append(seq)
                else:
                    self._trim(seq)
            else:
                seq.generated += 1
                emitted.append(seq)
                if seq.generated >= seq.output_len:
                    finished.append(seq)
        if finished or prefilled:
            gone = {id(s) for s in finished}
            gone.update(id(s) for s in prefilled)
            self.running = [s for s in self.running if id(s) not in gone]
            for seq in finished:
                self._free(seq)
                seq.held, seq.anon = [], 0
            for seq in prefilled:
                self.held[seq.rid] = seq
        return emitted, finished, prefilled

    # ------------------------------------------------------------------ fast-forward

    def decode_run_length(self, batch: Batch) -> int:
        """How many passes, starting with ``batch``, are certain to repeat it exactly.

        Nonzero only for a pure-decode batch with nothing waiting and nothing preempted:
        then, barring a new arrival, every following pass schedules the same requests, one
        token each, until one of them finishes. The run is cut so that the KV blocks of all its
        passes are free now (so no pass can preempt). Returns k >= 1 (k = 1: no run).
        """
        if batch.prefill_tokens or batch.admitted or batch.preempted or self.waiting or self.speculative:
            return 1  # (verify rounds emit a drawn number of tokens: see verify_run)
        entries = batch.entries
        if len(entries) != len(self.running):
            return 1  # the budget cut the batch short: later passes could differ
        k = min(seq.output_len - seq.generated for seq, _, _ in entries)
        if k <= 1:
            return 1
        bs = self.block_size
        free = self.kv.free_blocks
        if len(entries) * (k // bs + 1) <= free:
            return k  # no request can need more than k // bs + 1 new blocks in k passes

        slot = self.decode_slot

        def extra_blocks(passes: int) -> int:  # blocks needed by passes 2..passes
            total = 0
            for seq, _, _ in entries:
                total += -(-(seq.computed + passes + slot) // bs) - len(seq.held) - seq.anon
            return total

        if extra_blocks(k) > free:
            lo, hi = 1, k  # largest k that fits: extra_blocks is monotone in k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if extra_blocks(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
        return k

    def verify_run(self, batch: Batch, track_used: bool = False) -> Optional[VerifyRun]:
        """The plan of a fast-forwarded run of verify rounds starting with ``batch`` (see
        :class:`~simkit.engine.scheduler.speculative.VerifyRun`), or None when ``batch`` cannot
        start one: not every request is a decode step (a prompt, an admission, a preemption,
        a request waiting or left out by the budget), or not even its second pass is certain.
        ``track_used``: the plan keeps each pass's KV blocks in use (pass records)."""
        if self.speculative is None or not self.FAST_VERIFY_RUNS:
            return None
        if batch.prefill_tokens or batch.admitted or batch.preempted or self.waiting:
            return None
        entries = batch.entries
        if len(entries) != len(self.running):
            return None
        if self.decode_slot:
            return None  # (an engine giving the newest token a slot: not laid out; see FAST_VERIFY_RUNS)
        plan = VerifyRun([seq for seq, _, _ in entries], batch.decode_context_tokens, self.kv.used_blocks,
                         self.kv.free_anon, self.spec_k, self.block_size, track_used)
        plan.extend(2)
        if len(plan.ctxs) < 2:
            return None
        batch.verify_run = plan
        return plan

    def _advance_verify_run(self, batch: Batch, started: int, done: int) -> tuple[list[list[int]], list[Seq]]:
        """:meth:`advance_decode_run` for a run of verify rounds: each pass completed as
        :meth:`complete` completes a decode step (the round's tokens, the rejected drafts'
        blocks freed) and each pass scheduled as :meth:`schedule` schedules one (room for the
        round's drafts); returns each newly completed pass's emitted request ids (a request
        once per token) and the requests that finished."""
        seqs = batch.verify_run.seqs
        emitted_by_pass = []
        finished = []
        bs, slot, kv = self.block_size, self.decode_slot, self.kv
        while batch.run_done < done:
            if batch.run_started == batch.run_done:
                self._schedule_verify_pass(seqs)
                batch.run_started += 1
            emitted = []
            freed = 0
            for seq in seqs:
                # _verify and _trim, inlined (the hot loop of speculative runs)
                acc = seq.acc
                j = acc.ahead.popleft() if acc.ahead else acc.accepted()
                left = seq.output_len - seq.generated
                tokens = 1 + j if j < left else (left if left > 1 else 1)
                seq.spec.record(j, tokens)
                seq.generated += tokens
                seq.computed += tokens
                emitted.extend([seq.rid] * tokens)
                if tokens >= left:
                    finished.append(seq)
                else:
                    extra = len(seq.held) + seq.anon - -(-(seq.computed + slot) // bs)
                    if extra > 0 and seq.anon >= extra:
                        seq.anon -= extra
                        freed += extra
            if freed:
                kv.release((), freed)
            emitted_by_pass.append(emitted)
            batch.run_done += 1
        if batch.run_started < started:
            self._schedule_verify_pass(seqs)
            batch.run_started += 1
        self._retire(finished)
        return emitted_by_pass, finished

    def _retire(self, finished: list) -> None:
        """Take the ``finished`` requests of a run out of ``running`` and free their KV."""
        if finished:
            gone = {id(s) for s in finished}
            self.running = [s for s in self.running if id(s) not in gone]
            for seq in finished:
                self._free(seq)
                seq.held, seq.anon = [], 0

    def _schedule_verify_pass(self, seqs: list) -> None:
        """KV room for the next verify round of each of ``seqs`` (``decode_width``, inlined)."""
        bs = self.block_size
        k1 = self.spec_k + 1
        total = 0
        for seq in seqs:
            left = seq.output_len - seq.generated
            need = -(-(seq.computed + 1 + (k1 if k1 < left else (left if left > 1 else 1))) // bs) \
                - len(seq.held) - seq.anon
            if need > 0:
                seq.anon += need
                total += need
        self.kv.allocate(total)

    def decode_run_blocks(self, batch: Batch, passes: int) -> int:
        """KV blocks the passes after the first of a run of ``passes`` repeats of the pure-decode
        ``batch`` allocate (the first's were allocated by :meth:`schedule`)."""
        bs = self.block_size
        slot = self.decode_slot
        return sum(max(0, -(-(seq.computed + passes + slot) // bs) - len(seq.held) - seq.anon)
                   for seq, _, _ in batch.entries)

    def advance_decode_run(self, batch: Batch, started: int, done: int) -> tuple[list[int], list[Seq]]:
        """Bring a fast-forwarded run of the pure-decode ``batch`` to ``started`` passes
        scheduled and ``done`` passes complete, counted from the run's first pass (whose
        scheduling :meth:`schedule` did); ``done <= started <= done + 1`` and neither goes
        back. Returns the ids of the batch's requests (each produced one token per newly
        completed pass) and the requests that finished.

        Equivalent to the same passes of :meth:`schedule` + :meth:`complete` with no arrivals:
        the same tokens, the same blocks, the same LRU evictions (allocation takes anonymous
        free blocks before evicting, so one allocation of the total evicts exactly what the
        per-pass allocations would), so a run can be applied in pieces (a router reading the
        worker mid-run, :meth:`simkit.cluster.worker.Worker.settle`) or at once.
        """
        if batch.verify_run is not None:
            return self._advance_verify_run(batch, started, done)
        bs = self.block_size
        slot = self.decode_slot
        passes = done - batch.run_done
        ahead = started - done  # the pass under way: its token's KV slot is allocated
        extra = 0
        finished = []
        rids = []
        for seq, _, _ in batch.entries:
            rids.append(seq.rid)
            computed = seq.computed + passes
            need = -(-(computed + ahead + slot) // bs) - len(seq.held) - seq.anon
            if need > 0:
                seq.anon += need
                extra += need
            seq.computed = computed
            seq.generated += passes
            if seq.generated >= seq.output_len:
                finished.append(seq)
        self.kv.allocate(extra)
        batch.run_started, batch.run_done = started, done
        self._retire(finished)
        return rids, finished

    def complete_decode_run(self, batch: Batch, passes: int) -> tuple[list[int], list[Seq]]:
        """Apply the run's first ``passes`` passes in full (what :meth:`advance_decode_run`
        has not applied yet); see there."""
        return self.advance_decode_run(batch, passes, passes)

    # ------------------------------------------------------------------ prefill role: the handoff

    def release(self, rid: int) -> None:
        """Free the KV of a prefilled request once the handoff link has moved it."""
        seq = self.held.pop(rid)
        self._free(seq)
        seq.held, seq.anon = [], 0
